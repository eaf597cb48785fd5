"""``multipleOf`` as a grammar: the integers that are multiples of ``p`` read digit by
digit, the rule per residue of the digits so far modulo ``p`` (``n*10 + d`` mod ``p``
after digit ``d``), the number ending where the residue is 0.

``multipleOf: 10^-d`` on numbers is exactly the numbers written with at most ``d``
fraction digits (then zeros). Another fractional ``multipleOf`` = m / 10^d on numbers
(:func:`decimal_multiples`): at most ``d`` fraction digits and the digits, read as an
integer, a multiple of ``m``, read by an automaton (up to MAX_DECIMAL_STATES states).
Beside bounds or past that size, ``multipleOf: p/q`` (in lowest terms) generates the
integer multiples of ``p`` (a generation-time restriction); on integers that is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError

MAX_MODULUS = 256  # rules for residues up to this many; larger multiples are refused
MAX_FRACTION_DIGITS = 64
# Rules of a fractional multipleOf's automaton, at most: right-recursive (as for
# integers, so a union of two reads both at once), and lark's LALR analysis recurses
# along such chains.
MAX_DECIMAL_STATES = 64
DIGITS = [f'"{d}"' for d in range(10)]  # one Lark string terminal per digit


def multiple_of(node: dict, where: str) -> Fraction | None:
    """``multipleOf`` of ``node`` as an exact fraction (its decimal spelling), or None."""
    if "multipleOf" not in node:
        return None
    value = node["multipleOf"]
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) or value <= 0:
        raise ConstraintError(f"multipleOf at {where} must be a positive number")
    return exact(value)


def exact(value: int | float | Fraction) -> Fraction:
    """A JSON number as the fraction its decimal spelling means."""
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def common_multiple(a: int | float | Fraction, b: int | float | Fraction) -> Fraction:
    """The least common multiple of two ``multipleOf`` (both hold iff it does)."""
    x, y = exact(a), exact(b)
    return Fraction(math.lcm(x.numerator, y.numerator),
                    math.gcd(x.denominator, y.denominator))


def decimal_places(step: Fraction) -> int | None:
    """d when ``step`` is 10^-d (d >= 0), else None."""
    if step.numerator != 1:
        return None
    d, q = 0, step.denominator
    while q % 10 == 0:
        q, d = q // 10, d + 1
    return d if q == 1 else None


def integer_residues(p: int, avoid: int | None, rule: Callable[[list[str], str | None], str],
                     where: str, signs: tuple[bool, bool, bool] = (True, True, True)
                     ) -> list[str]:
    """Alternatives of a rule matching the JSON integers that are multiples of ``p`` and
    (``avoid``) not of ``avoid`` (``rule(alternatives, name)`` makes rules); ``signs``:
    negative, zero, positive ones allowed. Divisibility ignores the sign."""
    modulus = math.lcm(p, avoid) if avoid else p
    if modulus > MAX_MODULUS:
        raise UnsupportedSchemaError(
            f"multipleOf at {where}: residues modulo {modulus} (above {MAX_MODULUS}) "
            "are not supported")
    accept = {r for r in range(modulus) if r % p == 0 and not (avoid and r % avoid == 0)}
    if not accept:
        return []
    names: dict[int, str] = {}

    def step(r: int, d: int) -> str:  # digit d after a prefix of residue r
        t = (10 * r + d) % modulus
        return f"{DIGITS[d]} [{rest(t)}]" if t in accept else f"{DIGITS[d]} {rest(t)}"

    def rest(r: int) -> str:  # the digits after a prefix of residue r, ending accepted
        if r not in names:  # every residue reaches an accepted one (10^j >= modulus)
            names[r] = rule([], None)
            rule([step(r, d) for d in range(10)], names[r])
        return names[r]

    magnitude = rule([step(0, d) for d in range(1, 10)], None)
    negative, zero, positive = signs
    return [alt for alt, allowed in ((f'"-" {magnitude}', negative),
                                     (DIGITS[0], zero and 0 in accept),
                                     (magnitude, positive)) if allowed]


def decimal_regex(places: int, where: str) -> str:
    """JSON numbers written with at most ``places`` fraction digits (then zeros)."""
    if places > MAX_FRACTION_DIGITS:
        raise UnsupportedSchemaError(f"multipleOf at {where}: too many decimal places")
    fraction = rf"(?:\.[0-9]{{1,{places}}}0*)?" if places else r"(?:\.0+)?"
    return rf"-?(?:0|[1-9][0-9]*){fraction}"


def is_multiple(value: Any, step: Fraction) -> bool:
    return exact(value) % step == 0


def decimal_multiples(step: Fraction, rule: Callable[[list[str], str | None], str],
                      where: str) -> list[str] | None:
    """Alternatives of a rule matching the JSON numbers (no exponent) that are multiples
    of a fractional ``step`` = m / 10^d: at most d fraction digits (then zeros) and the
    digits, read as the integer x * 10^d, a multiple of m. The rules track that integer
    modulo m, digit by digit, and where d fraction digits have been read; states that
    can no longer end on a multiple are left out. None where that takes more than
    MAX_DECIMAL_STATES rules."""
    d = 0
    while (step * 10**d).denominator != 1:
        d += 1
        if d > MAX_FRACTION_DIGITS:
            return None
    m = int(step * 10**d)
    if m * (d + 2) > MAX_DECIMAL_STATES:
        return None
    moves, ends = _decimal_automaton(m, d)
    live = _co_reachable(moves, ends)
    names: dict[tuple, str] = {}

    def after(state: tuple, token: str) -> str:  # the token, then what may follow state
        tail = rest(state)
        if tail is None:
            return token
        return f"{token} [{tail}]" if state in ends else f"{token} {tail}"

    def rest(state: tuple) -> str | None:  # non-empty continuations from state
        options = [(t, s) for t, s in moves[state] if s in live]
        if not options:
            return None
        if state not in names:
            names[state] = rule([], None)
            rule([after(s, t) for t, s in options], names[state])
        return names[state]

    magnitude = rule([after(s, t) for t, s in moves[("start",)] if s in live], None)
    return [f'"-" {magnitude}', magnitude]


def _decimal_automaton(m: int, d: int) -> tuple[dict[tuple, list[tuple[str, tuple]]],
                                                set[tuple]]:
    """(moves: state -> [(token, next state)], accepting states) of the magnitudes
    (unsigned decimals) whose value times 10^d is a multiple of m."""
    moves: dict[tuple, list[tuple[str, tuple]]] = {
        ("start",): [(DIGITS[0], ("zero",))] + [(DIGITS[g], ("int", g % m))
                                                 for g in range(1, 10)],
        ("zero",): [('"."', ("frac", 0, 0))]}
    ends = {("zero",)}
    for r in range(m):
        moves[("int", r)] = [(DIGITS[g], ("int", (10 * r + g) % m)) for g in range(10)]
        moves[("int", r)].append(('"."', ("frac", r, 0)))
        if r * 10**d % m == 0:
            ends.add(("int", r))
        for j in range(d + 1):
            if j < d:
                moves[("frac", r, j)] = [(DIGITS[g], ("frac", (10 * r + g) % m, j + 1))
                                         for g in range(10)]
            else:  # d fraction digits read: only zeros may follow
                moves[("frac", r, j)] = [(DIGITS[0], ("frac", r, j))]
            if j > 0 and r * 10 ** (d - j) % m == 0:
                ends.add(("frac", r, j))
    return moves, ends


def _co_reachable(moves: dict[tuple, list[tuple[str, tuple]]], ends: set[tuple]) -> set:
    """The states from which an accepting state can be reached."""
    live = set(ends)
    changed = True
    while changed:
        changed = False
        for state, options in moves.items():
            if state not in live and any(s in live for _, s in options):
                live.add(state)
                changed = True
    return live
