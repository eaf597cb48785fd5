"""Bounded loopback load test: ~100 concurrent streams, some cancelled, some invalid.

At the end every valid request has its complete answer, every KV block is back in
the pool and ``/health`` is OK.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai

from tests.server.conftest import MODEL_NAME, aborted_count, wait_until_idle

NUM_VALID, NUM_CANCELLED, NUM_INVALID = 70, 15, 15
MAX_TOKENS = 16
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


async def cancelled_stream(client: openai.AsyncOpenAI, i: int) -> int:
    stream = await client.completions.create(
        model=MODEL_NAME, prompt=f"Long story {i}", max_tokens=400, stream=True,
        extra_body={"ignore_eos": True})
    chunks = 0
    async for _ in stream:
        chunks += 1
        if chunks >= 2 + i % 3:
            break
    await stream.close()
    return chunks


INVALID = [
    dict(extra_body={"guided_regex": "(unclosed"}),
    dict(temperature=-3),
    dict(prompt="word " * 700),
    dict(extra_body={"no_such_option": 1}),
    dict(model="other-model"),
]


async def invalid_request(client: openai.AsyncOpenAI, i: int) -> int:
    kwargs = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 8, "stream": True,
              **INVALID[i % len(INVALID)]}
    try:
        await client.completions.create(**kwargs)
    except openai.APIStatusError as exc:
        assert "error" in exc.response.json()
        return exc.status_code
    raise AssertionError(f"invalid request {kwargs} was accepted")


async def run_load(client: openai.AsyncOpenAI):
    tasks = [valid_stream(client, i) for i in range(NUM_VALID)]
    tasks += [cancelled_stream(client, i) for i in range(NUM_CANCELLED)]
    tasks += [invalid_request(client, i) for i in range(NUM_INVALID)]
    order = list(range(len(tasks)))
    order = order[::3] + order[1::3] + order[2::3]  # interleave the three kinds
    results = await asyncio.wait_for(asyncio.gather(*(tasks[k] for k in order)), timeout=150)
    by_task = dict(zip(order, results, strict=True))
    return [by_task[k] for k in range(len(tasks))]


async def valid_stream(client: openai.AsyncOpenAI, i: int):
    """One streamed request (completions or chat); returns (text, finish, usage)."""
    common = dict(model=MODEL_NAME, max_tokens=MAX_TOKENS, stream=True, temperature=0.8,
                  seed=i, stream_options={"include_usage": True},
                  extra_body={"guided_json": SCHEMA} if i % 10 == 0 else {"ignore_eos": True})
    pieces, finish, usage = [], None, None
    if i % 2:
        stream = await client.completions.create(prompt=f"Request {i}: tell me", **common)
        async for c in stream:
            if c.choices:
                pieces.append(c.choices[0].text)
                finish = c.choices[0].finish_reason or finish
            usage = c.usage or usage
    else:
        stream = await client.chat.completions.create(
            messages=[{"role": "user", "content": f"Request {i}"}], **common)
        async for c in stream:
            if c.choices:
                pieces.append(c.choices[0].delta.content or "")
                finish = c.choices[0].finish_reason or finish
            usage = c.usage or usage
    return "".join(pieces), finish, usage


def test_hundred_concurrent_streams(server, aclient):
    aborted_before = aborted_count(server)
    results = asyncio.run(run_load(aclient))
    valid = results[:NUM_VALID]
    cancelled = results[NUM_VALID:NUM_VALID + NUM_CANCELLED]
    invalid = results[NUM_VALID + NUM_CANCELLED:]
    for i, (text, finish, usage) in enumerate(valid):
        assert usage is not None, i
        if i % 10 == 0:
            assert finish == "stop" and json.loads(text)["ok"] in (True, False), text
        else:
            assert finish == "length" and usage.completion_tokens == MAX_TOKENS, (i, finish)
    assert all(n >= 2 for n in cancelled)
    assert sorted(set(invalid)) == [400, 404]
    stats = wait_until_idle(server, timeout=20)
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert aborted_count(server) == aborted_before + NUM_CANCELLED
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
