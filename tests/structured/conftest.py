"""Fixtures for structured decoding: the real SmolLM2 tokenizer and compiled constraints."""

from __future__ import annotations

import pytest

from specdec.structured import compile_constraint


@pytest.fixture(scope="session")
def compile_for(tokenizer):
    """``compile_for(grammar="json.lark")``: compile for the real tokenizer (cached)."""

    def compile_(**constraint):
        return compile_constraint(tokenizer, vocab_size=49152, eos_token_ids=frozenset([2]),
                                  **constraint)

    return compile_


@pytest.fixture(scope="session")
def json_grammar(compile_for):
    return compile_for(grammar="json.lark")


@pytest.fixture(scope="session")
def accepts(tokenizer):
    """``accepts(compiled, text)``: tokenize like the model, feed token by token, complete?"""

    def accepts_(compiled, text: str) -> bool:
        matcher = compiled.matcher()
        ids = tokenizer.encode(text, add_special_tokens=False)
        return all(matcher.accept_token(i) for i in ids) and matcher.is_accepting()

    return accepts_


@pytest.fixture(scope="session")
def accepts_exactly(accepts):
    """``accepts_exactly(compiled, good, bad)``: every good text accepted, every bad one not."""

    def accepts_exactly_(compiled, good: list[str], bad: list[str]) -> None:
        for text in good:
            assert accepts(compiled, text), f"valid {text!r} rejected"
        for text in bad:
            assert not accepts(compiled, text), f"invalid {text!r} accepted"

    return accepts_exactly_
