"""The MySQL side every store of delayq's shards shares: its servers' connection pools,
where each logical shard lives (cluster/store/routing.py), the names of every shard's
tables, and the schema check. MySQLStore (cluster/store/mysql_store.py) adds the
statements.

A job's shard is a function of its job_id alone (cluster.model.keys.shard_of): its
database (the logical shard, fixed for the life of the cluster) and its table there.
The versioned migrations of cluster/store/migrations.py create the tables and record the
shard layout and the cluster's key prefix; opening a store with a different layout, or
before a migration is applied, fails instead of silently looking for jobs in the wrong
tables, and one database serves one cluster only (another cluster's reconciler would
re-add its jobs).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from importlib.resources.abc import Traversable

import aiomysql
import pymysql

from cluster.errors import StoreAccessError, StoreUnavailable
from cluster.model.keys import shard_of
from cluster.settings.config import Settings
from cluster.store import connect, migrations, schema_check, sql
from cluster.store.migrations import MigrationReport
from cluster.store.routing import ShardRouter, shard_database
from cluster.store.servers import ServerSpec, server_specs

Shard = tuple[int, int]


class ShardedStore:
    """Connection pools of the servers, shard homes, table names, schema check."""

    def __init__(
        self, settings: Settings, node_id: str, *, schema_dir: Traversable | None = None
    ) -> None:
        """schema_dir: the migration files to apply and check (default: the packaged
        schema/; tests pass a directory with more)."""
        self.settings = settings
        self.schema_dir = schema_dir
        self.node_id = node_id[:128]
        self.conn_args = sql.parse_mysql_url(settings.mysql_url)
        self.database = self.conn_args["db"]
        self.servers: list[ServerSpec] = server_specs(settings)
        self.router = ShardRouter(settings, self.servers, self.database, self._open_pool)

    # ----- lifecycle -----------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """Connect to every server (one connection at once each, up to 10) and learn
        where each logical shard lives. Raises StoreAccessError when a server refuses:
        wrong password, TLS on one side only, an untrusted certificate; raises what
        connecting raised when no server answers. A server that does not answer leaves
        its shards unavailable (StoreUnavailable) until it does. With TLS asked for,
        every connection the pools open later must use it too, or it is refused before
        logging in (cluster/store/connect.py)."""
        self.router.closed = False
        limit = self.settings.mysql_statement_timeout_s  # a frozen server: not answering
        opened = await asyncio.gather(
            *(
                asyncio.wait_for(self.router.server_pool(spec.index), limit)
                for spec in self.servers
            ),
            return_exceptions=True,
        )
        failures = [r for r in opened if isinstance(r, BaseException)]
        refused = [r for r in failures if isinstance(r, StoreAccessError)]
        if refused or len(failures) == len(self.servers):
            await self.close()
            raise (refused or failures)[0]
        try:
            await self.router.discover()
            if check_schema:
                await self.check_layout()
        except BaseException:
            await self.close()
            raise

    async def _open_pool(self, server: ServerSpec) -> aiomysql.Pool:
        args = sql.mysql_connect_args(self.settings, server.url)
        try:
            return await connect.create_pool(
                minsize=1,
                maxsize=10,
                autocommit=True,
                charset="utf8mb4",
                # UTC, utf8mb4 whatever the server's default, and strict: a value too
                # long for its column is an error, never silently truncated.
                init_command=(
                    "SET NAMES utf8mb4, time_zone = '+00:00', "
                    "sql_mode = CONCAT_WS(',', @@sql_mode, 'STRICT_ALL_TABLES')"
                    + sql.session_init_extra(args)
                ),
                **args,
            )
        except (pymysql.err.Error, OSError) as error:
            refusal = sql.mysql_refusal(error, args)
            if refusal is None:
                raise  # not reachable yet: a starting node waits this out
            raise StoreAccessError(
                f"MySQL at {server.name} refused the connection: {refusal}"
            ) from error

    async def close(self) -> None:
        await self.router.close()

    @property
    def pool(self) -> aiomysql.Pool:
        """Server 0's pool (mysql_url's): for what is not a shard's."""
        pool = self.router.open_pools().get(0)
        if pool is None:
            raise RuntimeError("MySQLStore is not open (or mysql_url's server never answered)")
        return pool

    async def pool_for(self, db_index: int) -> aiomysql.Pool:
        """The pool of the server that serves logical shard db_index."""
        return await self.router.pool_for(db_index)

    async def server_pool(self, index: int) -> aiomysql.Pool:
        return await self.router.server_pool(index)

    def open_pools(self) -> dict[int, aiomysql.Pool]:
        """The pools opened so far, by server index."""
        return self.router.open_pools()

    async def rediscover(self) -> None:
        await self.router.discover()

    @property
    def homes(self) -> dict[int, int]:
        """Logical shard -> index of the server serving it (as last looked up)."""
        return self.router.homes

    def server_of(self, job_id: str) -> ServerSpec:
        """The server that holds a job's row, as last looked up (schedule_in)."""
        d = self.shard_of(job_id)[0]
        home = self.router.homes.get(d)
        if home is None:
            raise StoreUnavailable(f"no MySQL server that answers serves logical shard {d}")
        return self.servers[home]

    # ----- naming ----------------------------------------------------------------------

    def database_name(self, db_index: int) -> str:
        return shard_database(self.database, self.settings.mysql_databases, db_index)

    def shard_of(self, job_id: str) -> Shard:
        return shard_of(job_id, self.settings.mysql_databases, self.settings.mysql_tables)

    def tables_of(self, job_id: str) -> tuple[str, str]:
        """(job table, history table), fully qualified, of a job's shard."""
        return self.shard_tables(self.shard_of(job_id))

    def shard_tables(self, shard: Shard) -> tuple[str, str]:
        """(job table, history table), fully qualified, of a (database, table) shard."""
        db = self.database_name(shard[0])
        return f"`{db}`.`job_{shard[1]:04d}`", f"`{db}`.`job_history_{shard[1]:04d}`"

    def outbox_table(self, shard: Shard) -> str:
        """The outbox table of a shard, fully qualified (migration 004, schedule_in)."""
        return f"`{self.database_name(shard[0])}`.`job_outbox_{shard[1]:04d}`"

    def recurring_table(self, shard: Shard) -> str:
        """The recurring schedules table of a shard, fully qualified (migration 005)."""
        return f"`{self.database_name(shard[0])}`.`job_recurring_{shard[1]:04d}`"

    def all_shards(self, databases: Iterable[int] | None = None) -> list[Shard]:
        """Every (database, table) shard, or those of some logical shards."""
        dbs = range(self.settings.mysql_databases) if databases is None else databases
        return [(d, t) for d in dbs for t in range(self.settings.mysql_tables)]

    async def on_every_shard(self, work: Callable[[Shard], Awaitable[None]]) -> None:
        """work(shard) for every shard: one server's shards one after another, the
        servers at once, so that a server down or frozen holds back only its own (one
        silent for mysql_stall_s is cut off: router.each_server). Raises the first
        failure once every server's part has ended."""
        groups: dict[int | None, list[Shard]] = defaultdict(list)
        for shard in self.all_shards():
            groups[self.router.homes.get(shard[0])].append(shard)

        async def in_turn(shards: list[Shard]) -> None:
            for shard in shards:
                await work(shard)

        results = await self.router.each_server(
            {server: in_turn(shards) for server, shards in groups.items()}, stall=True
        )
        failures = [result for result in results if isinstance(result, BaseException)]
        for failure in failures:
            if not isinstance(failure, Exception):
                raise failure
        if failures:
            raise failures[0]

    def by_shard(self, job_ids: Iterable[str]) -> dict[Shard, list[int]]:
        """Positions of the ids, by shard."""
        groups: dict[Shard, list[int]] = defaultdict(list)
        for index, job_id in enumerate(job_ids):
            groups[self.shard_of(job_id)].append(index)
        return groups

    # ----- schema ----------------------------------------------------------------------

    async def migrate(self) -> MigrationReport:
        """Apply the schema migrations not yet applied to every shard of every server that
        answers (cluster.store.migrations); the report names the servers that did not."""
        return await migrations.apply_migrations(self, self.schema_dir)

    async def check_layout(self) -> None:
        """Refuse a database that misses a migration or has another layout."""
        await schema_check.check_schema(self, self.schema_dir)
