"""Which MySQL server serves each logical shard, and running statements there.

Every server's main database has a ``delayq_shards`` table (made by `db migrate`): one row
per logical shard it holds, in state ``home`` (served here), ``copying`` (a shard move is
copying it here) or ``moved`` (moved away; its tables were renamed into ``<main>_<d>_moved``
so that anyone still using them gets MySQL error 1146). A router reads those rows from
every server at open; a statement that meets 1146 reads them again and runs once more on
the shard's new home, waiting up to mysql_move_wait_s while no server is home (the
switch of a move). A server without the table yet (before `db migrate`) is taken to
hold what mysql_shard_map places on it.

Two servers saying home for one shard (a stale or hand-made row) would split its jobs:
the shard is then served by neither, every call on it raising ShardHomeConflict, until
`delayq db homes --resolve` leaves one home (cluster/store/shard_homes.py). The homes are
read again in the background while a server is down (one that comes back may claim a
shard another serves meanwhile) or such a conflict lasts, and now and then otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiomysql
import pymysql

from cluster.errors import ShardHomeConflict, StoreUnavailable
from cluster.settings.config import Settings
from cluster.store import connect, sql
from cluster.store.servers import ServerSpec
from cluster.store.stalls import gather_servers

log = logging.getLogger(__name__)

T = TypeVar("T")
NO_SUCH_TABLE = 1146
LOST_DURING_QUERY = 2013  # CR_SERVER_LOST
UNKNOWN_DATABASE = 1049
HOME, COPYING, MOVED = "home", "copying", "moved"
# How often a call waiting out a move's switch looks for the new home.
SWITCH_POLL_S = 0.05
# Unknown shards are looked for, and homes read again while a server is down or a shard
# has two homes, at most this often; else every RECHECK_EVERY_S (a row changed by hand).
REDISCOVER_EVERY_S = 1.0
RECHECK_EVERY_S = 10.0
# A server cut off for silence that has answered nothing since is waited for only this
# share of mysql_stall_s by the next calls over several servers.
STALLED_GRACE = 0.125

# What a statement on a shard raises when its server is down or not known: a pass over
# every shard goes on with the others, and fails (to be run again) at the end.
SERVER_DOWN: tuple[type[BaseException], ...] = (
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
    OSError,
    StoreUnavailable,
)

PoolOpener = Callable[[ServerSpec], Awaitable[aiomysql.Pool]]


def shard_database(main: str, databases: int, d: int) -> str:
    """Logical shard d's database: the main one when there is only one."""
    return main if databases == 1 else f"{main}_{d}"


async def recorded_shards(cur: Any, main: str, databases: int) -> dict[int, str]:
    """A server's delayq_shards rows (logical shard -> state). A server without that
    table (not migrated by this delayq yet) holds the shards whose first job table it
    has; one without the main database holds none."""
    try:
        await cur.execute(f"SELECT db_index, state FROM `{main}`.delayq_shards")
        return {int(d): str(state) for d, state in await cur.fetchall()}
    except pymysql.err.ProgrammingError as exc:
        if not exc.args or exc.args[0] not in (NO_SUCH_TABLE, UNKNOWN_DATABASE):
            raise
    names = {shard_database(main, databases, d): d for d in range(databases)}
    marks = ", ".join(["%s"] * len(names))
    await cur.execute(
        "SELECT TABLE_SCHEMA FROM information_schema.TABLES"
        f" WHERE TABLE_NAME = 'job_0000' AND TABLE_SCHEMA IN ({marks})",
        list(names),
    )
    return {names[schema]: HOME for (schema,) in await cur.fetchall()}


def is_no_such_table(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.ProgrammingError) and bool(
        exc.args and exc.args[0] == NO_SUCH_TABLE
    )


