"""A JSON schema that cannot compile within 5 s is refused at 5 s; others go on meanwhile."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

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


def _slow_terminals() -> dict:
    """A schema whose terminal DFAs take minutes (the table build)."""
    tag = uuid.uuid4().hex[:8]  # new schema: no cache has it
    branch = {"type": "string", "pattern": BLOWUP}
    return {"type": "object", "properties": {tag: {"anyOf": [
        {"anyOf": [branch, {"type": "integer"}]}, {"type": "array", "items": branch}]}}}


def _slow_translation() -> dict:
    """A schema whose translation to Lark takes minutes: the names no pattern matches
    (additionalProperties beside 30 patternProperties) are a regex difference."""
    patterns = {f"^(?:[a-c]{{{i % 7 + 3}}})*q{i}$": {"type": "integer"} for i in range(30)}
    return {"type": "object", "patternProperties": patterns,
            "additionalProperties": {"type": "string"}, "title": uuid.uuid4().hex}


PATHOLOGICAL = {"terminals": _slow_terminals, "translation": _slow_translation}


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


@pytest.mark.parametrize("slow_part", PATHOLOGICAL)
def test_pathological_schema_is_refused_within_5_s_and_holds_up_no_one(tokenizer, slow_part):
    plugin = StructuredOutputPlugin()
    plugin.specdec_engine_started(_Context(tokenizer))  # starts the forkserver
    ready = Request("ready", None, [1], SamplingParams(extra={"json_schema": {
        "type": "object", "properties": {uuid.uuid4().hex[:8]: {"type": "string"}}}}))
    plugin.specdec_request_added(ready)  # the first child waits for the forkserver's preload
    _wait_unblocked(ready, 60)
    start = time.monotonic()
    slow = Request("slow", None, [1], SamplingParams(
        extra={"json_schema": PATHOLOGICAL[slow_part]()}))
    plugin.specdec_request_added(slow)
    # The calling (engine) thread waited only to learn whether it compiles.
    assert time.monotonic() - start < plugin.validate_wait_s + 0.5
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


def test_a_slow_schema_spec_is_quick():
    """The spec (made on the engine thread and in the server's event loop) leaves the
    schema's translation to the compile."""
    start = time.monotonic()
    spec = constraint_spec(json_schema=_slow_translation())
    assert spec.kind == "json_schema" and time.monotonic() - start < 0.1
