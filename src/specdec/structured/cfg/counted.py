"""Counted repetitions (``(?:X){m,n}``, ``[a-z]{m,n}``) as byte DFAs, built directly.

interegular expands a counted group into ``n`` copies through its character-level
FSM, then a subset construction: ~100 ms for a JSON string of at most 20 characters,
seconds for a few hundred. When the repeated piece ``X`` is *prefix-free* (no string
it matches is a proper prefix of another: one character, one escape) and nothing
loops back to its start, the repetition is deterministic by construction:
``n + 1`` junction states ("i copies done", accepting from ``m`` on) joined by ``n``
copies of ``X``'s inner states. Pieces around it are joined the same way when their
first bytes do not collide. When any of these conditions fails, the caller falls back
to the general construction, so this is only ever a faster way to the same language.
"""

from __future__ import annotations

import re

import numpy as np

from specdec.structured.cfg.byte_dfa import DEAD, ByteDFA

MIN_COUNT = 4  # below this the general construction is as fast
_INLINE_FLAG = re.compile(r"\(\?[a-zA-Z]+\)")  # (?i) applies to the whole pattern: never split


class NotComposable(ValueError):
    """The shortcut does not apply; build the DFA the general way."""


def split_counted(pattern: str) -> tuple[str, str, int, int | None, str] | None:
    """``(prefix, atom, m, n, suffix)`` for the first top-level counted atom worth it.

    ``atom`` is a ``(?:...)`` group or a ``[...]`` class; ``n`` is None for ``{m,}``.
    None when the pattern has a top-level ``|``, an inline flag or no such atom.
    """
    if _INLINE_FLAG.search(pattern):
        return None
    depth, i, found = 0, 0, None
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            end = _class_end(pattern, i)
            if depth == 0 and found is None:
                found = _counted_at(pattern, i, end + 1)
            i = end + 1
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                group_start = i
        elif c == ")":
            depth -= 1
            if depth == 0 and found is None and pattern.startswith("(?:", group_start):
                found = _counted_at(pattern, group_start, i + 1)
        elif c == "|" and depth == 0:
            return None
        i += 1
    return found


def _class_end(pattern: str, start: int) -> int:
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _counted_at(pattern: str, start: int, end: int):
    """The split when a ``{m,n}`` / ``{m,}`` / ``{m}`` follows ``pattern[start:end]``."""
    if end >= len(pattern) or pattern[end] != "{":
        return None
    close = pattern.find("}", end)
    if close < 0:
        return None
    low, comma, high = pattern[end + 1 : close].partition(",")
    if not low.isdigit() or (high and not high.isdigit()):
        return None
    m = int(low)
    n = None if comma and not high else int(high or low)
    if max(m, n or 0) < MIN_COUNT or (n is not None and m > n):
        return None
    if close + 1 < len(pattern) and pattern[close + 1] in "?+":  # lazy or possessive
        return None
    return pattern[:start], pattern[start:end], m, n, pattern[close + 1 :]


def repeat(piece: ByteDFA, m: int, n: int | None) -> ByteDFA:
    """``piece{m,n}`` (``n`` None: unbounded) for a prefix-free ``piece``.

    Junction ``j`` means "``j`` copies done"; copy ``i`` runs from junction ``i`` to
    ``i + 1``, except that for ``{m,}`` one extra copy runs from junction ``m`` back to it.
    """
    table, accepting = piece.table, piece.accepting
    if accepting[0]:
        raise NotComposable("the piece matches the empty string")
    if (table[accepting] != DEAD).any():
        raise NotComposable("the piece is not prefix-free")
    if (table == 0).any():
        raise NotComposable("the piece loops back to its start")
    last = m if n is None else n  # the last junction
    copies = m + 1 if n is None else n
    inner = np.flatnonzero(~accepting)[1:]
    num_inner = inner.shape[0]
    junctions = last + 1
    rank = np.zeros(piece.num_states, dtype=np.int64)
    rank[inner] = np.arange(num_inner)
    copy = np.arange(copies)[:, None]
    # where each piece state lands in copy i: state 0 -> junction i, an accepting state
    # -> junction i + 1 (at most `last`), inner state k -> its place in copy i.
    target = np.where(accepting[None, :], np.minimum(copy + 1, last),
                      junctions + copy * num_inner + rank[None, :])
    target[:, 0] = copy[:, 0]
    out = np.full((junctions + copies * num_inner, 256), DEAD, dtype=np.int32)
    source = table[np.concatenate(([0], inner))]  # [1 + num_inner, 256]
    dead = source == DEAD
    clipped = source.clip(min=0)
    for i in range(copies):
        mapped = np.where(dead, DEAD, target[i][clipped])
        out[i] = mapped[0]
        out[junctions + i * num_inner : junctions + (i + 1) * num_inner] = mapped[1:]
    final = np.zeros(out.shape[0], dtype=bool)
    final[m:junctions] = True
    return ByteDFA(out, final)


def concat(first: ByteDFA, second: ByteDFA) -> ByteDFA:
    """``first`` then ``second``, when every accepting state of ``first`` can tell by
    its next byte whether ``first`` goes on or ``second`` starts."""
    offset = first.num_states
    start_row = second.table[0]
    starts = start_row != DEAD
    ends = np.flatnonzero(first.accepting)
    if (first.table[ends][:, starts] != DEAD).any():
        raise NotComposable("the pieces' bytes collide at the join")
    shifted = np.where(second.table == DEAD, DEAD, second.table + offset).astype(np.int32)
    table = np.concatenate([first.table, shifted])
    joined = table[ends]
    joined[:, starts] = shifted[0][starts]
    table[ends] = joined
    accepting = np.concatenate([np.zeros(offset, dtype=bool), second.accepting])
    accepting[ends] = second.accepting[0]
    return ByteDFA(table, accepting)


def composed_dfa(pattern: str, build) -> ByteDFA:
    """``pattern``'s DFA from its counted atom and the pieces around it (``build``
    compiles each piece); :class:`NotComposable` when the shortcut does not apply."""
    split = split_counted(pattern)
    if split is None:
        raise NotComposable("no counted atom")
    prefix, atom, m, n, suffix = split
    dfa = repeat(build(atom), m, n)
    if prefix:
        dfa = concat(build(prefix), dfa)
    if suffix:
        dfa = concat(dfa, build(suffix))
    return dfa
