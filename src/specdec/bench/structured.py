"""``specdec bench structured``: grammar mask cost, compile time, constrained throughput.

Part 1 (tokenizer only): for json.lark, a nested JSON schema and a regex, compile cold
(no caches at all, as in a new process), warm (a process that has compiled another
schema: shared terminal DFAs and walks kept) and from the disk cache, then replay real
documents token by token timing ``fill_bitmask`` per step (p50/p99; the first document
starts with cold mask caches). llguidance and xgrammar, when installed, are timed the
same way on the same constraint (:mod:`~specdec.bench.structured_peers`; json.lark is
their own any-JSON grammar). Part 2 (model): the JSON-extraction workload, unconstrained
and under json.lark, same prompts, same engine, same run.
"""

from __future__ import annotations

import argparse
import json
import time

from specdec.bench.structured_peers import PEERS, peer_mask_bench
from specdec.bench.workload import chat_prompt_ids, extraction_prompts, percentile

NESTED_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "integer", "minimum": 1},
        "customer": {"type": "object", "properties": {
            "name": {"type": "string"}, "email": {"type": "string", "format": "email"},
            "address": {"type": "object", "properties": {
                "street": {"type": "string"}, "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                "required": ["street", "city", "zip"]}},
            "required": ["name", "address"]},
        "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1,
                                                    "maximum": 99},
            "price": {"type": "number"}}, "required": ["sku", "quantity", "price"]}},
        "status": {"enum": ["new", "paid", "shipped"]},
    },
    "required": ["order_id", "customer", "items", "status"],
}
NESTED_DOC = {"order_id": 1001, "customer": {"name": "Lena Novak", "email": "lena@example.com",
              "address": {"street": "Main St 1", "city": "Zürich", "zip": "80331"}},
              "items": [{"sku": "ESP-1", "quantity": 2, "price": 329.4},
                        {"sku": "CUP-9", "quantity": 6, "price": 4.5}], "status": "paid"}
REGEX = r"\(\d{3}\) \d{3}-\d{4}"
# compiled before the "warm process" figure: another schema, sharing only common terminals
SHARED_WARMUP = {"json_schema": {"type": "object", "properties": {
    "title": {"type": "string"}, "count": {"type": "integer"}, "ratio": {"type": "number"}}}}
