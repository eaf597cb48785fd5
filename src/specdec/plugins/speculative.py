"""Built-in plugin: speculative decoding on the schedule hook.

Active when ``LLM(speculative={...})`` is set. Before each step it attaches draft
tokens to decoding requests; the scheduler schedules them like any other tokens
(k + 1 per request), the sampler verifies them (``specdec.sample.rejection``), the
scheduler keeps the accepted prefix and the metrics count what verification accepted
(``num_accepted_drafts``), even where a stop then cut the tokens. A third-party
proposer works the same way: implement ``specdec_schedule`` and set
``request.draft_token_ids``.
"""

from __future__ import annotations

from specdec.hookspecs import hookimpl
from specdec.speculative.config import SpeculativeConfig
from specdec.speculative.metrics import SpecMetrics
from specdec.speculative.ngram import TokenHistory, propose_ngram

OPT_OUT = "speculative"  # per-request option: speculative=False opts out


class SpeculativePlugin:
    name = "speculative"

    def __init__(self) -> None:
        self.config: SpeculativeConfig | None = None
        self.metrics = SpecMetrics()
        self.proposer = None  # draft-model proposer (method "draft")
        self._history: dict[str, TokenHistory] = {}
        self._scheduled_drafts: dict[str, int] = {}
        self.num_skipped_by_policy = 0

    @hookimpl
    def specdec_engine_started(self, context) -> None:
        options = context.config.speculative
        if not options:
            return
        self.config = SpeculativeConfig.from_dict(dict(options))
        if self.config.method == "draft":
            from specdec.speculative.draft_model import DraftModelProposer

            self.proposer = DraftModelProposer(self.config, context)

    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return [OPT_OUT]

    @hookimpl(tryfirst=True)
    def specdec_schedule(self, requests) -> None:
        cfg = self.config
        if cfg is None:
            return
        eligible = [r for r in requests if r.sampling_params.extra.get(OPT_OUT, True)]
        k = self._policy_k(len(eligible))
        if k == 0:
            self.num_skipped_by_policy += len(eligible)
            return
        wanted = []
        for req in eligible:
            room = req.sampling_params.max_tokens - len(req.output_token_ids) - 1
            if room > 0:
                wanted.append((req, min(k, room)))
        if self.proposer is not None:
            self.proposer.propose(wanted)
            return
        for req, kk in wanted:
            history = self._history.get(req.request_id)
            if history is None:
                history = self._history[req.request_id] = TokenHistory(req.prompt_token_ids)
            tokens = history.sync(req.prompt_token_ids, req.output_token_ids)
            req.draft_token_ids = propose_ngram(
                tokens, kk, cfg.prompt_lookup_min, cfg.prompt_lookup_max
            )

    def _policy_k(self, num_requests: int) -> int:
        """Drafts per request: k, reduced so the step stays under the token budget."""
        cfg = self.config
        if num_requests == 0:
            return 0
        fit = cfg.max_speculative_tokens // num_requests - 1
        return max(0, min(cfg.num_speculative_tokens, fit))

    @hookimpl
    def specdec_batch_scheduled(self, scheduler_output) -> None:
        if self.config is None:
            return
        for s in scheduler_output.scheduled:
            if s.num_draft_tokens:
                self._scheduled_drafts[s.request.request_id] = s.num_draft_tokens

    @hookimpl
    def specdec_postprocess(self, request, num_accepted_drafts: int = 0) -> None:
        # the default serves callers of the pluggy hook that predate the parameter
        drafts = self._scheduled_drafts.pop(request.request_id, 0)
        if drafts:
            self.metrics.record(drafts, num_accepted_drafts)

    @hookimpl
    def specdec_request_finished(self, request, reason) -> None:
        self._history.pop(request.request_id, None)
        self._scheduled_drafts.pop(request.request_id, None)
        if self.proposer is not None:
            self.proposer.release(request)

    @hookimpl
    def specdec_stats(self) -> dict:
        if self.config is None:
            return {}
        stats = self.metrics.as_dict()
        stats["spec_method"] = self.config.method
        stats["spec_requests_skipped_by_policy"] = self.num_skipped_by_policy
        return stats
