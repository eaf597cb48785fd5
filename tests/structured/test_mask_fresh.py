"""Masks from every cache and shortcut equal masks computed afresh, and the token semantics.

The grammar under test runs as in production: C walks and C lexer products, warm-up
(lexer contexts, cheap and dear walks in the process-wide store), suffix-cached masks,
several documents through one compiled grammar, and ``fill_bitmask`` into one reused
bitmask. The reference is a new grammar with none of that: numpy walks and products, a
private walk store, no suffix cache, no warm-up, lexer contexts found by feeding every
terminal. A sample of tokens is also checked one
by one against ``accept_token``, which uses no walk at all.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import specdec.structured.cfg.grammar as grammar_module
import specdec.structured.cfg.lexer as lexer_module
import specdec.structured.cfg.token_walk as token_walk_module
from specdec.structured import allocate_token_bitmask
from specdec.structured.cfg.grammar import CompiledGrammar
from specdec.structured.cfg.walk_store import WalkStore
from specdec.structured.cfg.warm_up import warm_up
from specdec.structured.compile import grammar_tables
from specdec.structured.json_schema import schema_to_lark
from specdec.structured.spec import grammars_dir
from specdec.structured.vocabulary import token_vocabulary

ORDER = {"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 1},
    "who": {"type": "object", "properties": {
        "name": {"type": "string"}, "mail": {"type": "string", "format": "email"},
        "zip": {"type": "string", "pattern": "[0-9]{5}"}}, "required": ["name", "zip"]},
    "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "maximum": 99},
        "price": {"type": "number"}}, "required": ["sku", "n"]}},
    "status": {"enum": ["new", "paid", "shipped", 3, None]}},
    "required": ["id", "who", "items"]}
ORDER_DOCS = [
    {"id": 7, "who": {"name": "Lena Novak", "mail": "lena@example.com", "zip": "80331"},
     "items": [{"sku": "ESP-1", "n": 2, "price": 329.4}, {"sku": "C", "n": 99}],
     "status": "paid"},
    {"id": 1001, "who": {"name": "Zoë \"Z\"", "zip": "01234"},
     "items": [{"sku": "a", "n": 1, "price": -0.5e3}], "status": None},
]
TREE = {"type": "object", "properties": {"v": {"type": "string"},
                                         "kids": {"type": "array", "items": {"$ref": "#"}}}}
TREE_DOCS = [{"v": "a", "kids": [{"v": "b", "kids": [{"v": "c"}]}, {"v": "d", "kids": []}]}]
ANY_DOCS = [[1, {"a": [True, None, "x\ny"], "b": {"c": -1.5e-3}}, "é"], {"k": []}]
CASES = [
    ("schema", schema_to_lark(ORDER),
     [json.dumps(d, ensure_ascii=False) for d in ORDER_DOCS]),
    ("recursive", schema_to_lark(TREE), [json.dumps(d) for d in TREE_DOCS]),
    ("json.lark", (grammars_dir() / "json.lark").read_text(),
     [json.dumps(d, indent=i, ensure_ascii=False) for d in ANY_DOCS for i in (None, 2)]),
    ("sql (basic lexer)", (grammars_dir() / "sql_select.lark").read_text(),
     ["SELECT a, count(*) AS n FROM t JOIN u ON t.x = u.y WHERE NOT a = 'q' ORDER BY n "
      "DESC LIMIT 5;", "select selectx from fromage"]),
    ("arithmetic (%ignore)", (grammars_dir() / "arithmetic.lark").read_text(),
     ["-(x1 + 2.5) * y ^ 2 ^ 3 / 10", "a+b  -  c"]),
]


def _replay(compiled: CompiledGrammar, tokenizer, texts: list[str]) -> list[np.ndarray]:
    """The mask before each token of each text and after the last, via fill_bitmask."""
    bitmask = allocate_token_bitmask(2, compiled.vocab.vocab_size)
    masks = []
    for text in texts:
        matcher = compiled.matcher()
        for token in tokenizer.encode(text, add_special_tokens=False):
            matcher.fill_bitmask(bitmask, 1)
            masks.append(bitmask[1].numpy().copy())
            assert matcher.accept_token(token), text
        matcher.fill_bitmask(bitmask, 1)
        masks.append(bitmask[1].numpy().copy())
    return masks


def _context_by_feeding_all(self: CompiledGrammar, stack) -> tuple[int, int]:
    """The lexer context as the LALR table's ``acceptable_low`` finds it (every terminal fed)."""
    names, low = self.lalr.acceptable_low(stack)
    index = self.tables.index
    return self._tset_id(frozenset(index[t] for t in names) | self.tables.ignore), low


@pytest.fixture(scope="module")
def vocab(tokenizer):
    return token_vocabulary(tokenizer, 49152, frozenset([2]))


@pytest.mark.parametrize(("name", "text", "docs"), CASES, ids=[c[0] for c in CASES])
def test_cached_masks_equal_fresh_ones(tokenizer, vocab, monkeypatch, name, text, docs):
    tables = grammar_tables(text, use_disk_cache=False)
    compiled = CompiledGrammar(tables, vocab)
    compiled.prewalk()
    compiled.warm_up()
    warm_up(compiled, float("inf"))  # every warm-up walk, whatever the machine's speed
    _replay(compiled, tokenizer, docs)  # the second replay finds what the first cached
    cached = _replay(compiled, tokenizer, docs[::-1])
    monkeypatch.setattr(token_walk_module, "load_trie_walk", lambda: None)
    monkeypatch.setattr(lexer_module, "load_lexer_product", lambda: None)
    monkeypatch.setattr(grammar_module, "SHARED", WalkStore())
    monkeypatch.setattr(CompiledGrammar, "_suffix_mask", lambda self, state: None)
    monkeypatch.setattr(CompiledGrammar, "_context_low", _context_by_feeding_all)
    fresh = _replay(CompiledGrammar(tables, vocab), tokenizer, docs[::-1])
    assert len(cached) == len(fresh)
    for step, (a, b) in enumerate(zip(cached, fresh, strict=True)):
        assert np.array_equal(a, b), f"{name}: step {step} differs"


@pytest.mark.parametrize(("name", "text", "docs"), CASES, ids=[c[0] for c in CASES])
def test_mask_bits_match_accept_token(tokenizer, vocab, name, text, docs):
    """Every allowed token (up to 300, sampled) is accepted, a sample of the others not."""
    compiled = CompiledGrammar(grammar_tables(text, use_disk_cache=False), vocab)
    compiled.warm_up()
    rng = np.random.default_rng(0)
    matcher = compiled.matcher()
    for step, token in enumerate(tokenizer.encode(docs[0], add_special_tokens=False)):
        if step % 3 == 0:
            allowed = np.zeros(vocab.vocab_size, dtype=bool)
            allowed[matcher.allowed_token_ids()] = True
            ids = np.flatnonzero(allowed)
            others = np.flatnonzero(~allowed)
            for i in np.concatenate([rng.choice(ids, min(300, ids.size), replace=False),
                                     rng.choice(others, min(300, others.size),
                                                replace=False)]).tolist():
                assert matcher.copy().accept_token(i) == allowed[i], (name, step, i)
        assert matcher.accept_token(token)
