"""The engine calls plugins as pluggy would: any subset of arguments, pluggy's order, isolated."""

from __future__ import annotations

import logging

import pytest

from specdec import LLM, SamplingParams, hookimpl

GREEDY = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
HOOKS = ("specdec_request_added", "specdec_schedule", "specdec_batch_scheduled",
         "specdec_logits", "specdec_postprocess", "specdec_request_finished", "specdec_stats")


class Minimal:
    """Every hook, each implementation taking fewer arguments than the spec offers."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.finished: list[str] = []

    def _seen(self, hook: str) -> None:
        self.calls[hook] = self.calls.get(hook, 0) + 1

    @hookimpl
    def specdec_register_models(self):
        self._seen("specdec_register_models")

    @hookimpl
    def specdec_engine_started(self):
        self._seen("specdec_engine_started")

    @hookimpl
    def specdec_request_options(self):
        return ["explode"]

    @hookimpl
    def specdec_request_added(self):
        self._seen("specdec_request_added")

    @hookimpl
    def specdec_schedule(self):
        self._seen("specdec_schedule")

    @hookimpl
    def specdec_batch_scheduled(self):
        self._seen("specdec_batch_scheduled")

    @hookimpl
    def specdec_logits(self, rows):
        self._seen("specdec_logits")

    @hookimpl
    def specdec_postprocess(self, request):
        self._seen("specdec_postprocess")

    @hookimpl
    def specdec_request_finished(self, request):
        self.finished.append(request.request_id)

    @hookimpl
    def specdec_stats(self):
        return {"minimal_calls": sum(self.calls.values())}


class Exploder:
    """Raises in a batch hook (``explode="schedule"`` or ``"logits"``) for the requests asking."""

    @hookimpl
    def specdec_schedule(self, requests):
        if any(r.sampling_params.extra.get("explode") == "schedule" for r in requests):
            raise RuntimeError("boom in schedule")

    @hookimpl
    def specdec_logits(self, rows):
        if any(r.request.sampling_params.extra.get("explode") == "logits" for r in rows):
            raise RuntimeError("boom in logits")


def test_subset_of_arguments_works_for_every_hook(tiny_model_dir):
    minimal = Minimal()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[minimal, Exploder()],
              load_entry_points=False)
    params = [SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True,
                             extra={"explode": where}) for where in ("schedule", "logits")]
    outs = llm.generate(["Hello", "Hello", "Hello", "Hi"], [GREEDY, *params, GREEDY],
                        use_tqdm=False)
    assert [o.finish_reason for o in outs] == ["length", "error", "error", "length"], outs[0].error
    assert "Exploder" in outs[1].error and "boom in schedule" in outs[1].error
    assert "Exploder" in outs[2].error and "boom in logits" in outs[2].error
    assert all(len(o.token_ids) == 5 for o in (outs[0], outs[3]))
    assert sorted(minimal.finished) == sorted(o.request_id for o in outs)
    for hook in ("specdec_register_models", "specdec_engine_started", *HOOKS[:-2]):
        assert minimal.calls.get(hook), hook
    assert llm.stats()["minimal_calls"] > 0
    assert llm.stats()["kv_blocks_free"] == llm.stats()["kv_blocks_total"]


def _recorder(tag: str, log: list[tuple[str, str]], **opts):
    """A plugin whose every hook appends ``(hook, tag)`` to ``log``."""

    class Recorder:
        name = tag

        @hookimpl(**opts)
        def specdec_request_added(self, request):
            log.append(("specdec_request_added", tag))

        @hookimpl(**opts)
        def specdec_schedule(self, requests):
            log.append(("specdec_schedule", tag))

        @hookimpl(**opts)
        def specdec_batch_scheduled(self, scheduler_output):
            log.append(("specdec_batch_scheduled", tag))

        @hookimpl(**opts)
        def specdec_logits(self, logits, rows):
            log.append(("specdec_logits", tag))

        @hookimpl(**opts)
        def specdec_postprocess(self, request, new_token_ids):
            log.append(("specdec_postprocess", tag))

        @hookimpl(**opts)
        def specdec_request_finished(self, request, reason):
            log.append(("specdec_request_finished", tag))

        @hookimpl(**opts)
        def specdec_stats(self):
            log.append(("specdec_stats", tag))
            return {}

    return Recorder()


def test_tryfirst_trylast_order_is_pluggys(tiny_model_dir):
    log: list[tuple[str, str]] = []
    plugins = [_recorder("last", log, trylast=True), _recorder("a", log),
               _recorder("first", log, tryfirst=True), _recorder("b", log)]
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=plugins,
              load_entry_points=False)
    llm.generate("Hello", SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True),
                 use_tqdm=False)
    llm.stats()
    engine_order = {hook: [t for h, t in log if h == hook][:4] for hook in HOOKS}

    req = llm.engine.add_request("Hi", GREEDY)  # the arguments pluggy needs, nothing more
    log.clear()
    hook = llm.engine.pm.hook
    hook.specdec_request_added(request=req)
    hook.specdec_schedule(requests=[req])
    hook.specdec_batch_scheduled(scheduler_output=None)
    hook.specdec_logits(logits=None, rows=[])
    hook.specdec_postprocess(request=req, new_token_ids=[])
    hook.specdec_request_finished(request=req, reason="stop")
    hook.specdec_stats()
    pluggy_order = {h: [t for hh, t in log if hh == h] for h in HOOKS}
    assert pluggy_order["specdec_postprocess"] == ["first", "b", "a", "last"]
    assert engine_order == pluggy_order


class LeakyCleanup:
    @hookimpl(tryfirst=True)
    def specdec_request_finished(self, request):
        raise RuntimeError("cannot release")


class Released:
    def __init__(self):
        self.finished: list[str] = []

    @hookimpl
    def specdec_request_finished(self, request, reason):
        self.finished.append(request.request_id)


def test_raising_request_finished_is_reported_and_others_still_release(tiny_model_dir, caplog):
    released = Released()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[LeakyCleanup(), released],
              load_entry_points=False)
    with caplog.at_level(logging.WARNING, logger="specdec"):
        outs = llm.generate(["a", "b"], GREEDY, use_tqdm=False)
    assert [o.finish_reason for o in outs] == ["length", "length"]
    assert released.finished == [o.request_id for o in outs]
    stats = llm.stats()
    assert stats["plugin_errors"] == 2
    assert "cannot release" in stats["plugin_error_LeakyCleanup"]
    assert "specdec_request_finished" in stats["plugin_error_LeakyCleanup"]
    assert "LeakyCleanup" in caplog.text and "cannot release" in caplog.text


def test_hook_wrappers_are_refused_at_start(tiny_model_dir):
    class Timing:
        @hookimpl(wrapper=True)
        def specdec_logits(self):
            return (yield)

    with pytest.raises(ValueError, match="Timing.*wrapper"):
        LLM(model=str(tiny_model_dir), plugins=[Timing()], load_entry_points=False)


class StepWatcher:
    """``specdec_batch_scheduled`` that raises for ``explode="batch"`` requests, or once."""

    def __init__(self, raise_once: bool = False):
        self.raise_once = raise_once
        self.views: list[int] = []

    @hookimpl
    def specdec_request_options(self):
        return ["explode"]

    @hookimpl
    def specdec_batch_scheduled(self, scheduler_output):
        self.views.append(len(scheduler_output.scheduled))
        if self.raise_once:
            self.raise_once = False
            raise RuntimeError("flaky once")
        for s in scheduler_output.scheduled:
            if s.request.sampling_params.extra.get("explode") == "batch":
                raise RuntimeError("boom in batch_scheduled")


def test_batch_scheduled_failure_fails_only_its_request(tiny_model_dir):
    watcher = StepWatcher()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[watcher],
              load_entry_points=False)
    base = llm.generate(["Hello", "Hi"], GREEDY, use_tqdm=False)
    explode = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True,
                             extra={"explode": "batch"})
    outs = llm.generate(["Hello", "Hello", "Hi"], [GREEDY, explode, GREEDY], use_tqdm=False)
    assert [o.finish_reason for o in outs] == ["length", "error", "length"]
    assert "StepWatcher" in outs[1].error and "boom in batch_scheduled" in outs[1].error
    assert outs[1].token_ids == []  # failed before its first forward
    assert [outs[0].token_ids, outs[2].token_ids] == [o.token_ids for o in base]
    assert llm.stats()["kv_blocks_free"] == llm.stats()["kv_blocks_total"]
    assert llm.stats()["plugin_errors"] == 0  # the request carried the error
    again = llm.generate(["Hello", "Hi"], GREEDY, use_tqdm=False)
    assert [o.token_ids for o in again] == [o.token_ids for o in base]


def test_batch_scheduled_raising_once_for_the_step_keeps_serving(tiny_model_dir):
    plain = LLM(model=str(tiny_model_dir), dtype="float32", load_entry_points=False)
    base = plain.generate(["Hello", "Hi", "Hey"], GREEDY, use_tqdm=False)
    watcher = StepWatcher(raise_once=True)
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[watcher],
              load_entry_points=False)
    outs = llm.generate(["Hello", "Hi", "Hey"], GREEDY, use_tqdm=False)
    assert [o.finish_reason for o in outs] == ["length"] * 3
    assert [o.token_ids for o in outs] == [o.token_ids for o in base]
    assert watcher.views[:4] == [3, 1, 1, 1]  # the step, then one request at a time
    stats = llm.stats()
    assert stats["plugin_errors"] == 1 and "flaky once" in stats["plugin_error_StepWatcher"]
    assert llm.generate("Hello", GREEDY, use_tqdm=False)[0].token_ids == base[0].token_ids


class BrokenStats:
    @hookimpl
    def specdec_stats(self):
        raise ZeroDivisionError("no metrics today")


def test_raising_stats_plugin_is_reported_under_its_name(tiny_model_dir):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[BrokenStats()],
              load_entry_points=False)
    stats = llm.stats()
    assert "no metrics today" in stats["plugin_error_BrokenStats"]
    assert stats["plugin_errors"] == 1
    assert "prefix_cache_hits" in stats and stats["kv_blocks_total"] > 0  # the others still show
    from specdec.server.metrics import ServerMetrics

    metrics = ServerMetrics().render(llm.stats())  # what /metrics serves
    assert "specdec_engine_plugin_errors 2" in metrics and "no metrics" not in metrics


def test_request_added_bug_rejects_with_plugin_error(tiny_model_dir):
    class Buggy:
        @hookimpl
        def specdec_request_added(self, request):
            raise KeyError("missing")

    released = Released()
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[released, Buggy()],
              load_entry_points=False)
    from specdec.engine import PluginError

    with pytest.raises(PluginError, match="'Buggy' failed in specdec_request_added: KeyError"):
        llm.generate("x", GREEDY, use_tqdm=False)
    assert len(released.finished) == 1 and llm.stats()["num_waiting"] == 0
