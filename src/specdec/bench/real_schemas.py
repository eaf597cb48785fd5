"""Real-world JSON schemas: which ones each structured backend compiles, and how fast.

The corpus is the SchemaStore schemas that ``check-jsonschema`` vendors (CI and config
files: GitHub workflows, GitLab CI, Renovate, Docker Compose...; 1 KiB to 2 MiB each),
or any folder of ``*.json`` schemas (``--dir``). specdec compiles each as a server
does (``constraint_spec`` + the compile pool, killed past ``--timeout``); the peers
compile in a forked child each, with the same limit. A refusal is counted with the
reason it names; nothing here checks instances (the conformance suite does that).

    pip install --no-deps check-jsonschema   # the corpus, once
    specdec bench real-schemas [--dir DIR] [--timeout 5] [--peers llguidance xgrammar]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.bench.workload import percentile

PEERS = ("llguidance", "xgrammar")


def corpus_dir() -> Path | None:
    """The schemas vendored by ``check-jsonschema``, if it is installed (found without
    importing it: ``--no-deps`` leaves out what its code needs)."""
    import importlib.util

    spec = importlib.util.find_spec("check_jsonschema")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "builtin_schemas" / "vendor"
    return path if path.is_dir() else None


def load_corpus(folder: Path) -> dict[str, Any]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def specdec_compiler(tokenizer, timeout_s: float) -> Callable[[Any], None]:
    """Compile as a server does: the schema's spec, then the compile pool (no caches)."""
    from specdec.structured.compile import (
        clear_caches,
        compile_spec,
        isolation_ready,
        start_isolation,
    )
    from specdec.structured.spec import constraint_spec
    from specdec.structured.vocabulary import token_vocabulary

    vocab = token_vocabulary(tokenizer, len(tokenizer), frozenset([tokenizer.eos_token_id]))
    vocab.byte_trie  # noqa: B018 - as at engine start
    start_isolation()
    isolation_ready(120.0)

    def compile_schema(schema: Any) -> None:
        clear_caches(disk=False)
        compile_spec(constraint_spec(json_schema=schema), vocab, use_disk_cache=False,
                     isolated=True, timeout_s=timeout_s)

    compile_schema({"type": "object", "properties": {"a": {"type": "string"}}})  # warm-up
    return compile_schema


def peer_compiler(name: str, tokenizer) -> Callable[[Any], None]:
    from specdec.bench.structured_peers import llguidance_peer, xgrammar_peer

    make = {"llguidance": llguidance_peer, "xgrammar": xgrammar_peer}[name]
    compile_constraint = make(tokenizer, len(tokenizer))[0]
    return lambda schema: compile_constraint({"json_schema": schema})


def in_child(compile_schema: Callable[[Any], None], schema: Any,
             timeout_s: float) -> tuple[str, float]:
    """(outcome, seconds) of one compile in a forked child, killed past ``timeout_s``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compile, report, exit without cleanup
        os.close(read_fd)
        start = time.perf_counter()
        try:
            compile_schema(schema)
            outcome = "ok"
        except BaseException as exc:  # noqa: BLE001 - the outcome is the report
            outcome = f"refused: {exc}"
        os.write(write_fd, pickle.dumps((outcome[:300], time.perf_counter() - start)))
        os._exit(0)
    os.close(write_fd)
    start = time.monotonic()
    os.set_blocking(read_fd, False)
    data = b""
    while time.monotonic() - start < timeout_s:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            time.sleep(0.005)
            continue
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    if not data:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else ("timeout", timeout_s)


def run_specdec(compile_schema: Callable[[Any], None], schema: Any) -> tuple[str, float]:
    start = time.perf_counter()
    try:
        compile_schema(schema)
        return "ok", time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - the outcome is the report
        return f"refused: {exc}", time.perf_counter() - start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder of *.json schemas (default: check-jsonschema's)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per compile")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)


def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from specdec.model.loader import resolve_model_dir

    folder = args.dir or corpus_dir()
    if folder is None:
        raise SystemExit("no corpus: pip install --no-deps check-jsonschema, or give --dir")
    corpus = load_corpus(folder)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(args.model),
                                              local_files_only=True)
    engines: dict[str, Callable[[str, Any], tuple[str, float]]] = {}
    ours = specdec_compiler(tokenizer, args.timeout)
    engines["specdec"] = lambda _name, schema: run_specdec(ours, schema)
    for name in args.peers:
        try:
            peer = peer_compiler(name, tokenizer)
        except ImportError:
            print(f"{name}: not installed")
            continue
        engines[name] = lambda _name, schema, peer=peer: in_child(peer, schema, args.timeout)
    results = {engine: {} for engine in engines}
    width = max(map(len, corpus))
    print(f"{'schema':{width}s} {'KiB':>6s}  " + "  ".join(f"{e:>18s}" for e in engines))
    for name, schema in corpus.items():
        size = len(json.dumps(schema)) // 1024
        cells = []
        for engine, run in engines.items():
            outcome, seconds = run(name, schema)
            results[engine][name] = (outcome, seconds)
            mark = "ok" if outcome == "ok" else outcome.split(":")[0]
            cells.append(f"{mark:>8s} {1e3 * seconds:7.1f} ms")
        print(f"{name:{width}s} {size:6d}  " + "  ".join(cells), flush=True)
    summary = {}
    print()
    for engine, by_schema in results.items():
        times = [s for outcome, s in by_schema.values() if outcome == "ok"]
        compiled = len(times)
        summary[engine] = {"compiled": compiled, "schemas": len(by_schema),
                           "compile_p50_ms": 1e3 * percentile(times, 50) if times else None,
                           "compile_max_ms": 1e3 * max(times) if times else None}
        reasons = Counter(_reason(o) for o, _ in by_schema.values() if o != "ok")
        p50 = f"{summary[engine]['compile_p50_ms']:.1f} ms" if times else "-"
        print(f"{engine:10s} compiled {compiled}/{len(by_schema)}, compile p50 {p50}; "
              f"not compiled: {dict(reasons.most_common())}")
    return summary


def _reason(outcome: str) -> str:
    """A short category of a refusal: the keyword or limit it names."""
    text = outcome.lower()
    if "cannot follow" in text:
        return "ambiguous union"
    for word in ("timeout", "uniqueitems", "oneof", "not at", "pattern", "allof",
                 "unrolled", "lark grammar", "$ref", "format", "propertynames", "if", "not"):
        if word in text:
            return word
    return "other"
