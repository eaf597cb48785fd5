"""A request that fails in a plugin: a ValueError is the request's fault (HTTP 400),
anything else the server's (500)."""

from __future__ import annotations

import pytest

from specdec import LLM, SamplingParams, hookimpl


class RefusesMidway:
    def __init__(self, error: Exception):
        self.error = error

    @hookimpl
    def specdec_postprocess(self, request):
        if len(request.output_token_ids) >= 2:
            raise self.error


@pytest.mark.parametrize(("error", "client"), [(ValueError("bad constraint"), True),
                                               (RuntimeError("plugin bug"), False)])
def test_error_kind_follows_the_exception(tiny_model_dir, error, client):
    llm = LLM(model=str(tiny_model_dir), dtype="float32", plugins=[RefusesMidway(error)],
              load_entry_points=False)
    out = llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0),
                       use_tqdm=False)[0]
    assert out.finish_reason == "error" and str(error) in out.error
    assert out.error_is_client is client


def test_server_answers_a_late_client_error_with_400():
    import asyncio
    from types import SimpleNamespace

    from specdec.outputs import RequestMetrics, RequestOutput
    from specdec.server.errors import BadRequestError
    from specdec.server.streaming import GenerationError, final_output

    def output(is_client: bool) -> RequestOutput:
        return RequestOutput("r", None, [1], "", [], "error", RequestMetrics(0.0, None, 0.0, 0),
                             error="cannot compile json_schema: too complex",
                             error_is_client=is_client)

    class Stream:
        request_id, finished = "r", True

        def __init__(self, out):
            self.out = out

        def __aiter__(self):
            async def one():
                yield self.out
            return one()

    engine = SimpleNamespace(abort=lambda request_id: None)
    with pytest.raises(BadRequestError, match="cannot compile"):
        asyncio.run(final_output(engine, Stream(output(True)), None))
    with pytest.raises(GenerationError):
        asyncio.run(final_output(engine, Stream(output(False)), None))
