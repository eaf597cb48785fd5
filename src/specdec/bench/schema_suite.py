"""The official JSON-Schema-Test-Suite through a structured backend, token by token.

Each group (one schema, several instances) is compiled for the real tokenizer; each
instance, as compact ``json.dumps``, is tokenized like model output and fed through a
matcher token by token. Accepted = every token accepted and the matcher accepting at
the end. A valid instance rejected makes the constraint too strict; an **invalid
instance accepted is a constraint failing open**, the worst bug a structured backend
can have.

Groups run in forked children, a few at a time, each with a wall-clock limit and an
address-space cap: a schema that explodes at compile time is recorded as a timeout or
crash instead of stalling or killing the run. ``optional/`` is left out (as the
suite's README says of it); ``remotes/`` documents are read from disk for the
``http://localhost:1234/`` references the tests make (the peer gets none).

    specdec bench schema-suite [--draft draft2020-12 draft7] [--timeout 10] [--jobs 2]
        [--peers llguidance]   # peers run in the same run where installed
        [--additional-properties open] [--property-order any]

The suite tests the specification, so by default the compiler runs with the options
that follow it (:data:`SPEC_OPTIONS`: additional properties allowed, properties in any
order). The engine's defaults are generation-time restrictions on top (``listed``,
``written``); ``--additional-properties listed --property-order written`` measures them.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DRAFTS = ("draft2020-12", "draft7")
# schema_to_lark options that follow the specification (see the module doc).
SPEC_OPTIONS = {"additional_properties": "open", "property_order": "any"}
# Integers may be spelled 1.0 (the specification counts values): on for the suite.
SPEC_INTEGER_FRACTION = True
NOT_COMPILED = ("unsupported", "timeout", "crash")


@dataclass
class GroupResult:
    draft: str
    keyword_file: str  # "type", "allOf", ... (the suite's file name, without .json)
    description: str
    status: str  # "compiled" | "unsupported" (a clear refusal) | "timeout" | "crash"
    message: str = ""
    compile_s: float = 0.0
    valid: int = 0
    invalid: int = 0
    valid_rejected: list[str] = field(default_factory=list)  # test descriptions
    invalid_accepted: list[str] = field(default_factory=list)


def suite_root() -> Path:
    """``../shared/testdata/JSON-Schema-Test-Suite`` beside the repository (or
    ``SPECDEC_SCHEMA_SUITE``)."""
    env = os.environ.get("SPECDEC_SCHEMA_SUITE")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "testdata" / "JSON-Schema-Test-Suite"
        if candidate.is_dir():
            return candidate
    return here.parents[3].parent / "shared" / "testdata" / "JSON-Schema-Test-Suite"


def groups(root: Path, draft: str) -> Iterator[tuple[str, dict]]:
    """(keyword file, group) for every required group of ``draft``."""
    for path in sorted((root / draft).glob("*.json")):
        for group in json.loads(path.read_text()):
            yield path.stem, group


def instance_text(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def check_group(compile_schema: Callable[[Any], Any], encode: Callable[[str], list[int]],
                draft: str, keyword_file: str, group: dict) -> GroupResult:
    """Compile one group's schema and run its instances (in the calling process)."""
    from specdec.structured.errors import CompileTimeoutError, ConstraintError

    result = GroupResult(draft, keyword_file, group["description"], "compiled")
    start = time.perf_counter()
    try:
        compiled = compile_schema(group["schema"], draft)
    except CompileTimeoutError as exc:
        result.status, result.message = "timeout", str(exc)[:300]
        return result
    except ConstraintError as exc:
        result.status, result.message = "unsupported", str(exc)[:300]
        return result
    except Exception as exc:  # noqa: BLE001 - any other failure is a crash of the compiler
        result.status, result.message = "crash", f"{type(exc).__name__}: {exc}"[:300]
        return result
    result.compile_s = time.perf_counter() - start
    for test in group["tests"]:
        try:
            ids = encode(instance_text(test["data"]))
        except UnicodeEncodeError:  # a lone surrogate cannot be model output
            continue
        matcher = compiled.matcher()
        accepted = all(matcher.accept_token(i) for i in ids) and matcher.is_accepting()
        if test["valid"]:
            result.valid += 1
            if not accepted:
                result.valid_rejected.append(test["description"])
        else:
            result.invalid += 1
            if accepted:
                result.invalid_accepted.append(test["description"])
    return result


