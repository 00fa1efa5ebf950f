"""The fault suite's verdict: what the clients were told (Ledger), what came out of
Kafka, and whether MySQL and Redis agree afterwards (verdict, assert_safe).

lost = ok-scheduled − ok-cancelled − fired − dead. A call whose outcome is unknown (it
raised after possibly writing) is neither counted as scheduled nor as lost; a call that
failed with a clear error must have written nothing, so every job fired or stored in
MySQL was scheduled ok, unless it can be one of the unknown calls' jobs ("unexpected"
counts the rest and must not exceed the unknown calls' jobs).

"acked_not_in_kafka" names the jobs that MySQL records as fired, or that Redis holds a
fire marker for (the ack script's), although no record of theirs was read from Kafka:
an acknowledgement of a publish the broker did not keep. It must be empty.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from cluster import DelayClient, JobStatus, StoreUnavailable
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ScheduleIncomplete
from cluster.model.contract import SEQ_DIGITS, member_id, member_seq
from cluster.model.envelope import record_of
from tests.faults.stores import byte_list
from tests.mysql_tools import on_shard


@dataclass
class Ledger:
    scheduled: set[str] = field(default_factory=set)
    schedule_failed: int = 0  # refused with a clear error: nothing was written
    schedule_unknown: int = 0
    cancelled: set[str] = field(default_factory=set)  # cancel() returned True
    not_cancelled: set[str] = field(default_factory=set)  # cancel() returned False
    rescheduled: dict[str, int] = field(default_factory=dict)  # reschedule() True: new due ms
    change_failed: int = 0  # cancel() or reschedule() raised: outcome unknown
    cancel_unknown: set[str] = field(default_factory=set)  # cancel() raised: may or may not

    async def cancel(self, client: DelayClient, job_id: str) -> None:
        try:
            cancelled = await client.cancel(job_id)
        except Exception:
            self.change_failed += 1
            self.cancel_unknown.add(job_id)
            return
        (self.cancelled if cancelled else self.not_cancelled).add(job_id)

    async def reschedule(self, client: DelayClient, job_id: str, due_ms: int) -> None:
        try:
            changed = await client.reschedule(job_id, at=due_ms / 1000)
        except Exception:  # maybe moved, maybe not: no due time to hold it to
            self.change_failed += 1
            self.rescheduled.pop(job_id, None)
            return
        if changed:
            self.rescheduled[job_id] = due_ms

    async def schedule_many(
        self, client: DelayClient, jobs: list[dict[str, Any]], errors: list[str] | None = None
    ) -> None:
        """schedule_many, its outcome counted; what it raised goes to `errors` if given."""
        try:
            self.scheduled.update(await client.schedule_many(jobs))
            return
        except ScheduleIncomplete as exc:  # jobs over several MySQL servers: each named
            self.scheduled.update(exc.scheduled)
            self.schedule_failed += len(exc.not_scheduled)
            self.schedule_unknown += len(exc.unknown)
            raised: Exception = exc
        except StoreUnavailable as exc:
            self.schedule_failed += len(jobs)
            raised = exc
        except Exception as exc:
            self.schedule_unknown += len(jobs)
            raised = exc
        if errors is not None:
            errors.append(f"{type(raised).__name__}: {raised}")


@dataclass
class Verdict:
    scheduled: int
    fired: int
    duplicates: int
    lost: list[str]
    early: int
    cancelled_but_fired: list[str]
    fired_at_old_time: list[str]  # rescheduled (True), yet fired with another due time
    dead: int
    max_lateness_ms: float
    violations: list[str]
    unexpected: int  # fired or stored, but no call that returned ok scheduled it
    # Jobs still pending or firing in MySQL: a node may still move them (claim, publish,
    # ack), so Redis read key by key can catch one between two places.
    unfinished: int
    # Recorded fired in MySQL, or marked acked in Redis, yet never read from Kafka.
    acked_not_in_kafka: list[str] = field(default_factory=list)

    def row(self) -> dict[str, object]:
        return {
            "scheduled": self.scheduled,
            "fired": self.fired,
            "duplicates": self.duplicates,
            "lost": len(self.lost),
            "early": self.early,
            "dead": self.dead,
            "fired_at_old_time": len(self.fired_at_old_time),
            "max_lateness_ms": round(self.max_lateness_ms),
            "unexpected": self.unexpected,
            "acked_not_in_kafka": len(self.acked_not_in_kafka),
        }


async def verdict(
    ledger: Ledger, records: list[dict[str, Any]], client: DelayClient, redis: RedisClient
) -> Verdict:
    fired = Counter(str(r["job_id"]) for r in records)
    dead = {job.job_id for job in await client.dead_letters(limit=10**9)}
    rows = await all_rows(client)
    return Verdict(
        scheduled=len(ledger.scheduled),
        fired=len(fired),
        duplicates=sum(n - 1 for n in fired.values()),
        # A job whose cancel() raised may have been cancelled: it need not fire.
        lost=sorted(
            ledger.scheduled - ledger.cancelled - ledger.cancel_unknown - set(fired) - dead
        ),
        early=sum(1 for r in records if r["fired_ms"] < r["due_ms"]),
        cancelled_but_fired=sorted(ledger.cancelled & set(fired)),
        fired_at_old_time=sorted(
            {
                str(r["job_id"])
                for r in records
                if r["job_id"] in ledger.rescheduled
                and abs(int(r["due_ms"]) - ledger.rescheduled[str(r["job_id"])]) > 1
            }
        ),
        dead=len(dead),
        max_lateness_ms=max((r["received_ms"] - r["due_ms"] for r in records), default=0.0),
        violations=await invariant_violations(client, redis, rows),
        unexpected=len((set(fired) | set(rows)) - ledger.scheduled),
        unfinished=sum(status in (JobStatus.PENDING, JobStatus.FIRING) for status in rows.values()),
        acked_not_in_kafka=sorted(
            (
                {job_id for job_id, status in rows.items() if status == JobStatus.FIRED}
                | await fire_markers(client, redis)
            )
            - set(fired)
        ),
    )


async def fire_markers(client: DelayClient, redis: RedisClient) -> set[str]:
    """The job ids with a fire marker in Redis (acked: published, per the ack script)."""
    marked: set[str] = set()
    for slot in range(client.settings.slots):
        acked = byte_list(await redis.zrange(client.keys.slot(slot).acked, 0, -1))
        marked.update(job_id.decode() for job_id in acked)
    return marked


async def invariant_violations(
    client: DelayClient, redis: RedisClient, rows: dict[str, JobStatus]
) -> list[str]:
    """After the load stopped: every pending job sits in exactly one of delay / ready /
    in flight / dead; no fired or cancelled job sits in any."""
    places: dict[str, list[str]] = {}
    for slot in range(client.settings.slots):
        k = client.keys.slot(slot)
        envelopes = cast(dict[bytes, bytes], await redis.hgetall(k.jobs))
        seqs = {job_id.decode(): envelope[:SEQ_DIGITS] for job_id, envelope in envelopes.items()}
        for member in byte_list(await redis.zrange(k.delay, 0, -1)):
            places.setdefault(member_id(member).decode(), []).append("delay")
        for member in byte_list(await redis.lrange(k.ready, 0, -1)):
            job_id = member_id(member).decode()
            if seqs.get(job_id) == member_seq(member):  # a stale entry is not a place
                places.setdefault(job_id, []).append("ready")
        for job_id_bytes in byte_list(await redis.zrange(k.inflight, 0, -1)):
            places.setdefault(job_id_bytes.decode(), []).append("inflight")
        for job_id_bytes in byte_list(await redis.zrange(k.dead, 0, -1)):
            places.setdefault(job_id_bytes.decode(), []).append("dead")
        for envelope in envelopes.values():
            record_of(envelope)  # every envelope parses
    violations = []
    for job_id, status in rows.items():
        where = places.get(job_id, [])
        if status in (JobStatus.PENDING, JobStatus.FIRING) and len(where) != 1:
            violations.append(f"{job_id} is {status.name} in MySQL but in {where} in Redis")
        if status in (JobStatus.FIRED, JobStatus.CANCELLED) and where:
            violations.append(f"{job_id} is {status.name} in MySQL but in {where} in Redis")
    for job_id in places.keys() - rows.keys():
        violations.append(f"{job_id} is in Redis but not in MySQL")
    return violations


async def all_rows(client: DelayClient) -> dict[str, JobStatus]:
    rows: dict[str, JobStatus] = {}
    for shard in client.mysql.all_shards():
        table, _ = client.mysql.shard_tables(shard)
        for job_id, status in await on_shard(
            client.mysql, shard, f"SELECT job_id, status FROM {table}"
        ):
            rows[job_id] = JobStatus(status)
    return rows


def assert_safe(result: Verdict, ledger: Ledger) -> None:
    """What every fault scenario holds to: nothing lost, none early, no cancelled job
    fired, none at its old time after a reschedule, the stores agree, and nothing fired
    or stored that no call could have scheduled."""
    assert result.lost == []
    assert result.early == 0
    assert result.cancelled_but_fired == []
    assert result.fired_at_old_time == []
    assert result.violations == []
    assert result.unexpected <= ledger.schedule_unknown
