"""``clear_caches`` forgets compiled constraints in memory, on disk, or both."""

from __future__ import annotations

from specdec.structured import compile as compile_module
from specdec.structured.spec import constraint_spec
from specdec.structured.vocabulary import token_vocabulary


def test_clear_caches_memory_and_disk_separately(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    spec = constraint_spec(regex="z(ab|cd)+q")
    compile_module.compile_spec(spec, vocab)
    folder = tmp_path / "structured"
    assert compile_module.cached(spec, vocab) is not None and any(folder.glob("*.pkl"))

    compile_module.clear_caches(disk=False)
    assert compile_module.cached(spec, vocab) is None and any(folder.glob("*.pkl"))

    compile_module.compile_spec(spec, vocab)  # reloaded from disk
    compile_module.clear_caches(memory=False)
    assert compile_module.cached(spec, vocab) is not None and not folder.exists()

    compile_module.clear_caches()
    assert compile_module.cached(spec, vocab) is None
