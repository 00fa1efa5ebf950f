"""Recurring ticks' job rows into their schedule's logical shard, for clusters created
before ticks lived there (cluster/model/keys.py: shard_of).

A tick's job row used to be in the logical shard of its own id; now it is in its
schedule's, so that a schedule's row and its ticks' jobs are one transaction on one
server. With one logical shard nothing differs. With several (all on one server: the
only layout before several servers were possible), `delayq db migrate` moves each tick
row found in another logical shard, with its history, to where shard_of puts it now, on
the same server, each row in one transaction. It runs on every migrate, so run migrate
once more after the last node of the older release has stopped (such a node still
writes ticks at the old place). Rows already at their place cost one index range scan
per table (the primary key's "@recurring:" prefix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cluster.model.keys import shard_of
from cluster.model.tick_ids import RECURRING_PREFIX

if TYPE_CHECKING:
    from cluster.store.migrations import ShardedDatabase

PAGE = 1000


async def place_tick_rows(store: ShardedDatabase, cur: Any, dbs: list[int]) -> int:
    """Move the tick rows of these logical shards (on the server of `cur`) that belong to
    another logical shard of the same server; returns how many moved. A row whose new
    shard is on another server stays (and is reported by the count of those left)."""
    databases, tables = store.settings.mysql_databases, store.settings.mysql_tables
    if databases == 1:
        return 0
    moved = 0
    for shard in store.all_shards(dbs):
        jobs, history = store.shard_tables(shard)
        after = RECURRING_PREFIX
        while True:
            await cur.execute(
                f"SELECT job_id FROM {jobs} WHERE job_id > %s AND job_id LIKE %s"
                " ORDER BY job_id LIMIT %s",
                (after, RECURRING_PREFIX + "%", PAGE),
            )
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:
                break
            after = ids[-1]
            for job_id in ids:
                target = shard_of(job_id, databases, tables)
                if target[0] == shard[0] or target[0] not in dbs:
                    continue
                new_jobs, new_history = store.shard_tables(target)
                await cur.execute("BEGIN")
                await cur.execute(
                    f"INSERT IGNORE INTO {new_jobs} SELECT * FROM {jobs} WHERE job_id = %s",
                    (job_id,),
                )
                await cur.execute(
                    f"INSERT INTO {new_history} (job_id, status, attempt, node, slot, at, note)"
                    f" SELECT job_id, status, attempt, node, slot, at, note FROM {history}"
                    " WHERE job_id = %s ORDER BY id",
                    (job_id,),
                )
                await cur.execute(f"DELETE FROM {history} WHERE job_id = %s", (job_id,))
                await cur.execute(f"DELETE FROM {jobs} WHERE job_id = %s", (job_id,))
                await cur.execute("COMMIT")
                moved += 1
    return moved
