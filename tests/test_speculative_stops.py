"""A stop that cuts a step's accepted drafts: the tokens end at the stop, while the
speculation metrics still count every draft that verification accepted."""

from __future__ import annotations

from specdec import LLM, SamplingParams, hookimpl

SCRIPT = list(range(300, 312))  # the output the plugin below forces, token by token
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}


class ScriptedOutput:
    """Forces ``SCRIPT`` as the output (a logits mask per position) and proposes its
    next three tokens as drafts, so every draft is accepted; records each step."""

    def __init__(self) -> None:
        self.steps: list[tuple[list[int], int]] = []  # (tokens kept, drafts accepted)

    @hookimpl
    def specdec_schedule(self, requests):
        for req in requests:
            done = len(req.output_token_ids)
            room = req.sampling_params.max_tokens - done - 1
            req.draft_token_ids = SCRIPT[done : done + min(3, room)]

    @hookimpl
    def specdec_logits(self, logits, rows):
        for i, row in enumerate(rows):
            forced = float(logits[i].max()) + 1.0
            logits[i, SCRIPT[row.position]] = forced

    @hookimpl
    def specdec_postprocess(self, request, new_token_ids, num_accepted_drafts):
        self.steps.append((list(new_token_ids), num_accepted_drafts))


def run(tiny_model_dir, **params):
    script = ScriptedOutput()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", speculative=NGRAM, plugins=[script])
    params = SamplingParams(max_tokens=len(SCRIPT), temperature=0.0, ignore_eos=True, **params)
    return llm.generate("Hello there", params, use_tqdm=False)[0], script.steps, llm.stats()


def test_scripted_drafts_are_all_accepted(tiny_model_dir):
    out, steps, stats = run(tiny_model_dir)
    assert out.token_ids == SCRIPT and out.finish_reason == "length"
    # prefill, then 3 drafts + bonus per step, then the last 3 (2 drafts + bonus)
    assert steps == [(SCRIPT[:1], 0), (SCRIPT[1:5], 3), (SCRIPT[5:9], 3), (SCRIPT[9:12], 2)]
    assert stats["spec_num_accepted_tokens"] == stats["spec_num_draft_tokens"] == 8


def test_stop_token_cutting_accepted_drafts_keeps_metrics_exact(tiny_model_dir):
    stop_token = SCRIPT[6]  # inside the third step's accepted drafts 5, 6, 7
    out, steps, stats = run(tiny_model_dir, stop_token_ids=[stop_token])
    assert out.token_ids == SCRIPT[:7] and out.finish_reason == "stop"
    assert steps == [(SCRIPT[:1], 0), (SCRIPT[1:5], 3), (SCRIPT[5:7], 3)]
    assert stats["spec_num_draft_tokens"] == 6
    assert stats["spec_num_accepted_tokens"] == 6  # not 3 + (len([5, 6]) - 1) = 4
    assert stats["spec_acceptance_per_position"] == [1.0, 1.0, 1.0]
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_plugins_without_the_new_parameter_still_get_their_tokens(tiny_model_dir):
    class OldStyle:
        def __init__(self) -> None:
            self.tokens: list[int] = []

        @hookimpl
        def specdec_postprocess(self, request, new_token_ids):
            self.tokens += new_token_ids

    old = OldStyle()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", speculative=NGRAM, plugins=[old])
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    out = llm.generate("a b c a b c a b c", params, use_tqdm=False)[0]
    assert old.tokens == out.token_ids and llm.stats()["spec_num_draft_tokens"] > 0
