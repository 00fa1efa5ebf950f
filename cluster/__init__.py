"""delayq for producers and operators: the client, its jobs, answers and errors, and the
settings.

    from cluster import DelayClient

    async with DelayClient.from_env() as client:
        job_id = await client.schedule("orders.close", {"order": 42}, delay=1800)

Subpackages, from the bottom layer up (each ``__init__`` says what it may import;
tests/unit/test_layout.py enforces it): ``errors``, ``settings``, ``connections`` and
``model``, ``store``, ``scripts``, ``client``, ``observe`` and ``process``, then
``web`` and ``ingress`` (beside the node runtime, the package ``actors``), then ``cli``.
``devstack`` is the development stack; production code never imports it. The Lua
scripts (``cluster.lua``) and SQL migrations (``cluster.schema``) are package data.
"""

from cluster import deprecated
from cluster.client.dead_letters import DeadJob
from cluster.client.delay_client import DelayClient
from cluster.errors import (
    ConfigError,
    DelayqError,
    InvalidJob,
    OutcomeUnknown,
    RedisStepFailed,
    ReplicationUnconfirmed,
    StoreAccessError,
    StoreMismatch,
    StoreUnavailable,
)
from cluster.model.changes import CancelResult, ChangeResult, ChangeStatus, RescheduleResult
from cluster.model.contract import JobStatus
from cluster.model.jobs import Job
from cluster.settings.config import Settings
from cluster.store.recurring_store import RecurringSchedule
from cluster.store.rows import JobRecord

# The release (pyproject.toml's version; CHANGELOG.md says what each one changed).
__version__ = "0.2.0"

deprecated.install()  # 0.1's import paths, with a DeprecationWarning, until 0.3

__all__ = [
    "CancelResult",
    "ChangeResult",
    "ChangeStatus",
    "ConfigError",
    "DeadJob",
    "DelayClient",
    "DelayqError",
    "InvalidJob",
    "Job",
    "JobRecord",
    "JobStatus",
    "OutcomeUnknown",
    "RecurringSchedule",
    "RedisStepFailed",
    "ReplicationUnconfirmed",
    "RescheduleResult",
    "Settings",
    "StoreAccessError",
    "StoreMismatch",
    "StoreUnavailable",
]
