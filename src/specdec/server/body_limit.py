"""A request body larger than ``max_request_bytes`` gets a 413 before anything parses it.

The body is counted as it arrives, buffered here (at most the limit) and replayed to
the app. Past the limit the rest is read and dropped, up to ``DRAIN_BYTES``, before the
413 goes out: a server that answers and closes while the client is still sending
makes the client's TCP stack reset the connection, and the client never sees the 413.
A body declared larger than ``DRAIN_BYTES`` is answered at once, and the connection
closed, without reading any of it.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specdec.server.errors import error_body

DRAIN_BYTES = 64 * 2**20


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > DRAIN_BYTES):
            await self._refuse(send, close=True)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > DRAIN_BYTES:
                await self._refuse(send, close=True)
                return
            if size <= self.max_bytes:
                chunks.append(chunk)
        if size > self.max_bytes:
            await self._refuse(send, close=False)
            return
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send, close: bool) -> None:
        body = json.dumps(error_body(
            f"the request body is larger than this server's limit of {self.max_bytes} bytes",
            code="request_too_large")).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as Starlette expects

    return replay
