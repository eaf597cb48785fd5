"""The compile pool's workers: reused across jobs, replaced after a kill, a crash or a
memory error, retired once grown; a vocabulary crosses the pipe once per worker."""

from __future__ import annotations

import os
import time

import pytest

from specdec.structured.compile_worker import (
    ProcessCompiler,
    _KeptVocabularies,
    _pickle_job,
)
from specdec.structured.errors import CompileTimeoutError, ConstraintError
from specdec.structured.vocabulary import token_vocabulary


def worker_pid(send) -> int:
    return os.getpid()


def vocabulary_identity(vocab, send) -> tuple[int, int]:
    return os.getpid(), id(vocab)


def sleep_then_pid(seconds: float, send) -> int:
    time.sleep(seconds)
    return os.getpid()


def refuse(send) -> None:
    raise ConstraintError("invalid Lark grammar: planted")


def allocate(mib: int, send) -> int:
    return len(bytearray(mib << 20))


def crash(send) -> None:
    os._exit(3)


@pytest.fixture()
def compiler():
    compiler = ProcessCompiler(max_workers=1, memory_bytes=256 << 20)
    yield compiler
    compiler.shutdown()


def _pid(compiler: ProcessCompiler) -> int:
    return compiler.run(worker_pid, (), "a probe", 60)


def test_a_worker_serves_one_job_after_another(compiler):
    first = _pid(compiler)
    assert first != os.getpid()
    assert _pid(compiler) == first
    with pytest.raises(ConstraintError, match="planted"):
        compiler.run(refuse, (), "a refused grammar", 60)
    assert _pid(compiler) == first  # a refusal leaves the worker serving


def test_a_timeout_kills_the_worker_and_the_next_job_gets_a_new_one(compiler):
    first = _pid(compiler)
    start = time.monotonic()
    with pytest.raises(CompileTimeoutError, match="grammar too complex"):
        compiler.run(sleep_then_pid, (30.0,), "a slow grammar", 1.0)
    assert time.monotonic() - start < 10
    second = _pid(compiler)
    assert second != first
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)


def test_a_memory_error_or_a_crash_ends_the_worker_not_the_pool(compiler):
    first = _pid(compiler)
    with pytest.raises(ConstraintError, match="exceeded the memory limit"):
        compiler.run(allocate, (1024,), "a hungry grammar", 60)
    second = _pid(compiler)
    assert second != first
    with pytest.raises(ConstraintError, match=r"crashed \(exit 3\)"):
        compiler.run(crash, (), "a crashing grammar", 60)
    assert _pid(compiler) not in (first, second)


def test_a_worker_that_grew_is_retired_after_its_job(compiler):
    first = _pid(compiler)
    assert compiler.run(keep_allocation, (100,), "a large grammar", 60) == 100 << 20
    assert _pid(compiler) != first  # grew by more than memory_bytes / 4: replaced


_kept: list[bytearray] = []  # in the worker: what a job left behind (caches, leaks)


def keep_allocation(mib: int, send) -> int:
    block = bytearray(mib << 20)
    block[::4096] = b"x" * len(block[::4096])  # resident, not only reserved
    _kept.append(block)
    return len(block)


def test_a_vocabulary_crosses_once_per_worker(compiler, tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    kept = _KeptVocabularies()
    full = len(_pickle_job(vocabulary_identity, (vocab,), kept))
    by_name = len(_pickle_job(vocabulary_identity, (vocab,), kept))
    assert full > 100_000 and by_name < 1_000
    pid, identity = compiler.run(vocabulary_identity, (vocab,), "a vocabulary", 60)
    assert compiler.run(vocabulary_identity, (vocab,), "a vocabulary", 60) == (pid, identity)
