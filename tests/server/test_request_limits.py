"""Huge requests are refused before they cost the server anything (issue 11, item 3):
a body limit (413), a character bound checked before tokenizing, and tokenization in the
prompt workers, never on the engine thread or the event loop."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from specdec.server.options import MIB
from tests.server.conftest import AUTH, MODEL_NAME, assert_still_serving, error_of


def _url(server, path: str = "/v1/completions") -> str:
    return server.base_url + path


def test_body_over_the_limit_is_413(server):
    prompt = "x" * (8 * MIB + 1)
    r = httpx.post(_url(server), headers=AUTH, timeout=30,
                   json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": 2})
    assert r.status_code == 413
    error = error_of(r)
    assert error["code"] == "request_too_large" and str(8 * MIB) in error["message"]
    assert_still_serving(server)


def test_chunked_body_over_the_limit_is_413(server):
    def chunks():
        yield b'{"model": "tiny", "max_tokens": 2, "prompt": "'
        for _ in range(9):
            yield b"y" * MIB
        yield b'"}'

    r = httpx.post(_url(server), headers={**AUTH, "Content-Type": "application/json"},
                   content=chunks(), timeout=30)
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"
    assert_still_serving(server)


def test_huge_declared_length_is_413_without_reading_the_body(server):
    """A Content-Length over the limit is answered at once; the body is never awaited."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: " + AUTH["Authorization"].encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{")
        reply = b""
        while chunk := sock.recv(65536):  # the server closes after the 413
            reply += chunk
        reply = reply.decode()
    assert reply.startswith("HTTP/1.1 413") and "request_too_large" in reply
    assert_still_serving(server)


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", lambda text: {"prompt": text}),
    ("/v1/chat/completions", lambda text: {"messages": [{"role": "user", "content": text}]}),
])
def test_prompt_that_cannot_fit_is_refused_before_tokenizing(server, monkeypatch, path, body):
    prompts = server.app.state.specdec.prompts
    bound = prompts.max_chars
    assert bound == 511 * 81  # (max_model_len - 1) x the longest SmolLM2 token string
    monkeypatch.setattr(prompts, "_pool", None)  # tokenizing now would raise: it must not
    start = time.monotonic()
    r = httpx.post(_url(server, path), headers=AUTH, timeout=30,
                   json={"model": MODEL_NAME, "max_tokens": 2, **body("a" * (4 * MIB))})
    assert time.monotonic() - start < 2.0
    assert r.status_code == 400
    error = error_of(r)
    assert "characters" in error["message"] and error["param"] in ("prompt", "messages")
    monkeypatch.undo()
    assert_still_serving(server)


def test_the_engine_only_receives_token_ids(server, monkeypatch):
    engine = server.engine
    seen: list = []
    original = engine.add_request

    def spy(prompt, *args, **kwargs):
        seen.append(prompt)
        return original(prompt, *args, **kwargs)

    monkeypatch.setattr(engine, "add_request", spy)
    for path, body in [("/v1/completions", {"prompt": "Hello there"}),
                       ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Hello there"}]})]:
        r = httpx.post(_url(server, path), headers=AUTH, timeout=30,
                       json={"model": MODEL_NAME, "max_tokens": 2, **body})
        assert r.status_code == 200, r.text
    assert len(seen) == 2 and all(isinstance(p, list) and p for p in seen)
    assert all(isinstance(t, int) for p in seen for t in p)


def test_token_ids_match_the_engine_tokenizer(server):
    text = "Hello <|im_start|>user\n  émoji 🤖 x"
    r = httpx.post(_url(server), headers=AUTH, timeout=30,
                   json={"model": MODEL_NAME, "prompt": text, "max_tokens": 1})
    expected = server.engine.tokenizer.encode(text, add_special_tokens=False)
    assert r.json()["usage"]["prompt_tokens"] == len(expected)
