"""Where a scrape of a member's /metrics may connect. A member's record is whatever was
written to ZooKeeper, so its metrics_url is untrusted: scrape_url() (snapshot.py) takes
only the form a node publishes, and this module checks the address a connection is
actually made to. A host name is resolved once, by ScrapeResolver, and only the
addresses that pass `allowed_address` are handed to the connector, which connects to
them without resolving again; an IPv4 address written another way (`0xa9fea9fe`,
`2130706433`, `0177.0.0.1`), which the C library would read as an address, is refused
outright rather than resolved."""

from __future__ import annotations

import ipaddress
import re
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

# Dotted or single numbers in decimal, octal or hex: what inet_aton reads as IPv4.
_NUMERIC_HOST = re.compile(
    r"(?:0[xX][0-9a-fA-F]*|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]*|[0-9]+)){0,3}\.?"
)


def allowed_address(text: str) -> bool:
    """Whether a scrape may connect to this IP address: not link-local (a cloud's
    metadata service), multicast or unspecified, also when written as IPv4-mapped IPv6."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return not (address.is_link_local or address.is_multicast or address.is_unspecified)


def odd_numeric_host(host: str) -> bool:
    """A host that is an IPv4 address in another notation than dotted decimal."""
    try:
        ipaddress.ip_address(host)
        return False  # the canonical form: checked as the address it is
    except ValueError:
        return _NUMERIC_HOST.fullmatch(host) is not None


def checked(results: list[ResolveResult]) -> list[ResolveResult]:
    """The resolved addresses a scrape may use; OSError when none is left."""
    allowed = [result for result in results if allowed_address(result["host"])]
    if not allowed:
        shown = ", ".join(sorted({result["host"] for result in results})) or "nothing"
        raise OSError(f"refused: the name resolves to {shown}, not an address to scrape")
    return allowed


class ScrapeResolver(AbstractResolver):
    """The default resolver, keeping only allowed addresses (checked())."""

    def __init__(self) -> None:
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return checked(await self._inner.resolve(host, port, family))

    async def close(self) -> None:
        await self._inner.close()


def scrape_session(timeout: aiohttp.ClientTimeout) -> aiohttp.ClientSession:
    """A session for scraping members: its connections go only to checked addresses."""
    connector = aiohttp.TCPConnector(resolver=ScrapeResolver(), use_dns_cache=False)
    return aiohttp.ClientSession(timeout=timeout, connector=connector)
