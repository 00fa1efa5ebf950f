"""A job's history as people read it: its creation first, then every status change
MySQL recorded.

The "created" entry is made from the row's gmt_create when the history is read, not
written as a history row: writing one per job would double the rows every schedule
writes (and retention deletes), for a fact the job's own row already holds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cluster.model.contract import JobStatus
from cluster.store.mysql_store import MySQLStore
from cluster.store.rows import JobRecord

CREATED_NOTE = "created"


def created_entry(record: JobRecord) -> dict[str, Any]:
    """The history entry of the job's creation, shaped like a history row (MySQL's
    naive UTC datetime in "at")."""
    created = dt.datetime.fromtimestamp(record.created_ms / 1000, dt.UTC).replace(tzinfo=None)
    return {
        "status": int(JobStatus.PENDING),
        "attempt": 0,
        "node": None,
        "slot": record.slot,
        "at": created,
        "note": CREATED_NOTE,
    }


async def history_of(mysql: MySQLStore, record: JobRecord) -> list[dict[str, Any]]:
    """The job's history rows (MySQLStore.history), its creation first."""
    return [created_entry(record), *await mysql.history(record.job_id)]
