from pathlib import Path

from specdec import paths


def test_cache_root_prefers_specdec_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "mine"


def test_cache_root_falls_back_to_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECDEC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "specdec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "specdec"


def test_empty_variables_count_as_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.cache_root() == tmp_path / ".cache" / "specdec"


def test_sub_folders_sit_under_the_root(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert paths.kernels_dir() == tmp_path / "kernels"
    assert paths.gguf_dir() == tmp_path / "gguf"
    assert paths.structured_dir() == tmp_path / "structured"
    assert paths.dtype_auto_file() == tmp_path / "dtype-auto.json"
    assert all(isinstance(p, Path) for p in (paths.kernels_dir(), paths.dtype_auto_file()))