def run_isolated(work: list[tuple[str, str, dict]], compile_schema, encode,
                 timeout_s: float, memory_bytes: int, jobs: int) -> list[GroupResult]:
    """``check_group`` for each (draft, keyword file, group), each in a forked child
    with ``timeout_s`` and an address-space cap of ``memory_bytes`` above the parent's."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results: list[GroupResult | None] = [None] * len(work)
    running: dict[int, tuple[int, int, float]] = {}  # pid -> (index, read fd, start)
    pending = list(range(len(work)))[::-1]
    base = _address_space_bytes()
    while pending or running:
        while pending and len(running) < jobs:
            index = pending.pop()
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # child: compile and check, send the result, exit without cleanup
                os.close(read_fd)
                try:
                    cap = base + memory_bytes
                    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
                    draft, keyword_file, group = work[index]
                    out = check_group(compile_schema, encode, draft, keyword_file, group)
                    payload = pickle.dumps(out)
                except BaseException as exc:  # noqa: BLE001 - MemoryError included
                    payload = pickle.dumps(f"{type(exc).__name__}: {exc}"[:300])
                with os.fdopen(write_fd, "wb") as pipe:
                    pipe.write(payload)
                os._exit(0)
            os.close(write_fd)
            running[pid] = (index, read_fd, time.monotonic())
        _reap(work, results, running, timeout_s)
    return [r for r in results if r is not None]


def _reap(work, results, running, timeout_s: float) -> None:
    import select
    import signal

    fds = {fd: pid for pid, (_, fd, _) in running.items()}
    ready, _, _ = select.select(list(fds), [], [], 0.05)
    now = time.monotonic()
    for pid, (index, fd, start) in list(running.items()):
        draft, keyword_file, group = work[index]
        if fd in ready:
            with os.fdopen(fd, "rb") as pipe:
                data = pipe.read()
            os.waitpid(pid, 0)
            out = pickle.loads(data) if data else "the compiler process died"
            if isinstance(out, str):
                out = GroupResult(draft, keyword_file, group["description"], "crash", out)
            results[index] = out
            del running[pid]
        elif now - start > timeout_s:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
            results[index] = GroupResult(draft, keyword_file, group["description"], "timeout",
                                         f"no result within {timeout_s:.0f} s")
            del running[pid]


def _address_space_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def summarize(results: list[GroupResult]) -> dict:
    status = Counter(r.status for r in results)
    compiled = [r for r in results if r.status == "compiled"]
    valid = sum(r.valid for r in compiled)
    invalid = sum(r.invalid for r in compiled)
    return {
        "groups": len(results),
        "compiled": status["compiled"],
        "unsupported": status["unsupported"],
        "timeout": status["timeout"],
        "crash": status["crash"],
        "valid_instances": valid,
        "valid_rejected": sum(len(r.valid_rejected) for r in compiled),
        "invalid_instances": invalid,
        "invalid_accepted": sum(len(r.invalid_accepted) for r in compiled),
        "compile_p50_s": _percentile([r.compile_s for r in compiled], 50),
        "compile_p99_s": _percentile([r.compile_s for r in compiled], 99),
    }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


REMOTES_URI = "http://localhost:1234/"


def local_remotes(root: Path):
    """The suite's ``remotes/`` documents by the URIs its tests use, read from disk
    (never fetched): ``http://localhost:1234/x.json`` -> ``remotes/x.json``."""
    folder = (root / "remotes").resolve()

    def retrieve(uri: str):
        if not uri.startswith(REMOTES_URI):
            return None
        path = (folder / uri[len(REMOTES_URI):]).resolve()
        if folder not in path.parents or not path.is_file():
            return None
        return json.loads(path.read_text())

    return retrieve


