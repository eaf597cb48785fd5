"""``multipleOf`` as a grammar: the integers that are multiples of ``p`` read digit by
digit, the rule per residue of the digits so far modulo ``p`` (``n*10 + d`` mod ``p``
after digit ``d``), the number ending where the residue is 0.

``multipleOf: p/q`` (in lowest terms) accepts every integer multiple of ``p``: those are
generated (a number's fraction is dropped, a generation-time restriction), except for
``multipleOf: 10^-d`` on numbers, which is exactly the numbers written with at most
``d`` fraction digits (then zeros).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError

MAX_MODULUS = 256  # rules for residues up to this many; larger multiples are refused
MAX_FRACTION_DIGITS = 64
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
