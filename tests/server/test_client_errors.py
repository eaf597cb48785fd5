"""Client mistakes that used to be 500s are 400s naming the field (issue 11, items 7, 9).

Each case: the status, an OpenAI error body whose ``param`` and message name the
field, and a server that still answers ``/health`` and a plain request right after.
Bodies are sent as raw JSON, since lone surrogates and NaN are what a client can send.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.server.conftest import AUTH, MODEL_NAME, assert_still_serving, error_of

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def _post(server, body: dict, path: str = "/v1/completions") -> httpx.Response:
    base = {"model": MODEL_NAME, "max_tokens": 3}
    base.update({"prompt": "Hi"} if path == "/v1/completions"
                else {"messages": [{"role": "user", "content": "Hi"}]})
    raw = json.dumps({**base, **body}).encode()  # NaN and "\ud800" escapes, as clients send
    return httpx.post(server.base_url + path, content=raw, timeout=30,
                      headers={**AUTH, "Content-Type": "application/json"})


CASES = {
    "lookahead": ({"guided_regex": "(?=a)b"}, "guided_regex", "lookahead"),
    "lookbehind": ({"guided_regex": "(?<=a)b"}, "guided_regex", "lookahead"),
    "backreference": ({"guided_regex": "(a)\\1"}, "guided_regex", "backreference"),
    "word boundary": ({"guided_regex": "\\bfoo"}, "guided_regex", "word boundary"),
    "anchors": ({"guided_regex": "^abc$"}, "guided_regex", "anchor"),
    "unsatisfiable": ({"guided_regex": "[^\\s\\S]"}, "guided_regex", "matches no string"),
    "vllm regex": ({"structured_outputs": {"regex": "(?=x)y"}}, "structured_outputs.regex",
                   "lookahead"),
    "bad whitespace_pattern": ({"guided_json": SCHEMA, "guided_whitespace_pattern": "("},
                               "guided_whitespace_pattern", "whitespace_pattern"),
    "lookahead whitespace_pattern": (
        {"structured_outputs": {"json": SCHEMA, "whitespace_pattern": "(?=x)"}},
        "structured_outputs.whitespace_pattern", "lookahead"),
    # refused by the schema's compile (in a worker), after the server's own checks
    "schema keyword": ({"guided_json": {"type": "array", "uniqueItems": True}},
                       "guided_json", "uniqueItems"),
    "vllm schema keyword": ({"structured_outputs": {"json": {"not": {"pattern": "^a"}}}},
                            "structured_outputs.json", "pattern"),
    "whitespace_pattern alone": ({"guided_whitespace_pattern": " "},
                                 "guided_whitespace_pattern", "JSON schema"),
    "lone surrogate prompt": ({"prompt": "a\ud800"}, "prompt", "surrogate"),
    "lone surrogate stop": ({"stop": ["\udfff"]}, "stop[0]", "surrogate"),
    "lone surrogate choice": ({"guided_choice": ["ok", "\ud800"]}, "guided_choice[1]",
                              "surrogate"),
    "seed too big": ({"seed": 2**64}, "seed", "seed"),
    "seed negative": ({"seed": -1}, "seed", "seed"),
    "temperature nan": ({"temperature": float("nan")}, "temperature", "finite"),
    "temperature inf": ({"temperature": float("inf")}, "temperature", "finite"),
    "top_p nan": ({"top_p": float("nan")}, "top_p", "top_p"),
}


@pytest.mark.parametrize("case", CASES)
def test_client_error_is_400_naming_the_field(server, case):
    body, param, words = CASES[case]
    r = _post(server, body)
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert words in error["message"] and len(error["message"]) < 400, error["message"]
    assert_still_serving(server)


@pytest.mark.parametrize("case", ["lookahead", "lone surrogate prompt", "seed too big"])
def test_streaming_request_is_refused_before_the_200(server, case):
    body, param, _ = CASES[case]
    r = _post(server, {**body, "stream": True})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert error_of(r)["param"] == param


def test_lone_surrogate_in_a_chat_message_is_400(server):
    r = _post(server, {"messages": [{"role": "user", "content": "ok"},
                                    {"role": "user", "content": "b\ud800"}]},
              "/v1/chat/completions")
    assert r.status_code == 400 and error_of(r)["param"] == "messages[1].content"
    assert_still_serving(server)


def test_largest_seed_is_fine(server):
    assert _post(server, {"seed": 2**64 - 1}).status_code == 200


def test_tiny_temperature_is_greedy(server):
    greedy = _post(server, {"temperature": 0, "max_tokens": 6}).json()
    tiny = _post(server, {"temperature": 1e-40, "max_tokens": 6}).json()
    assert tiny["choices"][0]["text"] == greedy["choices"][0]["text"]


def _no_infinity(text: str):
    def refuse(name: str):
        raise AssertionError(f"non-JSON constant {name} in {text[:200]}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_logprobs_with_a_constraint_are_finite(server, path):
    lp = {"logprobs": 5} if path == "/v1/completions" else {"logprobs": True, "top_logprobs": 5}
    body = {**lp, "guided_choice": ["yes"], "temperature": 0}
    r = _post(server, body, path)
    assert r.status_code == 200, r.text
    data = _no_infinity(r.text)
    logprobs = data["choices"][0]["logprobs"]
    floors = json.dumps(logprobs).count("-9999.0")
    assert floors >= 1  # masked tokens in the top 5 are reported at OpenAI's floor
    r = _post(server, {**body, "stream": True}, path)
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    for event in events[:-1]:
        _no_infinity(event)
    assert "-9999.0" in r.text


def test_server_error_keeps_the_connection_open(server, monkeypatch):
    """A 500 is an OpenAI error body, and the next request on the socket is answered."""
    async def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(server.app.state.specdec.prompts, "tokenize", broken)
    body = json.dumps({"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Authorization: " + AUTH["Authorization"].encode() + b"\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        first = _read_response(sock)
        sock.sendall(health)
        second = _read_response(sock)
    assert first.startswith(b"HTTP/1.1 500") and b"server_error" in first
    assert b"connection: close" not in first.lower()
    assert second.startswith(b"HTTP/1.1 200")


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest
