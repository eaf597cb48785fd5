"""The matcher verbs, identical for the CFG and the regex backends."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.structured import allocate_token_bitmask, apply_token_bitmask_

DOC = '{"name": "Zoë", "items": [1, 2.5e-3, true, null, {"k": "v\\n"}], "ok": false}'


@pytest.fixture(params=["grammar", "regex"])
def compiled(request, compile_for):
    if request.param == "grammar":
        return compile_for(grammar="json.lark")
    return compile_for(json_schema={"type": "object"})


def test_accept_validate_rollback_copy(compiled, tokenizer):
    ids = tokenizer.encode(DOC, add_special_tokens=False)
    matcher = compiled.matcher()
    assert matcher.validate_tokens(ids) == len(ids)
    assert matcher.num_accepted_tokens == 0  # validate does not advance
    assert matcher.accept_tokens(ids) == len(ids)
    assert matcher.is_accepting() and matcher.is_token_allowed(2)
    matcher.rollback(len(ids) - 1)  # >= 32 tokens back
    assert len(ids) - 1 >= 32 and matcher.num_accepted_tokens == 1
    assert not matcher.is_accepting() and not matcher.is_token_allowed(2)
    fork = matcher.copy()
    assert fork.accept_tokens(ids[1:]) == len(ids) - 1
    assert matcher.num_accepted_tokens == 1  # the copy is independent
    bad = tokenizer.encode("\n", add_special_tokens=False)[0]  # inside a string: forbidden
    before = matcher.allowed_token_ids()
    assert not matcher.accept_token(bad)
    assert matcher.allowed_token_ids() == before  # a rejected token changes nothing
    assert matcher.validate_tokens(ids[1:5] + [bad] + ids[5:]) == 4


def test_eos_then_terminated(compiled, tokenizer):
    matcher = compiled.matcher()
    assert not matcher.accept_token(2)
    matcher.accept_tokens(tokenizer.encode("{}", add_special_tokens=False))
    assert matcher.accept_token(2) and matcher.is_terminated()
    assert matcher.allowed_token_ids() == []


def test_mask_agrees_with_accept_token(compiled, tokenizer):
    """Every allowed token is accepted, and a sample of disallowed ones is refused."""
    ids = tokenizer.encode(DOC, add_special_tokens=False)
    rng = np.random.default_rng(0)
    matcher = compiled.matcher()
    for step, tok in enumerate(ids):
        if step % 3 == 0:
            allowed = set(matcher.allowed_token_ids())
            probe = list(allowed)[:300] + rng.integers(0, 49152, 300).tolist()
            for t in probe:
                assert matcher.copy().accept_token(t) == (t in allowed), (step, t)
        assert matcher.accept_token(tok)


def test_fill_and_apply_bitmask(compiled, tokenizer):
    matcher = compiled.matcher()
    bitmask = allocate_token_bitmask(2, 49152)
    matcher.fill_bitmask(bitmask, 1)
    logits = torch.zeros(2, 49152)
    apply_token_bitmask_(logits, bitmask)
    assert torch.isfinite(logits[0]).all()  # row 0 untouched
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert allowed == matcher.allowed_token_ids()
    assert tokenizer.encode("{", add_special_tokens=False)[0] in allowed


def test_wider_logits_than_tokenizer_are_masked(compiled):
    bitmask = allocate_token_bitmask(1, 49200)
    compiled.matcher().fill_bitmask(bitmask, 0)
    logits = torch.zeros(1, 49200)
    apply_token_bitmask_(logits, bitmask)
    assert torch.isinf(logits[0, 49152:]).all()


def test_rollback_is_bounded_by_max_rollback_tokens(compiled, tokenizer):
    matcher = compiled.matcher()
    matcher.accept_tokens(tokenizer.encode(DOC, add_special_tokens=False))
    matcher.max_rollback_tokens = 3
    with pytest.raises(ValueError, match="at most 3"):
        matcher.rollback(4)
    matcher.rollback(3)
    with pytest.raises(ValueError):
        matcher.rollback(-1)
