"""Hooks: plugins see what the contract says; a failing plugin fails only its request."""

from __future__ import annotations

import textwrap

import pytest

from specdec import LLM, SamplingParams, hookimpl


class BanToken:
    """Logits plugin: bans one token id for requests that ask with ``ban=...``."""

    def __init__(self):
        self.rows_seen = []

    @hookimpl
    def specdec_request_options(self):
        return ["ban", "explode"]

    @hookimpl
    def specdec_logits(self, logits, rows):
        for i, row in enumerate(rows):
            self.rows_seen.append((row.request.request_id, row.position))
            if row.request.sampling_params.extra.get("explode") == "logits":
                raise RuntimeError("boom in logits")
            ban = row.request.sampling_params.extra.get("ban")
            if ban is not None:
                logits[i, ban] = float("-inf")


class Lifecycle:
    def __init__(self):
        self.finished = {}
        self.tokens = {}

    @hookimpl
    def specdec_request_added(self, request):
        if request.sampling_params.extra.get("explode") == "added":
            raise ValueError("request rejected by policy")

    @hookimpl
    def specdec_postprocess(self, request, new_token_ids):
        self.tokens.setdefault(request.request_id, []).extend(new_token_ids)
        if request.sampling_params.extra.get("explode") == "post":
            raise KeyError("boom in postprocess")
        if len(request.output_token_ids) >= 3 and request.sampling_params.extra.get("ban") == -1:
            return "stop"
        return None

    @hookimpl
    def specdec_request_finished(self, request, reason):
        self.finished[request.request_id] = reason

    @hookimpl
    def specdec_stats(self):
        return {"lifecycle_finished": len(self.finished)}


@pytest.fixture()
def plugins():
    return BanToken(), Lifecycle()


@pytest.fixture()
def llm(tiny_model_dir, plugins):
    return LLM(model=str(tiny_model_dir), dtype="float32", plugins=list(plugins))


GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def test_logits_plugin_changes_output_and_sees_positions(llm, plugins):
    base = llm.generate("Hello", GREEDY, use_tqdm=False)[0].token_ids
    banned = llm.generate("Hello", GREEDY, use_tqdm=False, ban=base[0])[0].token_ids
    assert banned[0] != base[0]
    positions = [p for rid, p in plugins[0].rows_seen if rid == "req-1"]
    assert positions == list(range(6))


def test_plugin_exception_fails_only_its_request(llm, plugins):
    outs = llm.generate(
        ["Hello", "Hello", "Hello"],
        [GREEDY, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True,
                                extra={"explode": "logits"}), GREEDY],
        use_tqdm=False,
    )
    assert [o.finish_reason for o in outs] == ["length", "error", "length"]
    assert "BanToken" in outs[1].error and "boom in logits" in outs[1].error
    assert outs[0].token_ids == outs[2].token_ids and len(outs[0].token_ids) == 6
    assert llm.stats()["kv_blocks_free"] == llm.stats()["kv_blocks_total"]


def test_postprocess_exception_and_custom_stop(llm, plugins):
    bad, stopped, ok = llm.generate(
        ["a", "b", "c"],
        [SamplingParams(max_tokens=6, extra={"explode": "post"}),
         SamplingParams(max_tokens=6, ignore_eos=True, extra={"ban": -1}),
         SamplingParams(max_tokens=6, ignore_eos=True)],
        use_tqdm=False,
    )
    assert bad.finish_reason == "error" and "boom in postprocess" in bad.error
    assert stopped.finish_reason == "stop" and len(stopped.token_ids) == 3
    assert ok.finish_reason == "length"
    lifecycle = plugins[1]
    assert lifecycle.finished == {bad.request_id: "error", stopped.request_id: "stop",
                                  ok.request_id: "length"}
    assert lifecycle.tokens[ok.request_id] == ok.token_ids
    assert llm.stats()["lifecycle_finished"] == 3


def test_request_added_may_reject(llm):
    with pytest.raises(ValueError, match="rejected by policy"):
        llm.generate("x", use_tqdm=False, explode="added")
    assert llm.stats()["num_waiting"] == 0


def test_entry_point_plugin_discovered_without_code_changes(tmp_path, monkeypatch, tiny_model_dir):
    (tmp_path / "specdec_test_plugin.py").write_text(textwrap.dedent("""
        from specdec import hookimpl
        LOADED = []

        @hookimpl
        def specdec_engine_started(context):
            LOADED.append(context.vocab_size)

        @hookimpl
        def specdec_stats():
            return {"entry_point_plugin": 1}
    """))
    dist = tmp_path / "specdec_test_plugin-0.1.dist-info"
    dist.mkdir()
    metadata = "Metadata-Version: 2.1\nName: specdec-test-plugin\nVersion: 0.1\n"
    (dist / "METADATA").write_text(metadata)
    (dist / "entry_points.txt").write_text("[specdec]\ntest_plugin = specdec_test_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    llm = LLM(model=str(tiny_model_dir), plugins=["test_plugin"])
    assert llm.stats()["entry_point_plugin"] == 1
    import specdec_test_plugin

    assert specdec_test_plugin.LOADED == [llm.engine.vocab_size]
    blocked = LLM(model=str(tiny_model_dir), disable_plugins=["test_plugin"])
    assert "entry_point_plugin" not in blocked.stats()


def test_rejected_request_releases_state_of_plugins_that_accepted_it(tiny_model_dir):
    class Recorder:
        def __init__(self):
            self.added, self.finished = [], []

        @hookimpl(tryfirst=True)
        def specdec_request_added(self, request):
            self.added.append(request.request_id)

        @hookimpl
        def specdec_request_finished(self, request, reason):
            self.finished.append((request.request_id, reason))

    class Rejecter:
        @hookimpl(trylast=True)
        def specdec_request_added(self, request):
            raise ValueError("no thanks")

    recorder = Recorder()
    llm = LLM(model=str(tiny_model_dir), plugins=[recorder, Rejecter()])
    with pytest.raises(ValueError, match="no thanks"):
        llm.generate("hello", use_tqdm=False)
    assert recorder.finished == [(recorder.added[0], "error")]


class EngineWideSetting:
    """Owns one engine option and reads it at start."""

    def __init__(self):
        self.seen = None

    @hookimpl
    def specdec_engine_options(self):
        return ["banned_everywhere"]

    @hookimpl
    def specdec_engine_started(self, context):
        self.seen = context.config.plugin_options.get("banned_everywhere")


def test_engine_options_reach_the_plugin_that_declares_them(tiny_model_dir):
    plugin = EngineWideSetting()
    LLM(model=str(tiny_model_dir), plugins=[plugin], num_kv_blocks=16,
        banned_everywhere=7)
    assert plugin.seen == 7


def test_unknown_engine_option_is_an_error_naming_it(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown engine option.*'no_such_setting'"):
        LLM(model=str(tiny_model_dir), num_kv_blocks=16, no_such_setting=1)