WARMUP_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


def builtin_backend(tokenizer, additional_properties: str = SPEC_OPTIONS["additional_properties"],
                    root: Path | None = None,
                    property_order: str = SPEC_OPTIONS["property_order"],
                    timeout_s: float = 10.0):
    """(compile_schema, encode) for specdec's own compiler, as a server compiles: in the
    compile pool (:mod:`~specdec.structured.compile_worker`: capped worker processes,
    killed past ``timeout_s``), without the disk cache; ``additional_properties``/
    ``property_order``: as :func:`schema_to_lark` takes them. The time of a compile is
    what a request waits: the schema's grammar, the worker's tables and walks, the
    round trip and the matcher's set-up in this process. One other schema
    (:data:`WARMUP_SCHEMA`) is compiled first, as by an engine's start-up. The compiled
    constraints are forgotten before each compile (the suite repeats schemas across
    groups and drafts): what compiles share stays, as in a server's processes.
    """
    from specdec.structured.compile import (
        clear_caches,
        compile_spec,
        isolation_ready,
        start_isolation,
    )
    from specdec.structured.json_schema import schema_to_lark
    from specdec.structured.spec import ConstraintSpec
    from specdec.structured.vocabulary import token_vocabulary

    retrieve = local_remotes(root or suite_root())
    vocab = token_vocabulary(tokenizer, len(tokenizer), frozenset(
        [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []))
    vocab.byte_trie  # noqa: B018 - per tokenizer, as at engine start
    start_isolation()
    isolation_ready(120.0)

    def compile_schema(schema, draft: str = "draft2020-12"):
        grammar = schema_to_lark(schema, additional_properties=additional_properties,
                                 retrieve=retrieve, default_draft=draft,
                                 property_order=property_order,
                                 integer_fraction=SPEC_INTEGER_FRACTION)
        clear_caches(disk=False)  # a repeated schema is compiled again, not looked up
        return compile_spec(ConstraintSpec("grammar", grammar, "json_schema"), vocab,
                            use_disk_cache=False, isolated=True, timeout_s=timeout_s)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    compile_schema(WARMUP_SCHEMA)  # per tokenizer: trie indexes, C walk, JSON-string walks
    return compile_schema, encode


def llguidance_backend(tokenizer):
    """The peer: llguidance (``pip install llguidance``), same tokenizer and procedure;
    objects follow the specification (additional properties allowed), compact output."""
    import llguidance
    import llguidance.hf

    from specdec.structured.errors import ConstraintError

    lltok = llguidance.hf.from_tokenizer(tokenizer)

    class _Matcher:
        def __init__(self, grammar):
            self.inner = llguidance.LLMatcher(lltok, grammar)

        def accept_token(self, token_id: int) -> bool:
            return self.inner.consume_token(token_id) and not self.inner.is_error()

        def is_accepting(self) -> bool:
            return self.inner.is_accepting()

    class _Compiled:
        def __init__(self, grammar):
            self.grammar = grammar

        def matcher(self):
            return _Matcher(self.grammar)

    def compile_schema(schema, draft: str = "draft2020-12"):
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False})
        probe = llguidance.LLMatcher(lltok, grammar)
        if probe.is_error():
            raise ConstraintError(probe.get_error())
        return _Compiled(grammar)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    return compile_schema, encode


PEERS = {"llguidance": llguidance_backend}


