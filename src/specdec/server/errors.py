"""OpenAI-style error bodies, and the handlers that turn exceptions into them.

Every error the server returns looks like OpenAI's::

    {"error": {"message": "...", "type": "invalid_request_error", "param": null,
               "code": null}}

Bad input of any kind (malformed JSON, wrong types, an invalid schema or regex, a
prompt longer than the context, an unknown model) is a 4xx; only a server bug is a 500.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("specdec.server")


class APIError(Exception):
    """An error with an HTTP status and an OpenAI error type."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class BadRequestError(APIError):
    pass


class AuthenticationError(APIError):
    status_code = 401


class ModelNotFoundError(APIError):
    status_code = 404

    def __init__(self, model: str, available: str):
        super().__init__(f"The model '{model}' does not exist; this server serves "
                         f"'{available}'", param="model", code="model_not_found")


class EngineUnavailableError(APIError):
    status_code = 503
    error_type = "service_unavailable"


def error_body(message: str, error_type: str = "invalid_request_error",
               param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(error_body(exc.message, exc.error_type, exc.param, exc.code),
                        status_code=exc.status_code)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            message = "the request body is not valid JSON"
        elif where:
            message = f"{where}: {message}"
        return JSONResponse(error_body(message, param=where or None), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code)

    app.add_middleware(ServerErrorMiddleware)


class ServerErrorMiddleware:
    """A server bug becomes a 500 with an OpenAI error body, and the connection stays open.

    (A handler for ``Exception`` would go to Starlette's outermost middleware, which
    re-raises after answering; uvicorn then closes the keep-alive connection.) Installed
    innermost of the middlewares, so it sees the routes' exceptions first.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if started:  # mid-stream: nothing sane to send; let uvicorn close it
                raise
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            body = error_body(f"internal error: {type(exc).__name__}: {str(exc)[:500]}",
                              "server_error")
            await JSONResponse(body, status_code=500)(scope, receive, send)
