"""The producer API: ``DelayClient`` (schedule, schedule_many, schedule_in, cancel,
reschedule, get), recurring schedules, dead letters, the JSON form of jobs, and the
helpers downstream consumers use. ``from cluster import DelayClient`` is its front door.

May import: cluster.errors, cluster.settings, cluster.connections, cluster.model,
cluster.store, cluster.scripts.

- ``delay_client``: ``DelayClient``, the facade producers call
- ``job_writer``: the write path of new jobs (validation of a batch, MySQL, then Redis)
- ``job_changes``: cancel and reschedule, and the answers they give
- ``recurring``: recurring schedules (``RecurringSchedule``)
- ``dead_letters``: dead letters: list, replay, purge (``DeadJob``)
- ``job_json``: jobs, records and dead letters as JSON
- ``consumer``: ``FiredRecords`` and ``Deduplicator`` for consumers of fired jobs
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``from cluster.client import DelayClient``, 0.1's path, until 0.3."""
    if name == "DelayClient":
        from cluster.client.delay_client import DelayClient
        from cluster.deprecated import warn_moved

        warn_moved("cluster.client.DelayClient", "cluster.DelayClient")
        return DelayClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
