"""Exactly-once delivery (delivery = "exactly_once", docs/guarantees.md): each slot's
records go to Kafka in transactions of that slot's own transactional producer, and each
transaction also writes a journal record naming the jobs it carries.

The fence: a transactional id is Kafka's fence, so there is one per slot,
"delayq.<key_prefix>.slot-<n>". Starting a producer with it ends every earlier
transaction of the id (an open one is aborted) and stops the earlier producer from ever
committing again: a slot's previous owner (crashed, or paused past its ZooKeeper
session) is fenced by the new owner's first producer. A producer is started only after
the node checked the slot's epoch in Redis, and used only if the epoch is still its own
afterwards, so a zombie that starts one after losing the slot never sends with it.

What was committed: a transaction whose outcome is unknown (the commit timed out or the
connection broke, the node crashed after it, the ack in Redis failed) leaves its jobs in
flight. Before anything retries them, the slot's producer is started anew, which waits
until every earlier transaction of the slot has ended and fences every earlier
producer; it commits a barrier record to the journal, and the journal is read with
read_committed from before the jobs were claimed up to that barrier (actors/journal.py):
the jobs it names were committed and are acked; the others never will be and are
retried. So a consumer reading with isolation_level=read_committed sees each fired job
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.errors import TransactionalIdAuthorizationFailed

from actors import failpoints
from actors.journal import Journal
from actors.ownership import Ownership
from actors.publisher import Publisher, make_producer
from cluster.connections.kafka_conn import start_client
from cluster.errors import ConfigError
from cluster.model.envelope import Fire
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

# The journal is read from this long before the oldest claim in question: room for the
# clocks of Redis (claims), the broker (journal timestamps) and the node to disagree.
CLOCK_MARGIN_MS = 60_000
# Keeps a journal record (about 35 bytes per job) well under the broker's message limit.
MAX_JOBS_PER_TRANSACTION = 5000


class InDoubt(Exception):
    """A transaction's outcome is unknown: its jobs stay in flight until someone reads
    the journal (the retry-reaper, after their deadline)."""


class NotOwned(Exception):
    """The slot is no longer this node's: nothing was sent."""


class _Waiting(NamedTuple):
    """Records one publish() call queued for a slot, and the future they share."""

    fires: list[Fire]
    job_ids: list[bytes]
    future: asyncio.Future[object]
    # Not sent unless its transaction begins by then (time.monotonic()): a claim that
    # waited too long may have passed its in-flight deadline, and the reaper may have
    # retried its jobs already.
    send_by: float


def transactional_id_prefix(settings: Settings) -> str:
    """What every transactional id of the cluster starts with: one prefixed ACL covers them."""
    return f"delayq.{settings.key_prefix}.slot-"


def transactional_id(settings: Settings, slot: int) -> str:
    return f"{transactional_id_prefix(settings)}{slot}"


def probe_transactional_id(settings: Settings) -> str:
    """The start-up check's transactional id: inside the slots' prefix, owned by no slot."""
    return f"{transactional_id_prefix(settings)}probe"


def in_doubt(future: asyncio.Future[object]) -> bool:
    """Whether a transaction's future says nothing definite: not ended, cancelled (the
    node is stopping), or InDoubt. Its jobs must be left in flight."""
    return not future.done() or future.cancelled() or isinstance(future.exception(), InDoubt)


