"""Every MySQL connection delayq opens is made here: the job store's pool (client, node,
CLI, migrations) and the one-off connections of the development tools.

When TLS is asked for (mysql_ssl_ca, mysql_ssl_cert, or the URL's ssl_* parameters),
each new connection must use it, not only the first: PyMySQL and aiomysql quietly stay
in plain text when the server's greeting does not offer TLS, and a man in the middle can
strip that flag from the greeting of any connection. The handshake here refuses such a
greeting before anything is sent back (no user name, no password hash, no SET NAMES),
and checks that the transport is encrypted once the login is done. A refused connection
raises StoreAccessError and never reaches the pool. docs/security.md.

A caller's own connection (schedule_in) is checked by check_session_charset instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomysql
from pymysql.constants import CLIENT

from cluster.errors import InvalidJob, StoreAccessError

__all__ = ["check_session_charset", "connect", "create_pool", "uses_tls"]


def _not_encrypted(host: str, port: int, what: str) -> StoreAccessError:
    return StoreAccessError(
        f"MySQL at {host}:{port} {what}, which mysql_ssl_ca asks for: connection refused "
        "before logging in. Either the server has no TLS (give it ssl_cert/ssl_key, or, on "
        "a trusted network only, leave the mysql_ssl_* settings empty) or something on "
        "the path removed it from the server's greeting"
    )


class _Connection(aiomysql.Connection):  # type: ignore[misc]
    """An aiomysql connection that, with an "ssl" context, never logs in in plain text."""

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


async def connect(**kwargs: Any) -> Any:
    """aiomysql.connect(**kwargs) (an aiomysql.Connection), refusing plain text when
    kwargs has an "ssl" context (see the module's docstring)."""
    conn = _Connection(**kwargs)
    await conn._connect()
    return conn


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
