"""The cyclic collector is paused while an engine builds, and left as it was found."""

from __future__ import annotations

import gc

import pytest

from specdec import LLM, hookimpl
from specdec.engine.gc_pause import cyclic_gc_paused, freeze_startup_heap


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


@pytest.mark.parametrize("enabled_before", [True, False])
def test_paused_inside_and_restored_after(gc_state, enabled_before):
    gc.enable() if enabled_before else gc.disable()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() == enabled_before
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError
    assert gc.isenabled() == enabled_before


@pytest.mark.parametrize("enabled_before", [True, False])
def test_one_full_collection_after_the_block_where_collecting_is_on(gc_state, enabled_before):
    gc.enable() if enabled_before else gc.disable()
    full = []

    def record(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(gc.get_count())

    gc.callbacks.append(record)
    try:
        with cyclic_gc_paused():
            survivors = [[] for _ in range(5000)]  # tracked objects that stay
    finally:
        gc.callbacks.remove(record)
    assert len(full) == (1 if enabled_before else 0)
    assert survivors


def test_nested_pauses_restore_the_outer_state(gc_state):
    gc.enable()
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


class SeesCollector:
    def __init__(self):
        self.enabled_at_start = None

    @hookimpl
    def specdec_engine_started(self, context):
        self.enabled_at_start = gc.isenabled()


def test_engine_builds_with_the_collector_paused(gc_state, tiny_model_dir):
    gc.enable()
    plugin = SeesCollector()
    LLM(model=str(tiny_model_dir), plugins=[plugin], num_kv_blocks=16)
    assert plugin.enabled_at_start is False
    assert gc.isenabled()


def test_frozen_startup_heap_is_out_of_the_collectors_sight():
    made_at_start = [[] for _ in range(100)]
    try:
        freeze_startup_heap()
        tracked = {id(o) for o in gc.get_objects()}
        assert id(made_at_start) not in tracked
        assert gc.get_freeze_count() >= len(made_at_start)
        made_later = []
        assert id(made_later) in {id(o) for o in gc.get_objects()}
    finally:
        gc.unfreeze()
