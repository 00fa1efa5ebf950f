"""`delayq db homes`: which MySQL servers say home for each logical shard, and leaving one
home when several do (a stale or hand-made delayq_shards row; clients and nodes refuse
calls on such a shard: cluster/store/routing.py, ShardHomeConflict; docs/cluster.md).

Resolving shard D in favour of server N, nothing lost:

- every server must answer (one that does not may say home for D too);
- a claimant that holds no jobs (no row in D's job, outbox and recurring tables) stops
  being home as a move's source does: its row 'moved', its tables renamed into
  ``<main>_<d>_moved`` in one RENAME (anyone still writing there gets error 1146 and
  looks for the home again), then counted again: jobs written in between put everything
  back and refuse; empty tables are dropped, history alone is kept there;
- when N holds no jobs and one other claimant M does, N's own (empty) tables are retired
  that way, N's row set 'copying', and M's rows are moved to N by the shard move
  (cluster/store/shard_move.py), as `delayq db move-shard D --to N` would;
- when several claimants hold jobs (N and another, or two others), it refuses: which
  rows to keep is the operator's choice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import aiomysql
import pymysql

from cluster.store.mysql_store import MySQLStore
from cluster.store.routing import COPYING, HOME, MOVED
from cluster.store.shard_copy import HISTORY, Progress, fetch, q, shard_table_names
from cluster.store.shard_move import move_shard
from cluster.store.shard_plan import ShardMoveError, at, tables_in

__all__ = ["Claims", "read_claims", "resolve_homes"]

NO_SUCH_TABLE = 1146


@dataclass
class Claims:
    """Every answering server's delayq_shards rows, and why the others did not answer."""

    states: dict[int, dict[int, str]] = field(default_factory=dict)  # shard -> server -> state
    down: dict[int, str] = field(default_factory=dict)

    def homes(self, d: int) -> list[int]:
        return sorted(s for s, state in self.states.get(d, {}).items() if state == HOME)

    def conflicts(self) -> dict[int, list[int]]:
        """Logical shards that several servers say home for, with those servers."""
        return {d: self.homes(d) for d in sorted(self.states) if len(self.homes(d)) > 1}


async def read_claims(store: MySQLStore) -> Claims:
    claims = Claims()
    for spec in store.servers:
        try:
            rows = await store.router.shards_of(spec)
        except (pymysql.err.Error, OSError, RuntimeError) as exc:
            claims.down[spec.index] = f"{type(exc).__name__}: {exc}"
            continue
        for d, state in rows.items():
            claims.states.setdefault(d, {})[spec.index] = state
    return claims


async def held_rows(store: MySQLStore, server: int, database: str) -> dict[str, int]:
    """Rows of each kind (job, job_history, job_outbox, job_recurring) in a logical
    shard's tables in `database` on `server` (a missing table holds none)."""
    pool = await store.server_pool(server)
    counts: dict[str, int] = {}
    for kind, name in shard_table_names(store.settings.mysql_tables):
        try:
            [(n,)] = await fetch(pool, f"SELECT COUNT(*) FROM {at(database, name)}")
        except pymysql.err.ProgrammingError as exc:
            if not exc.args or exc.args[0] != NO_SUCH_TABLE:
                raise
            n = 0
        counts[kind.prefix] = counts.get(kind.prefix, 0) + int(n)
    return counts


def jobs_in(counts: dict[str, int]) -> int:
    """Rows that are jobs or belong to live ones (history alone is not)."""
    return sum(n for prefix, n in counts.items() if prefix != HISTORY.prefix)


def describe(counts: dict[str, int]) -> str:
    """ "rows: job 3, job_history 5" (the tables' kinds), or "no rows"."""
    held = ", ".join(f"{prefix} {n:,}" for prefix, n in sorted(counts.items()) if n)
    return f"rows: {held}" if held else "no rows"


