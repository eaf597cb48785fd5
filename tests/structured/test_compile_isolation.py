"""Compiles run in capped child processes: a blow-up is refused, never felt by the engine."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import pytest

from specdec import LLM, SamplingParams
from specdec.structured import compile as compile_module
from specdec.structured.compile import compile_spec, configure_isolation
from specdec.structured.errors import CompileTimeoutError, ConstraintError
from specdec.structured.spec import constraint_spec
from specdec.structured.vocabulary import token_vocabulary

# Not prefix-free ("a" begins "a1"), so counted directly is impossible: interegular
# expands them (n=100 already takes seconds), in minutes and gigabytes.
SLOW = "(?:[a-z0-9]|[a-z][0-9]){20000}"
HUNGRY = "(?:[a-z0-9]|[a-z][0-9]){3000}"  # tens of MiB in a few seconds


def _grammar(terminal: str) -> str:
    return f'start: "{uuid.uuid4().hex[:8]}" X\nX: /{terminal}/\n'  # new text: uncached


def _rss_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 >> 20


@pytest.fixture(scope="module")
def vocab(tokenizer):
    return token_vocabulary(tokenizer, 49152, frozenset([2]))


@pytest.fixture()
def isolation():
    old = compile_module._compiler
    yield configure_isolation
    compile_module._compiler = old


def test_memory_blowup_is_refused_and_parent_memory_stays_flat(vocab, isolation):
    isolation(memory_bytes=16 * 2**20)
    before = _rss_mib()
    with pytest.raises(ConstraintError, match="exceeded the memory limit"):
        compile_spec(constraint_spec(grammar=_grammar(HUNGRY)), vocab, use_disk_cache=False,
                     isolated=True, timeout_s=60)
    assert _rss_mib() - before < 64


def test_timeout_kills_the_compile_while_a_small_one_completes(vocab):
    errors: list[Exception] = []

    def slow() -> None:
        try:
            compile_spec(constraint_spec(grammar=_grammar(SLOW)), vocab, use_disk_cache=False,
                         isolated=True, timeout_s=4)
        except ConstraintError as exc:
            errors.append(exc)

    start = time.monotonic()
    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.3)
    small = compile_spec(constraint_spec(grammar=_grammar("[0-9]+")), vocab,
                         use_disk_cache=False, isolated=True, timeout_s=30)
    small_s = time.monotonic() - start
    assert small.matcher() is not None and thread.is_alive()
    assert small_s < 3.5
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - start < 10
    assert len(errors) == 1 and isinstance(errors[0], CompileTimeoutError)
    assert "grammar too complex" in str(errors[0])


def test_a_cache_hit_starts_no_child(vocab, monkeypatch):
    spec = constraint_spec(regex=f"x{uuid.uuid4().hex[:8]}[0-9]+")
    first = compile_spec(spec, vocab, use_disk_cache=False, isolated=True, timeout_s=30)

    def no_child(*args, **kwargs):
        raise AssertionError("a cache hit started a child")

    monkeypatch.setattr(compile_module._compiler, "run", no_child)
    assert compile_spec(spec, vocab, isolated=True, timeout_s=30) is first


def test_isolated_regex_matches_in_process(vocab, accepts):
    pattern = f"id-{uuid.uuid4().hex[:6]}-[0-9]{{3}}"
    isolated = compile_spec(constraint_spec(regex=pattern), vocab, use_disk_cache=False,
                            isolated=True, timeout_s=30)
    assert accepts(isolated, pattern.replace("[0-9]{3}", "123"))
    assert not accepts(isolated, "id-x")


def test_generate_with_grammar_and_schema_end_to_end(tiny_model_dir, tmp_path, monkeypatch):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))  # compiled entries go here
    params = SamplingParams(max_tokens=40, temperature=0.0)
    tag = uuid.uuid4().hex[:6]
    out = llm.generate("Say", params, grammar=f'start: "ok{tag}" | "no{tag}"',
                       use_tqdm=False)[0]
    assert out.text in (f"ok{tag}", f"no{tag}")
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
              "additionalProperties": False}
    out = llm.generate("JSON:", params, json_schema=schema, use_tqdm=False)[0]
    assert isinstance(json.loads(out.text)["a"], bool)


def test_a_script_without_a_main_guard_can_use_constraints(tmp_path, tiny_model_dir):
    """Compile children must not re-run the user's script (multiprocessing's forkserver
    would, and fail with its bootstrapping error)."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from specdec import LLM, SamplingParams\n"
        f"llm = LLM(model={str(tiny_model_dir)!r}, dtype='float32')\n"
        "out = llm.generate(['Hi'], SamplingParams(max_tokens=8, temperature=0),\n"
        "                   regex='[0-9]{3}', use_tqdm=False)[0]\n"
        "print('RESULT', out.finish_reason, out.text)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "SPECDEC_COMPILE_ISOLATION"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert "RESULT stop" in proc.stdout, proc.stderr[-2000:]
    assert proc.stdout.split("RESULT stop ")[1].strip().isdigit()


def test_a_worker_whose_parent_is_gone_exits_without_a_traceback():
    script = (
        "import multiprocessing as mp\n"
        "from specdec.structured.compile_worker import _KeptVocabularies, _nothing, "
        "_pickle_job, _serve\n"
        "parent, child = mp.Pipe(duplex=True)\n"
        "parent.send_bytes(_pickle_job(_nothing, (), _KeptVocabularies()))\n"
        "parent.close()  # the parent exited while its compile ran\n"
        "_serve(child, 2**30)\n"
        "print('exited')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "exited"


def test_tables_past_the_artifact_bound_are_refused(vocab):
    """What a worker sends back, the engine process holds: past the bound it is refused."""
    configure_isolation(max_artifact_bytes=64 << 10)
    try:
        with pytest.raises(ConstraintError, match="MiB of tables"):
            compile_spec(constraint_spec(json_schema={"type": "object", "properties": {
                f"k{i}": {"type": "string", "maxLength": i} for i in range(1, 40)}}),
                vocab, use_disk_cache=False, isolated=True, timeout_s=60)
    finally:
        configure_isolation(max_artifact_bytes=256 << 20)
