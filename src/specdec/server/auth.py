"""Optional API key: ``Authorization: Bearer <key>`` on every path except ``/health``.

A plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``), so streaming responses
and client-disconnect detection pass through untouched.
"""

from __future__ import annotations

import hmac

from specdec.server.errors import AuthenticationError, error_response

OPEN_PATHS = frozenset({"/health"})


class APIKeyMiddleware:
    def __init__(self, app, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        response = error_response(AuthenticationError(
            "Incorrect or missing API key; send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
        ))
        await response(scope, receive, send)
