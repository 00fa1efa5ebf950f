"""The SQL of the job tables' hot writes, built as multi-row statements: new job rows,
history rows, and the outcomes a node's recorder applies; and the marks of jobs whose
half-done cancel a node restores (restored_ms, migration 008).

Built here as text (sql.multi_row, one escape per text value) rather than by the driver,
whose per-parameter escaping cost more than the database's work. MySQLStore
(cluster/store/mysql_store.py) names the tables, holds the connections and calls these.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cluster.model.contract import WAITING_STATUSES, JobStatus
from cluster.model.job_fields import OPTIONS
from cluster.model.jobs import ValidJob
from cluster.store import sql
from cluster.store.rows import JOB_COLUMNS, OPTION_COLUMNS, JobRecord, Outcome, record_of_row

Quote = Callable[[str | None], str]
Shard = tuple[int, int]

# Status literals of the SQL below, built once from the contract (cluster/model/contract.py).
_FIRED = str(int(JobStatus.FIRED))
_PENDING_FIELD = f",{int(JobStatus.PENDING)},"  # the status value of an inserted row
_WAITING = sql.int_list(WAITING_STATUSES)  # not fired yet: pending or retrying
# A fired outcome applies to a dead or expired row too: a job the reaper buried or
# expired whose publish was acked late.
_FIREABLE = sql.int_list((*WAITING_STATUSES, JobStatus.DEAD, JobStatus.EXPIRED))


def insert_statements(
    conn: Any,
    shard_tables: Callable[[Shard], tuple[str, str]],
    jobs: Sequence[ValidJob],
    slots: Sequence[int],
    by_shard: dict[Shard, list[int]],
    stamp_utc: bool = False,
) -> Iterator[str]:
    """Multi-row INSERTs of the jobs, shard by shard (`by_shard`: indexes into jobs and
    slots); an existing job_id keeps its row (see MySQLStore.insert_jobs). A generator,
    so a caller can run one statement while the next is built (sql.execute_overlapped).
    stamp_utc: set gmt_create and gmt_modified to UTC_TIMESTAMP(3) rather than leaving
    them to the session's clock (a caller's connection, schedule_in)."""
    quote = sql.quoter(conn)
    times = sql.DatetimeLiterals()
    stamps = ",UTC_TIMESTAMP(3),UTC_TIMESTAMP(3)" if stamp_utc else ""
    stamp_columns = ", gmt_create, gmt_modified" if stamp_utc else ""
    topics: dict[str, str] = {}
    option_literals = _option_literals(quote)

    def rows(indexes: list[int]) -> Iterator[str]:
        pending = _PENDING_FIELD  # a local: the row below is built once per job
        for i in indexes:
            job = jobs[i]
            topic = topics.get(job.topic)
            if topic is None:
                topic = topics[job.topic] = quote(job.topic)
            stored = ",".join([literal(getattr(job, attr)) for attr, literal in option_literals])
            yield (
                f"({quote(job.job_id)},{topic}{pending}{times.of(job.due_ms)},"
                f"{sql.utf8_literal(job.payload_json)},{int(slots[i])},{stored}{stamps})"
            )

    for shard, indexes in by_shard.items():
        table, _ = shard_tables(shard)
        yield from sql.multi_row(
            f"INSERT INTO {table} (job_id, topic, status, action_time, payload, slot,"
            f" {', '.join(OPTION_COLUMNS)}{stamp_columns}) VALUES ",
            rows(indexes),
            " ON DUPLICATE KEY UPDATE job_id = job_id",
        )


def _option_literals(quote: Quote) -> list[tuple[str, Callable[[Any], str]]]:
    """For each stored option (OPTION_COLUMNS' order), its ValidJob attribute and how its
    value is written as SQL: an int as digits, text quoted, None as NULL."""

    def number(value: Any) -> str:
        return "NULL" if value is None else str(int(value))

    return [
        (option.kept_as, number if option.column_type is int else quote)
        for option in OPTIONS
        if option.column
    ]


async def insert_history(
    cur: Any,
    quote: Quote,
    node_id: str,
    table: str,
    rows: Sequence[tuple[str, int, int, int, str, int]],
) -> None:
    """Insert history rows (job_id, status, attempt, slot, note, at_ms), written by
    node_id."""
    node = quote(node_id)
    values = (
        f"({quote(job_id)},{int(status)},{int(attempt)},{node},{int(slot)},"
        f"FROM_UNIXTIME({at_ms // 1000}.{at_ms % 1000:03d}),{quote(note[:1000] or None)})"
        for job_id, status, attempt, slot, note, at_ms in rows
    )
    head = f"INSERT INTO {table} (job_id, status, attempt, node, slot, at, note) VALUES "
    for statement in sql.multi_row(head, values):
        await cur.execute(statement)


async def apply_outcomes(cur: Any, quote: Quote, table: str, outcomes: Sequence[Outcome]) -> None:
    """Apply one shard's journal entries to its job table (`table`): status, attempts
    and last error. Fired jobs go in multi-row UPDATEs, one per attempt number."""
    fired: dict[int, list[str]] = defaultdict(list)  # job ids by attempt
    others: list[Outcome] = []
    for o in outcomes:
        if o.status == JobStatus.FIRED:
            fired[o.attempt].append(o.job_id)
        else:
            others.append(o)
    for attempt, ids in fired.items():
        # Attempt 0: the ack of a job the reaper had expired, which does not know the
        # attempt (lua/ack.lua); the row's count stands.
        attempts = f", attempts = {int(attempt)}" if attempt else ""
        for statement in sql.multi_row(
            f"UPDATE {table} SET status = {_FIRED}{attempts} WHERE job_id IN (",
            map(quote, ids),
            f") AND status IN ({_FIREABLE})",
        ):
            await cur.execute(statement)
    # In journal order: a job's "dead" comes before its "replayed".
    if others:
        await cur.executemany(
            f"UPDATE {table} SET status = %s, attempts = %s, last_error = %s"
            f" WHERE job_id = %s AND status IN ({_WAITING}, %s)",
            [_status_change(o) for o in others],
        )


def _status_change(outcome: Outcome) -> tuple[int, int, str | None, str, int]:
    """Parameters of the UPDATE for a retrying, dead, expired or replayed outcome:
    status, attempts, last error, job id, and the third status the row may be in besides
    the waiting ones (pending, retrying). A replay (to pending) applies to a dead row and
    clears the last error; retrying, dead and expired apply only to waiting rows."""
    if outcome.status == JobStatus.PENDING:
        return (int(JobStatus.PENDING), outcome.attempt, None, outcome.job_id, int(JobStatus.DEAD))
    return (
        int(outcome.status),
        outcome.attempt,
        outcome.note[:1000] or None,
        outcome.job_id,
        int(JobStatus.FIRING),
    )


def unrestored_since(since_ms: int | None) -> tuple[tuple[int, ...], str]:
    """(parameters, SQL condition) of an UPDATE that applies only to a row not restored
    at or after since_ms (a cancel's Redis TIME): a cancel whose MySQL step comes after
    a node restored its job (mark_restored) changes nothing, and its caller tries again.
    Nothing when since_ms is None."""
    if since_ms is None:
        return (), ""
    return (int(since_ms),), " AND (restored_ms IS NULL OR restored_ms < %s)"


async def mark_restored(pool: Any, table: str, marks: dict[str, int]) -> list[JobRecord]:
    """The rows of `marks`' jobs in one shard's job table (`table`) that are still
    waiting, each given restored_ms = marks[job_id], in one committed transaction (the
    rows locked between the read and the write). Committed before the jobs go back into
    Redis: from then on, the UPDATE of a cancel whose Redis step was before its mark
    changes nothing (unrestored_since)."""
    if not marks:
        return []
    ids = list(marks)
    listed = ", ".join(["%s"] * len(ids))
    async with pool.acquire() as conn:
        await conn.begin()
        try:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT {JOB_COLUMNS} FROM {table} WHERE job_id IN ({listed})"
                    f" AND status IN ({_WAITING}) FOR UPDATE",
                    ids,
                )
                rows = [record_of_row(row) for row in await cur.fetchall()]
                if rows:
                    await cur.executemany(
                        f"UPDATE {table} SET restored_ms = %s WHERE job_id = %s",
                        [(int(marks[row.job_id]), row.job_id) for row in rows],
                    )
            await conn.commit()
        except BaseException:
            # A broken connection rolls back by itself; one that works is given back clean.
            with contextlib.suppress(Exception):
                await conn.rollback()
            raise
    return rows
