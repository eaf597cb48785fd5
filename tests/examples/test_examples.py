"""Smoke tests of the example apps on the tiny random model (the schema makes it valid)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.server.conftest import API_KEY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytest.importorskip("specdec.structured", reason="the structured-output plugin is not installed")


def load_example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # pydantic resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_extract_folder_writes_one_valid_record_per_file(tiny_model_dir, tmp_path):
    app = load_example("extract_folder/extract_records.py")
    samples = EXAMPLES / "extract_folder" / "samples"
    out = tmp_path / "people.jsonl"
    code = app.main([str(samples), "-o", str(out), "--model", str(tiny_model_dir),
                     "--max-tokens", "300"])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["file"] for r in records] == sorted(p.name for p in samples.glob("*.txt"))
    assert code == 0, records
    for record in records:
        app.Person.model_validate({k: v for k, v in record.items() if k != "file"})


@pytest.fixture(scope="module")
def long_context_server(tmp_path_factory, tokenizer):
    """A tiny model with a 2048-token context: room for a bounded invoice from random weights."""
    from specdec.server import create_app
    from tests.conftest import make_tiny_model_dir
    from tests.server.conftest import tiny_engine
    from tests.server.live_server import start_server

    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("tiny-2k"), tokenizer,
                                    max_position_embeddings=2048)
    live = start_server(create_app(tiny_engine(model_dir), api_key=API_KEY))
    yield live
    live.stop()


def test_invoice_extractor_against_the_server(long_context_server, capsys):
    app = load_example("invoice_extractor/extract_invoices.py")
    files = sorted((EXAMPLES / "invoice_extractor" / "samples").glob("*.txt"))
    code = app.main(["--base-url", long_context_server.base_url + "/v1", "--api-key", API_KEY,
                     "--max-tokens", "1500", *map(str, files)])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == len(files)
    for line in lines:
        record = json.loads(line)
        app.Invoice.model_validate({k: v for k, v in record.items() if k != "file"})
