"""The llama.cpp peer runs in a child process: a llama.cpp that dies (a wheel built for
another CPU dies of SIGILL) costs the benchmark its peer, not its run."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from specdec.bench.llamacpp_peer import llamacpp_latency


def fake_llama_cpp(tmp_path: Path, monkeypatch, body: str) -> None:
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text(body)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # the spawned child's too


def measure() -> dict:
    return llamacpp_latency(Path("model.gguf"), [[1, 2, 3]], max_tokens=4, threads=1,
                            ignore_eos=True)


def test_an_illegal_instruction_in_the_peer_is_its_status(tmp_path, monkeypatch):
    fake_llama_cpp(tmp_path, monkeypatch,
                   f"import os\nos.kill(os.getpid(), {int(signal.SIGILL)})\n")
    status = measure()["status"]
    assert status.startswith("crashed (SIGILL): built for another CPU?")
    assert "--no-cache-dir --force-reinstall" in status


@pytest.mark.parametrize(("body", "expected"), [
    ("raise ImportError('no such library')\n", "not installed (pip install llama-cpp-python)"),
    ("class Llama:\n    def __init__(self, **kw):\n        raise ValueError('bad file')\n",
     "failed: ValueError: bad file"),
    ("import os\nos._exit(3)\n", "exited with code 3 before answering"),
])
def test_a_peer_that_cannot_run_says_why(tmp_path, monkeypatch, body, expected):
    fake_llama_cpp(tmp_path, monkeypatch, body)
    assert measure() == {"status": expected}


def test_a_working_peer_reports_its_load_and_decode_times(tmp_path, monkeypatch):
    fake_llama_cpp(tmp_path, monkeypatch, (
        "__version__ = 'fake'\n"
        "class Llama:\n"
        "    def __init__(self, **kw):\n        import time; time.sleep(0.05)\n"
        "    def token_eos(self):\n        return 0\n"
        "    def generate(self, prompt, reset, **kw):\n        while True:\n            yield 7\n"))
    result = measure()
    assert result["status"] == "ok" and result["version"] == "fake"
    assert result["load_s"] >= 0.05
    assert result["outputs"] == [[7, 7, 7, 7]] and result["itl_ms"] > 0
