"""Compiled-constraint caches are LRU, bounded by bytes, in memory and on disk."""

from __future__ import annotations

import os
import time

import pytest

from specdec.structured import compile as compile_module
from specdec.structured.compile_cache import DiskCache, MemoryCache, dumps
from specdec.structured.spec import constraint_spec
from specdec.structured.vocabulary import token_vocabulary


def test_memory_cache_evicts_least_recently_used_by_bytes():
    cache = MemoryCache(max_bytes=100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # "b" is now the least recently used
    cache.put("c", "C", 40)
    assert "b" not in cache and cache.get("a") == "A" and cache.get("c") == "C"
    assert cache.nbytes == 80
    cache.put("huge", "H", 101)  # larger than the whole budget: not held
    assert "huge" not in cache and len(cache) == 2
    cache.resize(50)
    assert list(cache._entries) == ["c"] and cache.nbytes == 40


def test_disk_cache_keeps_its_directory_under_budget(tmp_path):
    cache = DiskCache(max_bytes=3000)
    paths = [tmp_path / f"{name}.pkl" for name in "abcd"]
    for i, path in enumerate(paths[:3]):
        cache.store(path, dumps(b"x" * 900))
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    assert cache.load(paths[0])[0] == b"x" * 900  # a load is a use: "b" is now the oldest
    cache.store(paths[3], dumps(b"y" * 900))
    assert sorted(p.name for p in tmp_path.glob("*.pkl")) == ["a.pkl", "c.pkl", "d.pkl"]
    assert sum(p.stat().st_size for p in tmp_path.glob("*.pkl")) <= 3000
    cache.store(tmp_path / "big.pkl", dumps(b"z" * 4000))  # over the budget alone: not written
    assert not (tmp_path / "big.pkl").exists()
    assert cache.load(tmp_path / "missing.pkl") is None


@pytest.fixture()
def fresh_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    memory, disk = compile_module._memory.max_bytes, compile_module._disk.max_bytes
    compile_module.clear_caches(disk=False)
    yield tmp_path / "structured"
    compile_module.configure_caches(memory, disk)
    compile_module.clear_caches(disk=False)


def test_compiled_constraints_stay_within_both_budgets(tokenizer, fresh_caches, accepts):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    specs = [constraint_spec(regex=f"{c}(ab|cd)+x") for c in "pqrs"]
    first = compile_module.compile_spec(specs[0], vocab)
    entry_bytes = compile_module._memory.nbytes
    file_bytes = sum(p.stat().st_size for p in fresh_caches.glob("*.pkl"))
    assert entry_bytes > 0 and file_bytes > 0
    compile_module.configure_caches(memory_bytes=int(2.5 * entry_bytes),
                                    disk_bytes=int(2.5 * file_bytes))
    for spec in specs[1:]:
        compile_module.compile_spec(spec, vocab)
    assert len(compile_module._memory) == 2
    assert compile_module._memory.nbytes <= 2.5 * entry_bytes
    assert compile_module.cached(specs[0], vocab) is None  # the oldest went first
    assert compile_module.cached(specs[-1], vocab) is not None
    assert sum(p.stat().st_size for p in fresh_caches.glob("*.pkl")) <= 2.5 * file_bytes
    again = compile_module.compile_spec(specs[0], vocab)  # rebuilt, still correct
    assert again is not first and accepts(again, "pabcdx") and not accepts(again, "pab")
