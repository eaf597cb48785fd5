"""``LLGuidanceMatcher`` keeps every :class:`Matcher` contract the engine relies on.

Imported from the package's source (llguidance itself is in the test extra), checked
against the built-in matcher of the same regex on the real SmolLM2 tokenizer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec.structured.bitmask import allocate_token_bitmask
from specdec.structured.compile import compile_spec
from specdec.structured.errors import ConstraintError
from specdec.structured.spec import constraint_spec
from specdec.structured.vocabulary import token_vocabulary

pytest.importorskip("llguidance")
SRC = Path(__file__).resolve().parents[2] / "plugins" / "specdec-llguidance" / "src"
REGEX = r"[0-9]{2}-(ab|cd)"
EOS = 2


@pytest.fixture(scope="module")
def backend(tokenizer):
    sys.path.insert(0, str(SRC))
    try:
        from specdec_llguidance.backend import LLGuidanceBackend
    finally:
        sys.path.remove(str(SRC))
    return LLGuidanceBackend(tokenizer, 49152, frozenset([EOS]))


@pytest.fixture(scope="module")
def builtin(tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([EOS]))
    return compile_spec(constraint_spec(regex=REGEX), vocab, use_disk_cache=False)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_masks_match_the_builtin_matcher_along_a_path(backend, builtin, tokenizer):
    ours, theirs = backend.compile(backend.spec(regex=REGEX)).matcher(), builtin.matcher()
    for tok in [*_ids(tokenizer, "42-cd"), EOS]:
        assert ours.allowed_token_ids() == theirs.allowed_token_ids()
        assert ours.is_accepting() == theirs.is_accepting()
        assert ours.accept_token(tok) and theirs.accept_token(tok)
    assert ours.allowed_token_ids() == [] and not ours.accept_token(EOS)


def test_rejected_token_leaves_the_state_unchanged(backend, tokenizer):
    m = backend.compile(backend.spec(regex=REGEX)).matcher()
    m.accept_tokens(_ids(tokenizer, "4"))
    before = m.allowed_mask().copy()
    assert not m.accept_token(_ids(tokenizer, "x")[0])
    assert not m.accept_token(EOS)  # not complete yet
    assert m.num_accepted_tokens == 1 and (m.allowed_mask() == before).all()
    assert m.accept_tokens(_ids(tokenizer, "2-ab")) == len(_ids(tokenizer, "2-ab"))


def test_validate_copy_and_rollback_for_speculation(backend, tokenizer):
    m = backend.compile(backend.spec(regex=REGEX)).matcher()
    good = _ids(tokenizer, "12-ab")
    assert m.validate_tokens(good + [EOS]) == len(good) + 1
    assert m.validate_tokens(good[:2] + [EOS]) == 2  # EOS only once complete
    assert m.validate_tokens(good[:1] + _ids(tokenizer, "x")) == 1
    assert m.num_accepted_tokens == 0  # validation never advances
    probe = m.copy()
    probe.accept_tokens(good + [EOS])
    assert m.num_accepted_tokens == 0 and probe.num_accepted_tokens == len(good) + 1
    probe.rollback(2)  # EOS and the last text token
    assert probe.num_accepted_tokens == len(good) - 1 and not probe.is_accepting()
    assert probe.accept_token(good[-1]) and probe.is_terminated()


def test_fill_bitmask_writes_the_packed_row(backend, tokenizer):
    m = backend.compile(backend.spec(regex=REGEX)).matcher()
    m.accept_tokens(_ids(tokenizer, "1"))
    bitmask = allocate_token_bitmask(2, 49152)
    m.fill_bitmask(bitmask, 1)
    assert (bitmask[0] == -1).all()
    assert np.array_equal(bitmask[1].numpy(), m.allowed_mask())
    assert bitmask.dtype == torch.int32


def test_schema_options_and_errors(backend, tokenizer):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    m = backend.compile(backend.spec(json_schema=schema)).matcher()
    assert m.validate_tokens(_ids(tokenizer, '{"a":1}')) == len(_ids(tokenizer, '{"a":1}'))
    assert m.validate_tokens(_ids(tokenizer, '{"a":1,"b"')) < len(_ids(tokenizer, '{"a":1,"b"'))
    spaced = backend.compile(backend.spec(json_schema=schema, whitespace_pattern=r"[ ]?"))
    assert spaced.matcher().validate_tokens(_ids(tokenizer, '{ "a": 1 }')) == \
        len(_ids(tokenizer, '{ "a": 1 }'))
    with pytest.raises(ConstraintError, match="Invalid type"):
        backend.compile(backend.spec(json_schema={"type": "no-such-type"}))
    with pytest.raises(ConstraintError, match="unclosed group"):
        backend.compile(backend.spec(regex="(ab"))
    with pytest.raises(ConstraintError, match="exactly one"):
        backend.spec(regex="a", choice=["b"])
    assert backend.cached(backend.spec(json_schema=schema)) is not None  # LRU hit
