"""A Lark grammar compiled for one vocabulary, and the per-request matcher over it.

State of a matcher: ``(stack, tset, q)``: the LALR stack, the lexer context (which
terminal set is being lexed, fixed when the lexeme started) and the lexer DFA state of
the partial lexeme (0: none yet). The mask for a state is built from cached
vocabulary walks (see :mod:`token_walk`): tokens that stay inside the current lexeme
come straight from the walk; only tokens that cross a terminal boundary feed the
parser, once per terminal. Masks are then cached per state: inside a JSON string or
number, or at any nesting pattern seen before, a step is a dictionary hit.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from dataclasses import dataclass

import numpy as np
from lark import Lark
from lark.exceptions import LarkError
from lark.lexer import Lexer, Pattern, PatternStr

from specdec.structured.bitmask import num_words, pack_token_ids
from specdec.structured.cfg.byte_dfa import ByteDFA, regex_to_byte_dfa
from specdec.structured.cfg.fast_grammar import fast_grammar as read_plain_grammar
from specdec.structured.cfg.lalr import END, MAX_STACK_DEPTH, LALRTable, Stack
from specdec.structured.cfg.lexer import LexerDFA, Terminal, build_lexer_dfa
from specdec.structured.cfg.prewalk import prewalk
from specdec.structured.cfg.token_walk import WalkResult, walk, walk_from_root
from specdec.structured.cfg.walk_store import SHARED, dfa_fingerprint
from specdec.structured.cfg.warm_up import DEAR_FANOUT, warm_up
from specdec.structured.errors import ConstraintError
from specdec.structured.matcher import StateStackMatcher
from specdec.structured.vocabulary import TokenVocabulary

State = tuple[Stack, int, int]  # (parser stack, terminal-set id, lexer DFA state)
FINISHED = -2  # lexer-state value after EOS was accepted
MAX_CACHED_MASKS = 200_000
BASIC_LEXER_DIRECTIVE = "// specdec-lexer: basic"
DEAR_STATES_PER_TERMINAL = 32  # walked at compile time; deeper ones (long counted strings) lazily
WARM_UP_S = 0.002  # the time a compile spends at most on the walks of :mod:`.warm_up`


class _TablesOnly(Lexer):
    """Stands in for lark's lexer: only the parse table is used (terminals are lexed by
    byte DFAs here), and building lark's contextual lexer costs 10-30x the table."""

    def __init__(self, conf) -> None:
        pass

    def lex(self, *args):
        raise NotImplementedError("grammar tables are never used to lex text")


@dataclass
class _Loaded:
    terminals: list[tuple[str, Pattern, int]]  # (name, pattern, priority), lark's order
    ignore: list[str]
    parse_table: object


def _read_fast(text: str) -> _Loaded | None:
    """The grammar read by :mod:`.fast_grammar` (the JSON-schema subset of Lark), if it can."""
    fast = read_plain_grammar(text)
    if fast is None:
        return None
    return _Loaded([(name, pattern, 0) for name, pattern in fast.terminals], [],
                   fast.parse_table)


