"""A terminal's regular expression as a DFA over UTF-8 *bytes*.

interegular turns a regex into an FSM over characters. Tokens are bytes, and one
token may end in the middle of a character, so each character transition is spelled
out as the character's UTF-8 bytes through intermediate states. Characters the regex
never names (``anything_else``, e.g. any non-ASCII letter in ``[^"\\\\]``) share one chain
of "any continuation byte" states per (target, bytes still missing).

The result is a dense table ``next[state, byte]`` (-1: dead) with state 0 the start,
trimmed so that every state can still reach an accepting state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import interegular
import numpy as np
from interegular.fsm import anything_else

DEAD = -1


@dataclass
class ByteDFA:
    table: np.ndarray  # int32 [num_states, 256]: next state, DEAD when the byte cannot follow
    accepting: np.ndarray  # bool [num_states]

    @property
    def num_states(self) -> int:
        return self.table.shape[0]


def _utf8_length(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # ASCII, a continuation byte or an invalid lead


@functools.lru_cache(maxsize=512)
def regex_to_byte_dfa(pattern: str) -> ByteDFA:
    """Compile ``pattern`` (Python regex syntax, as lark writes it) to a :class:`ByteDFA`.

    Counted repetitions are composed (:mod:`.counted`), plain patterns built directly
    (:mod:`.regex_dfa`), anything else through interegular. Memoised (JSON-schema
    grammars share most terminals): the result is shared, so never mutate its arrays.

    Raises ``ValueError`` when the pattern is not a regular language (lookarounds,
    backreferences) or interegular cannot parse it.
    """
    from specdec.structured.cfg.counted import NotComposable, composed_dfa
    from specdec.structured.cfg.regex_dfa import Unsupported, plain_regex_dfa

    try:
        return composed_dfa(pattern, regex_to_byte_dfa)
    except NotComposable:
        pass
    try:
        return plain_regex_dfa(pattern)
    except Unsupported:
        return _general_dfa(pattern)


def _general_dfa(pattern: str) -> ByteDFA:
    """interegular's FSM of ``pattern``, spelled out over UTF-8 bytes."""
    try:
        fsm = interegular.parse_pattern(pattern).to_fsm()
    except MemoryError:
        raise  # the compile's memory cap, not a property of the pattern
    except Exception as exc:  # noqa: BLE001 - interegular raises several types
        raise ValueError(f"not representable as a finite automaton: {exc}") from None
    alphabet = fsm.alphabet
    explicit = [c for c in alphabet._symbol_mapping if c is not anything_else and ord(c) >= 128]
    explicit_bytes = {c: c.encode() for c in explicit}
    else_symbol = alphabet._symbol_mapping.get(anything_else)

    def char_target(state, char: str):
        symbol = alphabet[char]
        return None if symbol is None else fsm.map.get(state, {}).get(symbol)

    def else_target(state):
        return None if else_symbol is None else fsm.map.get(state, {}).get(else_symbol)

    ids: dict[tuple, int] = {}
    rows: list[list[int]] = []
    finals: list[bool] = []
    queue: list[tuple] = []

    def node(key: tuple | None) -> int:
        if key is None:
            return DEAD
        if key not in ids:
            ids[key] = len(rows)
            rows.append([DEAD] * 256)
            finals.append(key[0] == "fsm" and key[1] in fsm.finals)
            queue.append(key)
        return ids[key]

    def fsm_node(state):
        return None if state is None else ("fsm", state)

    def generic(target, missing: int):
        if target is None:
            return None
        return ("fsm", target) if missing == 0 else ("any", target, missing)

    node(("fsm", fsm.initial))
    while queue:
        key = queue.pop()
        row = rows[ids[key]]
        if key[0] == "fsm":
            state = key[1]
            for b in range(128):
                row[b] = node(fsm_node(char_target(state, chr(b))))
            for lead in range(0xC2, 0xF5):
                prefix = bytes([lead])
                if any(e.startswith(prefix) for e in explicit_bytes.values()):
                    row[lead] = node(("trie", state, prefix))
                else:
                    row[lead] = node(generic(else_target(state), _utf8_length(lead) - 1))
        elif key[0] == "any":
            _, target, missing = key
            for b in range(0x80, 0xC0):
                row[b] = node(generic(target, missing - 1))
        else:  # ("trie", state, prefix): inside a character some explicit char starts with
            _, state, prefix = key
            total = _utf8_length(prefix[0])
            for b in range(0x80, 0xC0):
                longer = prefix + bytes([b])
                if len(longer) == total:
                    char = longer.decode("utf-8", errors="replace")
                    row[b] = node(fsm_node(char_target(state, char)))
                elif any(e.startswith(longer) for e in explicit_bytes.values()):
                    row[b] = node(("trie", state, longer))
                else:
                    row[b] = node(generic(else_target(state), total - len(longer)))
    table = np.array(rows, dtype=np.int32)
    accepting = np.array(finals, dtype=bool)
    return ByteDFA(_trim(table, accepting), accepting)


def _trim(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Send transitions into states that cannot reach acceptance to DEAD."""
    live = accepting.copy()
    while True:
        nxt = table.clip(min=0)
        reaches = live[nxt] & (table >= 0)
        grown = live | reaches.any(axis=1)
        if (grown == live).all():
            break
        live = grown
    out = table.copy()
    out[(table >= 0) & ~live[table.clip(min=0)]] = DEAD
    return out
