"""What every route needs, stored on ``app.state.specdec``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from specdec.server.async_engine import AsyncEngine
from specdec.server.errors import EngineUnavailableError, ModelNotFoundError
from specdec.server.metrics import ServerMetrics
from specdec.server.options import ServerOptions
from specdec.server.prompts import PromptPreparer


@dataclass
class ServerState:
    engine: AsyncEngine
    model_name: str  # the id clients send as "model" and /v1/models lists
    metrics: ServerMetrics
    options: ServerOptions
    prompts: PromptPreparer  # chat templates and tokenization, in worker threads

    @property
    def request_options(self) -> frozenset[str]:
        return self.engine.engine.request_options

    @property
    def tokenizer(self):
        return self.engine.engine.tokenizer

    def check_model(self, model: str | None) -> None:
        """``None`` or the served name is fine; anything else is a 404 like OpenAI's."""
        if model is not None and model != self.model_name:
            raise ModelNotFoundError(model, self.model_name)


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.specdec
    if not state.engine.is_healthy:
        raise EngineUnavailableError(f"the engine is not running: {state.engine.fatal_error}")
    return state


State = Annotated[ServerState, Depends(server_state)]  # route parameter: the live state
