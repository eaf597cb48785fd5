"""Structured outputs the OpenAI way (``response_format``) and with vLLM's extra fields.

The tiny model is random, so only the constraint makes its output valid: every
answer here must parse and match, whatever the weights.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.server.conftest import MODEL_NAME

pytest.importorskip("specdec.structured", reason="the structured-output plugin is not installed")

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green"]},
                   "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["ok", "color", "n"],
}
CHAT = [{"role": "user", "content": "Give me a record as JSON."}]


def test_response_format_json_schema(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=60, temperature=0.8, seed=1,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "record", "schema": SCHEMA, "strict": True}},
    )
    assert r.choices[0].finish_reason == "stop"
    record = json.loads(r.choices[0].message.content)
    assert set(record) == {"ok", "color", "n"}
    assert isinstance(record["ok"], bool) and record["color"] in ("red", "green")
    assert 0 <= record["n"] <= 99


def test_strict_json_schema_closes_every_object(client):
    """strict: true is OpenAI's strict mode: no property the schema does not allow, even
    in an object schema that lists none (which otherwise takes any; that open grammar is
    tested in test_json_schema_grammar.py)."""
    schema = {"type": "object", "properties": {"inner": {"type": "object"}},
              "required": ["inner"]}
    for seed in range(4):
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=CHAT, max_tokens=40, temperature=1.0, seed=seed,
            response_format={"type": "json_schema", "json_schema": {
                "name": "r", "schema": schema, "strict": True}})
        assert json.loads(r.choices[0].message.content) == {"inner": {}}


def test_strict_must_be_a_boolean(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL_NAME, messages=CHAT, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "r", "schema": SCHEMA, "strict": "yes"}})
    assert "strict" in str(info.value)


def test_response_format_json_schema_streaming(client):
    chunks = client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=60, temperature=0, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert set(json.loads(text)) == {"ok", "color", "n"}


def test_response_format_json_object_gives_an_object(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=200, temperature=0,
        response_format={"type": "json_object"},
    )
    text = r.choices[0].message.content
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("extra_body, check", [
    ({"guided_choice": ["yes", "no", "maybe"]}, lambda t: t in ("yes", "no", "maybe")),
    ({"guided_regex": r"[0-9]{3}-[a-c]{2}"}, lambda t: re.fullmatch(r"[0-9]{3}-[a-c]{2}", t)),
    ({"guided_json": json.dumps(SCHEMA)}, lambda t: set(json.loads(t)) == {"ok", "color", "n"}),
    ({"structured_outputs": {"choice": ["alpha", "beta"]}}, lambda t: t in ("alpha", "beta")),
    ({"structured_outputs": {"regex": r"(ab|cd){1,3}!"}},
     lambda t: re.fullmatch(r"(ab|cd){1,3}!", t)),
    ({"structured_outputs": {"json": SCHEMA}},
     lambda t: json.loads(t)["color"] in ("red", "green")),
])
def test_vllm_structured_output_fields(client, extra_body, check):
    r = client.completions.create(model=MODEL_NAME, prompt="Answer:", max_tokens=60,
                                  temperature=1.0, seed=3, extra_body=extra_body)
    assert r.choices[0].finish_reason == "stop"
    assert check(r.choices[0].text), r.choices[0].text


def test_guided_grammar_uses_a_shipped_lark_grammar(client):
    r = client.completions.create(model=MODEL_NAME, prompt="1+1=", max_tokens=30,
                                  temperature=0.7, seed=0,
                                  extra_body={"guided_grammar": "arithmetic.lark"})
    text = r.choices[0].text
    assert text and re.fullmatch(r"[\w+\-*/^() .]*", text), text


def test_guided_grammar_accepts_lark_text(client):
    grammar = 'start: "say " WORD\nWORD: "yes" | "no"\n'
    r = client.completions.create(model=MODEL_NAME, prompt="Answer:", max_tokens=10,
                                  temperature=1.0, seed=0, extra_body={"guided_grammar": grammar})
    assert r.choices[0].text in ("say yes", "say no")
