"""Masks found by the parser-stack suffix they depend on equal masks computed afresh."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specdec.structured.cfg.grammar import CompiledGrammar
from specdec.structured.compile import grammar_tables
from specdec.structured.json_schema import schema_to_lark
from specdec.structured.vocabulary import token_vocabulary

ITEM = {"type": "object", "properties": {"sku": {"type": "string"}, "n": {"type": "integer"},
                                         "tags": {"type": "array", "items": {"$ref": "#"}}}}
DOCS = [
    {"sku": "a", "n": 1, "tags": [{"sku": "b", "n": 2, "tags": [{"sku": "c", "n": 3}]},
                                  {"sku": "d", "n": 4}]},
    [1, [2, [3, {"x": [4, {"y": None}]}]], {"x": "é", "z": [True, False]}],
]


def _masks(compiled: CompiledGrammar, tokenizer, text: str) -> list[np.ndarray]:
    matcher = compiled.matcher()
    out = []
    for token in tokenizer.encode(text, add_special_tokens=False):
        out.append(matcher.allowed_mask().copy())
        assert matcher.accept_token(token)
    out.append(matcher.allowed_mask().copy())
    return out


@pytest.mark.parametrize(("schema", "doc"), [(ITEM, DOCS[0]), ({}, DOCS[1])])
def test_suffix_hits_give_the_masks_computed_afresh(tokenizer, monkeypatch, schema, doc):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    tables = grammar_tables(schema_to_lark(schema), use_disk_cache=False)
    text = json.dumps(doc, ensure_ascii=False)
    hits: list = []
    lookup = CompiledGrammar._suffix_mask
    monkeypatch.setattr(CompiledGrammar, "_suffix_mask",
                        lambda self, state: hits.append(lookup(self, state)) or hits[-1])
    with_suffixes = _masks(CompiledGrammar(tables, vocab), tokenizer, text)
    assert sum(hit is not None for hit in hits) >= 3  # the suffix cache was used
    monkeypatch.setattr(CompiledGrammar, "_suffix_mask", lambda self, state: None)  # off
    fresh = _masks(CompiledGrammar(tables, vocab), tokenizer, text)
    assert len(fresh) == len(with_suffixes)
    for a, b in zip(fresh, with_suffixes, strict=True):
        assert np.array_equal(a, b)
