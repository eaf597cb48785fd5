"""The peer: Hugging Face transformers ``generate`` on the same model and dtype."""

from __future__ import annotations

import time

import torch


def load_hf_model(model_dir, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()


def hf_generate(model, prompt_ids: list[list[int]], max_new_tokens: int, eos_ids, pad_id: int,
                batch_size: int, ignore_eos: bool = False,
                sampling: dict | None = None) -> tuple[float, list[list[int]]]:
    """Left-padded batches, greedy unless ``sampling`` (``generate`` keywords) says
    otherwise. Returns (seconds, generated ids per prompt up to EOS; with
    ``ignore_eos`` all ``max_new_tokens`` of each)."""
    fixed = {"min_new_tokens": max_new_tokens} if ignore_eos else {}
    outputs: list[list[int]] = []
    start = time.perf_counter()
    for b in range(0, len(prompt_ids), batch_size):
        batch = prompt_ids[b : b + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(batch):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                eos_token_id=list(eos_ids), pad_token_id=pad_id, **fixed,
                **(sampling or {"do_sample": False}),
            )
        for row in out[:, width:].tolist():
            gen = []
            for t in row:
                gen.append(t)
                if t in eos_ids and not ignore_eos:
                    break
            outputs.append(gen)
    return time.perf_counter() - start, outputs
