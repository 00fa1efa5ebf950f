"""A bound on the time a client may take to send a request's headers.

aiohttp waits for the rest of a request line and headers as long as the connection
stays open, so a client that sends them a byte at a time, or never finishes them, holds
a connection (and its memory) for as long as it likes. Each connection here must deliver
the complete headers of its first request within web_header_timeout_s of opening, and
those of each later request within web_header_timeout_s of its first byte, or it is
closed. An idle keep-alive connection is closed by aiohttp after KEEPALIVE_S (the
server's runner is made with keepalive_timeout=KEEPALIVE_S).

`HeaderDeadlineSite` listens like aiohttp's TCPSite, wrapping each connection's protocol
in a `HeaderDeadline`; the middleware `request_started` tells it when a request's headers
are complete (its handler is running), and `request_done` when it has been answered.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

from aiohttp import web
from aiohttp.typedefs import Handler

# How long an idle keep-alive connection stays open (aiohttp's own default is an hour).
KEEPALIVE_S = 75.0


class HeaderDeadline(asyncio.Protocol):
    """Passes everything to aiohttp's protocol, and closes the connection when a
    request's headers are not complete in time."""

    def __init__(self, inner: Any, timeout_s: float) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a request's handler is running (its headers are in)
        self.timer: asyncio.TimerHandle | None = None

    # ----- the deadline --------------------------------------------------------------

    def _arm(self) -> None:
        if self.timer is None and self.transport is not None:
            self.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if not self.busy and self.transport is not None:
            self.transport.close()

    def request_started(self) -> None:
        self._disarm()
        self.busy = True

    def request_done(self) -> None:
        # Bytes that came meanwhile may be this request's body or the next request's
        # start (pipelining, which browsers do not use): that one is bounded by aiohttp's
        # keep-alive timeout (KEEPALIVE_S) instead.
        self.busy = False

    # ----- asyncio.Protocol, passed on ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self._arm()  # from the first byte of a request's headers
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.transport = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def _deadline_of(request: web.Request) -> HeaderDeadline | None:
    transport = request.transport
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, HeaderDeadline) else None


@web.middleware
async def request_started(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tells the connection's HeaderDeadline that this request's headers are in."""
    deadline = _deadline_of(request)
    if deadline is not None:
        deadline.request_started()
    try:
        return await handler(request)
    finally:
        if deadline is not None:
            deadline.request_done()


class HeaderDeadlineSite(web.BaseSite):
    """aiohttp's TCPSite, with a HeaderDeadline around each connection."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        header_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self.runner = runner
        self.host, self.port = host, port
        self.header_timeout_s = header_timeout_s

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self.runner.server
        assert server is not None, "the runner is set up first"
        timeout = self.header_timeout_s
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HeaderDeadline(server(), timeout),
            self.host,
            self.port,
            ssl=self._ssl_context,
            reuse_address=True,
        )

    def bound_port(self) -> int:
        sockets = getattr(self._server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else self.port
