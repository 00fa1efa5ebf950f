"""insert_jobs(): a batch of new jobs into their shards' tables, one transaction per
server, and what it answers when only some servers commit (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import pymysql
from pymysql.constants import ER

from cluster.errors import CommitUnknown, ServerStalled
from cluster.model.jobs import ValidJob
from cluster.store import job_writes, sql

if TYPE_CHECKING:
    from cluster.store.sharded import Shard, ShardedStore


# Error 1213 (an InnoDB deadlock, or a Galera certification conflict with a write of
# the same job_id on another node) rolled the whole transaction back: it is run again,
# and then keeps the row the other wrote, as one server's lock wait would have.
CONFLICT_RETRIES = 3


class PartialCommit(Exception):
    """insert_jobs() over several servers where some did not commit: the indexes of the
    jobs each way (every job in exactly one list). `cause`: one server's error.
    `stalled`: those of `unknown` whose server was cut off for answering nothing
    (ServerStalled): not worth reading back at once."""

    def __init__(
        self,
        committed: list[int],
        refused: list[int],
        unknown: list[int],
        cause: BaseException,
        stalled: list[int] | None = None,
    ) -> None:
        super().__init__(f"{len(committed)} committed, {len(refused) + len(unknown)} not: {cause}")
        self.committed, self.refused, self.unknown, self.cause = committed, refused, unknown, cause
        self.stalled = stalled or []


async def insert_jobs(store: ShardedStore, jobs: Sequence[ValidJob], slots: Sequence[int]) -> int:
    """Insert each job; an existing job_id keeps its row. Multi-row statements, in
    one transaction per server when there are several. Returns how many rows were
    new: when it is len(jobs), no job_id existed before, and nothing needs reading
    back. Jobs on one server: all or none (CommitUnknown when the commit's answer is
    lost). Over several servers, each commits on its own: when one fails, raises
    PartialCommit saying which jobs are committed, which are not, and which unknown.

    "ON DUPLICATE KEY UPDATE job_id = job_id" rather than INSERT IGNORE: same effect,
    but no MySQL warning (which costs aiomysql a SHOW WARNINGS round trip). Without
    the FOUND_ROWS client flag (never set here) MySQL counts an inserted row as 1
    and a kept one, whose update changes nothing, as 0.
    """
    if not jobs:
        return 0
    by_shard = store.by_shard(job.job_id for job in jobs)

    async def insert(conn: Any, dbs: list[int]) -> int:
        mine = {shard: ix for shard, ix in by_shard.items() if shard[0] in dbs}
        retries = CONFLICT_RETRIES
        while True:
            try:
                return await _insert_on(store, conn, jobs, slots, mine)
            except pymysql.err.OperationalError as exc:
                if not retries or not exc.args or exc.args[0] != ER.LOCK_DEADLOCK:
                    raise
                retries -= 1
                with contextlib.suppress(pymysql.err.Error):
                    await conn.rollback()

    # Each server on its own, all at once; one server fails as before (raises). A server
    # that stalls while the others are done is cut off: its jobs' outcome is unknown.
    parts, failures = await store.router.run_each_server(
        {shard[0] for shard in by_shard}, insert, bounded=False, stall=True
    )
    if not failures:
        return sum(parts)
    failed = {d: error for dbs, error in failures for d in dbs}
    committed: list[int] = []
    refused: list[int] = []
    unknown: list[int] = []
    stalled: list[int] = []
    for shard, indexes in by_shard.items():
        error = failed.get(shard[0])
        if error is None:
            committed += indexes
        else:
            uncertain = isinstance(error, CommitUnknown | ServerStalled)
            (unknown if uncertain else refused).extend(indexes)
            if isinstance(error, ServerStalled):
                stalled.extend(indexes)
    cause = failures[0][1]
    if not committed and not unknown:
        raise cause  # nothing anywhere: as one server's failure
    raise PartialCommit(sorted(committed), sorted(refused), sorted(unknown), cause, sorted(stalled))


async def _insert_on(
    store: ShardedStore,
    conn: Any,
    jobs: Sequence[ValidJob],
    slots: Sequence[int],
    by_shard: dict[Shard, list[int]],
) -> int:
    """insert_jobs() on one server: these shards' jobs, one transaction if several
    statements."""
    statements = job_writes.insert_statements(conn, store.shard_tables, jobs, slots, by_shard)
    # Several statements go in one transaction: all jobs of the call or none.
    # The first two are built up front to know whether there is a second.
    first, second = next(statements), next(statements, None)
    in_transaction = second is not None
    if in_transaction:
        await conn.begin()
    committing = not in_transaction
    limit = store.settings.mysql_statement_timeout_s
    try:
        # Bounded here rather than by the router: a commit cut off is of unknown outcome.
        async with asyncio.timeout(limit):
            async with conn.cursor() as cur:
                inserted = await sql.execute_overlapped(
                    cur, chain([first], [second] if second else [], statements)
                )
            if in_transaction:
                committing = True
                await conn.commit()
        return inserted
    except TimeoutError:
        conn.close()  # its answer may still come: never reused
        message = f"no answer within mysql_statement_timeout_s ({limit} s)"
        if committing:
            raise CommitUnknown(message) from None
        raise pymysql.err.OperationalError(sql.LOST_DURING_QUERY, message) from None
    except asyncio.CancelledError:
        conn.close()
        raise
    except pymysql.err.OperationalError as exc:
        if committing and exc.args and exc.args[0] == sql.LOST_DURING_QUERY:
            raise CommitUnknown(str(exc)) from exc
        raise  # not committed: a broken connection rolls the transaction back
