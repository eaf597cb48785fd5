"""Incremental detokenization on byte-level BPE and stop strings."""

from __future__ import annotations

import pytest

from specdec.detokenizer import IncrementalDetokenizer

TEXTS = [
    "héllo wörld — 你好，世界 🎉🚀 naïve café",
    "Ann is 31.\n{\"name\": \"Zoë\"}",
    "日本語のテキスト",
]


@pytest.mark.parametrize("text", TEXTS)
def test_token_by_token_equals_full_decode(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.add_tokens([t]) for t in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == text == detok.text
    assert all("\ufffd" not in p for p in pieces)  # never a half character


def test_split_multibyte_character_is_held_back(tokenizer):
    ids = tokenizer.encode("🎉", add_special_tokens=False)
    assert len(ids) > 1  # the emoji spans several byte tokens
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.add_tokens([t]) for t in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.add_tokens([ids[-1]]) == "🎉"


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_trimmed_even_across_tokens(tokenizer, include):
    ids = tokenizer.encode("The answer is 42. END of story", add_special_tokens=False)
    detok = IncrementalDetokenizer(
        tokenizer, stop=["END", "never"], include_stop_str_in_output=include
    )
    for t in ids:
        detok.add_tokens([t])
        if detok.stopped_by:
            break
    assert detok.stopped_by == "END"
    assert detok.text == ("The answer is 42. END" if include else "The answer is 42. ")


def test_earliest_stop_string_wins(tokenizer):
    detok = IncrementalDetokenizer(tokenizer, stop=["b c", "a"])
    detok.add_tokens(tokenizer.encode("x a b c", add_special_tokens=False))
    assert detok.stopped_by == "a" and detok.text == "x "


def test_streamed_deltas_never_contain_trimmed_stop_text(tokenizer):
    detok = IncrementalDetokenizer(tokenizer, stop=["STOP HERE"])
    streamed = ""
    for t in tokenizer.encode("value: 42 STOP HERE and more", add_special_tokens=False):
        streamed += detok.add_tokens([t])
        if detok.stopped_by:
            break
    streamed += detok.flush()
    assert streamed == detok.text == "value: 42 "
