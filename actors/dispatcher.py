"""dispatcher: claims ready jobs, publishes them to Kafka, then acks them in Redis.

Per batch: one claim script call (ready → in-flight with a deadline), one Kafka send
per job (acks=all; records are batched by the producer), then one ack script call for
the published jobs and one nack call per distinct error for the rest. The ack journals
"fired" for the recorder, which marks the MySQL rows. A crash anywhere in between
leaves the jobs in flight; the retry-reaper returns them after their deadline, so a
crash can cause a duplicate, never a loss.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from aiokafka import AIOKafkaProducer

from actors.base import SlotQueue, next_or_stop
from actors.scanner import SlotScanner
from cluster.config import Settings
from cluster.envelope import fire_of
from cluster.ownership import StaticOwnership
from cluster.scripts import Claimed, Scripts

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 0.2


class Dispatcher:
    name = "dispatcher"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        producer: AIOKafkaProducer,
        ownership: StaticOwnership,
        scanner: SlotScanner,
        inbox: SlotQueue,
        recorder_queue: SlotQueue,
    ) -> None:
        self.settings = settings
        self.scripts = scripts
        self.producer = producer
        self.ownership = ownership
        self.scanner = scanner
        self.inbox = inbox
        self.recorder_queue = recorder_queue
        self.fired_total = 0
        self.failed_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self._stopping.clear()
        async with asyncio.TaskGroup() as group:
            for _ in range(self.settings.dispatch_concurrency):
                group.create_task(self._work())

    async def _work(self) -> None:
        # A batch in progress is finished even when stop() comes: its jobs are claimed.
        while (slot := await next_or_stop(self.inbox, self._stopping)) is not None:
            if not self.ownership.owns(slot):
                continue
            try:
                full = await self.dispatch(slot)
            except Exception as exc:
                log.warning("dispatch of slot %d failed: %s", slot, exc)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)
                full = True
            if full and not self._stopping.is_set():
                await self.inbox.put(slot)

    async def dispatch(self, slot: int) -> bool:
        """Fire one batch of a slot's ready jobs; True when more may be ready."""
        s = self.settings
        now_ms, claimed = await self.scripts.claim(slot, s.claim_batch, s.inflight_timeout_ms)
        if not claimed:
            return False
        errors = await self._publish(claimed, now_ms)
        published = [job.job_id for job in claimed if job.job_id not in errors]
        if published:
            await self.scripts.ack(slot, published)
            self.fired_total += len(published)
        if errors:
            await self._nack(slot, errors)
        await self.recorder_queue.put(slot)
        return len(claimed) == s.claim_batch

    async def _publish(self, claimed: list[Claimed], now_ms: int) -> dict[bytes, str]:
        """Send every job and wait for the broker; returns the errors by job id."""
        errors: dict[bytes, str] = {}
        pending: list[tuple[bytes, asyncio.Future[object]]] = []
        for job in claimed:
            fire = fire_of(job.envelope, job.attempt, now_ms)
            try:
                future = await self.producer.send(fire.topic, fire.value, key=fire.key)
            except Exception as exc:
                errors[job.job_id] = _describe(exc)
            else:
                pending.append((job.job_id, future))
        results = await asyncio.gather(*(f for _, f in pending), return_exceptions=True)
        for (job_id, _), result in zip(pending, results, strict=True):
            if isinstance(result, BaseException):
                errors[job_id] = _describe(result)
        return errors

    async def _nack(self, slot: int, errors: dict[bytes, str]) -> None:
        by_error: dict[str, list[bytes]] = defaultdict(list)
        for job_id, error in errors.items():
            by_error[error].append(job_id)
        for error, job_ids in by_error.items():
            log.warning("publishing %d job(s) of slot %d failed: %s", len(job_ids), slot, error)
            result = await self.scripts.nack(
                slot, job_ids, error, self.settings.retry_backoff_ms,
                self.settings.retry_backoff_max_ms,
            )
            self.failed_total += len(job_ids)
            if result.earliest_due_ms >= 0:
                self.scanner.wake(slot, result.earliest_due_ms)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]
