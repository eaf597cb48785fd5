"""A client that goes away aborts its request; its KV blocks return to the pool."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server.conftest import AUTH, MODEL_NAME, aborted_count, wait_until_idle


@pytest.fixture()
def slow_steps(server, monkeypatch):
    """Each engine step 5 ms longer: the requests below outlive their clients on any
    machine, however fast its steps."""
    step = server.engine.step

    def slow_step():
        time.sleep(0.005)
        return step()

    monkeypatch.setattr(server.engine, "step", slow_step)


def test_closing_a_stream_aborts_the_request(client, server, slow_steps):
    before = aborted_count(server)
    stream = client.completions.create(model=MODEL_NAME, prompt="Tell me a long story",
                                       max_tokens=400, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    received = 0
    for chunk in stream:
        received += len(chunk.choices[0].text)
        if received > 5:
            break
    stats = httpx.get(server.base_url + "/stats", headers=AUTH).json()
    assert stats["kv_blocks_used"] > 0  # still generating while we hold the stream
    stream.close()
    stats = wait_until_idle(server)
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert aborted_count(server) == before + 1


def test_non_streaming_client_timeout_aborts_the_request(server, slow_steps):
    body = {"model": MODEL_NAME, "prompt": "Tell me a long story", "max_tokens": 480,
            "ignore_eos": True}
    before = aborted_count(server)
    try:
        httpx.post(server.base_url + "/v1/completions", json=body, timeout=0.3,
                   headers=AUTH)
    except httpx.TimeoutException:
        pass
    stats = wait_until_idle(server, timeout=10)
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert aborted_count(server) == before + 1


def test_a_client_that_does_not_read_does_not_stall_others(client, server):
    body = {"model": MODEL_NAME, "prompt": "Tell me a long story", "max_tokens": 400,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body,
                      headers=AUTH, timeout=30) as idle_reader:
        assert idle_reader.status_code == 200  # headers read, body left unread
        r = client.completions.create(model=MODEL_NAME, prompt="Quick one", max_tokens=8,
                                      timeout=10)
        assert r.choices[0].finish_reason == "length"
    wait_until_idle(server)
