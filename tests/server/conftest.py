"""A live specdec server on the tiny random model, shared by the server tests."""

from __future__ import annotations

import pytest

from tests.server.live_server import LiveServer, start_server

API_KEY = "test-key"
MODEL_NAME = "tiny"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def tiny_engine(model_dir, **overrides):
    from specdec.config import EngineConfig
    from specdec.engine import LLMEngine

    config = dict(model=str(model_dir), dtype="float32", num_threads=1, num_kv_blocks=256,
                  max_num_seqs=64)
    config.update(overrides)
    return LLMEngine(EngineConfig(**config))


@pytest.fixture(scope="session")
def server(tiny_model_dir) -> LiveServer:
    from specdec.server import create_app

    engine = tiny_engine(tiny_model_dir)
    app = create_app(engine, model_name=MODEL_NAME, api_key=API_KEY)
    live = start_server(app)
    live.engine = engine
    yield live
    live.stop()


@pytest.fixture()
def client(server):
    import openai

    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY,
                       max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture()
def aclient(server):
    import openai

    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=API_KEY,
                              max_retries=0, timeout=60)


def wait_until_idle(server, timeout: float = 10.0) -> dict:
    """Poll ``/stats`` until no request runs or waits and every KV block is free."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while True:
        stats = httpx.get(server.base_url + "/stats",
                          headers={"Authorization": f"Bearer {API_KEY}"}).json()
        idle = stats["num_running"] == 0 and stats["num_waiting"] == 0
        if idle and stats["kv_blocks_used"] == 0:
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(f"server not idle after {timeout} s: {stats}")
        time.sleep(0.05)


def aborted_count(server) -> float:
    """``specdec_requests_total{outcome="abort"}`` from ``/metrics``."""
    import httpx

    for line in httpx.get(server.base_url + "/metrics", headers=AUTH).text.splitlines():
        if line.startswith('specdec_requests_total{outcome="abort"}'):
            return float(line.split()[-1])
    raise AssertionError("no abort counter in /metrics")


def assert_still_serving(server) -> None:
    """``/health`` is ok and a plain completion succeeds (after a bad request)."""
    import httpx

    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    r = httpx.post(server.base_url + "/v1/completions", headers=AUTH, timeout=30,
                   json={"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def error_of(response) -> dict:
    """The OpenAI-style ``error`` object of a 4xx/5xx response (all four keys present)."""
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error
