"""Regular expressions for integer ranges, so JSON-schema numeric bounds are enforced exactly.

``int_range_regex(3, 20)`` is ``(?:[3-9]|1[0-9]|20)``-like: digit by digit, a range of
equal-length numbers ``[lo, hi]`` splits into ``lo``'s first digit followed by
``[rest of lo, 99..]``, the full first digits in between, and ``hi``'s first digit
followed by ``[00.., rest of hi]``.

Longer alternatives come first: outlines-core builds its DFA with leftmost-first
semantics, where ``[0-9]|[1-9][0-9]`` would stop after one digit.
"""

from __future__ import annotations

from decimal import Decimal

_ANY_NONNEG = "(?:0|[1-9][0-9]*)"


def int_range_regex(lo: int | None, hi: int | None) -> str:
    """A regex matching exactly the JSON integers ``n`` with ``lo <= n <= hi`` (None = open)."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty integer range [{lo}, {hi}]")
    parts: list[str] = []
    if lo is None or lo < 0:  # negative part: -m with m in [max(1, -hi), -lo]
        m_lo = 1 if hi is None or hi >= 0 else -hi
        m_hi = None if lo is None else -lo
        parts.append("-" + _nonneg(m_lo, m_hi))
    if hi is None or hi >= 0:
        parts.append(_nonneg(max(lo or 0, 0), hi))
    return "(?:" + "|".join(parts) + ")"


def _nonneg(lo: int, hi: int | None) -> str:
    """Numbers in ``[lo, hi]`` (``hi`` None: unbounded), lo >= 0, without leading zeros."""
    if hi is None:
        if lo == 0:
            return _ANY_NONNEG
        n = len(str(lo))
        return f"(?:[1-9][0-9]{{{n},}}|" + _nonneg(lo, 10**n - 1) + ")"
    alternatives = []
    for length in range(len(str(lo)), len(str(hi)) + 1):
        a = max(lo, 10 ** (length - 1) if length > 1 else 0)
        b = min(hi, 10**length - 1)
        if a <= b:
            alternatives.append(_same_length(str(a), str(b)))
    return "(?:" + "|".join(reversed(alternatives)) + ")"  # longest first, see module doc


def _same_length(lo: str, hi: str) -> str:
    if lo == hi:
        return lo
    n = len(lo)
    if set(lo[1:]) <= {"0"} and set(hi[1:]) <= {"9"}:
        head = f"[{lo[0]}-{hi[0]}]" if lo[0] != hi[0] else lo[0]
        return head + ("[0-9]" * (n - 1))
    if lo[0] == hi[0]:
        return lo[0] + _same_length(lo[1:], hi[1:])
    parts = [lo[0] + _same_length(lo[1:], "9" * (n - 1))]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}]" + "[0-9]" * (n - 1))
    parts.append(hi[0] + _same_length("0" * (n - 1), hi[1:]))
    return "(?:" + "|".join(parts) + ")"


_FRACTION = r"(?:\.[0-9]+)?"
_ZERO_FRACTION = r"(?:\.0+)?"
_NONZERO_FRACTION = r"\.[0-9]*[1-9][0-9]*"


def number_range_regex(lo: int | None, hi: int | None, lo_open: bool = False,
                       hi_open: bool = False) -> str | None:
    """A regex matching exactly the JSON numbers written without an exponent whose value
    lies between the integers ``lo`` and ``hi`` (None: unbounded; ``*_open``: exclusive).
    None where no number does. ``-0`` counts as 0."""
    parts = []
    # x >= 0, written without '-': magnitudes in [lo', hi'].
    if hi is None or hi >= 0:
        m_lo, m_lo_open = (lo, lo_open) if lo is not None and lo >= 0 else (0, False)
        parts.append(_magnitude(m_lo, hi, m_lo_open, hi_open))
    # x <= 0, written with '-': x = -m.
    if lo is None or lo <= 0:
        m_lo, m_lo_open = (-hi, hi_open) if hi is not None and hi <= 0 else (0, False)
        m_hi, m_hi_open = (None, False) if lo is None else (-lo, lo_open)
        magnitude = _magnitude(m_lo, m_hi, m_lo_open, m_hi_open)
        parts.append(None if magnitude is None else "-" + magnitude)
    parts = [p for p in parts if p is not None]
    return "(?:" + "|".join(parts) + ")" if parts else None


def _magnitude(a: int, b: int | None, a_open: bool, b_open: bool) -> str | None:
    """Unsigned decimals m (integer part, optional fraction) with a <= m <= b, a >= 0."""
    if b is not None and (a > b or a == b and (a_open or b_open)):
        return None
    if b is not None and a == b:
        return str(a) + _ZERO_FRACTION
    parts = [str(a) + (_NONZERO_FRACTION if a_open else _FRACTION)]
    if b is None:
        parts.append(_nonneg(a + 1, None) + _FRACTION)
    else:
        if b - 1 >= a + 1:
            parts.append(_nonneg(a + 1, b - 1) + _FRACTION)
        if not b_open:
            parts.append(str(b) + _ZERO_FRACTION)
    return "(?:" + "|".join(parts) + ")"


def fraction_range_regex(lo: int | None, hi: int | None) -> str | None:
    """JSON numbers with a non-zero fraction (no exponent) strictly between the integers
    ``lo`` and ``hi`` (None: unbounded); None where there are none. Such a number lies
    in (k, k + 1) for its integer part k (-(m, m + 1) when negative)."""
    parts = []
    k_lo, k_hi = max(lo, 0) if lo is not None else 0, None if hi is None else hi - 1
    if k_hi is None or k_lo <= k_hi:
        parts.append(_nonneg(k_lo, k_hi) + _NONZERO_FRACTION)
    m_lo, m_hi = max(-hi, 0) if hi is not None else 0, None if lo is None else -lo - 1
    if m_hi is None or m_lo <= m_hi:
        parts.append("-" + _nonneg(m_lo, m_hi) + _NONZERO_FRACTION)
    return "(?:" + "|".join(parts) + ")" if parts else None


# ---------------------------------------------------------------- decimal bounds

MAX_BOUND_DIGITS = 64  # fraction digits of a bound written out digit by digit


def decimal_range_regex(lo: Decimal | None, hi: Decimal | None, lo_open: bool = False,
                        hi_open: bool = False) -> str | None:
    """Like :func:`number_range_regex`, for bounds with a fraction (``minimum: 1.1``):
    the integer part decides unless it equals a bound's, then the fraction digits do,
    compared digit by digit. None where no number lies in the range."""
    parts = []
    if hi is None or hi >= 0:
        a, a_open = (lo, lo_open) if lo is not None and lo >= 0 else (Decimal(0), False)
        parts.append(_decimal_magnitude(a, hi, a_open, hi_open))
    if lo is None or lo <= 0:
        a, a_open = (-hi, hi_open) if hi is not None and hi <= 0 else (Decimal(0), False)
        b, b_open = (None, False) if lo is None else (-lo, lo_open)
        magnitude = _decimal_magnitude(a, b, a_open, b_open)
        parts.append(None if magnitude is None else "-" + magnitude)
    parts = [p for p in parts if p is not None]
    return "(?:" + "|".join(parts) + ")" if parts else None


def _split(value: Decimal) -> tuple[int, str]:
    """(integer part, fraction digits without trailing zeros) of ``value`` >= 0."""
    whole, _, fraction = format(value, "f").partition(".")
    return int(whole), fraction.rstrip("0")


def _decimal_magnitude(a: Decimal, b: Decimal | None, a_open: bool,
                       b_open: bool) -> str | None:
    """Unsigned decimals m with a <= m <= b (``*_open``: strictly), a >= 0."""
    if b is not None and (a > b or a == b and (a_open or b_open)):
        return None
    (whole_a, frac_a) = _split(a)
    whole_b, frac_b = _split(b) if b is not None else (None, "")
    if whole_b == whole_a:  # one integer part: the fraction between both bounds
        from specdec.structured.schema_keys import regex_intersection

        low, high = _fraction_at_least(frac_a, a_open), _fraction_at_most(frac_b, b_open)
        both = regex_intersection(low, high, "#") if low and high else None
        return None if both is None else str(whole_a) + f"(?:{both})"
    parts = [str(whole_a) + _fraction_at_least(frac_a, a_open)]
    if whole_b is None:
        parts.append(_nonneg(whole_a + 1, None) + _FRACTION)
    else:
        if whole_b - 1 >= whole_a + 1:
            parts.append(_nonneg(whole_a + 1, whole_b - 1) + _FRACTION)
        top = _fraction_at_most(frac_b, b_open)
        if top is not None:
            parts.append(str(whole_b) + top)
    return "(?:" + "|".join(parts) + ")"


def _fraction_at_least(digits: str, strict: bool) -> str:
    """The written fractions ("" or ".ddd") of value >= 0.digits (> when ``strict``)."""
    if not digits:
        return _NONZERO_FRACTION if strict else _FRACTION
    return r"\." + _digits_above(digits, strict)


def _fraction_at_most(digits: str, strict: bool) -> str | None:
    """The written fractions of value <= 0.digits (< when ``strict``; None: none)."""
    if not digits:
        return None if strict else _ZERO_FRACTION
    return rf"(?:\.{_digits_below(digits, strict)})?"


def _digits_above(digits: str, strict: bool) -> str:
    """Non-empty digit strings s with 0.s >= 0.digits (> when strict), digits non-empty
    without trailing zeros."""
    first, rest = int(digits[0]), digits[1:]
    parts = [f"[{first + 1}-9][0-9]*"] if first < 9 else []
    if rest:
        parts.append(f"{first}{_digits_above(rest, strict)}")
    else:
        parts.append(f"{first}0*[1-9][0-9]*" if strict else f"{first}[0-9]*")
    return "(?:" + "|".join(parts) + ")"


def _digits_below(digits: str, strict: bool) -> str:
    """Non-empty digit strings s with 0.s <= 0.digits (< when strict), digits non-empty
    without trailing zeros."""
    first, rest = int(digits[0]), digits[1:]
    parts = [f"[0-{first - 1}][0-9]*"] if first > 0 else []
    if rest:
        parts.append(f"{first}(?:{_digits_below(rest, strict)})?")
    elif not strict:
        parts.append(f"{first}0*")
    return "(?:" + "|".join(parts) + ")"
