"""For consumers of fired jobs: records decoded, and repeated deliveries dropped.

    from aiokafka import AIOKafkaConsumer
    from cluster.client.consumer import Deduplicator, FiredRecords

    consumer = AIOKafkaConsumer(
        "orders.close", group_id="orders.close.handlers", enable_auto_commit=False,
        fetch_max_wait_ms=5,
    )
    await consumer.start()
    dedupe = Deduplicator(window_s=600)
    async for job in FiredRecords(consumer, dedupe):
        await close_order(job.payload["order"])     # the business logic
        await consumer.commit()

delayq delivers at least once, and Kafka consumers read at least once: the same record
can reach a handler twice. Deduplicator drops the repeats it can see, within limits that
are worth knowing exactly.

What Deduplicator guarantees. A delivery of a job whose key, (job_id, attempt), this
Deduplicator has passed within the last `window_s` seconds is dropped (counted in
`dropped`), provided fewer than `max_entries` other keys were passed since: past that
many, the oldest keys are forgotten before their window ends (counted in
`forgotten_early`; size max_entries above the fire rate times the window). The window
runs on this process's monotonic clock from the first delivery of the key; a repeat does
not extend it. With `per_job=True` the key is the job_id alone.

What it does not guarantee:

- Only this process, only this Deduplicator: a repeat delivered to another consumer of
  the group is not seen. All records of a job carry the same Kafka key (its biz_id, else
  its job_id), so they go to one partition, and to one consumer of the group until a
  rebalance moves the partition.
- Not across restarts: the memory is the process's. Kafka itself re-delivers after a
  restart only what was not committed, so committing after each handled record (as
  above) keeps handled records from coming back; a repeat that is a new record (below)
  is not caught after a restart.
- With the default key, not delayq's own re-publishes after a failure: a node that died
  after publishing, or a broker that acknowledged too late, makes delayq publish the job
  again as the next attempt, a different key. `per_job=True` drops those too (a job_id
  fires once, so any second record of it is a repeat; retention frees an id for reuse
  only after retention_days). Repeats with the same attempt: Kafka re-delivering
  uncommitted records after a rebalance or a seek back, a producer retrying a batch the
  broker had written, a job claimed again after a Redis failover lost the claim.
- Not exactly-once handling: a record is counted as passed when it is handed out. If
  handling it fails and the consumer seeks back to read it again, call
  `forget(job_id, attempt)` first, or the retry is dropped. Handlers that must never run
  twice need their own idempotence (a unique key on job_id in their database).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.errors import ConsumerStoppedError

log = logging.getLogger(__name__)

NODE_HEADER = "delayq-node"


@dataclass(frozen=True, slots=True)
class FiredRecord:
    """One fired job as its consumer reads it (the record format of docs/client.md)."""

    job_id: str
    topic: str
    biz_id: str | None
    biz_type: str | None
    payload: Any
    due_ms: int
    fired_ms: int
    attempt: int
    node: str | None  # the delayq-node header: the node that published it
    message: ConsumerRecord[Any, Any]  # the Kafka record (partition, offset, key, ...)
    recurring: str | None = None  # a recurring schedule's tick: the schedule's name
    tick_ms: int | None = None  # and the tick's time
    priority: int = 0  # records of jobs scheduled before 0.2.0 have none: 0


def fired_record(message: ConsumerRecord[Any, Any]) -> FiredRecord:
    """The fired job a Kafka record carries; ValueError if it is not one."""
    try:
        value = orjson.loads(message.value)
        job_id, attempt = value["job_id"], value["attempt"]
        due_ms, fired_ms = value["due_ms"], value["fired_ms"]
        priority = value.get("priority", 0)
    except (orjson.JSONDecodeError, TypeError, KeyError) as exc:
        raise ValueError(f"not a delayq fired record: {type(exc).__name__}: {exc}") from None
    if not isinstance(job_id, str) or not all(
        isinstance(n, int) and not isinstance(n, bool)
        for n in (attempt, due_ms, fired_ms, priority)
    ):
        raise ValueError(
            "not a delayq fired record: job_id, attempt, priority or a time has a wrong type"
        )
    node = next(
        (raw.decode(errors="replace") for name, raw in message.headers if name == NODE_HEADER),
        None,
    )
    return FiredRecord(
        job_id=job_id,
        topic=value.get("topic", message.topic),
        biz_id=value.get("biz_id"),
        biz_type=value.get("biz_type"),
        payload=value.get("payload"),
        due_ms=due_ms,
        fired_ms=fired_ms,
        attempt=attempt,
        node=node,
        message=message,
        recurring=value.get("recurring"),
        tick_ms=value.get("tick_ms"),
        priority=priority,
    )


class Deduplicator:
    """A bounded, time-windowed memory of the jobs passed (the module docstring says
    exactly what it guarantees). Pure: no I/O, one dict; `clock` is for tests."""

    def __init__(
        self,
        window_s: float = 600.0,
        max_entries: int = 100_000,
        *,
        per_job: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be more than 0, got {window_s!r}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries!r}")
        self.window_s = window_s
        self.max_entries = max_entries
        self.per_job = per_job
        self._clock = clock
        # key → when it was first passed; in that order, since the clock only moves on.
        self._seen: OrderedDict[tuple[str, int] | str, float] = OrderedDict()
        self.passed = 0  # deliveries passed (first of their key within the window)
        self.dropped = 0  # repeats dropped
        self.forgotten_early = 0  # keys forgotten before their window ended (max_entries)

    def _key(self, job_id: str, attempt: int) -> tuple[str, int] | str:
        return job_id if self.per_job else (job_id, attempt)

    def first(self, job_id: str, attempt: int) -> bool:
        """True for the first delivery of this job (and attempt) within the window, which
        the caller should handle; False for a repeat, which it should skip."""
        now = self._clock()
        seen = self._seen
        horizon = now - self.window_s
        while seen:
            oldest_key, oldest_at = next(iter(seen.items()))
            if oldest_at > horizon:
                break
            del seen[oldest_key]
        key = self._key(job_id, attempt)
        if key in seen:
            self.dropped += 1
            return False
        seen[key] = now
        self.passed += 1
        if len(seen) > self.max_entries:
            seen.popitem(last=False)
            self.forgotten_early += 1
        return True

    def forget(self, job_id: str, attempt: int) -> None:
        """Let the next delivery of this job (and attempt) through: for a record whose
        handling failed and that the consumer will read again."""
        self._seen.pop(self._key(job_id, attempt), None)

    def __len__(self) -> int:
        """How many keys it remembers (some may be past their window until the next
        call to first())."""
        return len(self._seen)


class FiredRecords:
    """The fired jobs an AIOKafkaConsumer receives, decoded, repeats dropped by the
    Deduplicator given (none: every delivery). `async for` ends when the consumer stops.

    A record that is not a delayq fired record (another producer wrote to the topic) is
    logged, counted in `invalid` and skipped, so one bad record does not stop the loop;
    its offset is committed with the others'."""

    def __init__(self, consumer: AIOKafkaConsumer, dedupe: Deduplicator | None = None) -> None:
        self.consumer = consumer
        self.dedupe = dedupe
        self.invalid = 0

    def __aiter__(self) -> FiredRecords:
        return self

    async def __anext__(self) -> FiredRecord:
        while True:
            try:
                message = await self.consumer.getone()
            except ConsumerStoppedError:
                raise StopAsyncIteration from None
            try:
                record = fired_record(message)
            except ValueError as exc:
                self.invalid += 1
                log.warning(
                    "skipping record %s[%d]@%d: %s",
                    message.topic,
                    message.partition,
                    message.offset,
                    exc,
                )
                continue
            if self.dedupe is None or self.dedupe.first(record.job_id, record.attempt):
                return record
