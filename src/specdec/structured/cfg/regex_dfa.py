"""Plain regular expressions straight to byte DFAs, without interegular.

interegular builds a character FSM through generic FSM operations (a few ms for a
short pattern, tens for a long alternation) that :mod:`.byte_dfa` then spells out
over UTF-8 bytes. For the plain subset JSON-schema grammars use (literals, escapes of
punctuation, ``\\n \\t \\xHH \\uHHHH``, ``.``, classes of ASCII ranges and single
characters, groups, ``|``, ``* + ? {m,n}``) this module goes from the pattern to a
Thompson NFA over bytes, then a subset construction over byte classes and Moore's
minimisation, in a millisecond or less. Characters are spelled as
:func:`~specdec.structured.cfg.byte_dfa._general_dfa` spells them: a named character
as its UTF-8 bytes, any other non-ASCII character (``.``, a negated class) as a lead
byte ``C2``-``F4`` and its number of continuation bytes ``80``-``BF``. Anything else
(``\\d``, anchors, flags, lazy quantifiers, non-ASCII ranges) raises
:class:`Unsupported` and the caller takes the general construction.
"""

from __future__ import annotations

import numpy as np

from specdec.structured.cfg.byte_dfa import DEAD, ByteDFA

MAX_COPIES = 64  # {m,n} beyond this: the general construction (or counted.py)
MAX_NFA_STATES = 20_000
MAX_RANGE = 512  # a class's non-ASCII range is spelled character by character
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
_CONTINUATION = sum(1 << b for b in range(0x80, 0xC0))


class Unsupported(ValueError):
    """Outside the plain subset: build the DFA the general way."""


def plain_regex_dfa(pattern: str) -> ByteDFA:
    """The minimal byte DFA of ``pattern`` (state 0 the start), or :class:`Unsupported`."""
    node, at = _Parser(pattern).alternation(0)
    if at != len(pattern):
        raise Unsupported("unbalanced parenthesis")
    nfa = _NFA()
    start = nfa.state()
    nfa.final = nfa.build(node, start)
    return _minimal(*_subsets(nfa, start))


class _Parser:
    """Nodes: ("set", chars, negated) | ("cat", [nodes]) | ("alt", [nodes]) |
    ("rep", node, low, high or None)."""

    def __init__(self, pattern: str):
        self.p = pattern

    def alternation(self, at: int) -> tuple[tuple, int]:
        branches = []
        while True:
            node, at = self.sequence(at)
            branches.append(node)
            if at < len(self.p) and self.p[at] == "|":
                at += 1
                continue
            return (branches[0] if len(branches) == 1 else ("alt", branches)), at

    def sequence(self, at: int) -> tuple[tuple, int]:
        items = []
        while at < len(self.p) and self.p[at] not in "|)":
            node, at = self.atom(at)
            node, at = self.quantified(node, at)
            items.append(node)
        return ("cat", items), at

    def quantified(self, node: tuple, at: int) -> tuple[tuple, int]:
        if at >= len(self.p) or self.p[at] not in "*+?{":
            return node, at
        c = self.p[at]
        if c == "{":
            close = self.p.find("}", at)
            low, comma, high = self.p[at + 1:close].partition(",")
            if close < 0 or not low.isdigit() or (high and not high.isdigit()):
                raise Unsupported("a brace that is not a count")
            bounds = (int(low), None if comma and not high else int(high or low))
            at = close + 1
        else:
            bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            at += 1
        low, high = bounds
        if (high is not None and high < low) or max(low, high or 0) > MAX_COPIES:
            raise Unsupported("count")
        if at < len(self.p) and self.p[at] in "*+?{":
            raise Unsupported("lazy, possessive or repeated quantifier")
        return ("rep", node, low, high), at

    def atom(self, at: int) -> tuple[tuple, int]:
        c = self.p[at]
        if c == "(":
            if self.p.startswith("(?:", at):
                at += 3
            elif self.p.startswith("(?", at):
                raise Unsupported("group flags or lookaround")
            else:
                at += 1
            node, at = self.alternation(at)
            if at >= len(self.p) or self.p[at] != ")":
                raise Unsupported("unbalanced parenthesis")
            return node, at + 1
        if c == "[":
            return self.char_class(at + 1)
        if c == ".":
            return ("set", frozenset("\n"), True), at + 1
        if c == "\\":
            char, at = self.escape(at + 1)
            return ("set", frozenset(char), False), at
        if c in "^$*+?{}]":
            raise Unsupported(f"{c!r}")
        return ("set", frozenset(c), False), at + 1

    def escape(self, at: int) -> tuple[str, int]:
        """The character ``\\`` + ``p[at:]`` stands for, and where it ends."""
        if at >= len(self.p):
            raise Unsupported("trailing backslash")
        e = self.p[at]
        if e in _ESCAPES:
            return _ESCAPES[e], at + 1
        if e == "x":  # interegular reads \xHH (not \uHHHH)
            digits = self.p[at + 1:at + 3]
            if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise Unsupported("escape")
            return chr(int(digits, 16)), at + 3
        if e.isascii() and not e.isalnum():
            return e, at + 1
        raise Unsupported(f"escape \\{e}")

    def char_class(self, at: int) -> tuple[tuple, int]:
        negated = at < len(self.p) and self.p[at] == "^"
        at += negated
        chars: set[str] = set()
        first = True
        while True:
            if at >= len(self.p):
                raise Unsupported("unterminated class")
            c = self.p[at]
            if c == "]" and not first:
                break
            if c in "[]":
                raise Unsupported("bracket in a class")
            low, at = self.class_char(at)
            first = False
            if self.p.startswith("-", at) and at + 1 < len(self.p) and self.p[at + 1] != "]":
                high, at = self.class_char(at + 1)
                if high < low or (ord(high) > 127 and ord(high) - ord(low) > MAX_RANGE):
                    raise Unsupported("range")
                chars.update(chr(x) for x in range(ord(low), ord(high) + 1))
            else:
                chars.add(low)
        return ("set", frozenset(chars), negated), at + 1

    def class_char(self, at: int) -> tuple[str, int]:
        c = self.p[at]
        if c == "\\":
            return self.escape(at + 1)
        if c == "[":
            raise Unsupported("bracket in a class")
        return c, at + 1


