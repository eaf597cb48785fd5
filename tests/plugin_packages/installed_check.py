"""Run in a fresh interpreter whose path holds the pip-installed plugin packages.

Uses them through ``LLM()`` and through the server exactly as a user would (no
registration in code: only the ``specdec`` entry points), and prints a JSON report.
Usage: ``python installed_check.py MODEL_DIR``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for tests.server.live_server

# Bounded languages, so even a random model's output completes (no "length" finishes).
SCHEMA = {"type": "object", "properties": {
    "ok": {"type": "boolean"},
    "n": {"type": "integer", "minimum": 0, "maximum": 99},
    "tag": {"enum": ["red", "green", "blue"]}}, "required": ["ok", "n", "tag"]}
REGEX = r"[0-9]{3}-[a-z]{2,4}"
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
               "prompt_lookup_max": 3}
JSON_PROMPT = 'Examples: {"ok":true,"n":12,"tag":"red"} {"ok":false,"n":7,"tag":"blue"} Next:'


def main(model_dir: str) -> dict:
    import openai

    from specdec import LLM, SamplingParams
    from specdec.server import create_app
    from tests.server.live_server import start_server

    llm = LLM(model=model_dir, dtype="float32", num_threads=1, num_kv_blocks=64)
    report: dict = {"plugins": sorted(n for n, _ in llm.engine.pm.list_name_plugin() if n),
                    "options": sorted(llm.engine.request_options)}
    greedy = SamplingParams(max_tokens=8, temperature=0)

    def tokens(**options) -> list[int]:
        return llm.generate("Hello there", greedy, use_tqdm=False, **options)[0].token_ids

    base = tokens()
    phrase = llm.tokenizer.decode(base[1:3])
    report["offline"] = {
        "base": base,
        "bias_ban_first": tokens(logit_bias={base[0]: -100}),
        "bias_force": tokens(logit_bias={42: 100}),
        "banned_phrase": phrase,
        "banned_phrase_output": llm.tokenizer.decode(tokens(banned_phrases=[phrase])),
        "frequency": tokens(frequency_penalty=2.0, presence_penalty=2.0),
        "repetition": tokens(repetition_penalty=3.0),
    }

    live = start_server(create_app(llm.engine, model_name="tiny"))
    try:
        client = openai.OpenAI(base_url=live.base_url + "/v1", api_key="none", max_retries=0)

        def text(**kwargs) -> str:
            return client.completions.create(model="tiny", prompt="Hello there", max_tokens=8,
                                              temperature=0, **kwargs).choices[0].text

        report["server"] = {
            "base": text(),
            "bias_force": text(logit_bias={"42": 100}),
            "penalties": text(presence_penalty=2.0, frequency_penalty=2.0),
            "repetition": text(extra_body={"repetition_penalty": 3.0}),
            "banned_phrase_output": text(extra_body={"banned_phrases": [phrase]}),
            "token_42": llm.tokenizer.decode([42]),
        }
        try:
            text(logit_bias={"999999999": 5})
            report["server"]["bad_bias_status"] = 200
        except openai.BadRequestError as exc:
            report["server"]["bad_bias_status"] = exc.status_code
            report["server"]["bad_bias_message"] = exc.response.json()["error"]["message"]
        report["server"].update(llguidance_server(client, llm))
    finally:
        live.stop()
    report["llguidance"] = llguidance_offline(model_dir)
    return report


def _valid_json(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def llguidance_offline(model_dir: str) -> dict:
    """``structured_backend="llguidance"`` for the engine, with and without speculation."""
    from specdec import LLM, SamplingParams

    report: dict = {}
    for name, extra in (("plain", {}), ("speculative", {"speculative": SPECULATIVE})):
        llm = LLM(model=model_dir, dtype="float32", num_threads=1, num_kv_blocks=64,
                  structured_backend="llguidance", **extra)
        texts = {}
        for seed in range(3):  # sampled, so each seed takes another path through the grammar
            params = SamplingParams(max_tokens=40, temperature=1.0, seed=seed)
            json_out = llm.generate(JSON_PROMPT, params, use_tqdm=False, json_schema=SCHEMA)[0]
            regex_out = llm.generate("Code:", params, use_tqdm=False, regex=REGEX)[0]
            texts[seed] = {"json": json_out.text, "json_finish": json_out.finish_reason,
                           "json_valid": _valid_json(json_out.text),
                           "regex": regex_out.text, "regex_finish": regex_out.finish_reason,
                           "regex_valid": re.fullmatch(REGEX, regex_out.text) is not None}
        builtin = llm.generate("Code:", SamplingParams(max_tokens=20, temperature=0),
                               use_tqdm=False, regex=REGEX, structured_backend="builtin")[0]
        stats = llm.stats()
        report[name] = {
            "outputs": texts,
            "builtin_override_valid": re.fullmatch(REGEX, builtin.text) is not None,
            "requests_llguidance": stats.get("structured_requests_llguidance", 0),
            "requests_builtin": stats.get("structured_requests_builtin", 0),
            "draft_tokens": stats.get("spec_num_draft_tokens", 0),
            "accepted_tokens": stats.get("spec_num_accepted_tokens", 0),
            "forced_drafts": stats.get("structured_forced_drafts", 0),
        }
        try:
            llm.generate("x", use_tqdm=False, json_schema={"type": "no-such-type"})
            report[name]["bad_schema_error"] = None
        except ValueError as exc:
            report[name]["bad_schema_error"] = str(exc)
    return report


def llguidance_server(client, llm) -> dict:
    """The body field ``structured_backend`` on a chat request (engine default: builtin)."""
    import openai

    def chat(**extra_body):
        return client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "JSON please"}], max_tokens=40,
            temperature=0, response_format={"type": "json_schema", "json_schema": {
                "name": "t", "schema": SCHEMA}}, extra_body=extra_body)

    before = llm.stats().get("structured_requests_llguidance", 0)
    text = chat(structured_backend="llguidance").choices[0].message.content
    out = {"llguidance_chat": text, "llguidance_chat_valid": _valid_json(text),
           "llguidance_chat_requests": llm.stats().get("structured_requests_llguidance", 0)
           - before}
    try:
        chat(structured_backend="nope")
        out["bad_backend_status"] = 200
    except openai.BadRequestError as exc:
        out["bad_backend_status"] = exc.status_code
        out["bad_backend_message"] = exc.response.json()["error"]["message"]
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
