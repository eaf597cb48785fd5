"""Sampler: filters never emit excluded tokens; seeds are batch-independent."""

from __future__ import annotations

import pytest
import torch

from specdec import LLM, SamplingParams
from specdec.core.request import Request
from specdec.sample.logits_rows import LogitsRow
from specdec.sample.sampler import Sampler


def rows_for(params: list[SamplingParams]) -> list[LogitsRow]:
    rows = []
    for i, p in enumerate(params):
        req = Request(f"s{i}", None, [1], p)
        if p.seed is not None:
            req.generator = torch.Generator().manual_seed(p.seed)
        rows.append(LogitsRow(req, 0, [], None))
    return rows


LOGITS = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0]])  # probs ~ .64 .23 .09 .03 .01 .004


@pytest.mark.parametrize(
    "params,allowed",
    [
        (SamplingParams(top_k=2), {0, 1}),
        (SamplingParams(top_p=0.8), {0, 1}),  # .64 < .8 -> need token 1 too
        (SamplingParams(top_p=0.5), {0}),
        (SamplingParams(min_p=0.1), {0, 1}),  # .09 < .1 * .64? no: .09 >= .064 -> keep 2
        (SamplingParams(temperature=0.5, top_k=3, top_p=0.99), {0, 1, 2}),
    ],
)
def test_filters_never_emit_excluded_tokens(params, allowed):
    if params.min_p:
        allowed = {0, 1, 2}
    sampler = Sampler(seed=0)
    seen = set()
    for _ in range(60):
        out = sampler(LOGITS.repeat(8, 1), rows_for([params] * 8))
        seen.update(out.token_ids)
    assert seen <= allowed
    assert len(seen) == len(allowed)  # and everything allowed does come up


def test_greedy_is_argmax_and_logprobs_reported():
    out = Sampler(seed=0)(LOGITS.clone(), rows_for([SamplingParams(temperature=0, logprobs=2)]))
    assert out.token_ids == [0]
    lp = out.logprobs[0]
    assert set(lp) == {0, 1}
    assert lp[0] == pytest.approx(torch.log_softmax(LOGITS, -1)[0, 0].item())


def test_sampling_matches_distribution():
    sampler = Sampler(seed=1)
    n = 4000
    out = sampler(LOGITS.repeat(n, 1), rows_for([SamplingParams(temperature=1.0)] * n))
    freq = torch.bincount(torch.tensor(out.token_ids), minlength=6).float() / n
    assert torch.allclose(freq, LOGITS.softmax(-1)[0], atol=0.03)


def test_seed_reproducible_whatever_else_is_in_the_batch(tiny_model_dir):
    llm = LLM(model=str(tiny_model_dir), dtype="float32")
    seeded = SamplingParams(max_tokens=12, temperature=8.0, seed=1234, ignore_eos=True)
    other = SamplingParams(max_tokens=20, temperature=1.0, ignore_eos=True)
    alone = llm.generate("Once upon a time", seeded, use_tqdm=False)[0].token_ids
    batch = llm.generate(
        ["Hello there", "Once upon a time", "A much longer prompt that shifts the batch around"],
        [other, seeded, other],
        use_tqdm=False,
    )
    assert batch[1].token_ids == alone
    different = SamplingParams(max_tokens=12, temperature=8.0, seed=99, ignore_eos=True)
    assert llm.generate("Once upon a time", different, use_tqdm=False)[0].token_ids != alone