class _NFA:
    """Thompson's construction over bytes: edges carry 256-bit byte masks."""

    def __init__(self):
        self.edges: list[list[tuple[int, int]]] = []  # state -> [(byte mask, target)]
        self.eps: list[list[int]] = []
        self.final = -1

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise Unsupported("too many states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, node: tuple, start: int) -> int:
        """Add ``node`` from ``start``; returns its end state."""
        kind = node[0]
        if kind == "set":
            return self._char(node[1], node[2], start)
        if kind == "cat":
            for item in node[1]:
                start = self.build(item, start)
            return start
        if kind == "alt":
            end = self.state()
            for branch in node[1]:
                entry = self.state()
                self.eps[start].append(entry)
                self.eps[self.build(branch, entry)].append(end)
            return end
        _, inner, low, high = node
        for _ in range(low):
            start = self.build(inner, start)
        if high is None:  # a loop back to the entry
            entry = self.state()
            self.eps[start].append(entry)
            self.eps[self.build(inner, entry)].append(entry)
            return entry
        end = self.state()
        for _ in range(high - low):
            self.eps[start].append(end)
            start = self.build(inner, start)
        self.eps[start].append(end)
        return end

    def _char(self, chars: frozenset[str], negated: bool, start: int) -> int:
        end = self.state()
        ascii_mask = sum(1 << ord(c) for c in chars if ord(c) < 128)
        if negated:
            self.edges[start].append(((1 << 128) - 1 & ~ascii_mask, end))
            self._other_characters(start, end, {c.encode() for c in chars if ord(c) >= 128})
            return end
        if ascii_mask:
            self.edges[start].append((ascii_mask, end))
        for c in chars:
            if ord(c) >= 128:
                data = c.encode()
                state = start
                for byte in data[:-1]:
                    step = self.state()
                    self.edges[state].append((1 << byte, step))
                    state = step
                self.edges[state].append((1 << data[-1], end))
        return end

    def _other_characters(self, start: int, end: int, excluded: set[bytes]) -> None:
        """Edges for every non-ASCII character but ``excluded`` (UTF-8 encodings): a lead
        byte and its continuation bytes, spelled exactly where an excluded one begins."""
        prefixes = {e[:i] for e in excluded for i in range(1, len(e))}
        chains = {0: end}

        def chain(missing: int) -> int:  # `missing` continuation bytes to go
            if missing not in chains:
                state = chains[missing] = self.state()
                self.edges[state].append((_CONTINUATION, chain(missing - 1)))
            return chains[missing]

        def spell(state: int, prefix: bytes, total: int, candidates: range) -> None:
            generic = 0
            for byte in candidates:
                longer = prefix + bytes([byte])
                if longer in prefixes:
                    step = self.state()
                    self.edges[state].append((1 << byte, step))
                    spell(step, longer, total, range(0x80, 0xC0))
                elif longer not in excluded:
                    generic |= 1 << byte
            if generic:
                self.edges[state].append((generic, chain(total - len(prefix) - 1)))

        for total, leads in ((2, range(0xC2, 0xE0)), (3, range(0xE0, 0xF0)),
                             (4, range(0xF0, 0xF5))):
            spell(start, b"", total, leads)


def _subsets(nfa: _NFA, start: int) -> tuple[list[list[int]], list[bool], list[int]]:
    """Subset construction over byte classes: (rows of next states by class, accepting,
    class of each byte)."""
    classes = [(1 << 256) - 1]
    for mask in {m for edges in nfa.edges for m, _ in edges}:
        refined = []
        for c in classes:
            inside, outside = c & mask, c & ~mask
            refined.extend(x for x in (inside, outside) if x)
        classes = refined
    covers: dict[int, list[int]] = {}  # byte mask -> the classes inside it
    moves: list[dict[int, list[int]]] = []
    for edges in nfa.edges:
        by_class: dict[int, list[int]] = {}
        for mask, target in edges:
            inside = covers.get(mask)
            if inside is None:
                inside = covers[mask] = [k for k, c in enumerate(classes) if c & mask]
            for k in inside:
                by_class.setdefault(k, []).append(target)
        moves.append(by_class)
    closures: dict[int, frozenset[int]] = {}

    def closure(state: int) -> frozenset[int]:
        found = closures.get(state)
        if found is None:
            seen, todo = {state}, [state]
            while todo:
                for t in nfa.eps[todo.pop()]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            found = closures[state] = frozenset(seen)
        return found

    first = closure(start)
    ids = {first: 0}
    queue = [first]
    rows: list[list[int]] = []
    for current in queue:  # grows while visited
        targets: dict[int, set[int]] = {}
        for s in current:
            for k, ts in moves[s].items():
                bucket = targets.setdefault(k, set())
                for t in ts:
                    bucket |= closure(t)
        row = [DEAD] * len(classes)
        for k, bucket in targets.items():
            key = frozenset(bucket)
            target = ids.get(key)
            if target is None:
                target = ids[key] = len(queue)
                queue.append(key)
            row[k] = target
        rows.append(row)
    class_of = [0] * 256
    for k, c in enumerate(classes):
        while c:
            low = c & -c
            class_of[low.bit_length() - 1] = k
            c ^= low
    return rows, [nfa.final in s for s in queue], class_of


def _minimal(rows: list[list[int]], accepting: list[bool], class_of: list[int]) -> ByteDFA:
    """Moore's partition refinement, then states renumbered breadth-first by byte (plain
    Python: these DFAs are small, and numpy's calls cost more than the work)."""
    block = [int(a) for a in accepting]
    count = len(set(block))
    while True:
        ids: dict[tuple, int] = {}
        refined = [ids.setdefault((block[s], *[block[t] if t >= 0 else DEAD for t in row]),
                                  len(ids)) for s, row in enumerate(rows)]
        if len(ids) == count:
            break
        block, count = refined, len(ids)
    first: dict[int, int] = {}  # block -> its first state
    for state, b in enumerate(block):
        first.setdefault(b, state)
    by_byte = list(dict.fromkeys(class_of))  # classes in the order of their first byte
    order = {block[0]: 0}
    queue = [block[0]]
    for b in queue:  # grows while visited
        row = rows[first[b]]
        for k in by_byte:
            if row[k] >= 0 and block[row[k]] not in order:
                order[block[row[k]]] = len(queue)
                queue.append(block[row[k]])
    table = [[order[block[t]] if t >= 0 else DEAD for t in rows[first[b]]] for b in queue]
    return ByteDFA(np.array(table, dtype=np.int32)[:, class_of],
                   np.array([accepting[first[b]] for b in queue], dtype=bool))
