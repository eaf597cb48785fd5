"""The acceptance rule: each request keeps its drafts up to the first mismatch."""

from __future__ import annotations

from specdec.core.messages import LogitsRow
from specdec.core.request import Request
from specdec.sample.rejection import accept_drafts
from specdec.sampling_params import SamplingParams


def rows_for(req: Request, drafts: list[int]) -> list[LogitsRow]:
    """The k + 1 rows the runner emits for a request verifying ``drafts``."""
    return [LogitsRow(req, j, drafts[:j], drafts[j] if j < len(drafts) else None)
            for j in range(len(drafts) + 1)]


def request(name: str) -> Request:
    return Request(name, None, [1, 2, 3], SamplingParams())


def test_keeps_accepted_drafts_and_the_recovered_token():
    req = request("a")
    out = accept_drafts(rows_for(req, [5, 8, 2]), [5, 8, 7, 4], [None] * 4)
    (sample,) = out.samples
    assert sample.request is req
    assert sample.token_ids == [5, 8, 7]  # 7 recovers draft 2; the bonus row's 4 is dropped
    assert sample.num_accepted_drafts == 2


def test_all_drafts_accepted_adds_the_bonus_token():
    req = request("a")
    (sample,) = accept_drafts(rows_for(req, [5, 8]), [5, 8, 9], [None] * 3).samples
    assert sample.token_ids == [5, 8, 9] and sample.num_accepted_drafts == 2


def test_first_draft_rejected_and_plain_decode():
    spec, plain = request("spec"), request("plain")
    rows = rows_for(spec, [5, 8]) + rows_for(plain, [])
    out = accept_drafts(rows, [6, 8, 9, 11], [None] * 4)
    assert [(s.request, s.token_ids, s.num_accepted_drafts) for s in out.samples] == [
        (spec, [6], 0), (plain, [11], 0)]


def test_logprobs_follow_the_kept_tokens_only():
    req = request("a")
    logprobs = [{5: -0.1}, {3: -0.2}, {4: -0.3}]
    (sample,) = accept_drafts(rows_for(req, [5, 8]), [5, 3, 4], logprobs).samples
    assert sample.token_ids == [5, 3] and sample.logprobs == [{5: -0.1}, {3: -0.2}]
    (no_lp,) = accept_drafts(rows_for(req, []), [4], [None]).samples
    assert no_lp.logprobs == []


def test_rows_of_a_request_are_grouped_in_first_seen_order():
    a, b = request("a"), request("b")
    rows = [rows_for(a, [1])[0], rows_for(b, [])[0], rows_for(a, [1])[1]]
    out = accept_drafts(rows, [1, 7, 2], [None] * 3)
    assert [(s.request.request_id, s.token_ids) for s in out.samples] == [
        ("a", [1, 2]), ("b", [7])]
