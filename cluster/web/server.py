"""The `delayq web` process: the API, the console and the OpenAPI document on one port.

Stateless: every answer comes from MySQL, Redis or ZooKeeper, so several processes can
serve behind one load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from importlib import resources
from pathlib import Path

import orjson
from aiohttp import web

from cluster.client.delay_client import DelayClient
from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.web.api import ROUTES, Api, Handler, json_response, problems_middleware
from cluster.web.auth import GRANTS, ROLE_KEY, Tokens, is_loopback, parse_tokens
from cluster.web.deadline import KEEPALIVE_S, HeaderDeadlineSite, request_started
from cluster.web.guard import RequestGuard, allowed_names
from cluster.web.metrics import WebMetricsServer
from cluster.web.openapi import openapi_document
from cluster.web.problems import Problem
from cluster.web.search_limits import CALLER_KEY
from cluster.web.stats import StatsSampler

log = logging.getLogger(__name__)

# The handlers of an application (tests read its batcher's counts).
API = web.AppKey("api", Api)
CONSOLE_DIR = Path(str(resources.files("cluster.web") / "console"))
_PERMISSIONS = {route.name: route.permission for route in ROUTES}
# The console's page loads only its own files, and no page may frame it.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def check_exposure(settings: Settings, host: str) -> Tokens:
    """The tokens of web_tokens; refuses (ConfigError) to serve without them anywhere
    but on a loopback address."""
    tokens = Tokens(parse_tokens(settings.web_tokens))
    if not tokens.required and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve {host} without authentication: set web_tokens "
            "(DELAYQ_WEB_TOKENS=TOKEN=ROLE,...) or listen on a loopback address"
        )
    return tokens


def make_app(
    client: DelayClient, tokens: Tokens, stats: StatsSampler, host: str = "127.0.0.1"
) -> web.Application:
    """The application over an open client, serving on host (whose name requests may
    give in Host: cluster/web/guard.py)."""
    guard = RequestGuard.of(client.settings, host)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        permission = _PERMISSIONS.get(request.match_info.route.name or "")
        if permission is None or not tokens.required:
            return await handler(request)  # the console, the document, /healthz
        role = tokens.role_of(request.headers.get("Authorization"))
        if role is None:
            raise Problem("unauthorized", "send Authorization: Bearer <token> with a known token")
        if permission not in GRANTS[role]:
            raise Problem("forbidden", f"the role {role} may not {permission}")
        request[ROLE_KEY] = role
        # The token itself (known, as it has a role): what per-token limits count by.
        request[CALLER_KEY] = request.headers["Authorization"].partition(" ")[2].strip()
        return await handler(request)

    app = web.Application(
        middlewares=[request_started, problems_middleware, guard.middleware, authenticate],
        client_max_size=client.settings.web_body_max_bytes,
    )
    api = Api(client, stats)
    app[API] = api
    for route in ROUTES:
        # A job id is one path segment, any characters but "/" (sent as %2F); aiohttp's
        # default pattern would also refuse braces.
        path = route.path.replace("{job_id}", "{job_id:[^/]+}")
        app.router.add_route(route.method, path, api.handler(route), name=route.name)
    document = orjson.dumps(openapi_document(client.settings))

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def console(_: web.Request) -> web.FileResponse:
        return web.FileResponse(CONSOLE_DIR / "index.html")

    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", console)
    app.router.add_static("/console/", CONSOLE_DIR)

    async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(_SECURITY_HEADERS)
        if request.path == "/" or request.path.startswith("/console/"):
            # Revalidated on every load, so after an upgrade a browser never mixes the
            # old release's modules with the new one's.
            response.headers["Cache-Control"] = "no-cache"

    app.on_response_prepare.append(secure_headers)
    return app


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.web_tls_certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.web_tls_certfile, settings.web_tls_keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load web_tls_certfile/web_tls_keyfile "
            f"({settings.web_tls_certfile}, {settings.web_tls_keyfile}): {exc}"
        ) from exc
    return context


async def serve(settings: Settings, host: str, port: int) -> int:
    """Serve until SIGINT or SIGTERM; prints the address it listens on."""
    tokens = check_exposure(settings, host)
    context = tls_context(settings)
    if not settings.web_header_timeout_s > 0:
        raise ConfigError(f"web_header_timeout_s must be > 0, got {settings.web_header_timeout_s}")
    allowed_names(settings, host)  # ConfigError for a web_allowed_hosts entry
    # aiozk logs every session it opens at INFO (the server reopens its one after a failure).
    logging.getLogger("aiozk").setLevel(logging.WARNING)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    async with contextlib.AsyncExitStack() as cleanup:  # undone in reverse, on every path
        client = await cleanup.enter_async_context(DelayClient(settings))
        stats = StatsSampler(settings)
        cleanup.push_async_callback(stats.close)
        app = make_app(client, tokens, stats, host)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S)
        await runner.setup()
        cleanup.push_async_callback(runner.cleanup)
        site = HeaderDeadlineSite(
            runner,
            host,
            port,
            header_timeout_s=settings.web_header_timeout_s,
            ssl_context=context,
        )
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        if settings.metrics_port:
            metrics = WebMetricsServer(settings)
            await metrics.start()  # ConfigError when metrics_port is taken
            cleanup.push_async_callback(metrics.stop)
        bound = site.bound_port()
        scheme = "https" if context else "http"
        shown_host = f"[{host}]" if ":" in host else host
        if not tokens.required:
            log.warning("no web_tokens: every request is allowed (loopback only)")
        elif context is None and not is_loopback(host):
            log.warning("serving tokens over plain HTTP: put TLS in front or set web_tls_*")
        print(f"delayq web on {scheme}://{shown_host}:{bound}/", flush=True)
        await stopping.wait()
    return 0
