"""A mysql_url listing several addresses of one server: a connection passes over the
ones that refuse or never answer (a frozen node), logs in on the next, and later
connections start with the one that worked. The working address is the local stack's
MariaDB; the others are a closed port and a listener that accepts and never greets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import pymysql
import pytest

from cluster.store import connect
from cluster.store.sql import parse_mysql_url

# Against the single Redis only: it tests MySQL connections alone.
pytestmark = pytest.mark.once


class Silent:
    """A TCP listener that accepts connections and never sends a byte."""

    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._writers.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def silent() -> AsyncIterator[Silent]:
    listener = Silent()
    await listener.start()
    yield listener
    await listener.stop()


def closed_port() -> int:
    """A port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def url_with(stack_env: dict[str, str], front: list[int], query: str = "") -> str:
    """The stack's mysql_url with more addresses before its own."""
    parsed = urlparse(
        stack_env.get("DELAYQ_MYSQL_URL", "mysql://delayq:delayq@127.0.0.1:13306/delayq")
    )
    userinfo, _, address = parsed.netloc.rpartition("@")
    hosts = ",".join([*(f"127.0.0.1:{port}" for port in front), address])
    return f"mysql://{userinfo}@{hosts}{parsed.path}{query}"


async def port_of(conn: Any) -> int:
    async with conn.cursor() as cur:
        await cur.execute("SELECT @@port")
        return int((await cur.fetchone())[0])


async def test_passes_over_a_refusing_and_a_frozen_address(
    stack_env: dict[str, str], silent: Silent
) -> None:
    args = parse_mysql_url(url_with(stack_env, [closed_port(), silent.port], "?wsrep_sync_wait=1"))
    server_port = args["addresses"][2][1]
    conn = await connect.connect(**args)
    try:
        assert await port_of(conn) == server_port
        assert silent.accepted == 1  # tried, and given up on after its timeout
        async with conn.cursor() as cur:
            await cur.execute("SELECT @@SESSION.wsrep_sync_wait")
            assert await cur.fetchone() == (1,)
    finally:
        conn.close()
    # The next connection starts with the address that worked: the others are not tried.
    again = await connect.connect(**args)
    again.close()
    assert silent.accepted == 1
    pool = await connect.create_pool(minsize=2, maxsize=2, **args)
    try:
        async with pool.acquire() as one, pool.acquire() as two:
            assert [await port_of(one), await port_of(two)] == [server_port, server_port]
    finally:
        pool.close()
        await pool.wait_closed()
    assert silent.accepted == 1


async def test_when_every_address_fails_the_last_error_is_raised(silent: Silent) -> None:
    refusing = closed_port()
    args = parse_mysql_url(f"mysql://u:pw@127.0.0.1:{silent.port},127.0.0.1:{refusing}/delayq")
    with pytest.raises(pymysql.err.OperationalError) as caught:
        await connect.connect(**args)
    assert caught.value.args[0] == 2003
    assert "no answer" not in str(caught.value)  # the refusal, not the silent one's timeout
    assert silent.accepted == 1
    # The other way round: the silent one is last, and its timeout is the error.
    args = parse_mysql_url(f"mysql://u:pw@127.0.0.1:{refusing},127.0.0.1:{silent.port}/delayq")
    with pytest.raises(pymysql.err.OperationalError, match="no answer within 2 s") as caught:
        await connect.connect(**args)
    assert caught.value.args[0] == 2003