JSON_DOCS = [
    NESTED_DOC,
    {"name": "Kofi Mensah", "age": 28, "city": "Seoul", "job": "nurse", "tags": [], "x": None},
    [{"id": i, "ok": i % 2 == 0, "score": -1.25e-3 * i, "note": "line\nbreak \"q\" é"}
     for i in range(6)],
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--skip-e2e", action="store_true", help="masks and compile only")


def main(args: argparse.Namespace) -> dict:
    from specdec.model.loader import resolve_model_dir

    tokenizer = _load_tokenizer(resolve_model_dir(args.model))
    result: dict = {}
    docs = [json.dumps(d, indent=i, ensure_ascii=False) for d in JSON_DOCS for i in (None, 2)]
    cases = [
        ("json.lark", {"grammar": "json.lark"}, docs),
        ("nested_schema", {"json_schema": NESTED_SCHEMA},
         [json.dumps(NESTED_DOC, ensure_ascii=False)]),
        ("regex", {"regex": REGEX}, ["(555) 123-4567", "(201) 231-3111"]),
    ]
    for name, constraint, texts in cases:
        result[name] = r = _mask_and_compile(tokenizer, constraint, texts)
        print(f"{name:14s} specdec     compile cold {1e3 * r['compile_cold_s']:7.1f} ms, warm "
              f"process {1e3 * r['compile_warm_s']:7.1f} ms, from disk "
              f"{1e3 * r['compile_disk_s']:6.1f} ms | mask p50 {r['mask_p50_us']:5.0f} us, "
              f"p99 {r['mask_p99_us']:6.0f} us, max {r['mask_max_us']:6.0f} us "
              f"({r['mask_steps']} steps)")
        for peer in PEERS:
            p = r[peer] = peer_mask_bench(peer, tokenizer, 49152, constraint, texts)
            if p["status"] != "ok":
                print(f"{name:14s} {peer:11s} {p['status']}")
                continue
            print(f"{name:14s} {peer:11s} compile cold {1e3 * p['compile_cold_s']:7.1f} ms"
                  f"{'':44s} | mask p50 {p['mask_p50_us']:5.0f} us, p99 "
                  f"{p['mask_p99_us']:6.0f} us, max {p['mask_max_us']:6.0f} us")
    if not args.skip_e2e:
        result["e2e"] = _throughput(args)
    return result


def _load_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def _mask_and_compile(tokenizer, constraint: dict, texts: list[str]) -> dict:
    from specdec.structured import allocate_token_bitmask, compile
    from specdec.structured.spec import constraint_spec
    from specdec.structured.vocabulary import token_vocabulary

    vocab = token_vocabulary(tokenizer, 49152, frozenset([tokenizer.eos_token_id]))
    vocab.byte_trie  # noqa: B018 - per tokenizer, not per grammar
    spec = constraint_spec(**constraint)
    compile.clear_caches(shared=True)  # as in a new process
    start = time.perf_counter()
    compile.compile_spec(spec, vocab)
    cold = time.perf_counter() - start
    compile.clear_caches()  # a new constraint in a process that has compiled others
    compile.compile_spec(constraint_spec(**SHARED_WARMUP), vocab)
    start = time.perf_counter()
    compiled = compile.compile_spec(spec, vocab)
    warm = time.perf_counter() - start
    compile.clear_caches(disk=False)
    start = time.perf_counter()
    compiled = compile.compile_spec(constraint_spec(**constraint), vocab)
    disk = time.perf_counter() - start
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    times: list[float] = []
    for text in texts:
        matcher = compiled.matcher()
        for tok in tokenizer.encode(text, add_special_tokens=False):
            t0 = time.perf_counter()
            matcher.fill_bitmask(bitmask, 0)
            times.append(time.perf_counter() - t0)
            if not matcher.accept_token(tok):
                raise RuntimeError(f"benchmark document rejected by {constraint}: {text!r}")
    return {"compile_cold_s": cold, "compile_warm_s": warm, "compile_disk_s": disk,
            "mask_steps": len(times),
            "mask_p50_us": percentile(times, 50) * 1e6, "mask_p99_us": percentile(times, 99) * 1e6,
            "mask_max_us": max(times) * 1e6}


def _throughput(args: argparse.Namespace) -> dict:
    from specdec import LLM, SamplingParams, isa
    from specdec.cli.options import engine_kwargs

    llm = LLM(**engine_kwargs(args))
    print(f"engine: {isa.engine_summary(llm.stats())}")
    prompts = chat_prompt_ids(llm.tokenizer, extraction_prompts(args.num_prompts))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    llm.generate(prompts[:2], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False,
                 grammar="json.lark")  # warm-up, compiles the grammar
    out: dict = {}
    for label, options in (("unconstrained", {}), ("json.lark", {"grammar": "json.lark"})):
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False, **options)
        elapsed = time.perf_counter() - start
        tokens = sum(len(o.token_ids) for o in outs)
        valid = sum(_is_json(o.text) for o in outs if o.finish_reason == "stop")
        out[label] = {"s": elapsed, "tokens": tokens, "tok_s": tokens / elapsed,
                      "finished_stop": sum(o.finish_reason == "stop" for o in outs),
                      "valid_json": valid}
        print(f"{label:14s} {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:.1f} tok/s; "
              f"stop {out[label]['finished_stop']}/{len(outs)}, valid JSON {valid}")
    out["ratio"] = out["json.lark"]["tok_s"] / out["unconstrained"]["tok_s"]
    print(f"constrained / unconstrained throughput: {out['ratio']:.2f}x")
    return out


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False
