"""Checks every request passes before its handler runs, with or without tokens.

- Host: the name a request is addressed to must be one this server answers to (an IP
  address, localhost, web_host, this machine's name, or web_allowed_hosts), else 421.
  A page on another site that gets its own name resolved to this server's address (DNS
  rebinding) sends its own name here, so it is refused.
- Origin, when a browser sends one: the request's own origin (the Host it names) or a
  name in web_allowed_hosts, else 403. A page of another origin, even another port on
  loopback, cannot act through a visitor's browser.
- Content type: POST, PUT and PATCH (and a DELETE that carries a body) must say
  application/json, else 415 and nothing is read or changed. A browser sends that type
  across origins only after a CORS preflight, which this server never grants, so a form
  or a no-cors fetch from another page cannot write.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.web.problems import Problem

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _name(host: str) -> str:
    """A host name compared as DNS does: lower case, no trailing dot, no brackets."""
    return host.strip().strip("[]").rstrip(".").lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return False
    return True


def split_host(header: str) -> tuple[str, int | None] | None:
    """A Host header as (name, port or None); None when it is not a host[:port]."""
    text = header.strip()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        name, _, port_text = text.partition(":")
    else:
        name, port_text = text, None
    if not name or any(c.isspace() or c in "/@?#" for c in name):
        return None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            return None
        return _name(name), int(port_text)
    return _name(name), None


def allowed_names(settings: Settings, bind_host: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every host name requests may name, the ones web_allowed_hosts names); ConfigError
    for an entry that is not a host name."""
    named = set()
    for entry in settings.web_allowed_hosts.split(","):
        if not entry.strip():
            continue
        parsed = split_host(entry)
        if parsed is None or parsed[1] is not None:
            raise ConfigError(
                f"web_allowed_hosts: {entry.strip()!r} is not a host name (no scheme or port)"
            )
        named.add(parsed[0])
    own = {"localhost", _name(bind_host), _name(socket.gethostname()), _name(socket.getfqdn())}
    return frozenset(own | named), frozenset(named)


class RequestGuard:
    """The checks above, as an aiohttp middleware (`middleware`)."""

    def __init__(self, names: Iterable[str], named: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.named = frozenset(named)  # also trusted as an Origin (behind a proxy)

    @classmethod
    def of(cls, settings: Settings, bind_host: str) -> RequestGuard:
        names, named = allowed_names(settings, bind_host)
        return cls(names, named)

    def check_host(self, header: str | None) -> tuple[str, int | None] | None:
        if header is None:
            return None  # HTTP/1.0 without Host: no browser sends that
        parsed = split_host(header)
        if parsed is None or not (_is_ip(parsed[0]) or parsed[0] in self.names):
            raise Problem(
                "misdirected-request",
                "the Host header names no address this server answers to; an operator "
                "can add names with web_allowed_hosts",
            )
        return parsed

    def check_origin(self, origin: str, host: tuple[str, int | None] | None) -> None:
        try:
            url = URL(origin)
        except ValueError:
            url = URL()
        name = _name(url.host or "")
        if name and url.scheme in _DEFAULT_PORTS:
            if name in self.named:
                return
            port = url.explicit_port
            if port == _DEFAULT_PORTS[url.scheme]:
                port = None
            if host is not None:
                host_port = None if host[1] == _DEFAULT_PORTS[url.scheme] else host[1]
                if (name, port) == (host[0], host_port):
                    return
        raise Problem(
            "cross-origin",
            "requests from another origin are refused (the Origin header is not this "
            "server's own; an operator can add names with web_allowed_hosts)",
        )

    @staticmethod
    def check_content_type(request: web.Request) -> None:
        if request.method not in WRITES or request.match_info.http_exception is not None:
            return  # reads, and routes that do not exist (404, 405)
        if request.method == "DELETE" and not request.body_exists:
            return
        if request.content_type != "application/json":
            raise Problem(
                "unsupported-media-type",
                f"send the body as Content-Type: application/json (got "
                f"{request.headers.get('Content-Type', 'none')[:100]!r}); nothing was changed",
            )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        host = self.check_host(request.headers.get("Host"))
        origin = request.headers.get("Origin")
        if origin is not None:
            self.check_origin(origin, host)
        self.check_content_type(request)
        return await handler(request)
