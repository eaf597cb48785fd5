"""The server through the official ``openai`` client: completions and chat, both ways."""

from __future__ import annotations

import httpx

from tests.server.conftest import API_KEY, MODEL_NAME

CHAT = [{"role": "user", "content": "Extract the name as JSON: Ann is 31."}]


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]


def test_completion_non_streaming_reports_usage(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello there", max_tokens=6,
                                  temperature=0)
    choice = r.choices[0]
    assert r.object == "text_completion" and r.model == MODEL_NAME
    assert choice.finish_reason == "length" and choice.text
    assert r.usage.completion_tokens == 6 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6


def test_completion_stream_concatenates_to_the_non_streamed_text(client):
    kwargs = dict(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=8, temperature=0)
    whole = client.completions.create(**kwargs).choices[0].text
    chunks = list(client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 8


def test_completion_accepts_token_ids(client, server):
    ids = server.engine.tokenizer.encode("Hello there", add_special_tokens=False)
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=4,
                                       temperature=0)
    by_text = client.completions.create(model=MODEL_NAME, prompt="Hello there", max_tokens=4,
                                        temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_chat_non_streaming_and_streaming_agree(client):
    kwargs = dict(model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0)
    r = client.chat.completions.create(**kwargs)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason == "length"


def test_chat_without_max_tokens_uses_the_context_left(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=0,
                                       stop=["\n\n"], extra_body={"ignore_eos": False})
    assert r.choices[0].finish_reason in ("stop", "length")


def test_seed_makes_sampling_reproducible(client):
    kwargs = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8,
                  temperature=1.0, top_p=0.9, seed=7)
    a = client.completions.create(**kwargs).choices[0].text
    b = client.completions.create(**kwargs).choices[0].text
    assert a == b


def test_stop_string_ends_the_completion(client):
    base = client.completions.create(model=MODEL_NAME, prompt="Hello there", max_tokens=8,
                                     temperature=0).choices[0].text
    stop = base.strip().split()[0] if base.strip() else None
    if stop is None:
        return
    r = client.completions.create(model=MODEL_NAME, prompt="Hello there", max_tokens=8,
                                  temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=3,
                                  temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert all(v <= 0 for v in lp.token_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    assert all(len(c.top_logprobs) == 2 and c.logprob <= 0 for c in content)
    # greedy: the sampled token is the most likely one
    assert all(c.logprob == max(t.logprob for t in c.top_logprobs) for c in content)


def test_health_needs_no_key_and_metrics_are_prometheus_text(client, server):
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
    client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2)
    text = httpx.get(server.base_url + "/metrics",
                     headers={"Authorization": f"Bearer {API_KEY}"}).text
    for name in ('specdec_requests_total{outcome="length"}', "specdec_prompt_tokens_total",
                 "specdec_generation_tokens_total", "specdec_kv_cache_usage_ratio",
                 'specdec_time_to_first_token_seconds_bucket{le="+Inf"}',
                 "specdec_inter_token_latency_seconds_count",
                 "specdec_e2e_request_latency_seconds_sum",
                 "specdec_engine_prefix_cache_hit_rate"):
        assert name in text, name
    assert "# TYPE specdec_requests_total counter" in text
