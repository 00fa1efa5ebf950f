"""Where a scrape of a planted member's metrics_url may connect (observe/scrape_guard.py)."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import ResolveResult

from cluster.observe.scrape_guard import ScrapeResolver, allowed_address, checked
from cluster.observe.snapshot import scrape_url


@pytest.mark.parametrize(
    "host",
    [
        "0x7f000001",  # 127.0.0.1 in hex
        "0xa9fea9fe",  # 169.254.169.254, a cloud metadata service
        "2130706433",  # 127.0.0.1 as one decimal number
        "0177.0.0.1",  # octal
        "127.1",  # inet_aton's short form
        "0xa9.0xfe.0xa9.0xfe",
        "[::ffff:169.254.169.254]",
        "169.254.169.254",
        "[fe80::1]",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_addresses_in_other_notations_and_refused_ranges_are_refused(host: str) -> None:
    assert scrape_url({"metrics_url": f"http://{host}:9100/metrics"}) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "[::1]", "node-3.example", "3com.com"])
def test_what_a_node_publishes_is_taken(host: str) -> None:
    assert scrape_url({"metrics_url": f"http://{host}:9100/metrics"}) is not None


def _result(host: str) -> ResolveResult:
    return ResolveResult(
        hostname="name", host=host, port=80, family=socket.AF_INET, proto=0, flags=0
    )


def test_a_name_keeps_only_its_allowed_addresses() -> None:
    kept = checked([_result("169.254.169.254"), _result("10.0.0.7")])
    assert [r["host"] for r in kept] == ["10.0.0.7"]
    with pytest.raises(OSError, match=r"169\.254\.169\.254"):
        checked([_result("169.254.169.254"), _result("::ffff:169.254.169.254")])
    assert not allowed_address("fe80::1%eth0")


async def test_the_resolver_resolves_and_checks() -> None:
    resolver = ScrapeResolver()
    try:
        found = await resolver.resolve("localhost", 80, socket.AF_INET)
    finally:
        await resolver.close()
    assert found and all(r["host"] == "127.0.0.1" for r in found)