def _load_with_lark(text: str, import_paths: list[str] | None) -> _Loaded:
    try:
        lark = Lark(text, parser="lalr", lexer=_TablesOnly, start="start",
                    import_paths=import_paths or [])
    except LarkError as exc:
        raise ConstraintError(f"invalid Lark grammar: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - lark raises plain errors for some inputs
        raise ConstraintError(f"invalid Lark grammar: {type(exc).__name__}: {exc}") from None
    return _Loaded([(t.name, t.pattern, t.priority) for t in lark.terminals],
                   list(lark.ignore_tokens), lark.parser.parser.parser.parse_table)


@functools.lru_cache(maxsize=1024)
def pattern_dfa(pattern: Pattern) -> tuple[ByteDFA, str]:
    """A terminal pattern's byte DFA and walk-store key, once per process (most patterns
    recur across grammars; the patterns of :mod:`.fast_grammar` are shared objects)."""
    dfa = regex_to_byte_dfa(pattern.to_regexp())
    return dfa, dfa_fingerprint(dfa)


def _terminal(name: str, pattern: Pattern, priority: int) -> Terminal:
    try:
        dfa = pattern_dfa(pattern)[0]
    except ValueError as exc:
        raise ConstraintError(
            f"terminal {name} /{pattern.value}/ {exc}; write terminals as plain "
            "regular expressions (no lookarounds or backreferences)"
        ) from None
    if dfa.accepting[0]:
        raise ConstraintError(f"terminal {name} matches the empty string")
    return Terminal(name, dfa, priority, isinstance(pattern, PatternStr))


class GrammarTables:
    """What compiling a grammar produces, independent of any vocabulary (picklable)."""

    def __init__(self, text: str, import_paths: list[str] | None = None):
        loaded = _read_fast(text) or _load_with_lark(text, import_paths)
        self.terminals: list[Terminal] = [_terminal(name, pattern, priority)
                                          for name, pattern, priority in loaded.terminals]
        self.index = {t.name: i for i, t in enumerate(self.terminals)}
        self.terminal_keys = [pattern_dfa(p)[1] for _, p, _ in loaded.terminals]  # walk keys
        # "// specdec-lexer: basic" in the grammar: lex every terminal everywhere (lark's
        # basic lexer; keywords are reserved: "SELECTx" is one NAME, not SELECT + x).
        self.basic_lexer = BASIC_LEXER_DIRECTIVE in text
        self.ignore = frozenset(self.index[name] for name in loaded.ignore)
        self.lalr = LALRTable(loaded.parse_table)

    def terminals_fingerprint(self) -> str:
        """A hash of everything a walk depends on besides the vocabulary."""
        h = hashlib.blake2b(digest_size=16)
        for terminal, key in zip(self.terminals, self.terminal_keys, strict=True):
            h.update(repr((terminal.name, terminal.rank, key)).encode())
        return h.hexdigest()


class CompiledGrammar:
    """Grammar tables + a vocabulary + the caches of walks and masks (thread-safe)."""

    def __init__(self, tables: GrammarTables, vocab: TokenVocabulary,
                 walks: dict[tuple, WalkResult] | None = None):
        self.tables = tables
        self.vocab = vocab
        self.lalr = tables.lalr
        self._tset_ids: dict[frozenset[int], int] = {}
        self._lexers: list[LexerDFA] = []
        self._tset_members: list[frozenset[int]] = []  # per context: its terminals
        self._state_terminals: dict[int, tuple[int, tuple[str, ...]]] = {}  # LALR state ->
        # (the context of its terminals, the terminals it reduces on)
        self._stack_tset: dict[Stack, int] = {}
        self._walks: dict[tuple, WalkResult] = dict(walks or {})
        self._masks: dict[State, np.ndarray] = {}
        self._suffix_masks: dict[tuple, np.ndarray] = {}  # (stack suffix, tset, q) -> mask
        self._suffix_depths: dict[tuple, set[int]] = {}  # (top, tset, q) -> suffix lengths
        self._growth = vocab.max_token_bytes + 2  # how much one token may grow the stack
        self._lock = threading.RLock()
        self._trie = vocab.byte_trie
        self._num_words = num_words(vocab.vocab_size)
        self._eos_mask = pack_token_ids(vocab.eos_token_ids, vocab.vocab_size)
        self.initial_state: State = (self.lalr.start_stack,
                                     self.tset_for(self.lalr.start_stack), 0)

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self)

    def prewalk(self) -> dict[tuple, WalkResult]:
        """Do the compile-time walks of :mod:`.prewalk`; returns them (for the disk cache)."""
        walks = prewalk(self._lexers[self.initial_state[1]], self._trie)
        self._walks.update(walks)
        return walks

    def warm_up(self) -> None:
        """Do now, off the engine thread, what the first masks would otherwise pay (see
        :mod:`.warm_up`), and the first mask."""
        self.warm_shared_walks()
        warm_up(self, time.perf_counter() + WARM_UP_S)
        self.mask_for(self.initial_state)

    def state_context(self, lalr_state: int) -> int:
        """The lexer context of the terminals ``lalr_state`` has actions for: what a
        stack with it on top lexes, unless a reduce fails deeper."""
        if self.tables.basic_lexer:
            return self._tset_id(frozenset(range(len(self.tables.terminals))))
        index = self.tables.index
        return self._tset_id(frozenset(index[t] for t in self.lalr.actions[lalr_state]
                                       if t != END) | self.tables.ignore)

    def warm_shared_walks(self, per_terminal: int = DEAR_STATES_PER_TERMINAL) -> None:
        """Walk the dear single-terminal states (inside a string: nearly every byte
        continues, so the walk visits the whole vocabulary) into the shared store."""
        for index, terminal in enumerate(self.tables.terminals):
            table = terminal.dfa.table
            dear = np.flatnonzero((table >= 0).sum(axis=1) >= DEAR_FANOUT)
            dear = dear[dear > 0][:per_terminal]
            if dear.size:
                lexer = build_lexer_dfa(self.tables.terminals, frozenset([index]))
                for q in dear.tolist():
                    self._shared_walk(lexer, q, index, q)

    # ------------------------------------------------------------ lexer contexts

    def tset_for(self, stack: Stack) -> int:
        return self.tset_low(stack)[0]

    def tset_low(self, stack: Stack) -> tuple[int, int]:
        """The lexer context of ``stack`` and the lowest index of ``stack`` it depends on."""
        found = self._stack_tset.get(stack)
        if found is None:
            if self.tables.basic_lexer:
                tset, low = self.state_context(stack[-1]), len(stack)
            elif len(stack) >= MAX_STACK_DEPTH:  # shifts fail there too
                names, low = self.lalr.acceptable_low(stack)
                tset = self._tset_id(frozenset(self.tables.index[t] for t in names)
                                     | self.tables.ignore)
            else:
                tset, low = self._context_low(stack)
            if len(self._stack_tset) > MAX_CACHED_MASKS:
                self._stack_tset.clear()
            found = self._stack_tset[stack] = (tset, low)
        return found

    def _context_low(self, stack: Stack) -> tuple[int, int]:
        """``lalr.acceptable_low`` as a lexer context, below the depth limit: a terminal
        the top state shifts is acceptable whatever lies below; only reduces are fed.
        With no reduce to try, the context is the top state's own (one dict hit)."""
        top = stack[-1]
        entry = self._state_terminals.get(top)
        if entry is None:
            actions = self.lalr.actions[top]
            reduces = tuple(t for t, (is_shift, _) in actions.items()
                            if t != END and not is_shift)
            entry = self._state_terminals[top] = (self.state_context(top), reduces)
        tset, reduces = entry
        low = len(stack) - 1
        if not reduces:
            return tset, low
        index = self.tables.index
        members = set(self._tset_members[tset])
        for name in reduces:
            fed, read = self.lalr.feed_low(stack, name)
            low = min(low, read)
            if fed is None and index[name] not in self.tables.ignore:
                members.discard(index[name])
        return self._tset_id(frozenset(members)), low

    def lexer(self, tset: int) -> LexerDFA:
        return self._lexers[tset]

    def _tset_id(self, members: frozenset[int]) -> int:
        """The lexer context lexing ``members`` (built on first use)."""
        tset = self._tset_ids.get(members)
        if tset is None:
            with self._lock:
                tset = self._tset_ids.get(members)
                if tset is None:
                    self._lexers.append(build_lexer_dfa(self.tables.terminals, members))
                    self._tset_members.append(members)
                    tset = self._tset_ids[members] = len(self._lexers) - 1
        return tset

    def close_lexeme(self, stack: Stack, tset: int, q: int) -> Stack | None:
        """The stack after the lexeme in state ``q`` closes (None: no terminal / parse error)."""
        terminal = int(self._lexers[tset].winner[q])
        if terminal < 0:
            return None
        if terminal in self.tables.ignore:
            return stack
        return self.lalr.feed(stack, self.tables.terminals[terminal].name)

    def step_byte(self, state: State, byte: int) -> State | None:
        stack, tset, q = state
        nq = int(self._lexers[tset].table[q, byte])
        if nq >= 0:
            return (stack, tset, nq)
        if q == 0:
            return None
        stack = self.close_lexeme(stack, tset, q)
        if stack is None:
            return None
        tset = self.tset_for(stack)
        nq = int(self._lexers[tset].table[0, byte])
        return None if nq < 0 else (stack, tset, nq)

    def is_accepting(self, state: State) -> bool:
        stack, tset, q = state
        if q == FINISHED:
            return False
        if q != 0:
            stack = self.close_lexeme(stack, tset, q)
            if stack is None:
                return False
        return self.lalr.accepts_end(stack)

    # ------------------------------------------------------------------- masks

    def mask_for(self, state: State) -> np.ndarray:
        mask = self._masks.get(state)
        if mask is not None:
            return mask
        mask = self._suffix_mask(state)
        if mask is None:
            mask, low = self._compute_mask(state)
            self._remember_suffix(state, low, mask)
        if len(self._masks) > MAX_CACHED_MASKS:
            self._masks.clear()
        self._masks[state] = mask
        return mask

    def _compute_mask(self, state: State) -> tuple[np.ndarray, int]:
        """The mask of ``state`` and the lowest index of its stack the mask depends on."""
        stack, tset, q = state
        mask = np.zeros(self._num_words, dtype=np.int32)
        reach = _Reach(len(stack))
        if q != FINISHED:
            self._collect(stack, tset, q, (self._lexers[tset].live[q],), None, mask,
                          len(stack), reach)
            if self._accepting_read(stack, tset, q, reach):
                mask |= self._eos_mask
        mask.setflags(write=False)
        return mask, reach.low

    # A mask depends on the top of the stack only (what the parser reads while feeding the
    # terminals a token can close): masks are also kept by that suffix, so a structure seen
    # at another depth or position (the next array item, a nested object) is a dict hit.
    def _suffix_mask(self, state: State) -> np.ndarray | None:
        stack, tset, q = state
        if len(stack) + self._growth >= MAX_STACK_DEPTH:
            return None  # near the depth limit the stack's length matters too
        for depth in self._suffix_depths.get((stack[-1], tset, q), ()):
            if depth <= len(stack):
                mask = self._suffix_masks.get((stack[len(stack) - depth:], tset, q))
                if mask is not None:
                    return mask
        return None

    def _remember_suffix(self, state: State, low: int, mask: np.ndarray) -> None:
        stack, tset, q = state
        if len(stack) + self._growth >= MAX_STACK_DEPTH:
            return
        if len(self._suffix_masks) > MAX_CACHED_MASKS:
            self._suffix_masks.clear()
            self._suffix_depths.clear()
        self._suffix_masks[(stack[low:], tset, q)] = mask
        self._suffix_depths.setdefault((stack[-1], tset, q), set()).add(len(stack) - low)

    def _accepting_read(self, stack: Stack, tset: int, q: int, reach: _Reach) -> bool:
        """:meth:`is_accepting`, noting in ``reach`` how deep it read ``stack``."""
        kept = len(stack)
        if q != 0:
            terminal = int(self._lexers[tset].winner[q])
            if terminal < 0:
                return False
            if terminal not in self.tables.ignore:
                stack, low = self.lalr.feed_low(stack, self.tables.terminals[terminal].name)
                reach.read(low, kept)
                if stack is None:
                    return False
                kept = min(kept, low + 1)
        accepts, low = self.lalr.accepts_end_low(stack)
        reach.read(low, kept)
        return accepts

    def _root_walk(self, tset: int, q: int, live: tuple) -> WalkResult:
        """A whole-vocabulary walk from lexer state ``q``; from the process-wide store
        when one terminal alone is alive there (the walk is then grammar-independent)."""
        if len(live) != 1:
            return walk_from_root(self._lexers[tset], q, self._trie)
        ((terminal, terminal_state),) = live
        return self._shared_walk(self._lexers[tset], q, terminal, terminal_state)

    def store_key(self, terminal: int, terminal_state: int) -> tuple[str, str, int]:
        """The shared store's key of the walk from ``terminal_state`` of ``terminal``."""
        return (self.vocab.fingerprint, self.tables.terminal_keys[terminal], terminal_state)

    def _shared_walk(self, lexer: LexerDFA, q: int, terminal: int,
                     terminal_state: int) -> WalkResult:
        """The walk from ``lexer`` state ``q``, where only ``terminal`` is alive (in
        ``terminal_state``): from the shared store, walked and stored if missing."""
        key = self.store_key(terminal, terminal_state)
        result = SHARED.get(key, terminal)
        if result is None:
            result = walk_from_root(lexer, q, self._trie)
            SHARED.put(key, result)
        return result

    def walk_at(self, key: tuple, tset: int, q: int, start: np.ndarray | None) -> WalkResult:
        """The walk of ``key`` (see :meth:`_collect`) from state ``q`` of lexer context
        ``tset``, over ``start`` (None: the whole vocabulary); cached."""
        result = self._walks.get(key)
        if result is None:
            if start is None:
                result = self._root_walk(tset, q, key[0])
            else:
                result = walk(self._lexers[tset], q, start, self._trie)
            self._walks[key] = result
        return result

    def _collect(self, stack: Stack, tset: int, q: int, key: tuple, start: np.ndarray | None,
                 allowed: np.ndarray, kept: int, reach: _Reach) -> None:
        """Set in ``allowed`` (a packed token mask) the tokens that the state accepts.

        ``start``: the trie nodes whose bytes begin the lexeme (None: the whole vocabulary).
        ``key``: the walk's cache key, (live pairs of the first lexer state,) then one
        (terminal, next lexer context) per boundary crossed. ``kept``: how many entries at
        the bottom of ``stack`` are the mask's own stack's; ``reach`` records how deep
        into those the parser reads.
        """
        result = self.walk_at(key, tset, q, start)
        allowed |= result.packed
        for terminal, sub_start in result.boundaries.items():
            next_kept = kept
            if terminal in self.tables.ignore:
                next_stack = stack
            else:
                next_stack, low = self.lalr.feed_low(stack, self.tables.terminals[terminal].name)
                reach.read(low, kept)
                if next_stack is None:
                    continue
                next_kept = min(kept, low + 1)
            next_tset, low = self.tset_low(next_stack)
            reach.read(low, next_kept)
            self._collect(next_stack, next_tset, 0, key + (terminal, next_tset), sub_start,
                          allowed, next_kept, reach)


