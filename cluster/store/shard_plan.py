"""Step 1 of a shard move (cluster/store/shard_move.py): where the logical shard is,
where it goes, and whether it can: the servers' delayq_shards rows say which step an
interrupted move had reached, so that running it again goes on from there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import aiomysql
import pymysql

from cluster.errors import DelayqError
from cluster.store.mysql_store import MySQLStore
from cluster.store.routing import COPYING, HOME, MOVED
from cluster.store.servers import ServerSpec
from cluster.store.shard_copy import Kind, Progress, fetch, q, shard_table_names

ACCESS_DENIED_PROCESS = 1227
NO_SUCH_TABLE = 1146


class ShardMoveError(DelayqError):
    """A shard move refused to start or stopped; the message says what to do. Nothing
    is lost: run the same command again once the cause is fixed."""


@dataclass
class Plan:
    """A move as the check found it."""

    store: MySQLStore
    d: int
    source: ServerSpec
    target: ServerSpec
    src: aiomysql.Pool
    tgt: aiomysql.Pool
    phase: str  # "copy", "switched" (S moved, not renamed), "renamed" or "done"
    resumed: str = ""
    tables: list[tuple[Kind, str]] = field(default_factory=list)

    @property
    def main(self) -> str:
        return str(self.store.database)

    @property
    def shard_db(self) -> str:
        return self.store.database_name(self.d)

    @property
    def moved_db(self) -> str:
        return f"{self.shard_db}_moved"

    def say(self, progress: Progress | None, text: str) -> None:
        if progress is not None:
            progress(text)


async def check(store: MySQLStore, d: int, target: int) -> Plan:
    """Where D is and whether it can move to `target` (ShardMoveError if not)."""
    settings = store.settings
    if settings.mysql_databases < 2:
        raise ShardMoveError(
            "mysql_databases is 1: the one shard database is the main database and cannot "
            "move (a cluster meant to grow over servers is created with mysql_databases >= 2)"
        )
    if not 0 <= d < settings.mysql_databases:
        raise ShardMoveError(
            f"there is no logical shard {d}: they are 0..{settings.mysql_databases - 1}"
        )
    if not 0 <= target < len(store.servers):
        raise ShardMoveError(f"there is no server {target}: {_servers_text(store)}")
    states, down = await _shard_states(store, d)
    spec = store.servers[target]
    if target in down:
        raise ShardMoveError(f"the target, {spec}, does not answer: {down[target]}")
    homes = [i for i, (state, _) in states.items() if state == HOME]
    if len(homes) > 1:
        raise ShardMoveError(
            f"logical shard {d} says home on several servers "
            f"({', '.join(str(store.servers[i]) for i in homes)}): fix delayq_shards first"
        )
    moved = sorted((at, i) for i, (state, at) in states.items() if state == MOVED)
    if homes == [target]:
        if moved:
            source = store.servers[moved[-1][1]]
            return await _plan(store, d, source, spec, "done")
        raise ShardMoveError(f"logical shard {d} already lives on {spec}: the target is the source")
    if homes:
        plan = await _plan(store, d, store.servers[homes[0]], spec, "copy")
        if states.get(target, ("", None))[0] == COPYING:
            plan.resumed = "before the switch"
        await _check_copy_start(plan, states.get(target, ("", None))[0])
    else:
        copying = [i for i, (state, _) in states.items() if state == COPYING]
        if target not in copying or not moved:
            others = [store.servers[i] for i in copying if i != target]
            hint = (
                f": an interrupted move to {others[0]}; run `delayq db move-shard {d} "
                f"--to {others[0].index}` to finish it"
                if others and moved
                else ""
            )
            why = "; ".join(f"{store.servers[i]}: {w}" for i, w in sorted(down.items()))
            raise ShardMoveError(
                f"logical shard {d} has no home on any server that answers{hint}"
                + (f" (not answering: {why})" if why else "")
            )
        plan = await _plan(store, d, store.servers[moved[-1][1]], spec, "renamed")
        plan.resumed = "after the switch"
        if await tables_in(plan.src, plan.shard_db):
            plan.phase = "switched"  # S said moved, the crash came before the RENAME
        elif not await tables_in(plan.src, plan.moved_db):
            raise ShardMoveError(
                f"{plan.source} says logical shard {d} moved, but neither {plan.shard_db} nor "
                f"{plan.moved_db} holds its tables there"
            )
    await _check_migrations(plan)
    await _check_process_privilege(plan)
    return plan


async def _shard_states(
    store: MySQLStore, d: int
) -> tuple[dict[int, tuple[str, dt.datetime | None]], dict[int, str]]:
    """D's delayq_shards row (state, changed_at) on every server that answers, and why
    the others did not."""
    states: dict[int, tuple[str, dt.datetime | None]] = {}
    down: dict[int, str] = {}
    for spec in store.servers:
        try:
            pool = await store.server_pool(spec.index)
            rows = await fetch(
                pool,
                f"SELECT state, changed_at FROM {q(store.database)}.delayq_shards"
                " WHERE db_index = %s",
                (d,),
            )
        except pymysql.err.ProgrammingError as exc:
            if exc.args and exc.args[0] == NO_SUCH_TABLE:
                down[spec.index] = "no delayq_shards table: run `delayq db migrate`"
                continue
            raise
        except (pymysql.err.Error, OSError, DelayqError) as exc:
            down[spec.index] = f"{type(exc).__name__}: {exc}"
            continue
        if rows:
            states[spec.index] = (str(rows[0][0]), rows[0][1])
    return states, down


async def _plan(
    store: MySQLStore, d: int, source: ServerSpec, target: ServerSpec, phase: str
) -> Plan:
    return Plan(
        store,
        d,
        source,
        target,
        await store.server_pool(source.index),
        await store.server_pool(target.index),
        phase,
        tables=shard_table_names(store.settings.mysql_tables),
    )


async def tables_in(pool: aiomysql.Pool, database: str) -> list[str]:
    rows = await fetch(
        pool,
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
        (database,),
    )
    return sorted(str(r[0]) for r in rows)


async def _check_copy_start(plan: Plan, target_state: str) -> None:
    wanted = sorted(name for _, name in plan.tables)
    if await tables_in(plan.src, plan.shard_db) != wanted:
        raise ShardMoveError(
            f"{plan.source} says it serves logical shard {plan.d}, but {plan.shard_db} there "
            f"does not hold exactly its {len(wanted)} tables"
        )
    if await tables_in(plan.src, plan.moved_db):
        raise ShardMoveError(
            f"{plan.moved_db} on {plan.source} still holds the tables of an earlier move of "
            f"logical shard {plan.d} away from it; check that the shard's home has every "
            f"row you need, then DROP DATABASE `{plan.moved_db}` there and run this again"
        )
    if target_state != COPYING:
        for name in await tables_in(plan.tgt, plan.shard_db):
            [(some,)] = await fetch(plan.tgt, f"SELECT COUNT(*) FROM {at(plan.shard_db, name)}")
            if some:
                raise ShardMoveError(
                    f"{plan.target} already has rows in {plan.shard_db}.{name} although no "
                    f"move to it is under way: check them, drop {plan.shard_db} there, and "
                    "run this again"
                )


async def _check_migrations(plan: Plan) -> None:
    found = []
    for spec, pool in ((plan.source, plan.src), (plan.target, plan.tgt)):
        try:
            rows = await fetch(
                pool,
                "SELECT version, checksum, applied_at IS NOT NULL"
                f" FROM {q(plan.main)}.delayq_migrations ORDER BY version",
            )
        except pymysql.err.ProgrammingError as exc:
            raise ShardMoveError(f"{spec} has no delayq schema: run `delayq db migrate`") from exc
        unapplied = [int(v) for v, _, applied in rows if not applied]
        if unapplied or not rows:
            raise ShardMoveError(
                f"{spec} has migration(s) {unapplied or 'none'} not applied: run "
                "`delayq db migrate` (it goes on where it stopped)"
            )
        found.append({int(v): str(c) for v, c, _ in rows})
    if found[0] != found[1]:
        raise ShardMoveError(
            f"the migrations of {plan.source} ({sorted(found[0])}) and {plan.target} "
            f"({sorted(found[1])}) differ: run `delayq db migrate` with this delayq first"
        )


async def _check_process_privilege(plan: Plan) -> None:
    try:
        await fetch(plan.src, "SELECT COUNT(*) FROM information_schema.INNODB_TRX")
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == ACCESS_DENIED_PROCESS:
            raise ShardMoveError(
                f"the move reads information_schema.INNODB_TRX (the open transactions) on "
                f"{plan.source}, which needs the PROCESS privilege: GRANT PROCESS ON *.* "
                "to the user of the URL, or run the move as a user that has it"
            ) from exc
        raise


@contextlib.asynccontextmanager
async def move_lock(plan: Plan) -> Any:
    """One move of a shard at once (a named lock on the source, held on one connection)."""
    name = f"delayq_move:{plan.main}:{plan.d}"[:64]
    async with plan.src.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
        if (await cur.fetchone())[0] != 1:
            raise ShardMoveError(f"another move of logical shard {plan.d} is running")
        try:
            yield
        finally:
            with contextlib.suppress(pymysql.MySQLError):
                await cur.execute("SELECT RELEASE_LOCK(%s)", (name,))


def at(database: str, table: str) -> str:
    return f"{q(database)}.{q(table)}"


def _servers_text(store: MySQLStore) -> str:
    return ", ".join(str(spec) for spec in store.servers)
