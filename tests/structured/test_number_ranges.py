"""Integer and number range regexes against exact decimal comparison, on generated
numbers and bounds (hypothesis)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.structured.int_range import fraction_range_regex, int_range_regex, number_range_regex

bounds = st.one_of(st.none(), st.integers(-1200, 1200))
numbers = st.builds(
    lambda sign, whole, fraction: f"{sign}{whole}{fraction}",
    st.sampled_from(["", "-"]),
    st.one_of(st.integers(0, 12), st.integers(0, 1500)).map(str),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,4}", fullmatch=True)),
)


@settings(max_examples=400, deadline=None)
@given(bounds, bounds, st.booleans(), st.booleans(), st.lists(numbers, min_size=1, max_size=20))
def test_number_range_is_exact(lo, hi, lo_open, hi_open, texts):
    regex = number_range_regex(lo, hi, lo_open, hi_open)
    for text in texts:
        value = Decimal(text)
        inside = (lo is None or (value > lo if lo_open else value >= lo)) and \
                 (hi is None or (value < hi if hi_open else value <= hi))
        assert bool(regex and re.fullmatch(regex, text)) == inside, (lo, hi, text, regex)


@settings(max_examples=300, deadline=None)
@given(bounds, bounds, st.lists(st.integers(-2000, 2000), min_size=1, max_size=20))
def test_integer_range_is_exact(lo, hi, values):
    if lo is not None and hi is not None and lo > hi:
        return
    regex = int_range_regex(lo, hi)
    for n in values:
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(re.fullmatch(regex, str(n))) == inside, (lo, hi, n, regex)


@pytest.mark.parametrize(("lo", "hi", "good", "bad"), [
    (2, None, ["2.5", "10.01"], ["2", "1.5", "3", "-2.5", "2.0"]),
    (None, 0, ["-0.5", "-7.25"], ["0.5", "-1", "-0.0"]),
    (-1, 1, ["-0.5", "0.5"], ["-1.5", "1.5", "0", "1"]),
])
def test_fraction_range_regex(lo, hi, good, bad):
    regex = re.compile(fraction_range_regex(lo, hi))
    assert all(regex.fullmatch(t) for t in good)
    assert not any(regex.fullmatch(t) for t in bad)
    assert fraction_range_regex(1, 1) is None