class _Reach:
    """The lowest index of a mask's stack that computing the mask read."""

    __slots__ = ("low",)

    def __init__(self, length: int):
        self.low = max(length - 1, 0)

    def read(self, low: int, kept: int) -> None:
        """A read down to ``low`` of a stack whose first ``kept`` entries are the mask's."""
        if low < kept:
            self.low = min(self.low, low)


class GrammarMatcher(StateStackMatcher):
    """Per-request position in a :class:`CompiledGrammar`: a history of states."""

    compiled: CompiledGrammar

    def accept_token(self, token_id: int) -> bool:
        state = self.states[-1]
        if state[2] == FINISHED or not 0 <= token_id < self.vocab_size:
            return False
        if token_id in self.compiled.vocab.eos_token_ids:
            if not self.compiled.is_accepting(state):
                return False
            self.states.append((state[0], state[1], FINISHED))
            return True
        data = self.compiled.vocab.token_bytes[token_id]
        if not data:
            return False
        for byte in data:
            state = self.compiled.step_byte(state, byte)
            if state is None:
                return False
        self.states.append(state)
        return True

    def accept_text(self, text: str | bytes) -> bool:
        """Advance over raw text (not tokens); False leaves the state unchanged. Tests use it."""
        state = self.states[-1]
        for byte in text.encode() if isinstance(text, str) else text:
            state = self.compiled.step_byte(state, byte)
            if state is None:
                return False
        self.states.append(state)
        return True

    def is_accepting(self) -> bool:
        return self.compiled.is_accepting(self.states[-1])

    def is_terminated(self) -> bool:
        return self.states[-1][2] == FINISHED or super().is_terminated()
