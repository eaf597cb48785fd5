"""A chat template sent by a client is refused unless the server trusts request templates;
trusted ones render sandboxed, off the event loop, within a time limit (issue 11, item 2)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.server.conftest import (
    AUTH,
    MODEL_NAME,
    assert_still_serving,
    error_of,
    tiny_engine,
)
from tests.server.live_server import start_server

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(server, timeout: float = 30, **body) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/chat/completions", headers=AUTH, timeout=timeout,
                      json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2, **body})


@pytest.fixture(scope="module")
def trusting_server(tiny_model_dir):
    from specdec.server import create_app
    from specdec.server.options import ServerOptions

    options = ServerOptions(trust_request_chat_template=True, template_timeout_s=1.0)
    live = start_server(create_app(tiny_engine(tiny_model_dir), model_name=MODEL_NAME,
                                   api_key=AUTH["Authorization"].split()[1], options=options))
    yield live
    live.stop()


@pytest.mark.parametrize("where", ["chat_template_kwargs", "top level"])
def test_request_template_is_refused_by_default(server, where):
    template = "{{ messages[0].content }}"
    body = {"chat_template_kwargs": {"chat_template": template}} if where != "top level" \
        else {"chat_template": template}
    r = _chat(server, **body)
    assert r.status_code == 400
    error = error_of(r)
    assert error["param"] == "chat_template"
    assert "--trust-request-chat-template" in error["message"]
    assert_still_serving(server)


def test_looping_template_is_refused_quickly_by_default(server):
    start = time.monotonic()
    r = _chat(server, timeout=10, chat_template_kwargs={"chat_template": LOOP})
    assert r.status_code == 400 and time.monotonic() - start < 5
    assert_still_serving(server)


def test_reserved_template_kwargs_are_400(server):
    r = _chat(server, chat_template_kwargs={"tokenize": True})
    assert r.status_code == 400 and error_of(r)["param"] == "chat_template_kwargs"
    assert_still_serving(server)


def test_trusted_template_renders(trusting_server):
    r = _chat(trusting_server, chat_template="{% for m in messages %}{{ m.content }}"
                                             "{% endfor %}")
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 1  # just "hi"


def test_trusted_looping_template_times_out_and_health_stays_fast(trusting_server):
    result: dict = {}

    def slow() -> None:
        result["r"] = _chat(trusting_server, chat_template=LOOP)

    thread = threading.Thread(target=slow)
    start = time.monotonic()
    thread.start()
    time.sleep(0.2)
    for _ in range(5):  # the event loop answers while the template loops
        t0 = time.monotonic()
        assert httpx.get(trusting_server.base_url + "/health", timeout=5).status_code == 200
        assert time.monotonic() - t0 < 0.5
    thread.join(30)
    assert time.monotonic() - start < 10
    r = result["r"]
    assert r.status_code == 400 and "time limit" in error_of(r)["message"]
    assert_still_serving(trusting_server)


@pytest.mark.parametrize("template, words", [
    ("{{ ''.__class__.__mro__ }}", "unsafe"),
    ("{{ 'a' * 10**10 }}", "items"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
     "{% endfor %}{{ ns.s }}", "items"),
    ("{{ '%0999999999d' % 1 }}", "width"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion"),
    ("{{ raise_exception('no system role') }}", "no system role"),
    ("{% for %}", "chat template"),
])
def test_hostile_trusted_templates_are_400(trusting_server, template, words):
    r = _chat(trusting_server, chat_template=template)
    assert r.status_code == 400
    assert words in error_of(r)["message"]
    assert_still_serving(trusting_server)
