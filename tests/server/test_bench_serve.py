"""``specdec bench serve`` against the live test server: figures, JSON result and plot."""

from __future__ import annotations

import importlib.util
import json

from specdec.cli import main
from tests.server.conftest import API_KEY


def test_bench_serve_reports_every_rate(server, tmp_path, capsys):
    result, png = tmp_path / "serve.json", tmp_path / "serve.png"
    can_plot = importlib.util.find_spec("matplotlib") is not None  # optional dependency
    code = main(["bench", "serve", "--base-url", server.base_url, "--api-key", API_KEY,
                 "--num-prompts", "6", "--max-tokens", "8", "--request-rate", "50", "inf",
                 "--max-concurrency", "4", "--result-json", str(result),
                 *(["--plot", str(png)] if can_plot else [])])
    assert code == 0
    runs = json.loads(result.read_text())
    assert [r["request_rate"] for r in runs] == [50, float("inf")]
    for run in runs:
        assert run["completed"] == 6 and run["failed"] == 0
        assert run["median_ttft_ms"] > 0 and run["output_token_throughput"] > 0
        assert run["p99_e2el_ms"] >= run["median_e2el_ms"]
    assert not can_plot or png.stat().st_size > 1000
    assert "Output token throughput" in capsys.readouterr().out


def test_bench_serve_structured_completions(server, tmp_path):
    result = tmp_path / "serve.json"
    main(["bench", "serve", "--base-url", server.base_url, "--api-key", API_KEY,
          "--endpoint", "completions", "--json-output", "--num-prompts", "3",
          "--max-tokens", "8", "--result-json", str(result)])
    (run,) = json.loads(result.read_text())
    assert run["completed"] == 3 and run["json_output"] is True
