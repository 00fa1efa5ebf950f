"""Moving one logical shard (the database ``<main>_<d>`` and its tables) from the server
that serves it to another, while nodes and producers run: `delayq db move-shard D --to
SERVER` (docs/cluster.md, "Moving a logical shard").

1. check: D is home on a source server S, the target T answers and is not S, both have
   every migration applied, mysql_databases > 1, the caller may read INNODB_TRX;
2. on T: the database and the tables as S has them (SHOW CREATE), T's delayq_shards row
   'copying';
3. bulk copy, 4. catch-up rounds until one copies few rows (cluster/store/shard_copy.py);
5. switch: S's row 'moved' (waiting for schedule_in transactions holding it in share
   mode), one atomic RENAME TABLE of all D's tables into ``<main>_<d>_moved`` (waiting for
   the transactions using them; from then on anyone still using them gets error 1146 and
   looks for the new home), the final round from the renamed tables (outbox and recurring
   made identical), T's row 'home'. The pause is from S's 'moved' to T's 'home'.
6. run again after a crash, it goes on: before the switch it copies again (every round
   is safe to repeat); after it, it copies everything from the renamed tables (the
   catch-up marks died with the process) and sets T home.

Rows deleted on S during the move (retention prunes finished jobs and their history)
may stay on T: they are old, finished, and pruned there again. The renamed tables stay
on S until an operator drops ``<main>_<d>_moved``.
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from dataclasses import dataclass, field

import aiomysql
import pymysql

from cluster.store.mysql_store import MySQLStore
from cluster.store.routing import COPYING, HOME, MOVED
from cluster.store.shard_copy import Copier, Marks, Progress, fetch, q
from cluster.store.shard_plan import Plan, ShardMoveError, at, check, move_lock, tables_in

__all__ = ["MoveReport", "ShardMoveError", "move_shard"]

MAX_ROUNDS = 8  # catch-up rounds before switching anyway
FEW_ROWS = 2000  # a catch-up round that copied at most this many is the last
SWITCH_LOCK_WAIT_S = 10  # how long the switch waits for transactions holding D
LOCK_WAIT_TIMEOUT = 1205


@dataclass
class MoveReport:
    """What one move did."""

    db_index: int
    source: str
    target: str
    rows: dict[str, int] = field(default_factory=dict)  # rows written, by table kind
    rounds: int = 0  # catch-up rounds
    pause_ms: float | None = None  # from S's 'moved' to T's 'home'
    seconds: float = 0.0
    resumed: str = ""  # "", "before the switch" or "after the switch"
    already: bool = False  # D was home on the target already: nothing done

    def lines(self) -> list[str]:
        if self.already:
            return [f"logical shard {self.db_index} already lives on {self.target}: nothing to do"]
        copied = ", ".join(f"{kind} {n:,}" for kind, n in sorted(self.rows.items()))
        total = sum(self.rows.values())
        rate = total / self.seconds if self.seconds else 0.0
        lines = [
            f"moved logical shard {self.db_index} from {self.source} to {self.target}"
            + (f" (resumed {self.resumed})" if self.resumed else ""),
            f"rows written: {total:,} ({copied}); {self.rounds} catch-up round(s)",
            f"total {self.seconds:.1f} s ({rate:,.0f} rows/s)",
        ]
        if self.pause_ms is not None:
            lines.append(f"pause (shard served by no server): {self.pause_ms:.0f} ms")
        return lines


async def move_shard(
    store: MySQLStore, db_index: int, target: int, *, progress: Progress | None = None
) -> MoveReport:
    """Move logical shard db_index to server `target` (steps in the module docstring);
    raises ShardMoveError when it cannot start or go on."""
    started = time.monotonic()
    plan = await check(store, db_index, target)
    report = MoveReport(db_index, str(plan.source), str(plan.target), resumed=plan.resumed)
    if plan.phase == "done":
        report.already = True
        return report
    async with move_lock(plan):
        marks = Marks(None)
        if plan.phase == "copy":
            await prepare_target(plan, progress)
            marks, report.rounds, copier = await copy_and_catch_up(plan, progress)
            report.rows = dict(copier.rows)
            pause_start = await switch(plan, progress)
        else:
            plan.say(progress, f"resuming after the switch: copying all of {plan.moved_db}")
            pause_start = time.monotonic()
            if plan.phase == "switched":
                await _rename(plan)
        rows = await finish(plan, marks, progress)
        report.pause_ms = (time.monotonic() - pause_start) * 1000
        for kind, n in rows.items():
            report.rows[kind] = report.rows.get(kind, 0) + n
    with contextlib.suppress(Exception):
        await store.rediscover()
    report.seconds = time.monotonic() - started
    return report


# ----- 2-4. the target, the copy, the catch-up --------------------------------------------


async def prepare_target(plan: Plan, progress: Progress | None = None) -> None:
    """T's row 'copying', then the shard's database and tables as S has them."""
    await _set_state(plan.tgt, plan, COPYING)
    [(_, create_db)] = await fetch(plan.src, f"SHOW CREATE DATABASE {q(plan.shard_db)}")
    await _run(plan.tgt, _if_not_exists(create_db, "DATABASE"))
    for _, name in plan.tables:
        [(_, create)] = await fetch(plan.src, f"SHOW CREATE TABLE {at(plan.shard_db, name)}")
        await _run(plan.tgt, _if_not_exists(create, "TABLE", plan.shard_db))
    await _check_same_tables(plan)
    plan.say(progress, f"created {plan.shard_db}'s {len(plan.tables)} tables on {plan.target}")


async def copy_and_catch_up(
    plan: Plan, progress: Progress | None = None
) -> tuple[Marks, int, Copier]:
    """The bulk copy, then catch-up rounds; the marks the final round starts from."""
    copier = await _copier(plan, plan.shard_db, progress)
    [(estimate,)] = await fetch(
        plan.src,
        "SELECT COALESCE(SUM(TABLE_ROWS), 0) FROM information_schema.TABLES"
        " WHERE TABLE_SCHEMA = %s",
        (plan.shard_db,),
    )
    plan.say(
        progress,
        f"copying logical shard {plan.d} ({plan.shard_db}, about {int(estimate):,} rows) "
        f"from {plan.source} to {plan.target}",
    )
    marks = Marks(None)
    rounds = 0
    phase = "copy"
    while True:
        following = await copier.snapshot(plan.shard_db, marks)
        began = time.monotonic()
        copied = await copier.copy_round(plan.shard_db, marks, phase)
        marks = following
        plan.say(progress, f"{phase}: {copied:,} rows in {time.monotonic() - began:.1f} s")
        if phase != "copy" and (copied <= FEW_ROWS or rounds >= MAX_ROUNDS):
            return marks, rounds, copier
        rounds += 1
        phase = f"catch-up round {rounds}"


async def _copier(plan: Plan, source_db: str, progress: Progress | None) -> Copier:
    rows = await fetch(
        plan.src,
        "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME, ORDINAL_POSITION",
        (source_db,),
    )
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(str(table), []).append(str(column))
    return Copier(plan.src, plan.tgt, plan.shard_db, plan.tables, columns, progress)


async def _check_same_tables(plan: Plan, source_db: str | None = None) -> None:
    """T's tables have S's columns and indexes (no migration ran on one side only)."""
    columns = (
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE,"
        " COLUMN_DEFAULT, EXTRA, COLLATION_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s ORDER BY 1, 3"
    )
    indexes = (
        "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE"
        " FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s ORDER BY 1, 2, 3"
    )
    for query in (columns, indexes):
        mine = await fetch(plan.src, query, (source_db or plan.shard_db,))
        theirs = await fetch(plan.tgt, query, (plan.shard_db,))
        if mine != theirs:
            raise ShardMoveError(
                f"the tables of {plan.shard_db} on {plan.target} differ from those on "
                f"{plan.source} (a migration ran on one of them during the move?): run "
                f"`delayq db migrate`, DROP DATABASE `{plan.shard_db}` on {plan.target} "
                "and run the move again"
            )


# ----- 5. the switch ----------------------------------------------------------------------


async def switch(plan: Plan, progress: Progress | None = None) -> float:
    """S's row 'moved', then the RENAME; returns when the pause began (time.monotonic).
    On a failure S is home again and nothing was renamed."""
    await _check_same_tables(plan)
    [(_, create_db)] = await fetch(plan.src, f"SHOW CREATE DATABASE {q(plan.shard_db)}")
    await _run(plan.src, _if_not_exists(create_db, "DATABASE", rename_to=plan.moved_db))
    plan.say(progress, f"switching: {plan.source} stops serving logical shard {plan.d}")
    began = time.monotonic()
    async with plan.src.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            f"SET SESSION innodb_lock_wait_timeout = {SWITCH_LOCK_WAIT_S},"
            f" lock_wait_timeout = {SWITCH_LOCK_WAIT_S}"
        )
        try:
            # Waits for schedule_in transactions that read the row in share mode.
            changed = await cur.execute(
                f"UPDATE {q(plan.main)}.delayq_shards SET state = %s, changed_at = NOW(3)"
                " WHERE db_index = %s AND state = %s",
                (MOVED, plan.d, HOME),
            )
            if not changed:
                raise ShardMoveError(f"{plan.source} stopped saying home for shard {plan.d}")
            try:
                await cur.execute(_rename_statement(plan))
            except BaseException:
                # Home again, unless the RENAME took effect and only its answer was lost
                # (then running the move again finishes it).
                with contextlib.suppress(Exception):
                    if await tables_in(plan.src, plan.shard_db):
                        await _set_state(plan.src, plan, HOME)
                raise
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == LOCK_WAIT_TIMEOUT:
                raise ShardMoveError(
                    f"a transaction on logical shard {plan.d} stayed open for more than "
                    f"{SWITCH_LOCK_WAIT_S} s on {plan.source}, so the switch was not made (the "
                    "shard is still served there); run the move again"
                ) from exc
            raise
        finally:
            with contextlib.suppress(pymysql.MySQLError):
                await cur.execute(
                    "SET SESSION innodb_lock_wait_timeout = DEFAULT, lock_wait_timeout = DEFAULT"
                )
    return began


async def _rename(plan: Plan) -> None:
    [(_, create_db)] = await fetch(plan.src, f"SHOW CREATE DATABASE {q(plan.shard_db)}")
    await _run(plan.src, _if_not_exists(create_db, "DATABASE", rename_to=plan.moved_db))
    await _run(plan.src, _rename_statement(plan))


def _rename_statement(plan: Plan) -> str:
    return "RENAME TABLE " + ", ".join(
        f"{at(plan.shard_db, name)} TO {at(plan.moved_db, name)}" for _, name in plan.tables
    )


async def finish(plan: Plan, marks: Marks, progress: Progress | None = None) -> dict[str, int]:
    """The final round from the renamed tables, then T home; the rows it wrote."""
    copier = await _copier(plan, plan.moved_db, progress)
    await _check_same_tables(plan, plan.moved_db)
    copied = await copier.copy_round(plan.moved_db, marks, "final copy")
    deleted = await copier.make_exact(plan.moved_db)
    await copier.match_counters(plan.moved_db)
    await _set_state(plan.tgt, plan, HOME)
    plan.say(
        progress,
        f"final copy: {copied:,} rows, {deleted:,} deleted; {plan.target} serves logical "
        f"shard {plan.d}",
    )
    return dict(copier.rows)


# ----- small helpers ------------------------------------------------------------------------


async def _set_state(pool: aiomysql.Pool, plan: Plan, state: str) -> None:
    await _run(
        pool,
        f"REPLACE INTO {q(plan.main)}.delayq_shards (db_index, state, changed_at)"
        f" VALUES ({int(plan.d)}, '{state}', NOW(3))",
    )


async def _run(pool: aiomysql.Pool, statement: str) -> None:
    with warnings.catch_warnings():
        # "IF NOT EXISTS" on an existing database or table is a MySQL warning.
        warnings.simplefilter("ignore", pymysql.Warning)
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(statement)


def _if_not_exists(
    create: str, what: str, database: str | None = None, rename_to: str | None = None
) -> str:
    """SHOW CREATE's statement made idempotent: CREATE <what> IF NOT EXISTS, a table
    qualified with `database`, a database given the name `rename_to`."""
    head = re.match(rf"CREATE {what} (?:IF NOT EXISTS )?`([^`]+)`", create)
    if head is None:
        raise ShardMoveError(f"unexpected SHOW CREATE {what}: {create[:80]}")
    name = head[1] if database is None else f"{database}`.`{head[1]}"
    if rename_to is not None:
        name = rename_to
    return f"CREATE {what} IF NOT EXISTS `{name}`" + create[head.end() :]
