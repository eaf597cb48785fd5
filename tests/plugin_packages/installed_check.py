"""Run in a fresh interpreter whose path holds the pip-installed plugin packages.

Uses them through ``LLM()`` and through the server exactly as a user would (no
registration in code: only the ``specdec`` entry points), and prints a JSON report.
Usage: ``python installed_check.py MODEL_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for tests.server.live_server


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
    finally:
        live.stop()
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
