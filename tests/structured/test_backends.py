"""Structured-output backends: chosen per engine and per request; blocked requests wake the loop.

A test backend (a plugin registering ``"recording"`` at engine start) compiles with the
built-in compiler but records what it compiled, can be slowed down, or can fail.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from specdec import LLM, SamplingParams, hookimpl
from specdec.structured.backends import StructuredBackend
from specdec.structured.compile import compile_spec
from specdec.structured.vocabulary import token_vocabulary

PHONE = r"\d{3}-\d{4}"
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


class RecordingBackend(StructuredBackend):
    def __init__(self, vocab):
        self.vocab = vocab
        self.compiled: list[str] = []  # spec.origin of every compile
        self.delay_s = 0.0
        self.fail: Exception | None = None

    def compile(self, spec, on_valid=None, timeout_s=None):
        time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        self.compiled.append(spec.origin)
        return compile_spec(spec, self.vocab, use_disk_cache=False)


class RecordingBackendPlugin:
    def __init__(self):
        self.backend: RecordingBackend | None = None

    @hookimpl
    def specdec_engine_started(self, context):
        vocab = token_vocabulary(context.tokenizer, context.vocab_size,
                                 frozenset(context.eos_token_ids))
        self.backend = RecordingBackend(vocab)
        context.structured_backends.register("recording", self.backend)


def _llm(model_dir, **options) -> tuple[LLM, RecordingBackendPlugin]:
    plugin = RecordingBackendPlugin()
    llm = LLM(model=str(model_dir), dtype="float32", num_kv_blocks=64, num_threads=1,
              load_entry_points=False, plugins=[plugin], **options)
    return llm, plugin


def _text(llm: LLM, **options) -> str:
    return llm.generate("Call me at", GREEDY, use_tqdm=False, **options)[0].text


@pytest.fixture(scope="module")
def default_llm(tiny_model_dir):
    return _llm(tiny_model_dir)


def test_builtin_is_the_default_and_unchanged(default_llm):
    llm, plugin = default_llm
    assert re.fullmatch(PHONE, _text(llm, regex=PHONE))
    assert plugin.backend.compiled == []
    structured = llm.engine.pm.get_plugin("structured")
    assert structured.default_backend == "builtin"
    assert structured.backends.names() == ["builtin", "recording"]


def test_request_option_selects_a_backend(default_llm):
    llm, plugin = default_llm
    text = _text(llm, regex=r"[a-z]{5}", structured_backend="recording")
    assert re.fullmatch(r"[a-z]{5}", text)
    assert plugin.backend.compiled == ["regex"]


def test_engine_option_sets_the_default_and_requests_override_it(tiny_model_dir):
    llm, plugin = _llm(tiny_model_dir, structured_backend="recording")
    assert re.fullmatch(r"[0-9]{4}", _text(llm, regex=r"[0-9]{4}"))
    assert plugin.backend.compiled == ["regex"]
    assert re.fullmatch(r"[0-9]{6}", _text(llm, regex=r"[0-9]{6}", structured_backend="builtin"))
    assert plugin.backend.compiled == ["regex"]  # the built-in compiled that one


def test_unknown_backend_per_request_names_the_field_and_the_choices(default_llm):
    llm, _ = default_llm
    with pytest.raises(ValueError, match=r"structured_backend must be one of builtin, "
                                         r"recording, got 'nope'"):
        _text(llm, regex=PHONE, structured_backend="nope")
    with pytest.raises(ValueError, match="structured_backend must be one of"):
        _text(llm, structured_backend=3)  # checked even without a constraint
    assert llm.stats()["num_waiting"] == 0


def test_unknown_engine_backend_stops_the_engine(tiny_model_dir):
    with pytest.raises(ValueError, match=r"structured_backend must be one of builtin, "
                                         r"recording, got 'llguidanse'"):
        _llm(tiny_model_dir, structured_backend="llguidanse")


def test_a_backend_compile_failure_rejects_the_request(default_llm):
    llm, plugin = default_llm
    plugin.backend.fail = RuntimeError("backend exploded")
    try:
        with pytest.raises(ValueError, match="cannot compile regex: backend exploded"):
            _text(llm, regex=r"[a-z]{7}", structured_backend="recording")
    finally:
        plugin.backend.fail = None


def _count_steps(engine) -> list[float]:
    """Wrap ``engine.step`` (this instance only) to record when each step ran."""
    times: list[float] = []
    step = engine.step

    def counted():
        times.append(time.monotonic())
        return step()

    engine.step = counted
    return times


def test_blocked_request_wakes_the_offline_loop_without_polling(default_llm, monkeypatch):
    """The compile outlasts the validity wait, so the request is queued blocked; the loop
    sleeps until the compile ends (the wake-up event), not stepping every millisecond."""
    llm, plugin = default_llm
    monkeypatch.setattr("specdec.llm.WAKE_UP_TIMEOUT_S", 30.0)  # only the event can wake it
    plugin.backend.delay_s = 0.6
    steps = _count_steps(llm.engine)
    try:
        start = time.monotonic()
        text = _text(llm, regex=r"[a-z]{3}q", structured_backend="recording")
        elapsed = time.monotonic() - start
    finally:
        plugin.backend.delay_s = 0.0
        del llm.engine.step
    assert re.fullmatch(r"[a-z]{3}q", text)
    assert 0.6 <= elapsed < 5.0  # woken by the compile's end, not by the 30 s timeout
    blocked_steps = [t for t in steps if t < start + 0.55]
    assert len(blocked_steps) <= 3, len(blocked_steps)  # polling at 1 ms would be ~300


def test_blocked_request_wakes_the_server_loop_without_polling(default_llm, monkeypatch):
    from specdec.server.async_engine import AsyncEngine

    llm, plugin = default_llm
    monkeypatch.setattr("specdec.server.async_engine.WAKE_UP_TIMEOUT_S", 30.0)
    plugin.backend.delay_s = 0.6
    steps = _count_steps(llm.engine)
    prompt = llm.tokenizer.encode("Call me at")

    async def run() -> tuple[str, float]:
        engine = AsyncEngine(llm.engine)
        engine.start()
        try:
            start = time.monotonic()
            params = SamplingParams(max_tokens=12, temperature=0.0,
                                    extra={"regex": r"[a-z]{2}w",
                                           "structured_backend": "recording"})
            stream = await engine.add(prompt, params)
            ids = [t for out in [o async for o in stream] for t in out.token_ids]
            return llm.tokenizer.decode(ids), start
        finally:
            engine.shutdown()

    try:
        text, start = asyncio.run(run())
        elapsed = time.monotonic() - start
    finally:
        plugin.backend.delay_s = 0.0
        del llm.engine.step
    assert re.fullmatch(r"[a-z]{2}w", text), text
    assert elapsed < 5.0
    assert len([t for t in steps if t < start + 0.55]) <= 3


def test_work_ready_is_set_when_a_background_compile_fails(default_llm):
    llm, plugin = default_llm
    engine = llm.engine
    plugin.backend.delay_s, plugin.backend.fail = 0.5, RuntimeError("late failure")
    try:
        engine.context.work_ready.clear()
        request = engine.add_request("Hi", SamplingParams(
            max_tokens=4, extra={"regex": "[a-z]{9}", "structured_backend": "recording"}))
        assert request.blocked_reason
        assert engine.context.work_ready.wait(10.0)
        assert request.blocked_reason is None
        while not request.is_finished:
            engine.step()
    finally:
        plugin.backend.delay_s, plugin.backend.fail = 0.0, None
    assert request.finish_reason == "error" and "late failure" in request.error


def test_engine_loop_does_not_wait_when_a_step_only_ran_a_prefill_chunk(tiny_model_dir):
    """No outputs but unblocked work (a chunked prefill): the loop goes straight on."""
    llm = LLM(model=str(tiny_model_dir), dtype="float32", num_kv_blocks=64, num_threads=1,
              load_entry_points=False, max_num_batched_tokens=16,
              long_prefill_token_threshold=8)
    waits = []
    event = llm.engine.context.work_ready
    original = event.wait
    event.wait = lambda timeout=None: waits.append(timeout) or original(0)  # noqa: B023
    out = llm.generate(list(range(100, 160)), SamplingParams(max_tokens=2), use_tqdm=False)
    assert len(out[0].token_ids) == 2 and waits == []


def test_a_backend_name_is_registered_once(default_llm):
    llm, _ = default_llm
    with pytest.raises(ValueError, match="registered twice"):
        llm.engine.context.structured_backends.register("builtin", object())


def test_server_leaves_the_constraint_check_to_a_named_backend():
    """The server's up-front check is the built-in parser's: a body naming another backend
    skips it (that backend decides at admission), and the field reaches the plugin."""
    from specdec.server.errors import BadRequestError
    from specdec.server.protocol import SamplingFields
    from specdec.server.sampling import sampling_params

    claimed = frozenset(["regex", "json_schema", "choice", "grammar", "structured_backend"])
    lookahead = r"a(?=b)b"  # refused by the built-in regex check, fine for some engines
    with pytest.raises(BadRequestError) as err:
        sampling_params(SamplingFields(guided_regex=lookahead), 8, None, claimed)
    assert err.value.param == "guided_regex"
    body = SamplingFields(guided_regex=lookahead, structured_backend="other")
    params = sampling_params(body, 8, None, claimed)
    assert params.extra == {"regex": lookahead, "structured_backend": "other"}
