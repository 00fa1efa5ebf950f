"""Every MySQL connection delayq opens is made here: the job store's pool (client, node,
CLI, migrations) and the one-off connections of the development tools.

When TLS is asked for (mysql_ssl_ca, mysql_ssl_cert, or the URL's ssl_* parameters),
each new connection must use it, not only the first: PyMySQL and aiomysql quietly stay
in plain text when the server's greeting does not offer TLS, and a man in the middle can
strip that flag from the greeting of any connection. The handshake here refuses such a
greeting before anything is sent back (no user name, no password hash, no SET NAMES),
and checks that the transport is encrypted once the login is done. A refused connection
raises StoreAccessError and never reaches the pool. docs/security.md.

A server may have several addresses (a Galera cluster's nodes, listed in one mysql_url):
a new connection tries them in turn, from the one that last worked, passing over one
that refuses, does not answer within ADDRESS_TIMEOUT_S, is a Galera node not ready, or
offers no TLS when TLS is asked for (refused there as above, before logging in).

A caller's own connection (schedule_in) is checked by check_session_charset instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomysql
import pymysql
from pymysql.constants import CLIENT, CR, ER

from cluster.errors import InvalidJob, StoreAccessError
from cluster.store.sql import session_init_extra

__all__ = ["check_session_charset", "connect", "create_pool", "last_answer", "uses_tls"]


def _not_encrypted(host: str, port: int, what: str) -> StoreAccessError:
    return StoreAccessError(
        f"MySQL at {host}:{port} {what}, which mysql_ssl_ca asks for: connection refused "
        "before logging in. Either the server has no TLS (give it ssl_cert/ssl_key, or, on "
        "a trusted network only, leave the mysql_ssl_* settings empty) or something on "
        "the path removed it from the server's greeting"
    )


# When each MySQL address last sent this process anything (the event loop's clock), by
# (host, port): how a call over several servers tells a frozen server from a busy one
# (cluster/store/routing.py, mysql_stall_s).
_answered: dict[tuple[str, int], float] = {}


def last_answer(host: str, port: int) -> float | None:
    """When a connection to host:port last received a packet (loop time), if ever."""
    return _answered.get((host, port))


class _Connection(aiomysql.Connection):  # type: ignore[misc]
    """An aiomysql connection that, with an "ssl" context, never logs in in plain text,
    and notes when its server last answered (last_answer)."""

    async def _read_packet(self, *args: Any, **kwargs: Any) -> Any:
        packet = await super()._read_packet(*args, **kwargs)
        _answered[(self._host, self._port)] = self._loop.time()
        return packet

    async def _request_authentication(self) -> None:
        # Runs right after the server's greeting is read and before the client's first
        # packet, on every (re)connect, including ping(reconnect=True).
        if self._ssl_context and not self.server_capabilities & CLIENT.SSL:
            raise _not_encrypted(self._host, self._port, "does not offer TLS")
        await super()._request_authentication()
        if self._ssl_context and not uses_tls(self):
            raise _not_encrypted(self._host, self._port, "is not speaking TLS")


def uses_tls(conn: Any) -> bool:
    """Whether a connection is encrypted: its transport is a TLS one."""
    writer = getattr(conn, "_writer", None)
    return writer is not None and writer.get_extra_info("ssl_object") is not None


# Per address of a server with several (a Galera cluster's nodes): a node that is down
# refuses at once, but a frozen one must not hold a new connection up for long.
ADDRESS_TIMEOUT_S = 2.0
# The address that last took a connection, per list of addresses: the next connection
# starts there, so that a pool stays on one node after a failover.
_last_worked: dict[tuple[tuple[str, int], ...], int] = {}


async def connect(**kwargs: Any) -> Any:
    """aiomysql.connect(**kwargs) (an aiomysql.Connection), refusing plain text when
    kwargs has an "ssl" context (see the module's docstring).

    Also takes what sql.parse_mysql_url adds: "wsrep_sync_wait" (set for the session, in
    the init command) and "addresses", several (host, port) of one server, tried in turn
    from the one that last worked, each for at most connect_timeout (default
    ADDRESS_TIMEOUT_S) up to the end of the login, and passed over when it is not a
    ready Galera node or, with TLS asked for, offers no TLS; when none takes the
    connection, the first TLS refusal is raised (StoreAccessError), else the last one's
    error."""
    addresses = [(str(host), int(port)) for host, port in kwargs.pop("addresses", None) or []]
    kwargs = _with_session_settings(kwargs)
    if len(addresses) < 2:
        return await _connect_once(kwargs)
    key = tuple(addresses)
    first = _last_worked.get(key, 0) % len(addresses)
    timeout = kwargs.get("connect_timeout") or ADDRESS_TIMEOUT_S
    error: BaseException | None = None
    refusal: StoreAccessError | None = None
    for index in [*range(first, len(addresses)), *range(first)]:
        host, port = addresses[index]
        attempt = {**kwargs, "host": host, "port": port, "connect_timeout": timeout}
        try:
            conn = await _connect_once(attempt, deadline_s=timeout)
        except StoreAccessError as exc:
            # This address offers no TLS (or something on its path removed it): nothing
            # was sent; another address may be sound.
            refusal = refusal or exc
            continue
        except (pymysql.err.OperationalError, OSError) as exc:
            error = exc
            continue
        try:
            await _check_ready(conn)
        except BaseException as exc:
            conn.close()
            if not isinstance(exc, pymysql.err.Error | OSError):
                raise
            error = exc
            continue
        _last_worked[key] = index
        return conn
    if refusal is not None:
        raise refusal
    assert error is not None
    raise error


async def _connect_once(kwargs: dict[str, Any], *, deadline_s: float | None = None) -> Any:
    conn = _Connection(**kwargs)
    try:
        if deadline_s is None:
            await conn._connect()
        else:
            # aiomysql's connect_timeout covers the TCP connect only: a server that
            # accepts and never greets (frozen) would hold the login up for ever.
            async with asyncio.timeout(deadline_s):
                await conn._connect()
    except TimeoutError:
        conn.close()
        raise pymysql.err.OperationalError(
            CR.CR_CONN_HOST_ERROR,
            f"Can't connect to MySQL server on {conn.host}:{conn.port} "
            f"(no answer within {deadline_s:g} s)",
        ) from None
    except BaseException:
        conn.close()  # cancelled mid-login: aiomysql leaves the socket open then
        raise
    return conn


async def _check_ready(conn: Any) -> None:
    """Refuse a Galera node that is not ready (not in the primary component, or still
    joining): it takes logins, but answers most statements with error 1047."""
    async with conn.cursor(aiomysql.Cursor) as cur:
        await cur.execute(
            "SHOW STATUS WHERE Variable_name IN ('wsrep_provider_name', 'wsrep_ready')"
        )
        status = {str(name): str(value) for name, value in await cur.fetchall()}
    # No provider name: not a Galera node (MariaDB built with wsrep reports OFF then).
    if status.get("wsrep_provider_name") and status.get("wsrep_ready", "").upper() != "ON":
        raise pymysql.err.OperationalError(
            ER.UNKNOWN_COM_ERROR, f"Galera node {conn.host}:{conn.port} is not ready"
        )


def _with_session_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs without "wsrep_sync_wait", which goes into the init command instead
    (unless the caller's init command, built with sql.session_init_extra, has it)."""
    if "wsrep_sync_wait" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    extra = session_init_extra({"wsrep_sync_wait": kwargs.pop("wsrep_sync_wait")})
    command = kwargs.get("init_command")
    if not extra or (command is not None and "wsrep_sync_wait" in command):
        return kwargs
    if command is None:
        kwargs["init_command"] = "SET SESSION " + extra.removeprefix(", ")
    elif command.lstrip()[:4].upper() == "SET ":
        kwargs["init_command"] = command + extra
    else:
        raise ValueError("wsrep_sync_wait needs an init_command that is a SET statement")
    return kwargs


class _Pool(aiomysql.Pool):  # type: ignore[misc]
    """aiomysql's pool, whose new connections are made by connect() above."""

    async def _fill_free_pool(self, override_min: bool) -> None:
        # aiomysql's Pool._fill_free_pool (0.2 and 0.3) with one change: it calls
        # aiomysql.connect, which has no way to choose the connection's class.
        free_size = len(self._free)
        n = 0
        while n < free_size:
            conn = self._free[-1]
            if conn._reader.at_eof() or conn._reader.exception() or conn._reader.eof_received:
                self._free.pop()
                conn.close()
            elif self._recycle > -1 and self._loop.time() - conn.last_usage > self._recycle:
                self._free.pop()
                conn.close()
            else:
                self._free.rotate()
            n += 1

        while self.size < self.minsize:
            await self._add_connection()
        if self._free:
            return
        if override_min and (not self.maxsize or self.size < self.maxsize):
            await self._add_connection()

    async def _add_connection(self) -> None:
        self._acquiring += 1
        try:
            conn = await connect(echo=self._echo, loop=self._loop, **self._conn_kwargs)
            self._free.append(conn)
        finally:
            self._acquiring -= 1
            # Also after a failed connect, whose place is free again: a waiting caller
            # tries next (aiomysql wakes none then).
            self._cond.notify()

    def release(self, conn: Any) -> Any:
        """aiomysql's release, which wakes no waiting caller when the connection is
        closed (a query failed on it, MySQL went away): the pool has room again then,
        and once every connection had gone that way, callers waiting for one would wait
        for ever."""
        closed = conn.closed and conn not in self._terminated
        done = super().release(conn)
        if closed and not self._closing:
            return self._loop.create_task(self._wakeup())
        return done


async def create_pool(*, minsize: int, maxsize: int, **kwargs: Any) -> aiomysql.Pool:
    """aiomysql.create_pool(minsize=…, maxsize=…, **kwargs), every connection of which is
    made by connect() above."""
    pool = _Pool(
        minsize=minsize,
        maxsize=maxsize,
        echo=False,
        pool_recycle=-1,
        loop=asyncio.get_running_loop(),
        **kwargs,
    )
    if minsize > 0:
        try:
            async with pool._cond:
                await pool._fill_free_pool(False)
        except BaseException:
            pool.close()
            await pool.wait_closed()
            raise
    return pool


async def check_session_charset(cur: Any) -> None:
    """Refuse a caller's connection whose session reads statements in another character
    set than utf8mb4, the one its literals are escaped for. The driver cannot know: a
    `SET NAMES gbk` run through it changes the server's side only, and in GBK the byte
    before an escaping backslash can swallow it, so a value would end its literal early."""
    await cur.execute("SELECT @@character_set_client, @@character_set_connection")
    client, connection = await cur.fetchone()
    if (client, connection) != ("utf8mb4", "utf8mb4"):
        raise InvalidJob(
            "schedule_in() needs a connection whose session character set is utf8mb4 on "
            f"the server too; this one has character_set_client={client}, "
            f"character_set_connection={connection} (run SET NAMES utf8mb4 first)"
        )
