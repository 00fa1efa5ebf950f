"""MySQL TLS on every connection, not only the first: a real man in the middle between
delayq and the secure local stack's MariaDB (`delayq services up --secure`) passes the
first connection through untouched and clears the CLIENT_SSL flag in the server's
greeting of every later one. delayq must refuse those connections before it sends
anything (no user name, no password hash), and the pool must never hand them out.
docs/security.md."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import pytest

from cluster import DelayClient
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.errors import StoreAccessError
from cluster.settings.config import Settings
from cluster.store.connect import connect, uses_tls
from cluster.store.mysql_store import MySQLStore
from cluster.store.sql import mysql_connect_args

CLIENT_SSL = 0x0800  # in the lower two bytes of the greeting's capability flags


def strip_ssl(greeting: bytes) -> bytes:
    """A protocol-10 server greeting without the CLIENT_SSL capability: version byte,
    NUL-terminated server version, connection id (4), auth data part 1 (8), filler (1),
    then the capability flags' lower two bytes, little-endian."""
    offset = greeting.index(0, 1) + 1 + 4 + 8 + 1
    flags = int.from_bytes(greeting[offset : offset + 2], "little")
    assert flags & CLIENT_SSL, "the server offers no TLS: not the secure stack"
    cleared = (flags & ~CLIENT_SSL).to_bytes(2, "little")
    return greeting[:offset] + cleared + greeting[offset + 2 :]


@dataclass
class StrippingProxy:
    """A TCP proxy in front of MySQL that strips TLS from every connection after the
    first `untouched` ones: CLIENT_SSL cleared in the server's greeting, and in the
    client's answer (so the server takes it for a plain-text login). It records what the
    client sends on those, which anyone on the path could read."""

    upstream: tuple[str, int]
    untouched: int = 1
    port: int = 0
    connections: int = 0
    sent_in_clear: list[bytearray] = field(default_factory=list)
    _stripped: list[asyncio.Task[None]] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.close()
            await self._server.wait_closed()

    async def stripped_done(self) -> list[bytes]:
        """What the client sent on each stripped connection, once each has ended."""
        if self._stripped:
            await asyncio.wait(self._stripped, timeout=10)
        return [bytes(sent) for sent in self.sent_in_clear]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        strip = self.connections > self.untouched
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]
        record: bytearray | None = None
        if strip:
            task = asyncio.current_task()
            assert task is not None
            self._stripped.append(task)
            greeting = await _packet(up_reader)
            writer.write(greeting[:4] + strip_ssl(greeting[4:]))
            record = bytearray()
            self.sent_in_clear.append(record)
            try:
                answer = await _packet(reader)
            except asyncio.IncompleteReadError as closed:  # refused: nothing sent
                record.extend(closed.partial)
                writer.close()
                up_writer.close()
                return
            record.extend(answer)
            flags = int.from_bytes(answer[4:8], "little") & ~CLIENT_SSL
            up_writer.write(answer[:4] + flags.to_bytes(4, "little") + answer[8:])
        await asyncio.gather(_pipe(reader, up_writer, record), _pipe(up_reader, writer, None))


async def _packet(reader: asyncio.StreamReader) -> bytes:
    """One MySQL packet: 3-byte length, sequence number, payload."""
    header = await reader.readexactly(4)
    return header + await reader.readexactly(int.from_bytes(header[:3], "little"))


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bytearray | None
) -> None:
    try:
        while chunk := await reader.read(65536):
            if record is not None:
                record.extend(chunk)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def through(proxy: StrippingProxy, settings: Settings) -> Settings:
    """settings with mysql_url pointing at the proxy (same host: the certificate's)."""
    parts = urlsplit(settings.mysql_url)
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{proxy.port}"
    return settings.replace(mysql_url=urlunsplit(parts._replace(netloc=netloc)))


