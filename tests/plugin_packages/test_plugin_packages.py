"""The packages under ``plugins/`` install with pip and work without any specdec change.

They are installed with ``pip install --target`` into a private directory (not into the
shared virtualenv, so no other test sees them) and exercised in a fresh interpreter
that has that directory on its path: ``LLM()`` and the server find them only through
the ``specdec`` entry-point group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["specdec-logit-bias", "specdec-repetition-penalty", "specdec-llguidance"]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("plugin-site")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
           "--no-index", "--target", str(target), *(str(ROOT / "plugins" / p) for p in PACKAGES)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def report(plugin_site, tiny_model_dir) -> dict:
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("installed_check.py")),
                           str(tiny_model_dir)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_entry_points_register_the_plugins(report):
    assert {"logit_bias", "repetition_penalty", "llguidance"} <= set(report["plugins"])
    assert {"logit_bias", "banned_phrases", "presence_penalty", "frequency_penalty",
            "repetition_penalty"} <= set(report["options"])


def test_offline_llm_applies_the_plugins(report):
    off = report["offline"]
    assert off["bias_ban_first"][0] != off["base"][0]
    assert off["bias_force"] == [42] * 8
    assert off["banned_phrase"] not in off["banned_phrase_output"]
    assert off["frequency"] != off["base"]
    assert len(set(off["frequency"])) > len(set(off["base"]))  # fewer repeats
    assert off["repetition"] != off["base"]


def test_server_passes_openai_fields_to_the_plugins(report):
    srv = report["server"]
    assert srv["bias_force"] == srv["token_42"] * 8
    assert srv["penalties"] != srv["base"]
    assert srv["repetition"] != srv["base"]
    assert report["offline"]["banned_phrase"] not in srv["banned_phrase_output"]
    assert srv["bad_bias_status"] == 400 and "vocabulary" in srv["bad_bias_message"]


@pytest.mark.parametrize("mode", ["plain", "speculative"])
def test_llguidance_backend_outputs_validate(report, mode):
    """LLM(structured_backend="llguidance"): sampled outputs of a JSON schema and a
    regex are complete and valid, with speculation (n-gram drafts and grammar-forced
    drafts checked by the llguidance matcher) as without."""
    run = report["llguidance"][mode]
    for seed, out in run["outputs"].items():
        assert out["json_finish"] == "stop" and out["json_valid"], (seed, out)
        assert out["regex_finish"] == "stop" and out["regex_valid"], (seed, out)
    assert run["requests_llguidance"] == 6
    assert run["requests_builtin"] == 1 and run["builtin_override_valid"]  # per request
    assert "Invalid type" in run["bad_schema_error"]  # a ValueError, before generation
    if mode == "speculative":
        assert run["forced_drafts"] > 0 and run["accepted_tokens"] > 0


def test_server_takes_structured_backend_from_the_body(report):
    srv = report["server"]
    assert srv["llguidance_chat_valid"], srv["llguidance_chat"]
    assert srv["llguidance_chat_requests"] == 1
    assert srv["bad_backend_status"] == 400
    assert "structured_backend must be one of builtin, llguidance" in srv["bad_backend_message"]


def test_specdec_alone_refuses_the_fields(tiny_model_dir):
    """Without the packages the same options are an error, not silently ignored."""
    from importlib.metadata import entry_points

    from specdec import LLM, SamplingParams

    if any(ep.name == "logit_bias" for ep in entry_points(group="specdec")):
        pytest.skip("specdec-logit-bias is installed in this environment")
    llm = LLM(model=str(tiny_model_dir), dtype="float32", num_threads=1, num_kv_blocks=64)
    with pytest.raises(ValueError, match="unknown request option"):
        llm.generate("Hi", SamplingParams(max_tokens=2), use_tqdm=False, logit_bias={1: 1})


def test_specdec_alone_has_only_the_builtin_backend(tiny_model_dir):
    from importlib.metadata import entry_points

    from specdec import LLM

    if any(ep.name == "llguidance" for ep in entry_points(group="specdec")):
        pytest.skip("specdec-llguidance is installed in this environment")
    with pytest.raises(ValueError, match="structured_backend must be one of builtin, got "
                                         "'llguidance'"):
        LLM(model=str(tiny_model_dir), dtype="float32", num_kv_blocks=16,
            structured_backend="llguidance")