class ShardRouter:
    """A connection pool per server (opened when first needed) and the home of every
    logical shard."""

    def __init__(
        self, settings: Settings, servers: list[ServerSpec], database: str, opener: PoolOpener
    ) -> None:
        self.settings = settings
        self.servers = servers
        self.database = database
        self._open_pool = opener
        self._pools: dict[int, aiomysql.Pool] = {}
        self._opening: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.homes: dict[int, int] = {}  # logical shard -> server index
        self.down: dict[int, str] = {}  # server index -> why it did not answer at the last look
        self.in_transit: set[int] = set()  # moved or copying somewhere, home nowhere
        self.conflicts: dict[int, list[int]] = {}  # logical shard -> servers saying home
        self._looked_at = -1e9
        self._recheck: asyncio.Task[None] | None = None
        self.closed = False
        self._addresses = {spec.index: _addresses_of(spec) for spec in servers}
        self._stalled: dict[int, float] = {}  # server cut off for silence -> silent since

    # ----- pools -------------------------------------------------------------------------

    async def server_pool(self, index: int) -> aiomysql.Pool:
        """Server `index`'s pool, opened if needed (raises what connecting raised)."""
        pool = self._pools.get(index)
        if pool is not None:
            return pool
        if self.closed:
            raise RuntimeError("the MySQL store is closed")
        async with self._opening[index]:
            if index not in self._pools:
                self._pools[index] = await self._open_pool(self.servers[index])
            return self._pools[index]

    def open_pools(self) -> dict[int, aiomysql.Pool]:
        return dict(self._pools)

    async def close(self) -> None:
        self.closed = True  # until the store opens again: no pool opens meanwhile
        recheck, self._recheck = self._recheck, None
        if recheck is not None and not recheck.done():
            recheck.cancel()
            await asyncio.wait([recheck])
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()
        for pool in pools.values():
            await pool.wait_closed()

    # ----- homes -------------------------------------------------------------------------

    async def discover(self) -> None:
        """Read every reachable server's delayq_shards; a server that does not answer is
        noted in `down` and its shards are unknown until it answers."""
        self._looked_at = asyncio.get_running_loop().time()
        found = await asyncio.gather(
            *(self.shards_of(spec) for spec in self.servers), return_exceptions=True
        )
        claims: dict[int, list[int]] = defaultdict(list)  # servers saying home
        moving: set[int] = set()  # said moved or copying by some server
        for spec, rows in zip(self.servers, found, strict=True):
            if isinstance(rows, BaseException):
                if not isinstance(rows, pymysql.err.Error | OSError | StoreUnavailable):
                    raise rows
                self.down[spec.index] = f"{type(rows).__name__}: {rows}"
                continue
            self.down.pop(spec.index, None)
            for d, state in rows.items():
                if state == HOME:
                    claims[d].append(spec.index)
                else:
                    moving.add(d)
        conflicts = {d: servers for d, servers in claims.items() if len(servers) > 1}
        for d, servers in conflicts.items():
            if self.conflicts.get(d) != servers:
                log.error("%s", self.conflict_error(d, servers))
        self.conflicts = conflicts
        # A home that stopped answering stays the home until a server that answers differs.
        kept = {d: i for d, i in self.homes.items() if i in self.down and d not in claims}
        self.homes = kept | {d: servers[0] for d, servers in claims.items() if len(servers) == 1}
        self.in_transit = moving - set(claims)

    def conflict_error(self, d: int, servers: list[int]) -> ShardHomeConflict:
        names = [str(self.servers[i]) for i in servers]
        return ShardHomeConflict(
            f"logical shard {d} says home on {' and '.join(names)}: calls on it are refused "
            f"until one home is left (`delayq db homes`, then `delayq db homes --resolve {d} "
            "--server N`: docs/cluster.md)",
            d,
            names,
        )

    def _recheck_now_and_then(self) -> None:
        """Read the homes again in the background when it is time (module docstring)."""
        if self.closed or (self._recheck is not None and not self._recheck.done()):
            return
        loop = asyncio.get_running_loop()
        every = REDISCOVER_EVERY_S if self.down or self.conflicts else RECHECK_EVERY_S
        if loop.time() - self._looked_at < every:
            return

        async def recheck() -> None:
            try:
                await self.discover()
            except Exception as exc:  # the next call tries again
                log.warning("reading where the logical shards live failed: %s", exc)

        self._recheck = loop.create_task(recheck())

    async def shards_of(self, spec: ServerSpec, bounded: bool | float = True) -> dict[int, str]:
        """Server spec's delayq_shards rows (recorded_shards)."""

        async def read(conn: Any) -> dict[int, str]:
            async with conn.cursor() as cur:
                return await recorded_shards(cur, self.database, self.settings.mysql_databases)

        # Bounded like any statement: a frozen server must not hold up the others' homes.
        return await self.on_server(spec.index, read, bounded)

    async def home_of(self, d: int) -> int:
        """The index of the server serving logical shard d; StoreUnavailable when no
        server that answers says it is home (looked for again at most once a second);
        ShardHomeConflict when several say so."""
        self._recheck_now_and_then()
        home = self.homes.get(d)
        if home is not None:
            return home
        if d in self.conflicts:
            raise self.conflict_error(d, self.conflicts[d])
        loop = asyncio.get_running_loop()
        if loop.time() - self._looked_at >= REDISCOVER_EVERY_S:
            await self.discover()
        # A shard between servers (a move's switch) gets a home within moments: wait.
        deadline = loop.time() + self.settings.mysql_move_wait_s
        while d in self.in_transit and loop.time() < deadline:
            await asyncio.sleep(SWITCH_POLL_S)
            await self.discover()
        home = self.homes.get(d)
        if home is not None:
            return home
        if d in self.conflicts:
            raise self.conflict_error(d, self.conflicts[d])
        down = "; ".join(f"{self.servers[i]}: {why}" for i, why in sorted(self.down.items()))
        raise StoreUnavailable(
            f"no MySQL server that answers serves logical shard {d}"
            + (f" (not answering: {down})" if down else " (is its server in mysql_servers?)")
        )

    async def pool_for(self, d: int) -> aiomysql.Pool:
        return await self.server_pool(await self.home_of(d))

    async def _after_missing_table(
        self, dbs: list[int], server: int, deadline: float, error: BaseException
    ) -> None:
        """Some table of these logical shards is gone from `server`. Returns once they
        all have a home and one of them moved away (run again: at the new home); waits
        while one has no home (a move's switch); re-raises `error` when all are still
        home on `server` (the table is really missing), or at the deadline."""
        loop = asyncio.get_running_loop()
        while True:
            await self.discover()
            homes = [self.homes.get(d) for d in dbs]
            if None not in homes:
                if all(home == server for home in homes):
                    raise error
                return
            if loop.time() >= deadline:
                raise StoreUnavailable(
                    f"logical shard(s) {[d for d in dbs if d not in self.homes]} have no "
                    f"home on any server answering after mysql_move_wait_s "
                    f"({self.settings.mysql_move_wait_s} s): {error}"
                )
            await asyncio.sleep(SWITCH_POLL_S)

    # ----- running statements ------------------------------------------------------------

    async def on_server(
        self, server: int, call: Callable[[Any], Awaitable[T]], bounded: bool | float
    ) -> T:
        """call(connection) on a connection of `server`; `bounded` (True:
        mysql_statement_timeout_s, or a number of seconds): all of it, connecting
        included, within that, else OperationalError 2013 as for a connection lost
        mid-statement: its outcome is unknown. A connection whose statement was cut off
        (timeout, cancel) is closed, never reused."""
        limit: float | None = None
        if bounded is True:
            limit = self.settings.mysql_statement_timeout_s
        elif bounded is not False:
            limit = float(bounded)
        try:
            async with asyncio.timeout(limit):
                pool = await self.server_pool(server)
                async with pool.acquire() as conn:
                    try:
                        return await call(conn)
                    except asyncio.CancelledError:
                        conn.close()  # a reply may still come: the pool must not reuse it
                        raise
        except TimeoutError:
            raise pymysql.err.OperationalError(
                LOST_DURING_QUERY,
                f"{self.servers[server]} did not answer within mysql_statement_timeout_s "
                f"({limit} s)",
            ) from None

    async def run(
        self, d: int, work: Callable[[Any], Awaitable[T]], *, bounded: bool | float = True
    ) -> T:
        """work(connection) on logical shard d's home server (bounded: see on_server). A
        statement that finds the shard's tables gone (a move switched it) is run again
        at the new home: `work` must be safe to repeat when it failed (each statement's
        own transaction, or one that the failure rolled back)."""
        deadline: float | None = None
        while True:
            home = await self.home_of(d)
            try:
                return await self.on_server(home, work, bounded)
            except pymysql.err.ProgrammingError as exc:
                if not is_no_such_table(exc):
                    raise
                if deadline is None:
                    wait = self.settings.mysql_move_wait_s
                    deadline = asyncio.get_running_loop().time() + wait
                await self._after_missing_table([d], home, deadline, exc)

    async def run_grouped(
        self,
        dbs: Iterable[int],
        work: Callable[[Any, list[int]], Awaitable[T]],
        *,
        bounded: bool | float = True,
    ) -> list[T]:
        """work(connection, the logical shards of `dbs` it serves) once per server, all
        servers at once; each as run() does. Raises the first failure, after every
        server's work has finished."""
        parts, failures = await self.run_each_server(dbs, work, bounded=bounded)
        if failures:
            raise failures[0][1]
        return parts

    async def run_each_server(
        self,
        dbs: Iterable[int],
        work: Callable[[Any, list[int]], Awaitable[T]],
        *,
        bounded: bool | float = True,
        stall: bool = False,
    ) -> tuple[list[T], list[tuple[list[int], BaseException]]]:
        """As run_grouped, but the servers that answered give their results and the
        others are named: (results, [(their logical shards, the error)]). A shard with
        no known home fails at once. `stall`: cut off a server silent for mysql_stall_s
        once another's part is done (each_server); a read (`bounded` not False) on one
        server alone that was cut off so and has answered nothing since waits only
        STALLED_GRACE of mysql_stall_s."""
        by_server: dict[int, list[int]] = defaultdict(list)
        failures: list[tuple[list[int], BaseException]] = []
        for d in sorted(set(dbs)):
            try:
                by_server[await self.home_of(d)].append(d)
            except StoreUnavailable as exc:
                failures.append(([d], exc))
        if len(by_server) == 1 and not failures:
            [(server, group)] = by_server.items()
            if stall and bounded is not False and self._still_frozen(server):
                # Cut off for silence and silent since: a read does not wait it out.
                bounded = self.settings.mysql_stall_s * STALLED_GRACE
            return await self._run_group(server, group, work, bounded), []
        results = await self.each_server(
            {s: self._run_group(s, g, work, bounded) for s, g in by_server.items()},
            stall=stall,
        )
        parts: list[T] = []
        for group, result in zip(by_server.values(), results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                failures.append((group, result))
            else:
                parts.extend(result)
        return parts, failures

    def silent_since(self, server: int | None, started: float) -> float:
        """From when a server counts as silent for a call that started at `started`:
        since it last answered on any connection, or the call's start if later; but
        when a call cut it off for silence and it has answered nothing since (still
        frozen), so that this call waits for it only STALLED_GRACE of mysql_stall_s
        (time for a server just woken to answer)."""
        if server is None or server not in self._addresses:
            return started
        answers = [connect.last_answer(*a) for a in self._addresses[server]]
        last = max((t for t in answers if t is not None), default=None)
        since = self._stalled.get(server)
        if since is not None:
            if last is None or last < since:
                stall_s = self.settings.mysql_stall_s
                return max(since, started - stall_s + stall_s * STALLED_GRACE)
            del self._stalled[server]  # it answered since: as any server again
        return started if last is None else max(started, last)

    def _still_frozen(self, server: int) -> bool:
        started = asyncio.get_running_loop().time()
        return server in self._stalled and self.silent_since(server, started) < started

    def _cut_off(self, server: int | None, silent_from: float) -> None:
        if server is not None:
            self._stalled[server] = min(silent_from, self._stalled.get(server, silent_from))

    async def each_server(
        self, parts: dict[int | None, Awaitable[T]], *, stall: bool = True
    ) -> list[T | BaseException]:
        """Each server's part (by server index; None: shards with no known home) at
        once, and each one's result or exception, in order. With `stall`, once some part
        has ended, a server that has answered nothing (on any connection) for
        mysql_stall_s is cut off: its part is cancelled (a statement cut off closes its
        connection) and ends in ServerStalled, so that a frozen server holds back no
        other's work; one cut off that has answered nothing since counts as silent
        from then on, so the next calls do not wait for it again. Without (a long
        count or search, whose server may send nothing for a while), each part ends on
        its own."""
        if not stall:
            return list(await asyncio.gather(*parts.values(), return_exceptions=True))
        return await gather_servers(
            parts,
            self.settings.mysql_stall_s,
            self.silent_since,
            lambda s: "shards with no known home" if s is None else str(self.servers[s]),
            self._cut_off,
        )

    async def _run_group(
        self,
        server: int,
        group: list[int],
        work: Callable[[Any, list[int]], Awaitable[T]],
        bounded: bool | float,
    ) -> list[T]:
        """work on one server's group: one result, or, when a shard of the group moved
        meanwhile, one per server the group is on now."""
        try:
            return [await self.on_server(server, lambda conn: work(conn, group), bounded)]
        except pymysql.err.ProgrammingError as exc:
            if not is_no_such_table(exc):
                raise
            deadline = asyncio.get_running_loop().time() + self.settings.mysql_move_wait_s
            await self._after_missing_table(group, server, deadline, exc)
        return await self.run_grouped(group, work, bounded=bounded)


def _addresses_of(spec: ServerSpec) -> list[tuple[str, int]]:
    args = sql.parse_mysql_url(spec.url)
    found: list[tuple[str, int]] = args.get("addresses") or [(args["host"], args["port"])]
    return found
