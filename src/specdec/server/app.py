"""The FastAPI application: OpenAI-compatible routes over one :class:`AsyncEngine`.

``create_app(engine)`` takes a built ``LLMEngine`` (so tests and embedders choose the
model and plugins); ``specdec serve`` builds one from the command line. The engine
thread and the prompt workers start with the app and stop with it. Request bodies over
``options.max_request_bytes`` are refused (413) before they are parsed.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from specdec.engine import LLMEngine
from specdec.server import chat, completions
from specdec.server.async_engine import AsyncEngine
from specdec.server.auth import APIKeyMiddleware
from specdec.server.body_limit import BodyLimitMiddleware
from specdec.server.errors import error_body, install_error_handlers
from specdec.server.metrics import ServerMetrics
from specdec.server.options import ServerOptions
from specdec.server.prompts import PromptPreparer
from specdec.server.state import ServerState, State


def default_model_name(engine: LLMEngine) -> str:
    """The name clients use: the model path given, or the bundled model's name."""
    return engine.config.model or "SmolLM2-135M-Instruct"


def create_app(engine: LLMEngine, model_name: str | None = None,
               api_key: str | None = None, options: ServerOptions | None = None) -> FastAPI:
    options = options or ServerOptions()
    metrics = ServerMetrics()
    async_engine = AsyncEngine(engine, on_finished=metrics.request_finished,
                               buffer_outputs=options.stream_buffer_outputs,
                               stall_timeout_s=options.stream_stall_timeout_s)
    prompts = PromptPreparer(engine.tokenizer, engine.max_model_len, options)
    state = ServerState(async_engine, model_name or default_model_name(engine), metrics,
                        options, prompts)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        async_engine.start()
        try:
            yield
        finally:
            async_engine.shutdown()
            prompts.shutdown()

    app = FastAPI(title="specdec", lifespan=lifespan)
    app.state.specdec = state
    install_error_handlers(app)
    app.include_router(completions.router)
    app.include_router(chat.router)
    _add_info_routes(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=options.max_request_bytes)
    if api_key:  # outermost: an unauthenticated body is never read
        app.add_middleware(APIKeyMiddleware, api_key=api_key)
    return app


def _add_info_routes(app: FastAPI) -> None:
    created = int(time.time())

    @app.get("/health")
    async def health(request: Request):
        engine = request.app.state.specdec.engine
        if engine.is_healthy:
            return {"status": "ok"}
        return JSONResponse(error_body(f"engine down: {engine.fatal_error}",
                                       "service_unavailable"), status_code=503)

    @app.get("/v1/models")
    async def models(state: State):
        return {"object": "list", "data": [{"id": state.model_name, "object": "model",
                                            "created": created, "owned_by": "specdec"}]}

    @app.get("/metrics")
    async def prometheus_metrics(state: State):
        stats = await state.engine.stats()
        return PlainTextResponse(state.metrics.render(stats),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/stats")
    async def engine_stats(state: State):
        """``engine.stats()`` as JSON (KV blocks, running requests, plugin stats)."""
        return await state.engine.stats()
