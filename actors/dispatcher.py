"""dispatcher: claims ready jobs, publishes them to Kafka, then acks them in Redis.

Per round: one claim script run per slot waiting for dispatch (ready → in-flight with
a deadline; all slots in one pipelined round trip), one Kafka send per job (acks=all;
the producer batches records), then, once the broker has answered, one ack run per
slot for the published jobs (again one round trip) and one nack run per slot and
distinct error for the rest. The ack journals "fired" for the recorder, which marks the
MySQL rows. A crash anywhere in between leaves the jobs in flight; the retry-reaper
returns them after their deadline (a claim whose reply was lost: the next round, see
actors/claims.py; a dead node's, when its session ends), so a crash can cause a
duplicate, never a loss. Nothing is published while the node's lease has lapsed
(actors/ownership.py): those jobs stay in flight too. Fire advance: a claim can return
jobs not due yet, held in the round's task until due (actors/dispatch_round.py).
Expiry: claim.lua expires a job whose due time + expires_after has passed rather than
claim it (nack.lua, a failed publish whose retry would come after that), so a job is
never published after its expiry; claim reports how many expired, for the metrics.

Exactly-once (delivery = exactly_once, actors/transactions.py): the records of each slot
go to Kafka in a transaction of the slot's own producer, with a journal record naming
its jobs; the transaction's outcome replaces the broker's acknowledgement. Claims wait
for a replica (with redis_wait_replicas), and a round whose outcome stays unknown
neither acks nor nacks: its jobs stay in flight until the reaper has read the journal.

A claimed job whose envelope is still lean (lua/add.lua; the filler had not reached it:
rescheduled or retried close to its time, replayed, or the filler behind or down) gets
its tail from its MySQL row, one read for all such jobs of a round, so it fires the same
record bytes as a full envelope would have. When MySQL does not answer, those jobs are
released (lua/release.lua): back to the delay zset, due again after retry_backoff_ms,
the attempt not counted, since nothing was tried. A lean job MySQL has no row of cannot
be built at all: it fails its attempt like an unpublishable one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict

from aiokafka import AIOKafkaProducer

from actors import failpoints
from actors.claims import Claims
from actors.dispatch_round import (
    Answers,
    Held,
    Sent,
    SlotClaim,
    Tails,
    broker_answers,
    describe,
    lapsed,
    lapsed_futures,
    load_tails,
    publish_held,
    sort_claimed,
)
from actors.histogram import LATENESS_BUCKETS_S, Histograms
from actors.lifecycle import Actor
from actors.ownership import Ownership
from actors.publisher import Publisher
from actors.queues import SlotQueue
from actors.scanner import SlotScanner
from actors.transactions import SlotTransactions, in_doubt
from cluster.errors import Fenced, ReplicationUnconfirmed, SlotFailed
from cluster.model.contract import NO_TIME
from cluster.model.envelope import Fire, is_lean
from cluster.scripts.codec import ClaimResult
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 0.2
# Acks that failed (their Redis node failing over) are tried again after these pauses,
# about as long as a Redis Cluster failover takes, before the jobs are left in flight
# for the reaper (which fires them again: a duplicate).
ACK_RETRY_PAUSES_S = (0.1, 0.25, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0)


class Dispatcher(Actor):
    name = "dispatcher"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        mysql: MySQLStore,
        producer: AIOKafkaProducer,
        ownership: Ownership,
        scanner: SlotScanner,
        inbox: SlotQueue,
        transactions: SlotTransactions | None = None,  # delivery = exactly_once
    ) -> None:
        super().__init__()
        self.transactions = transactions
        self.settings = settings
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        limit = settings.kafka_max_batch_bytes
        self.publisher = Publisher(producer, settings.node_id, limit, ownership.leased)
        self.scanner = scanner
        self.inbox = inbox
        self.claims = Claims(settings, scripts, scanner, transactions is not None)
        self.fired_total = 0
        self.failed_total = 0
        self.unreplicated_acks = 0
        self.retried_total = 0  # failed publishes given another attempt
        self.dead_total = 0  # failed publishes that used up their attempts
        # Jobs not published because their due time + expires_after had passed: at
        # claim (lua/claim.lua), or when a failed publish's retry would come after it.
        self.expired_total = 0
        self.tails_loaded_total = 0  # lean jobs whose tail was read from MySQL at claim
        self.released_total = 0  # lean jobs put back because MySQL did not answer
        # Metrics, filled a round at a time (actors/histogram.py): records acknowledged and
        # broker ack − due per job, by topic; ready → claimed (from the slot's latest
        # move, a lower bound) per job; claimed → broker ack.
        self.published_by_topic: Counter[str] = Counter()
        self.lateness = Histograms(LATENESS_BUCKETS_S)
        self.claim_lag = Histograms(LATENESS_BUCKETS_S)
        self.publish_lag = Histograms(LATENESS_BUCKETS_S)
        self.lease_ms = settings.zk_session_timeout_ms / 2  # older claims: see _fresh
        self._rounds_in_flight: Counter[int] = Counter()
        self._round_done = asyncio.Event()

    def busy(self, slot: int) -> bool:
        """Whether a round that claimed from `slot` still awaits the broker or its ack."""
        return self._rounds_in_flight[slot] > 0

    async def wait_idle(self, slot: int) -> None:
        """Until no round of `slot` is in flight (a graceful hand-off waits for this)."""
        while self.busy(slot):
            self._round_done.clear()
            await self._round_done.wait()

    async def body(self) -> None:
        """Claim and send, slot batch after slot batch; a separate task per round waits
        for the broker and acks, so claiming never waits on Kafka round trips. At most
        dispatch_concurrency rounds await the broker at once (backpressure)."""
        try:
            await self._dispatch()
        finally:
            await self.publisher.close()  # sends still waiting for a topic's metadata

    async def _dispatch(self) -> None:
        in_flight = asyncio.Semaphore(self.settings.dispatch_concurrency)
        # Leaving the TaskGroup waits for every round already sent: a clean stop
        # finishes what it claimed.
        async with asyncio.TaskGroup() as rounds:
            while (slots := await self.next_batch(self.inbox)) is not None:
                held = [
                    (slot, self.ownership.epoch(slot))
                    for slot in slots
                    if self.ownership.owns(slot)
                ]
                if not held:
                    continue
                # Counted as busy before waiting for room, so that a hand-off starting
                # meanwhile waits for this round rather than releasing under it.
                for slot, _ in held:
                    self._rounds_in_flight[slot] += 1
                await in_flight.acquire()
                still = [
                    (slot, epoch)
                    for slot, epoch in held
                    if self.ownership.owns(slot) and self.ownership.epoch(slot) == epoch
                ]
                bounds = self.claims.bounds(still)
                try:
                    sent, later, more = await self._claim_and_send(still) if still else ({}, [], [])
                except Exception as exc:
                    self.claims.round_failed(bounds)  # the claims may have run: actors/claims.py
                    self.warn("claiming from %d slot(s) failed: %s", len(held), exc)
                    self._round_finished(held, in_flight)
                    await self.sleep(RETRY_AFTER_ERROR_S)
                    more = [slot for slot, _ in held]
                else:
                    rounds.create_task(self._finish(held, sent, later, in_flight))
                for slot in more:
                    await self.inbox.put(slot)

    def _round_finished(self, held: list[tuple[int, int]], in_flight: asyncio.Semaphore) -> None:
        for slot, _ in held:
            self._rounds_in_flight[slot] -= 1
        self._round_done.set()
        in_flight.release()

    async def _claim_and_send(
        self, held: list[tuple[int, int]]
    ) -> tuple[dict[int, list[Sent]], list[Held], list[int]]:
        """Claim from every (slot, epoch) in one round trip and hand the jobs that are
        due to the publisher. Returns what was sent by slot, the jobs to publish at
        their due time (fire advance), and the slots that may hold more. Steps: claim,
        load lean jobs' tails, sort (actors/dispatch_round.py), settle the jobs that
        cannot be sent, publish the rest."""
        s = self.settings
        claims, failed, received = await self._claim(held)
        tails = await self._load_tails(
            [job.job_id for claim in claims for job in claim.jobs if is_lean(job.envelope)]
        )
        jobs = sort_claimed(self._fresh(claims), tails, s, s.claim_batch, received)
        if failed:
            self.warn(
                "claiming from %d of %d slot(s) failed, retrying in %.0f ms: %s",
                len(failed),
                len(held),
                RETRY_AFTER_ERROR_S * 1000,
                failed[0],
            )
        for (slot, epoch), errors in jobs.refused.items():
            await self._nack(slot, epoch, errors)
        for (slot, epoch), job_ids in jobs.unbuilt.items():
            await self._release(slot, epoch, job_ids)
        return await self._publish(jobs.fires, jobs.owners, received), jobs.later, jobs.more

    async def _claim(
        self, held: list[tuple[int, int]]
    ) -> tuple[list[SlotClaim], list[SlotFailed], float]:
        """Claim (or reclaim) from every (slot, epoch) in one round trip. Returns the
        claims of the slots still owned, the slots whose Redis node failed, and the
        time.monotonic() the reply arrived. Exactly-once: the claims wait for a replica
        (a claim a Redis failover could undo would fire its jobs twice)."""
        durable = self.transactions is not None
        replies = await self.claims.run(held, self.settings.claim_batch, durable)
        received = time.monotonic()
        if any(isinstance(reply, ClaimResult) and reply.jobs for _, _, reply in replies):
            failpoints.hit("after-claim")
        claims: list[SlotClaim] = []
        failed: list[SlotFailed] = []
        for slot, epoch, reply in replies:
            if reply is None:
                self.ownership.lost(slot, epoch)
                continue
            if isinstance(reply, SlotFailed):
                # Only this slot's Redis node is in trouble: the others' claims go on.
                failed.append(reply)
                self.scanner.retry_later(slot, int(RETRY_AFTER_ERROR_S * 1000))
                if self.claims.failed(slot):  # back here even if nothing is ready
                    asyncio.get_running_loop().call_later(
                        RETRY_AFTER_ERROR_S, self.inbox.put_nowait, slot
                    )
                continue
            self.expired_total += reply.expired
            if reply.jobs:
                moved_ms = self.scanner.moved_ms.get(slot, reply.now_ms)
                lag_s = max(reply.now_ms - moved_ms, 0) / 1000
                self.claim_lag.observe((), lag_s, len(reply.jobs))
            claims.append(SlotClaim(slot, epoch, reply.now_ms, reply.jobs))
        return claims, failed, received

    def _fresh(self, claims: list[SlotClaim]) -> list[SlotClaim]:
        """The claims young enough to publish (checked after reading tails: that counts)."""
        fresh: list[SlotClaim] = []
        for claim in claims:
            age_ms = self.scanner.redis_now_ms() - claim.now_ms
            if age_ms > self.lease_ms:
                # This process was paused since the claim: the slot may have moved on.
                # Leave the jobs in flight; whoever owns the slot now retries them.
                log.warning(
                    "not publishing %d job(s) of slot %d claimed %.0f ms ago",
                    len(claim.jobs),
                    claim.slot,
                    age_ms,
                )
                continue
            fresh.append(claim)
        return fresh

    async def _publish(
        self, fires: list[Fire], owners: list[tuple[int, bytes, int]], received: float
    ) -> dict[int, list[Sent]]:
        """Hand the records to the producer; returns them by slot, with their futures.
        owners: (slot, job id, claimed at) of each record; received: the monotonic time
        the claims' reply arrived."""
        sent: dict[int, list[Sent]] = defaultdict(list)
        if fires:
            owned = [(slot, job_id) for slot, job_id, _ in owners]
            futures = await self._send(fires, owned, received)
            for (slot, job_id, claimed_ms), future, fire in zip(
                owners, futures, fires, strict=True
            ):
                sent[slot].append(Sent(job_id, future, fire.topic, fire.due_ms, claimed_ms))
        return sent

    async def _send(
        self, fires: list[Fire], owners: list[tuple[int, bytes]], claimed: float
    ) -> list[asyncio.Future[object]]:
        """Hand records to the producer (exactly_once: one transaction per slot);
        owners: the (slot, job id) of each; claimed: when their claim's reply arrived
        (time.monotonic())."""
        if not self.ownership.leased():  # actors/ownership.py: left in flight
            self.warn("not publishing %d claimed job(s): the lease lapsed", len(fires))
            return lapsed_futures(len(fires))
        if self.transactions is not None:
            return self.transactions.publish(fires, owners, claimed, self.lease_ms)
        return await self.publisher.publish(fires)

    async def _load_tails(self, job_ids: list[bytes]) -> Tails:
        """The envelope tails of lean claimed jobs (dispatch_round.load_tails), each
        server's within half the claim's lease, which the caller checks afterwards."""
        tails = await load_tails(self.mysql, job_ids, self.lease_ms / 2000)
        if tails.error is not None:
            self.warn(
                "reading the payloads of %d claimed lean job(s) from MySQL failed; they "
                "are put back, due again in %d ms, without using an attempt: %s",
                len(tails.unread),
                self.settings.retry_backoff_ms,
                describe(tails.error),
            )
        self.tails_loaded_total += len(tails.found)
        return tails

    async def _release(self, slot: int, epoch: int, job_ids: list[bytes]) -> None:
        """Put back claimed jobs whose record could not be built (lua/release.lua)."""
        try:
            released, due_ms = await self.scripts.release(
                slot, epoch, job_ids, self.settings.retry_backoff_ms
            )
        except Fenced:
            self.ownership.lost(slot, epoch)  # the new owner's reaper retries them
            return
        self.released_total += released
        if due_ms != NO_TIME:
            self.scanner.wake(slot, due_ms)

    async def _finish(
        self,
        held: list[tuple[int, int]],
        sent: dict[int, list[Sent]],
        later: list[Held],
        in_flight: asyncio.Semaphore,
    ) -> None:
        """Publish the held jobs at their due times, wait for the broker until the
        delivery deadline, then ack what was published (one round trip for all slots)
        and nack the rest."""
        try:
            if later:
                await publish_held(later, sent, self.lease_ms, self._send)
            # A transaction bounds itself: its outcome, not a deadline, decides.
            wait_ms = self.settings.kafka_delivery_timeout_ms * (3 if self.transactions else 1)
            answers = await broker_answers(sent, wait_ms)
            if len(answers.failed) < answers.batches:
                failpoints.hit("after-publish")
            published = await self._settle(dict(held), sent, answers)
            if published:
                await self._ack(published)
                failpoints.hit("after-ack")
        except Exception as exc:
            # The jobs stay in flight; the retry-reaper returns them after their deadline.
            log.warning("acking a dispatch round failed: %s", exc)
        finally:
            self._round_finished(held, in_flight)

    async def _settle(
        self, epochs: dict[int, int], sent: dict[int, list[Sent]], answers: Answers
    ) -> dict[int, list[bytes]]:
        """Nack the jobs of the batches the broker did not acknowledge, count and time
        the rest; returns the published job ids by slot, for the ack."""
        failed = answers.failed
        # When each batch was acknowledged, on the Redis clock: once per batch.
        acked_ms = {key: self.scanner.redis_ms(at) for key, at in answers.acked_at.items()}
        published: dict[int, list[bytes]] = {}
        for slot, items in sent.items():
            if self.transactions is not None:  # in doubt: in flight, for the reaper
                items = [item for item in items if not in_doubt(item.future)]
            items = [item for item in items if not lapsed(item.future)]  # in flight
            errors = {
                item.job_id: failed[id(item.future)] for item in items if id(item.future) in failed
            }
            if errors:
                await self._nack(slot, epochs[slot], errors)
            ok = [item for item in items if item.job_id not in errors]
            if ok:
                published[slot] = [item.job_id for item in ok]
                self._observe(ok, acked_ms)
        return published

    def _observe(self, published: list[Sent], acked_ms: dict[int, float]) -> None:
        """Count and time jobs the broker acknowledged (the metrics), a batch at a time;
        acked_ms: future → Redis-clock ms the broker acknowledged its batch."""
        lateness: dict[str, list[float]] = defaultdict(list)
        publish_s: list[float] = []
        for item in published:
            at_ms = acked_ms[id(item.future)]
            lateness[item.topic].append((at_ms - item.due_ms) / 1000)
            publish_s.append((at_ms - item.claimed_ms) / 1000)
        for topic, values in lateness.items():
            self.published_by_topic[topic] += len(values)
            self.lateness.observe_many((topic,), values)
        self.publish_lag.observe_many((), publish_s)

    async def _ack(self, published: dict[int, list[bytes]]) -> None:
        """Ack published jobs (one round trip for all slots); retry the slots whose
        Redis node failed for about as long as a failover takes. Not fenced: a job that
        was published is done, whoever owns it now."""
        for pause_s in (*ACK_RETRY_PAUSES_S, None):
            try:
                acked, failed = await self.scripts.ack_many(published)
            except ReplicationUnconfirmed as exc:
                # Done on the master; only a failover in the next moments could undo
                # it, and then these jobs fire again (a duplicate after a failure).
                acked, failed = exc.result
                self.unreplicated_acks += 1
                self.warn("acks of %d slot(s) not confirmed by a replica: %s", len(published), exc)
            self.fired_total += acked
            if not failed:
                return
            published = {slot: published[slot] for slot in failed}
            if pause_s is None or not await self.sleep(pause_s):
                break
        log.warning(
            "acking %d published job(s) of %d slot(s) failed; they stay in flight and "
            "fire again after inflight_timeout_ms: %s",
            sum(map(len, published.values())),
            len(published),
            next(iter(failed.values())),
        )

    async def _nack(self, slot: int, epoch: int, errors: dict[bytes, str]) -> None:
        by_error: dict[str, list[bytes]] = defaultdict(list)
        for job_id, error in errors.items():
            by_error[error].append(job_id)
        for error, job_ids in by_error.items():
            log.warning(
                "publishing %d job(s) of slot %d failed: %s",
                len(job_ids),
                slot,
                error,
                extra={"slot": slot, "job_id": job_ids[0].decode(errors="replace")},
            )
            try:
                result = await self.scripts.nack(
                    slot,
                    epoch,
                    job_ids,
                    error,
                    self.settings.retry_backoff_ms,
                    self.settings.retry_backoff_max_ms,
                )
            except Fenced:
                self.ownership.lost(slot, epoch)  # the new owner's reaper retries them
                return
            self.failed_total += len(job_ids)
            self.retried_total += result.retried
            self.dead_total += result.dead
            self.expired_total += result.expired
            if result.earliest_due_ms != NO_TIME:
                self.scanner.wake(slot, result.earliest_due_ms)
