"""The workloads shared by the benchmarks: JSON extraction (64 short texts) and
prompts of random tokens of a given length."""

from __future__ import annotations

import json
from importlib import resources


def extraction_prompts(n: int = 64) -> list[str]:
    path = resources.files("specdec") / "data" / "extraction_prompts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if n > len(rows):
        rows = (rows * (n // len(rows) + 1))[:n]
    return [r["prompt"] for r in rows[:n]]


def chat_prompt_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    out = []
    for p in prompts:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def random_prompt_ids(vocab_size: int, length: int, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` token ids drawn (seeded) from the vocabulary's upper
    15/16, away from the special tokens at its start: a long-prompt workload (vLLM's
    ``--input-len``) whose prompts share no prefix, so none hits the prefix cache."""
    import random

    rng = random.Random(seed)
    low = vocab_size // 16
    return [[rng.randrange(low, vocab_size) for _ in range(length)] for _ in range(count)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]
