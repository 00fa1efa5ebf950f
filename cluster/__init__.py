"""delayq for producers and operators: the client, its jobs and errors, settings, the
stores both producers and nodes use, and the `delayq` command line.

    from cluster import DelayClient

    async with DelayClient.from_env() as client:
        job_id = await client.schedule("orders.close", {"order": 42}, delay=1800)

The node runtime (the actors that fire jobs) is the package `actors`.
"""

from cluster.client import (
    DeadJob,
    DelayClient,
    OutcomeUnknown,
    RecurringSchedule,
    RedisStepFailed,
    ReplicationUnconfirmed,
    StoreUnavailable,
)
from cluster.config import ConfigError, Settings
from cluster.contract import JobStatus
from cluster.jobs import InvalidJob, Job
from cluster.mysql_store import JobRecord

__all__ = [
    "ConfigError",
    "DeadJob",
    "DelayClient",
    "InvalidJob",
    "Job",
    "JobRecord",
    "JobStatus",
    "OutcomeUnknown",
    "RecurringSchedule",
    "RedisStepFailed",
    "ReplicationUnconfirmed",
    "Settings",
    "StoreUnavailable",
]