def run_suite(tokenizer, drafts=DRAFTS, timeout_s: float = 10.0,
              memory_bytes: int = 4 << 30, jobs: int = 2, root: Path | None = None,
              backend=None) -> list[GroupResult]:
    """Every group through ``backend`` (a peer's (compile_schema, encode), each group in
    a forked child capped at ``memory_bytes``) or, by default, specdec's compile pool as
    configured (:func:`~specdec.structured.compile.configure_isolation`), groups checked
    from ``jobs`` threads of this process."""
    root = root or suite_root()
    work = [(draft, kw, g) for draft in drafts for kw, g in groups(root, draft)]
    if backend is not None:
        compile_schema, encode = backend
        return run_isolated(work, compile_schema, encode, timeout_s, memory_bytes, jobs)
    compile_schema, encode = builtin_backend(tokenizer, root=root, timeout_s=timeout_s)
    return run_pooled(work, compile_schema, encode, jobs)


def run_pooled(work: list[tuple[str, str, dict]], compile_schema, encode,
               jobs: int) -> list[GroupResult]:
    """``check_group`` for each group from ``jobs`` threads of this process: for a
    backend that isolates its own compiles."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda item: check_group(compile_schema, encode, *item), work))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--draft", nargs="+", default=list(DRAFTS), choices=DRAFTS)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per group")
    parser.add_argument("--jobs", type=int, default=2, help="groups compiled at once")
    parser.add_argument("--additional-properties",
                        default=SPEC_OPTIONS["additional_properties"],
                        choices=["listed", "open", "closed"],
                        help="objects' extra properties (see structured/json_schema.py; "
                             "the engine's default is listed)")
    parser.add_argument("--property-order", default=SPEC_OPTIONS["property_order"],
                        choices=["written", "any"],
                        help="listed properties' order (the engine's default is written)")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS),
                        help="peers run in the same run where installed")
    parser.add_argument("--show", type=int, default=20,
                        help="list this many failing groups of each kind")


def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from specdec.model.loader import resolve_model_dir
    from specdec.structured.compile import configure_isolation

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(args.model),
                                              local_files_only=True)
    start = time.perf_counter()
    configure_isolation(max_workers=args.jobs, memory_bytes=4 << 30)
    builtin = builtin_backend(tokenizer, args.additional_properties,
                              property_order=args.property_order, timeout_s=args.timeout)
    work = [(draft, kw, g) for draft in args.draft for kw, g in groups(suite_root(), draft)]
    results = run_pooled(work, *builtin, args.jobs)
    summary = summarize(results)
    summary["wall_s"] = time.perf_counter() - start
    print(f"specdec     {format_summary(summary)}")
    for name in args.peers:
        try:
            peer = PEERS[name](tokenizer)
        except ImportError:
            print(f"{name:11s} not installed")
            continue
        peer_summary = summarize(run_suite(tokenizer, args.draft, args.timeout,
                                           jobs=args.jobs, backend=peer))
        summary[name] = peer_summary
        print(f"{name:11s} {format_summary(peer_summary)}")
        print(f"{'':11s} compiled groups specdec / {name}: "
              f"{summary['compiled'] / max(1, peer_summary['compiled']):.2f}x")
    for title, picked in (
        ("invalid instances accepted (fails open)",
         [(r, d) for r in results for d in r.invalid_accepted]),
        ("valid instances rejected", [(r, d) for r in results for d in r.valid_rejected]),
        ("groups timed out or crashed",
         [(r, r.message) for r in results if r.status in ("timeout", "crash")]),
    ):
        if picked:
            print(f"\n{title}: {len(picked)}")
            for r, detail in picked[: args.show]:
                print(f"  {r.draft}/{r.keyword_file}: {r.description} -- {detail}")
    return summary


def format_summary(s: dict) -> str:
    return (f"groups compiled {s['compiled']}/{s['groups']} "
            f"({s['unsupported']} refused, {s['timeout']} timeouts, {s['crash']} crashes); "
            f"valid rejected {s['valid_rejected']}/{s['valid_instances']}; "
            f"invalid accepted {s['invalid_accepted']}/{s['invalid_instances']}; "
            f"compile p50 {1e3 * s['compile_p50_s']:.1f} ms, p99 {1e3 * s['compile_p99_s']:.0f} ms")