@pytest.fixture
async def secure_db(secure_env: dict[str, str]) -> AsyncIterator[Settings]:
    """Settings of the secure stack with a migrated database of this test's own."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    settings = await create_cluster_database(
        Settings.from_env(secure_env).replace(key_prefix=prefix), f"delayq_{prefix}"
    )
    yield settings
    await drop_cluster_database(settings)


@pytest.fixture
async def proxy(secure_db: Settings) -> AsyncIterator[StrippingProxy]:
    args = mysql_connect_args(secure_db)
    assert "ssl" in args, "the secure stack's settings ask for TLS"
    stripping = StrippingProxy((args["host"], args["port"]))
    await stripping.start()
    yield stripping
    await stripping.close()


async def test_pool_refuses_every_later_connection_without_tls(
    secure_db: Settings, proxy: StrippingProxy
) -> None:
    store = MySQLStore(through(proxy, secure_db), "test")
    await store.open()  # connection 1: through the proxy untouched, so TLS
    try:
        assert proxy.connections == 1
        async with store.pool.acquire() as first:
            assert uses_tls(first)
            # The first connection is taken: each acquire must open a new one.
            for _ in range(4):
                with pytest.raises(StoreAccessError, match="does not offer TLS") as caught:
                    async with store.pool.acquire():
                        pass
                assert "refused before logging in" in str(caught.value)
            assert store.pool.size == 1  # none of them joined the pool
        assert proxy.connections == 5
        # Not a byte of the login (user name, password hash) went out in plain text.
        assert await proxy.stripped_done() == [b""] * 4
        assert await store.get("no-such-job") is None  # the TLS connection still serves
    finally:
        await store.close()


async def test_client_refuses_later_connections_without_tls(
    secure_db: Settings, proxy: StrippingProxy
) -> None:
    client = DelayClient(through(proxy, secure_db))
    await client.open()
    try:
        # Concurrent reads need more connections than the one the pool holds.
        results = await asyncio.gather(
            *(client.get(f"job-{i}") for i in range(5)), return_exceptions=True
        )
        refused = [r for r in results if isinstance(r, BaseException)]
        assert refused, "the reads needed new connections"
        assert all(isinstance(r, StoreAccessError) for r in refused), refused
        assert [r for r in results if not isinstance(r, BaseException)] == [None] * (
            5 - len(refused)
        )
        assert await proxy.stripped_done() == [b""] * len(refused)
    finally:
        await client.close()


async def test_one_off_connections_refuse_plain_text(
    secure_db: Settings, proxy: StrippingProxy
) -> None:
    """The tools' single connections (cluster.store.connect.connect) and the development
    stack's database set-up."""
    proxy.untouched = 0
    with pytest.raises(StoreAccessError, match="does not offer TLS"):
        await connect(**mysql_connect_args(through(proxy, secure_db)))
    with pytest.raises(StoreAccessError, match="does not offer TLS"):
        await create_cluster_database(through(proxy, secure_db), "delayq_never_created")
    store = MySQLStore(through(proxy, secure_db), "test")
    with pytest.raises(StoreAccessError, match="does not offer TLS"):
        await store.open()
    await store.close()
    assert await proxy.stripped_done() == [b""] * 3


async def test_untouched_connections_use_tls(secure_db: Settings) -> None:
    """Without a man in the middle every connection is encrypted (and the server agrees)."""
    conn = await connect(**mysql_connect_args(secure_db))
    try:
        assert uses_tls(conn)
        async with conn.cursor() as cur:
            await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            (_, cipher) = await cur.fetchone()
        assert cipher
    finally:
        conn.close()


def _with_hosts(url: str, hosts: str, query: str = "") -> str:
    """url with its addresses replaced by `hosts` (host:port,…) and its query by `query`."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{hosts}", query=query))


async def test_tls_of_mysql_url_holds_for_the_other_servers(secure_db: Settings) -> None:
    """TLS asked for in mysql_url alone (?ssl_ca=…, no mysql_ssl_* setting) holds for a
    server of mysql_servers whose URL names no TLS parameter: its connections are
    encrypted too. Server 1 is the same MariaDB reached through a plain TCP relay (a
    second address): what matters is how delayq connects to it."""
    args = mysql_connect_args(secure_db)
    host, ca = args["host"], secure_db.mysql_ssl_ca
    relay = StrippingProxy((host, args["port"]), untouched=10**6)  # strips nothing
    await relay.start()
    settings = secure_db.replace(
        mysql_ssl_ca="",
        mysql_url=_with_hosts(secure_db.mysql_url, f"{host}:{args['port']}", f"ssl_ca={ca}"),
        mysql_servers=_with_hosts(secure_db.mysql_url, f"{host}:{relay.port}").rsplit("/", 1)[0]
        + "/",
        mysql_databases=2,
    )
    store = MySQLStore(settings, "test")
    try:
        for server in (0, 1):
            pool = await store.server_pool(server)
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                (_, cipher) = await cur.fetchone()
                assert (server, uses_tls(conn), bool(cipher)) == (server, True, True)
        assert relay.connections >= 1  # server 1's connections went through the relay
    finally:
        await store.close()
        await relay.close()


async def test_an_address_without_tls_is_passed_over(secure_db: Settings) -> None:
    """A mysql_url with several addresses (a Galera cluster's) whose first one offers no
    TLS (a man in the middle stripped it): the connection, nothing sent there, fails
    over to the next address, which is sound; with no sound address it is refused."""
    args = mysql_connect_args(secure_db)
    host, port = args["host"], args["port"]
    stripping = StrippingProxy((host, port), untouched=0)
    await stripping.start()
    try:
        url = _with_hosts(secure_db.mysql_url, f"{host}:{stripping.port},{host}:{port}")
        conn = await connect(**mysql_connect_args(secure_db.replace(mysql_url=url)))
        try:
            assert uses_tls(conn)
        finally:
            conn.close()
        store = MySQLStore(secure_db.replace(mysql_url=url), "test")
        await store.open()
        try:
            assert await store.get("no-such-job") is None
        finally:
            await store.close()
        both = _with_hosts(
            secure_db.mysql_url, f"{host}:{stripping.port},127.0.0.1:{stripping.port}"
        )
        with pytest.raises(StoreAccessError, match="does not offer TLS"):
            await connect(**mysql_connect_args(secure_db.replace(mysql_url=both)))
        assert stripping.connections >= 3
        # Not a byte of any login went out through the stripped address.
        assert set(await stripping.stripped_done()) == {b""}
    finally:
        await stripping.close()