async def resolve_homes(
    store: MySQLStore, d: int, keep: int, *, progress: Progress | None = None
) -> list[str]:
    """Leave server `keep` the only home of logical shard d (module docstring); the
    lines to print. Raises ShardMoveError, changing nothing, when it cannot."""
    if not 0 <= d < store.settings.mysql_databases:
        raise ShardMoveError(
            f"there is no logical shard {d}: they are 0..{store.settings.mysql_databases - 1}"
        )
    if not 0 <= keep < len(store.servers):
        raise ShardMoveError(f"there is no server {keep}: {_servers(store)}")
    claims = await read_claims(store)
    if claims.down:
        why = "; ".join(f"{store.servers[i]}: {w}" for i, w in sorted(claims.down.items()))
        raise ShardMoveError(
            f"every server must answer (one that does not may say home for logical shard "
            f"{d} too); not answering: {why}"
        )
    homes = claims.homes(d)
    if keep not in homes:
        state = claims.states.get(d, {}).get(keep, "no row")
        hint = (
            f"; a move to it was interrupted: `delayq db move-shard {d} --to {keep}` finishes it"
            if state == COPYING and homes
            else ""
        )
        raise ShardMoveError(
            f"{store.servers[keep]} does not say home for logical shard {d} (its row: "
            f"{state}); the servers saying home: {_names(store, homes) or 'none'}{hint}"
        )
    if homes == [keep]:
        return [f"logical shard {d} has one home, {store.servers[keep]}: nothing to do"]
    shard_db = store.database_name(d)
    counts = {s: await held_rows(store, s, shard_db) for s in homes}
    holding = [s for s in homes if jobs_in(counts[s])]
    if len(holding) > 1:
        held = "; ".join(f"{store.servers[s]}: {describe(counts[s])}" for s in holding)
        raise ShardMoveError(
            f"logical shard {d} holds jobs on several servers ({held}); nothing was changed. "
            "Merging them is not automatic: keep the server whose jobs you need, move the "
            f"other's rows there by hand (or drop them), then run this again"
        )
    lines: list[str] = []
    for server in homes:
        if server != keep and server not in holding:
            lines.append(await _retire(store, d, server, MOVED))
    if holding and holding[0] != keep:
        lines.append(await _retire(store, d, keep, COPYING))
        report = await move_shard(store, d, keep, progress=progress)
        lines.extend(report.lines())
    with contextlib.suppress(Exception):
        await store.rediscover()
    lines.append(f"logical shard {d} lives on {store.servers[keep]} alone")
    return lines


async def _retire(store: MySQLStore, d: int, server: int, state: str) -> str:
    """Server stops saying home for d (its row `state`) and its tables of d, which hold
    no jobs, go into <shard>_moved there (dropped when empty). Jobs that arrived after
    they were counted: everything is put back, and ShardMoveError."""
    pool = await store.server_pool(server)
    shard_db = store.database_name(d)
    moved_db = f"{shard_db}_moved"
    spec = store.servers[server]
    if await tables_in(pool, moved_db):
        raise ShardMoveError(
            f"{moved_db} on {spec} still holds the tables of an earlier move of logical "
            f"shard {d}; check them, DROP DATABASE `{moved_db}` there and run this again"
        )
    tables = [name for _, name in shard_table_names(store.settings.mysql_tables)]
    present = set(await tables_in(pool, shard_db))
    names = [name for name in tables if name in present]
    [(charset, collation)] = await fetch(
        pool,
        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME"
        " FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
        (shard_db,),
    )
    await _run(
        pool,
        f"CREATE DATABASE IF NOT EXISTS {q(moved_db)} CHARACTER SET {charset} COLLATE {collation}",
    )
    await _set_state(pool, store, d, state, expected=HOME)
    renamed = False
    try:
        if names:
            await _run(pool, _rename(names, shard_db, moved_db))
            renamed = True
        after = await held_rows(store, server, moved_db)
        if jobs_in(after):
            raise ShardMoveError(
                f"{spec} received jobs of logical shard {d} while it was being resolved "
                f"({describe(after)}): it is home again as before, and several servers may "
                "now hold jobs; run `delayq db homes` and resolve again"
            )
    except BaseException:
        with contextlib.suppress(Exception):
            if renamed:
                await _run(pool, _rename(names, moved_db, shard_db))
            await _set_state(pool, store, d, HOME, expected=state)
        raise
    if any(after.values()):
        kept = f"its tables ({describe(after)}) are kept in {moved_db} there"
    else:
        await _run(pool, f"DROP DATABASE {q(moved_db)}")
        kept = "its empty tables there were dropped"
    if state == COPYING:
        return f"{spec} set to receive logical shard {d} ({kept})"
    return f"{spec} no longer serves logical shard {d} ({kept})"


def _rename(names: list[str], source: str, target: str) -> str:
    return "RENAME TABLE " + ", ".join(f"{at(source, n)} TO {at(target, n)}" for n in names)


async def _set_state(
    pool: aiomysql.Pool, store: MySQLStore, d: int, state: str, *, expected: str
) -> None:
    async with pool.acquire() as conn, conn.cursor() as cur:
        changed = await cur.execute(
            f"UPDATE {q(store.database)}.delayq_shards SET state = %s, changed_at = NOW(3)"
            " WHERE db_index = %s AND state = %s",
            (state, d, expected),
        )
    if not changed:
        raise ShardMoveError(
            f"logical shard {d}'s row changed meanwhile (no longer {expected}): run "
            "`delayq db homes` and try again"
        )


async def _run(pool: aiomysql.Pool, statement: str) -> None:
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(statement)


def _names(store: MySQLStore, servers: list[int]) -> str:
    return ", ".join(str(store.servers[s]) for s in servers)


def _servers(store: MySQLStore) -> str:
    return ", ".join(str(spec) for spec in store.servers)