class SlotTransactions:
    """The slots' transactional producers, the journal, and the answer to "which of
    these jobs were committed?"."""

    def __init__(self, settings: Settings, scripts: Scripts, ownership: Ownership) -> None:
        self.settings = settings
        self.scripts = scripts
        self.ownership = ownership
        self.journal = Journal(settings)
        # slot → the publisher over its producer, and the ownership epoch it was started
        # for: a producer of an earlier epoch may be fenced, or may have been in use
        # when another node's transactions of the slot began.
        self._publishers: dict[int, tuple[Publisher, int]] = {}
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Records waiting for their slot's next transaction, and the task running them:
        # what arrives while a transaction runs goes in the next one together (group
        # commit), so a busy slot makes fewer, larger transactions, not a queue of them.
        self._waiting: dict[int, list[_Waiting]] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self.committed_total = 0  # transactions committed
        self.aborted_total = 0  # transactions aborted (their jobs are retried)
        self.in_doubt_total = 0  # transactions whose outcome was left to the journal
        self.resolved_total = 0  # in-flight jobs found committed in the journal, acked

    async def start(self) -> None:
        """Create the journal topic if it is missing, check that the broker supports
        transactions, and start the journal's reader."""
        await self.journal.create_topic()
        await self.journal.load_key(self.scripts.redis)
        probe_id = probe_transactional_id(self.settings)
        probe = make_producer(self.settings, probe_id)
        try:
            try:
                await start_client(probe, self.settings)
            except TransactionalIdAuthorizationFailed:
                raise ConfigError(
                    f"the Kafka broker refused the transactional id {probe_id!r}: "
                    "delivery = exactly_once needs Write and Describe on the transactional "
                    f"ids prefixed {transactional_id_prefix(self.settings)!r} for the node's "
                    "Kafka user (docs/security.md#kafka-acls)"
                ) from None
            except Exception as exc:
                raise ConfigError(
                    "delivery = exactly_once needs a Kafka broker with transactions "
                    f"(InitProducerId): {type(exc).__name__}: {exc}"
                ) from None
            partitions = len(await probe.partitions_for(self.journal.topic))
        finally:
            await probe.stop()
        await self.journal.start_reader(partitions)

    async def close(self) -> None:
        workers = list(self._workers.values())
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for waiting in self._waiting.values():
            for entry in waiting:
                entry.future.cancel()
        self._waiting.clear()
        for slot in list(self._publishers):
            await self._discard(slot)
        await self.journal.close()

    def publish(
        self,
        fires: Sequence[Fire],
        owners: Sequence[tuple[int, bytes]],
        claimed: float,
        lease_ms: float,
    ) -> list[asyncio.Future[object]]:
        """Queue the records for their slots' next transactions; every record gets the
        future of its slot's share: done when its transaction was committed, failed when
        it was aborted, InDoubt when that is unknown. claimed: the time.monotonic() the
        claim's reply arrived; a record whose transaction has not begun lease_ms after
        it is not sent (InDoubt: its jobs stay in flight for the reaper)."""
        by_slot: dict[int, list[int]] = defaultdict(list)
        for index, (slot, _) in enumerate(owners):
            by_slot[slot].append(index)
        of_index: dict[int, asyncio.Future[object]] = {}
        loop = asyncio.get_running_loop()
        for slot, indexes in by_slot.items():
            entry = _Waiting(
                [fires[i] for i in indexes],
                [owners[i][1] for i in indexes],
                loop.create_future(),
                claimed + lease_ms / 1000,
            )
            self._waiting.setdefault(slot, []).append(entry)
            if slot not in self._workers:
                self._workers[slot] = loop.create_task(
                    self._work(slot), name=f"transactions-slot-{slot}"
                )
            for index in indexes:
                of_index[index] = entry.future
        return [of_index[index] for index in range(len(fires))]

    async def _work(self, slot: int) -> None:
        """Run the slot's waiting records in transactions, up to MAX_JOBS_PER_TRANSACTION
        each, until none wait."""
        taken: list[_Waiting] = []
        try:
            while waiting := self._waiting.pop(slot, []):
                taken, count = [], 0
                while waiting and (
                    not taken or count + len(waiting[0].job_ids) <= MAX_JOBS_PER_TRANSACTION
                ):
                    count += len(waiting[0].job_ids)
                    taken.append(waiting.pop(0))
                if waiting:  # the rest go in the next transaction
                    self._waiting[slot] = waiting + self._waiting.get(slot, [])
                try:
                    await self._transact(slot, taken)
                except Exception as exc:
                    for entry in taken:
                        entry.future.set_exception(exc)
                else:
                    for entry in taken:
                        entry.future.set_result(None)
                taken = []
        except asyncio.CancelledError:  # close(): nobody waits for these any more
            for entry in taken:
                entry.future.cancel()
            raise
        finally:
            del self._workers[slot]

    async def _transact(self, slot: int, taken: list[_Waiting]) -> None:
        """One transaction of the taken records; the entries that waited past their
        send_by are settled InDoubt here, unsent."""
        async with self._locks[slot]:
            try:
                epoch = self.ownership.epoch(slot)
            except KeyError:
                raise NotOwned(f"slot {slot} is no longer owned by this node") from None
            publisher = await self._publisher(slot, epoch)
            producer = publisher.producer
            # Checked with the lock held, right before the transaction begins: from
            # here to its end the reaper cannot read the journal for this slot.
            now = time.monotonic()
            for entry in [entry for entry in taken if now > entry.send_by]:
                taken.remove(entry)
                entry.future.set_exception(
                    InDoubt("not sent: claimed too long ago; left in flight for the reaper")
                )
            if not taken:
                return
            fires = [fire for entry in taken for fire in entry.fires]
            job_ids = [job_id for entry in taken for job_id in entry.job_ids]
            began_ms = int(time.time() * 1000)
            committing = False
            try:
                async with asyncio.timeout(self.settings.kafka_delivery_timeout_ms / 1000):
                    await producer.begin_transaction()
                    sends = [
                        *set(await publisher.publish(fires)),
                        await self.journal.send(producer, slot, epoch, job_ids),
                    ]
                    errors = [
                        r
                        for r in await asyncio.gather(*sends, return_exceptions=True)
                        if isinstance(r, BaseException)
                    ]
                    if errors:
                        raise errors[0]
                    failpoints.hit("before-commit")
                    committing = True
                    await producer.commit_transaction()
            except Exception as exc:
                aborted = not committing and await self._abort(slot, producer)
                # A new producer next time: nothing of this one's queues may leak into
                # the slot's next transaction.
                await self._discard(slot)
                if aborted:
                    self.aborted_total += 1
                    raise
                await self._resolve_in_doubt(slot, epoch, job_ids, began_ms, exc)
                return
            self.committed_total += 1

    async def _abort(self, slot: int, producer: AIOKafkaProducer) -> bool:
        """Abort the slot's open transaction; False when that failed too."""
        try:
            async with asyncio.timeout(self.settings.kafka_request_timeout_ms / 1000):
                await producer.abort_transaction()
        except Exception as exc:
            log.warning("aborting a transaction of slot %d failed: %s", slot, exc)
            return False
        return True

    async def _resolve_in_doubt(
        self, slot: int, epoch: int, job_ids: list[bytes], began_ms: int, error: Exception
    ) -> None:
        """After a transaction of unknown outcome (lock held): start the slot's producer
        anew, which ends the transaction for good, and read the journal. Returns when it
        was committed; raises the error when it was not, InDoubt when that is unknown."""
        self.in_doubt_total += 1
        try:
            committed = await self._committed(slot, epoch, set(job_ids), began_ms - CLOCK_MARGIN_MS)
        except Exception as exc:
            raise InDoubt(
                f"transaction of slot {slot} failed ({type(error).__name__}: {error}) and "
                f"reading the journal failed too ({type(exc).__name__}: {exc})"
            ) from None
        log.info(
            "slot %d: in-doubt transaction of %d job(s) %s",
            slot,
            len(job_ids),
            "committed" if committed else "not committed",
        )
        if not committed:
            self.aborted_total += 1
            raise error
        self.committed_total += 1

    async def _publisher(self, slot: int, epoch: int) -> Publisher:
        """The slot's publisher over a started producer: a new one (fencing every
        earlier producer of the slot) if there is none; NotOwned if the slot's epoch in
        Redis is not `epoch`, before or after starting it."""
        held = self._publishers.get(slot)
        if held is not None:
            if held[1] == epoch:
                return held[0]
            await self._discard(slot)
        await self._check_epoch(slot, epoch)
        producer = make_producer(self.settings, transactional_id(self.settings, slot))
        began = time.monotonic()
        try:
            await start_client(producer, self.settings)
            log.debug(
                "slot %d: producer started in %.0f ms", slot, (time.monotonic() - began) * 1000
            )
            await self._check_epoch(slot, epoch)
        except BaseException:
            await producer.stop()
            raise
        publisher = Publisher(
            producer,
            self.settings.node_id,
            self.settings.kafka_max_batch_bytes,
            self.ownership.leased,
        )
        self._publishers[slot] = (publisher, epoch)
        return publisher

    async def _check_epoch(self, slot: int, epoch: int) -> None:
        current = int(await self.scripts.redis.get(self.scripts.keys.slot(slot).owner) or 0)
        if current != epoch:
            self.ownership.lost(slot, epoch)
            raise NotOwned(f"slot {slot} has epoch {current} in Redis, not {epoch}")

    async def _discard(self, slot: int) -> None:
        held = self._publishers.pop(slot, None)
        if held is not None:
            publisher = held[0]
            await publisher.close()
            try:
                # stop() flushes what the producer holds, which waits for a broker
                # that does not answer: bounded, since nothing it sends can commit.
                async with asyncio.timeout(self.settings.kafka_request_timeout_ms / 1000):
                    await publisher.producer.stop()
            except Exception as exc:  # its connection may be what broke
                log.debug("stopping the producer of slot %d: %s", slot, exc)

    async def settle_timed_out(
        self, held: list[tuple[int, int]], now_ms: int, limit: int
    ) -> list[tuple[int, int]]:
        """Before the retry-reaper retries in-flight jobs whose deadline passed (by
        now_ms, the Redis clock): ack those the journal shows committed. Returns the
        (slot, epoch) pairs settled, whose other timed-out jobs may be retried; a slot
        whose lookup failed is left out (logged), and the others are settled all the
        same."""
        settled = []
        replies = await self.scripts.timed_out_many([slot for slot, _ in held], now_ms, limit)
        for (slot, epoch), timed_out in zip(held, replies, strict=True):
            if not timed_out:
                settled.append((slot, epoch))
                continue
            try:
                await self._settle_slot(slot, epoch, timed_out)
            except Exception as exc:
                log.warning(
                    "slot %d: looking up %d timed-out in-flight job(s) in the journal "
                    "failed, none retried: %s: %s",
                    slot,
                    len(timed_out),
                    type(exc).__name__,
                    exc,
                )
                continue
            settled.append((slot, epoch))
        return settled

    async def _settle_slot(
        self, slot: int, epoch: int, timed_out: list[tuple[bytes, float]]
    ) -> None:
        oldest_claim_ms = min(score for _, score in timed_out) - self.settings.inflight_timeout_ms
        async with self._locks[slot]:
            committed = await self._committed(
                slot,
                epoch,
                {job_id for job_id, _ in timed_out},
                int(oldest_claim_ms) - CLOCK_MARGIN_MS,
            )
        if committed:
            count, failed = await self.scripts.ack_many({slot: sorted(committed)})
            if failed:
                raise failed[slot].error
            self.resolved_total += count
            log.info(
                "slot %d: %d timed-out in-flight job(s) were committed to Kafka: acked",
                slot,
                count,
            )

    async def forget_unowned(self) -> None:
        """Stop the producers of slots this node no longer owns."""
        for slot in [slot for slot in self._publishers if not self.ownership.owns(slot)]:
            async with self._locks[slot]:
                await self._discard(slot)

    async def _committed(
        self, slot: int, epoch: int, job_ids: set[bytes], since_ms: int
    ) -> set[bytes]:
        """Which of `job_ids` a transaction of the slot committed (lock held). The slot's
        producer is started anew first, even this process's own, which fences every
        earlier producer and waits until every earlier transaction of the id has ended;
        then it commits a barrier record to the journal, and the journal is read up to
        that barrier. Reading to the barrier, not to the end offset the broker reports:
        a commit returns once the coordinator has decided, before its markers are
        written, and only what is below a visible committed record is surely settled."""
        await self._discard(slot)
        producer = (await self._publisher(slot, epoch)).producer
        barrier = uuid.uuid4().hex
        try:
            async with asyncio.timeout(self.settings.kafka_delivery_timeout_ms / 1000):
                await producer.begin_transaction()
                await (await self.journal.send(producer, slot, epoch, [], barrier))
                await producer.commit_transaction()
        except BaseException:
            await self._discard(slot)  # its transaction may be open
            raise
        return await self.journal.committed(slot, job_ids, since_ms, barrier)
