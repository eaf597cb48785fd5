"""Bad input is a 4xx with an OpenAI error body, never a 500 and never unconstrained text."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.conftest import API_KEY, MODEL_NAME, wait_until_idle

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def assert_openai_error(exc: openai.APIStatusError, status: int, words: str) -> None:
    assert exc.status_code == status
    error = exc.response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words.lower() in error["message"].lower(), error["message"]


@pytest.mark.parametrize("kwargs, words", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(temperature=-1), "temperature"),
    (dict(top_p=1.5), "top_p"),
    (dict(max_tokens=10_000), "context"),
    (dict(n=2), "n=1"),
    (dict(logprobs=50), "logprobs"),
    (dict(extra_body={"guided_regex": "("}), "regex"),
    (dict(extra_body={"guided_json": {"type": "object", "properties": {
        "a": {"type": "array", "uniqueItems": True}}}}), "uniqueItems"),
    (dict(extra_body={"guided_json": "{not json"}), "json"),
    (dict(extra_body={"guided_grammar": "start: undefined_rule"}), "grammar"),
    (dict(extra_body={"guided_choice": []}), "choice"),
    (dict(extra_body={"guided_regex": "a", "guided_choice": ["b"]}), "one"),
    (dict(extra_body={"guided_regx": "a"}), "unknown field"),
    (dict(extra_body={"structured_outputs": {"regex": "a", "choice": ["b"]}}), "exactly one"),
    (dict(logit_bias={"42": 5}), "plugin"),
])
def test_bad_completion_parameters_are_400(client, kwargs, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_NAME, prompt="Hello", **{"max_tokens": 4, **kwargs})
    assert_openai_error(info.value, 400, words)


def test_prompt_longer_than_the_context_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_NAME, prompt="hello " * 600, max_tokens=4)
    assert_openai_error(info.value, 400, "context")


def test_bad_response_format_is_400(client):
    messages = [{"role": "user", "content": "hi"}]
    for fmt, words in [({"type": "yaml"}, "not supported"),
                       ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema"),
                       ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
                           "type": "object", "properties": {"x": {"type": "array",
                                                                  "uniqueItems": True}}}}},
                        "uniqueItems")]:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=4,
                                           response_format=fmt)
        assert_openai_error(info.value, 400, words)


def test_empty_messages_and_bad_roles_are_400(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=[], max_tokens=4)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, max_tokens=4,
                                       messages=[{"role": "wizard", "content": "hi"}])
    assert_openai_error(info.value, 400, "messages")


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gpt-17", prompt="Hello", max_tokens=4)
    assert_openai_error(info.value, 404, "gpt-17")
    assert info.value.response.json()["error"]["code"] == "model_not_found"


def test_streaming_request_errors_before_the_stream_starts(client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="", max_tokens=4, stream=True)


def test_malformed_json_and_wrong_types_are_400(server):
    url = server.base_url + "/v1/completions"
    r = httpx.post(url, content=b'{"model": "tiny", "prompt": ', headers={
        **AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(url, json={"model": MODEL_NAME, "prompt": "x", "max_tokens": "many"},
                   headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = httpx.post(url, json={"model": MODEL_NAME}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def test_api_key_guards_everything_but_health(server):
    wrong = openai.OpenAI(base_url=server.base_url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        wrong.models.list()
    assert_openai_error(info.value, 401, "api key")
    for path in ("/metrics", "/stats", "/v1/models"):
        assert httpx.get(server.base_url + path).status_code == 401
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_rejections_leave_nothing_behind(client, server):
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=4,
                                      extra_body={"guided_regex": "["})
    wait_until_idle(server)
    metrics = httpx.get(server.base_url + "/metrics", headers=AUTH).text
    assert 'specdec_requests_total{outcome="rejected"}' in metrics
