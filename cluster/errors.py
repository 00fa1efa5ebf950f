"""Every exception delayq raises on purpose, in one hierarchy: ``except DelayqError``
catches any of them. The bottom layer of the package: it imports nothing of delayq.

Errors that were a ValueError or a RuntimeError before the hierarchy existed still are
one (a second base), so ``except ValueError`` around ``schedule()`` keeps working.
docs/client.md lists when each is raised and what to do about it.

    DelayqError
    ├── ConfigError (ValueError)          a setting is wrong or missing
    │   └── StoreAccessError              a store refused the credentials or TLS
    │       ├── KafkaAccessError
    │       └── ZooKeeperAccessError
    ├── InvalidJob (ValueError)           a job was refused; nothing was written
    ├── StoreUnavailable                  MySQL (or Redis, at open) unreachable
    │   ├── ServerStalled                 a MySQL server answered nothing for a while
    │   └── ShardHomeConflict             two MySQL servers claim one logical shard
    ├── StoreMismatch                     schedule_in() got a connection that can't write
    ├── OutcomeUnknown                    may or may not have happened: .job_ids
    │   ├── CommitUnknown                 the MySQL commit's answer was lost
    │   ├── RedisStepFailed               committed in MySQL, not yet in Redis
    │   ├── ScheduleIncomplete            a batch over several servers: some failed
    │   └── ReplicationUnconfirmed        done on the master, replicas did not confirm
    ├── SchemaError                       the database's schema is not this version's
    ├── Fenced                            a script refused a stale ownership epoch
    ├── LeaseLapsed                       a node's hold of its slots went unconfirmed
    ├── RedisRestarted                    a slot's Redis is not the one its watermark names
    ├── SlotFailed, SlotsFailed           a slot's script run failed (Redis node down)
    ├── UnsafeConfig                      Redis may evict keys: a node won't start
    ├── ClusterConfigError                the cluster's fixed config differs
    ├── StartupFailed                     a node or ingress could not start in time
    └── SupervisorGaveUp                  an actor kept crashing: the node exits
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClusterConfigError",
    "CommitUnknown",
    "ConfigError",
    "DelayqError",
    "Fenced",
    "InvalidJob",
    "KafkaAccessError",
    "LeaseLapsed",
    "OutcomeUnknown",
    "RedisRestarted",
    "RedisStepFailed",
    "ReplicationUnconfirmed",
    "ScheduleIncomplete",
    "SchemaError",
    "ServerStalled",
    "ShardHomeConflict",
    "SlotFailed",
    "SlotsFailed",
    "StartupFailed",
    "StoreAccessError",
    "StoreMismatch",
    "StoreUnavailable",
    "SupervisorGaveUp",
    "UnsafeConfig",
    "ZooKeeperAccessError",
]


class DelayqError(Exception):
    """The base of every exception delayq raises on purpose."""


class ConfigError(DelayqError, ValueError):
    """A setting is missing, malformed or inconsistent; the message names it."""


class StoreAccessError(ConfigError):
    """A store (MySQL, Redis, Kafka, ZooKeeper) refused the credentials or the TLS
    handshake: retrying will not help until the settings change. The message names the
    store and the setting to look at, never a secret."""


class KafkaAccessError(StoreAccessError):
    """Kafka refused the SASL credentials or the TLS handshake."""


class ZooKeeperAccessError(StoreAccessError):
    """ZooKeeper refused the digest credentials (or they are missing for an ACL'd root)."""


class InvalidJob(DelayqError, ValueError):
    """A job was refused before anything was written; the message says which field and
    why. Also a ValueError."""


class StoreUnavailable(DelayqError, RuntimeError):
    """MySQL could not be reached, so nothing was changed: no job scheduled (Redis was
    not touched), or a cancel or reschedule undone in Redis before it was answered.
    Also MySQL, Redis or (for the cluster's status) ZooKeeper not answering when a
    client opens: the message names the store's host:port (never a password) and what
    to check."""


class ServerStalled(StoreUnavailable):
    """A call over several MySQL servers cut off one server's part: it had answered
    nothing for mysql_stall_s while another server's part was done (a frozen server).
    A read of it was not made; a write's outcome there is unknown (schedule_many names
    those jobs in ScheduleIncomplete.unknown)."""


class ShardHomeConflict(StoreUnavailable):
    """Two MySQL servers both say they serve one logical shard (each has its
    delayq_shards row in state home): writes to that shard are refused, nothing written,
    until `delayq db homes --resolve SHARD --server N` leaves one home. `shard` and
    `servers` (their names) say which."""

    def __init__(self, message: str, shard: int, servers: list[str]) -> None:
        super().__init__(message)
        self.shard = shard
        self.servers = servers


class StoreMismatch(DelayqError, RuntimeError):
    """schedule_in() got a connection that cannot write delayq's tables: another MySQL
    server, or a user without INSERT on them. The caller's transaction is untouched
    by delayq (the failed statement wrote nothing)."""


class OutcomeUnknown(DelayqError, RuntimeError):
    """The call may or may not have taken effect: the connection to MySQL broke while it
    was committing, or a cancel or reschedule was done in Redis and not recorded in
    MySQL (docs/client.md says where such a job stands). `job_ids` names the jobs;
    calling again with the same job_id is safe (one job per id), and get() tells where
    each stands."""

    def __init__(self, message: str, job_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.job_ids = job_ids if job_ids is not None else []


class CommitUnknown(OutcomeUnknown):
    """The store's own form of OutcomeUnknown: the connection was lost while MySQL was
    committing. The client re-raises it as OutcomeUnknown naming the batch's jobs."""


class ScheduleIncomplete(OutcomeUnknown):
    """A schedule_many() whose jobs live on several MySQL servers, where some servers
    committed and some did not (each server commits its own part: docs/guarantees.md).
    Every job of the batch is in exactly one list: `scheduled` (committed and will
    fire), `not_scheduled` (nothing written) and `unknown` (that server's commit answer
    was lost). `job_ids` is not_scheduled + unknown: calling schedule_many() again with
    them, or with the whole batch, is safe (one job per id)."""

    def __init__(
        self, message: str, scheduled: list[str], not_scheduled: list[str], unknown: list[str]
    ) -> None:
        super().__init__(message, not_scheduled + unknown)
        self.scheduled = scheduled
        self.not_scheduled = not_scheduled
        self.unknown = unknown


class RedisStepFailed(OutcomeUnknown):
    """MySQL committed the jobs, then adding them to Redis failed (Redis unreachable,
    loading, timed out): the jobs ARE scheduled and will fire, possibly late. The node
    owning each job's slot re-adds it from MySQL within about recent_reconcile_ms once
    Redis answers (actors/reconciler.py). `job_ids` names them; get() finds them, and
    scheduling them again with the same job_id is safe but not needed. A subclass of
    OutcomeUnknown, so code that handles that handles this too."""


class ReplicationUnconfirmed(OutcomeUnknown):
    """The change was made (in MySQL and on the Redis master), but fewer than
    redis_wait_replicas replicas confirmed it within redis_wait_timeout_ms, so a
    failover in the next moments could still undo it in Redis (a cancelled job could
    fire, a rescheduled one fire at its old time). Calling again is safe and confirms
    it once the replicas answer. A subclass of OutcomeUnknown.

    Raised first by the script runner, where `result` is what the script answered and
    `replicas`/`wanted` how many replicas confirmed and were asked for; the client
    raises it again naming the job in `job_ids`."""

    def __init__(
        self,
        message: str,
        job_ids: list[str] | None = None,
        *,
        result: Any = None,
        replicas: int = 0,
        wanted: int = 0,
    ) -> None:
        super().__init__(message, job_ids)
        self.result = result
        self.replicas = replicas
        self.wanted = wanted

    @classmethod
    def of_write(cls, result: Any, replicas: int, wanted: int) -> ReplicationUnconfirmed:
        """The runner's form: a write whose replicas did not all confirm in time."""
        return cls(
            f"{replicas} of {wanted} replica(s) confirmed the write in time",
            result=result,
            replicas=replicas,
            wanted=wanted,
        )


class SchemaError(DelayqError, RuntimeError):
    """The database's schema is not the one this version expects (a migration missing,
    changed, or newer than this code); the message says which and what to run."""


class Fenced(DelayqError, RuntimeError):
    """A script refused to act: the caller's ownership epoch of the slot is not current."""

    def __init__(self, slot: int, detail: str = "") -> None:
        super().__init__(f"slot {slot} is fenced: {detail}")
        self.slot = slot


class LeaseLapsed(DelayqError, RuntimeError):
    """A node did not publish records it had claimed: ZooKeeper has not confirmed its
    hold of their slots for most of the session timeout (it was frozen, or cut off), so
    another node may own them now. Their jobs stay in flight for the slot's owner."""


class RedisRestarted(DelayqError, RuntimeError):
    """A slot's claim was refused: its Redis server is not the one the slot's watermark
    names (it restarted, or a replica took over), so it may lack its last writes (a
    cancel, a reschedule). Nothing was claimed; claims go on once the slot's owner has
    re-applied MySQL's changes since the watermark (actors/rollback.py)."""

    def __init__(self, slot: int, detail: str = "") -> None:
        super().__init__(f"slot {slot}: Redis restarted or failed over (run_id {detail})")
        self.slot = slot
        self.run_id = detail


class SlotFailed(DelayqError):
    """One slot's script run failed with a Redis error (its Redis node is down, failing
    over, loading, out of memory): in a batch of runs, the other slots' runs count.
    `error` is the driver's exception."""

    def __init__(self, slot: int, error: BaseException) -> None:
        super().__init__(f"slot {slot}: {type(error).__name__}: {error}")
        self.slot = slot
        self.error = error


class SlotsFailed(DelayqError):
    """Some slots' runs of a batch failed (the others were done): `failed` maps each
    such slot to its SlotFailed."""

    def __init__(self, failed: dict[int, SlotFailed], done: Any = None) -> None:
        first = next(iter(failed.values()))
        super().__init__(f"{len(failed)} slot(s) failed, e.g. {first}")
        self.failed = failed
        self.done = done  # what the method returns, for the slots that did not fail


class UnsafeConfig(DelayqError, RuntimeError):
    """Redis is configured so that it may lose delayq's keys (an evicting maxmemory
    policy): a node refuses to start on it."""


class ClusterConfigError(DelayqError, RuntimeError):
    """This node's fixed cluster settings (slot count, names) differ from the ones the
    cluster was created with in ZooKeeper."""


class StartupFailed(DelayqError, RuntimeError):
    """A node or an ingress could not reach a service it needs before its start-up
    deadline; the message names the service."""


class SupervisorGaveUp(DelayqError, RuntimeError):
    """An actor crashed more often than its restart budget allows: the node stops and
    exits non-zero so that its process manager restarts it."""
