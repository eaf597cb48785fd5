"""Schemathesis over the server's own OpenAPI schema: whatever a client sends, valid or
not, the answer is never a 5xx, and the server is healthy afterwards (issue 11).

Loopback only, on the tiny random model; bounded examples per operation and no
per-example deadline (the 2-core CI machines are slow), so the whole pass takes
about a minute.
"""

from __future__ import annotations

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from tests.server.conftest import AUTH, assert_still_serving  # noqa: E402

MAX_EXAMPLES = 30  # per operation and mode


@pytest.fixture(scope="module")
def api_schema(server):
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json", headers=AUTH)
    assert server.base_url.startswith("http://127.0.0.1:")  # loopback only
    return schema


POSTS = [("POST", "/v1/completions"), ("POST", "/v1/chat/completions")]
GETS = [("GET", "/v1/models"), ("GET", "/health"), ("GET", "/stats"), ("GET", "/metrics")]
# A GET takes no input, so there is nothing schema-violating to send it.
OPERATIONS = [(*op, mode) for op in POSTS for mode in ("positive", "negative")] + \
    [(*op, "positive") for op in GETS]


@pytest.mark.parametrize("method, path, mode", OPERATIONS)
def test_no_server_errors(api_schema, server, method, path, mode):
    """Schema-valid ("positive") and schema-violating ("negative") requests."""
    operation = api_schema[path][method]
    strategy = operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

    @given(case=strategy)
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(case) -> None:
        response = case.call(base_url=server.base_url, headers=AUTH, timeout=30)
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()


def test_server_is_healthy_after_the_fuzz(server):
    assert_still_serving(server)
    stats = httpx.get(server.base_url + "/stats", headers=AUTH, timeout=10).json()
    assert stats["plugin_errors"] == 0 or "plugin_errors" not in stats
