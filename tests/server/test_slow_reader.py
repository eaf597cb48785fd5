"""A client that stops reading cannot hold memory or KV blocks (issue 11, item 5).

Its request's buffer holds a few deltas; then the request is paused (no longer
generated) and, after the stall timeout, aborted with its KV blocks freed.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from specdec.outputs import RequestMetrics, RequestOutput
from specdec.server.request_stream import RequestStream
from tests.server.conftest import AUTH, MODEL_NAME, assert_still_serving, tiny_engine
from tests.server.live_server import start_server

STALL_S = 1.0


@pytest.fixture(scope="module")
def stalling_server(tiny_model_dir):
    from specdec.server import create_app
    from specdec.server.options import ServerOptions

    options = ServerOptions(stream_stall_timeout_s=STALL_S, stream_buffer_outputs=4)
    engine = tiny_engine(tiny_model_dir)
    live = start_server(create_app(engine, model_name=MODEL_NAME,
                                   api_key=AUTH["Authorization"].split()[1], options=options))
    yield live
    live.stop()


def _stats(server) -> dict:
    return httpx.get(server.base_url + "/stats", headers=AUTH, timeout=10).json()


def _wait_for(server, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = _stats(server)
        if predicate(stats):
            return stats
        assert time.monotonic() < deadline, f"timed out; last stats {stats}"
        time.sleep(0.05)


def _stalled_client(server, body: dict) -> asyncio.Future:
    """Call the app on the server's loop like uvicorn does for a peer that stops reading:
    after the headers and the first event, ``send`` never returns (the transport's buffer
    is full). Loopback socket buffers take megabytes, so a real socket would need a
    longer answer than the tiny model's context allows to fill them."""
    loop = server.app.state.specdec.engine._loop
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "path": "/v1/completions", "raw_path": b"/v1/completions",
             "query_string": b"", "root_path": "", "scheme": "http",
             "server": ("127.0.0.1", server.port), "client": ("127.0.0.1", 1),
             "headers": [(b"authorization", AUTH["Authorization"].encode()),
                         (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())]}
    received = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive():
        if received:
            return received.pop()
        await asyncio.Event().wait()  # connected, never disconnects

    sent: list[dict] = []

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            await asyncio.Event().wait()  # the peer's window is closed, forever

    return asyncio.run_coroutine_threadsafe(server.app(scope, receive, send), loop)


def test_stalled_reader_is_paused_then_aborted_and_its_blocks_freed(stalling_server):
    server = stalling_server
    baseline = _wait_for(server, lambda s: s["num_running"] == 0, 10)
    assert baseline["kv_blocks_used"] == 0
    call = _stalled_client(server, {"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 500,
                                    "ignore_eos": True, "logprobs": 5, "stream": True})
    try:
        paused = _wait_for(server, lambda s: s["num_paused"] == 1, 30)
        assert paused["kv_blocks_used"] > 0
        time.sleep(0.3)
        assert _stats(server)["generation_tokens"] == paused["generation_tokens"]  # paused
        start = time.monotonic()
        after = _wait_for(server, lambda s: s["kv_blocks_used"] == 0, STALL_S + 10)
        assert STALL_S - 0.5 < time.monotonic() - start < STALL_S + 5
        assert after["requests_stalled"] == baseline["requests_stalled"] + 1
        assert after["num_paused"] == after["num_running"] == 0
        assert after["generation_tokens"] - baseline["generation_tokens"] < 50  # not 500
    finally:
        call.cancel()
    assert_still_serving(server)


def test_slow_reader_that_keeps_reading_gets_everything(stalling_server):
    server = stalling_server
    texts = []
    with httpx.stream("POST", server.base_url + "/v1/completions", headers=AUTH, timeout=30,
                      json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 30,
                            "ignore_eos": True, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                texts.extend(c["text"] for c in chunk["choices"])
                usage = chunk.get("usage")
            time.sleep(0.02)
    whole = httpx.post(server.base_url + "/v1/completions", headers=AUTH, timeout=30,
                       json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 30,
                             "ignore_eos": True, "temperature": 0}).json()
    assert "".join(texts) == whole["choices"][0]["text"]
    assert usage["completion_tokens"] == 30


def _output(step: int, logprobs: bool = True) -> RequestOutput:
    tokens = list(range(step + 1))
    return RequestOutput("r", None, [1], text="x" * (step + 1), token_ids=tokens,
                         finish_reason=None, metrics=RequestMetrics(0.0),
                         logprobs=[{t: -1.0} for t in tokens] if logprobs else None,
                         delta_text="x", delta_token_ids=[step])


def test_stream_buffer_holds_deltas_and_reports_full():
    stream = RequestStream("r", num_prompt_tokens=1, capacity=4)
    fulls = [stream.push(_output(step)) for step in range(4)]
    assert fulls == [False, False, False, True]
    last = stream.pending[-1]
    assert last.text == "x" and last.token_ids == [3] and last.logprobs == [{3: -1.0}]
    assert all(len(out.token_ids) == 1 for out in stream.pending)
