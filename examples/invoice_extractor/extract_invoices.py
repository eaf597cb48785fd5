"""Invoice / receipt fields -> JSON, through ``specdec serve`` and the official openai client.

    .venv/bin/python examples/invoice_extractor/extract_invoices.py --spawn-server \\
        examples/invoice_extractor/samples/*.txt

With ``--spawn-server`` the script starts ``specdec serve`` (the bundled model) on a free
local port and stops it at the end; without it, it talks to ``--base-url`` (start one
with ``specdec serve``). Each document is sent with ``response_format`` set to the JSON
schema of :class:`Invoice` (``client.chat.completions.parse``), exactly as one would
against OpenAI, so the answer always parses into the pydantic model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

AMOUNT = r"^[0-9]{1,7}\.[0-9]{2}$"  # money as a decimal string: exact, and bounded


class LineItem(BaseModel):
    description: str = Field(max_length=40)
    quantity: int = Field(ge=0, le=10_000)
    unit_price: str = Field(pattern=AMOUNT)


class Invoice(BaseModel):
    """Every field is bounded, so even a weak model's answer ends and parses."""

    vendor: str = Field(max_length=40)
    invoice_number: str = Field(max_length=20)
    date: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    items: list[LineItem] = Field(max_length=6)
    total: str = Field(pattern=AMOUNT)


SYSTEM = ("You extract invoice fields as JSON: vendor, invoice_number, date, currency "
          "(a 3-letter code), items (description, quantity, unit_price) and total.")


def extract_invoice(client, model: str, text: str, max_tokens: int) -> Invoice:
    completion = client.chat.completions.parse(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
        response_format=Invoice,
        max_tokens=max_tokens,
        temperature=0,
    )
    return completion.choices[0].message.parsed


@contextlib.contextmanager
def spawned_server(extra_args: list[str], timeout: float = 300) -> Iterator[str]:
    """``specdec serve`` on a free loopback port; yields its /v1 base URL."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "specdec.cli", "serve", "--port", str(port),
           "--log-level", "warning", *extra_args]
    proc = subprocess.Popen(cmd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("specdec serve did not start")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    import openai

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--spawn-server", action="store_true",
                        help="start specdec serve for this run (default model)")
    parser.add_argument("--model", default=None,
                        help="with --spawn-server: model path to serve")
    parser.add_argument("--max-tokens", type=int, default=400)
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if args.spawn_server:
            serve_args = ["--model", args.model] if args.model else []
            base_url = stack.enter_context(spawned_server(serve_args))
        client = openai.OpenAI(base_url=base_url, api_key=args.api_key)
        model = client.models.list().data[0].id
        failures = 0
        for path in args.files:
            try:
                invoice = extract_invoice(client, model, path.read_text(), args.max_tokens)
                record = {"file": path.name, **invoice.model_dump()}
            except openai.LengthFinishReasonError:
                failures += 1
                record = {"file": path.name, "error": "cut off by --max-tokens"}
            print(json.dumps(record, ensure_ascii=False))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
