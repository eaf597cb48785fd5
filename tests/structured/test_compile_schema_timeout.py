"""A JSON schema that cannot compile within 5 s is refused at 5 s; others go on meanwhile."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

from specdec.core.request import Request
from specdec.sampling_params import SamplingParams
from specdec.structured.compile_worker import ISOLATION
from specdec.structured.plugin import (
    DEFAULT_SCHEMA_COMPILE_TIMEOUT_S,
    PLUGIN_NAME,
    StructuredOutputPlugin,
)
from specdec.structured.spec import constraint_spec

# Not prefix-free, so interegular expands the count: minutes and gigabytes, in a union.
BLOWUP = "^(?:[a-z0-9]|[a-z][0-9]){20000}$"


def _pathological_schema() -> dict:
    tag = uuid.uuid4().hex[:8]  # new schema: no cache has it
    branch = {"type": "string", "pattern": BLOWUP}
    return {"type": "object", "properties": {tag: {"anyOf": [
        {"anyOf": [branch, {"type": "integer"}]}, {"type": "array", "items": branch}]}}}


class _Context:
    def __init__(self, tokenizer):
        self.tokenizer, self.vocab_size, self.eos_token_ids = tokenizer, 49152, frozenset([2])
        self.config = SimpleNamespace(speculative=None)


def _wait_unblocked(request: Request, limit_s: float) -> float:
    start = time.monotonic()
    while request.blocked_reason and time.monotonic() - start < limit_s:
        time.sleep(0.01)
    return time.monotonic() - start


def test_schemas_get_the_short_limit_grammar_files_the_long_one():
    plugin = StructuredOutputPlugin()
    assert DEFAULT_SCHEMA_COMPILE_TIMEOUT_S == 5.0
    schema = constraint_spec(json_schema={"type": "integer"})
    grammar = constraint_spec(grammar='start: "a"')
    assert plugin.timeout_for(schema) == 5.0
    assert plugin.timeout_for(grammar) == plugin.compile_timeout_s >= 5.0


def test_pathological_schema_is_refused_within_5_s_and_holds_up_no_one(tokenizer):
    plugin = StructuredOutputPlugin()
    plugin.specdec_engine_started(_Context(tokenizer))  # starts the forkserver
    ready = Request("ready", None, [1], SamplingParams(extra={"json_schema": {
        "type": "object", "properties": {uuid.uuid4().hex[:8]: {"type": "string"}}}}))
    plugin.specdec_request_added(ready)  # the first child waits for the forkserver's preload
    _wait_unblocked(ready, 60)
    start = time.monotonic()
    slow = Request("slow", None, [1], SamplingParams(
        extra={"json_schema": _pathological_schema()}))
    plugin.specdec_request_added(slow)
    assert slow.blocked_reason  # compiling in the background
    small = Request("small", None, [1], SamplingParams(extra={"json_schema": {
        "type": "object", "properties": {uuid.uuid4().hex[:8]: {"type": "integer"}}}}))
    plugin.specdec_request_added(small)
    _wait_unblocked(small, 10)
    small_s = time.monotonic() - start
    assert plugin_state(small).matcher is not None
    assert small_s < 2.5 and slow.blocked_reason  # done while the big one still runs
    _wait_unblocked(slow, 30)
    slow_s = time.monotonic() - start
    state = plugin_state(slow)
    assert state.matcher is None and "grammar too complex" in state.error
    assert 4.5 <= slow_s <= 6.0 if ISOLATION else slow_s <= 6.0


def plugin_state(request: Request):
    return request.plugin_data[PLUGIN_NAME]
