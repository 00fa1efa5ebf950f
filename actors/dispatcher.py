"""dispatcher: claims ready jobs, publishes them to Kafka, then acks them in Redis.

Per round: one claim script run per slot waiting for dispatch (ready → in-flight with
a deadline; all slots in one pipelined round trip), one Kafka send per job (acks=all;
the producer batches records), then, once the broker has answered, one ack run per
slot for the published jobs (again one round trip) and one nack run per slot and
distinct error for the rest. The ack journals
"fired" for the recorder, which marks the MySQL rows. A crash anywhere in between
leaves the jobs in flight; the retry-reaper returns them after their deadline, so a
crash can cause a duplicate, never a loss.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from actors.base import SlotQueue, batch_or_stop
from actors.scanner import SlotScanner
from cluster.config import Settings
from cluster.envelope import Fire, fire_of
from cluster.ownership import StaticOwnership
from cluster.publisher import Publisher
from cluster.scripts import Scripts

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 0.2


@dataclass(frozen=True, slots=True)
class Sent:
    """A job handed to the producer, and the future of its broker acknowledgement."""

    job_id: bytes
    future: asyncio.Future[object]


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
    ) -> None:
        self.settings = settings
        self.scripts = scripts
        self.publisher = Publisher(producer)
        self.ownership = ownership
        self.scanner = scanner
        self.inbox = inbox
        self.fired_total = 0
        self.failed_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Claim and send, slot batch after slot batch; a separate task per round waits
        for the broker and acks, so claiming never waits on Kafka round trips. At most
        dispatch_concurrency rounds await the broker at once (backpressure)."""
        self._stopping.clear()
        in_flight = asyncio.Semaphore(self.settings.dispatch_concurrency)
        # Leaving the TaskGroup waits for every round already sent: a clean stop
        # finishes what it claimed.
        async with asyncio.TaskGroup() as rounds:
            while (slots := await batch_or_stop(self.inbox, self._stopping)) is not None:
                slots = [slot for slot in slots if self.ownership.owns(slot)]
                if not slots:
                    continue
                await in_flight.acquire()
                try:
                    sent, more = await self._claim_and_send(slots)
                except Exception as exc:
                    in_flight.release()
                    log.warning("claiming from %d slot(s) failed: %s", len(slots), exc)
                    await asyncio.sleep(RETRY_AFTER_ERROR_S)
                    more, sent = slots, {}
                if sent:
                    rounds.create_task(self._finish(sent, in_flight))
                else:
                    in_flight.release()
                for slot in more:
                    await self.inbox.put(slot)

    async def _claim_and_send(
        self, slots: list[int]
    ) -> tuple[dict[int, list[Sent]], list[int]]:
        """Claim from every slot in one round trip and hand the jobs to the publisher.
        Returns what was sent by slot, and the slots that may hold more ready jobs."""
        s = self.settings
        claims = await self.scripts.claim_many(slots, s.claim_batch, s.inflight_timeout_ms)
        fires: list[Fire] = []
        owners: list[tuple[int, bytes]] = []
        more: list[int] = []
        for slot, (now_ms, claimed) in zip(slots, claims, strict=True):
            for job in claimed:
                fires.append(fire_of(job.envelope, job.attempt, now_ms))
                owners.append((slot, job.job_id))
            if len(claimed) == s.claim_batch:
                more.append(slot)
        sent: dict[int, list[Sent]] = defaultdict(list)
        if fires:
            futures = await self.publisher.publish(fires)
            for (slot, job_id), future in zip(owners, futures, strict=True):
                sent[slot].append(Sent(job_id, future))
        return sent, more

    async def _finish(self, sent: dict[int, list[Sent]], in_flight: asyncio.Semaphore) -> None:
        """Wait for the broker, then ack what was published (one round trip for all
        slots) and nack the rest."""
        try:
            unique = list({id(item.future): item.future
                           for items in sent.values() for item in items}.values())
            results = await asyncio.gather(*unique, return_exceptions=True)
            failed = {
                id(future): _describe(result)
                for future, result in zip(unique, results, strict=True)
                if isinstance(result, BaseException)
            }
            published: dict[int, list[bytes]] = {}
            for slot, items in sent.items():
                errors = {item.job_id: failed[id(item.future)]
                          for item in items if id(item.future) in failed}
                if errors:
                    await self._nack(slot, errors)
                ok = [item.job_id for item in items if item.job_id not in errors]
                if ok:
                    published[slot] = ok
            if published:
                self.fired_total += await self.scripts.ack_many(published)
        except Exception as exc:
            # The jobs stay in flight; the retry-reaper returns them after their deadline.
            log.warning("acking a dispatch round failed: %s", exc)
        finally:
            in_flight.release()

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
