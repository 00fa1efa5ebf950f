"""One dispatch round's jobs, from the claim's reply to the broker's answer: the steps of
actors/dispatcher.py that need no actor state (no Redis, no MySQL, no logging).

Sorting (sort_claimed): every claimed job of a fresh claim is published now, held until
its due time, refused (nacked: its attempt fails), or left unbuilt (released: put back
without using an attempt).

Fire advance: the mover moves jobs up to fire_advance_ms before their due time, so a
claim can return jobs that are not due yet. Each such job is held in the round's task
and published once the Redis clock has passed its due time: the claim script's Redis
TIME is a reading taken before its reply arrived, so (due − that reading) ms of the
local monotonic clock after the reply always ends after the due time, whatever the
node's wall clock says. Its record's fired_ms is that reading plus the time held, never
below due_ms.

Priority: the jobs a round publishes at once (its due ones, or the held ones released
together) go out highest priority first, in claim order otherwise; a slot's claim is
already in due order, and by priority within a due ms (the delay zset's score). Only a
round with a job of priority above 0 is reordered.

Broker answers (broker_answers): one wait for every batch of the round, bounded by
kafka_delivery_timeout_ms; a batch not acknowledged by then counts as failed.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

from cluster.errors import LeaseLapsed
from cluster.model.envelope import (
    Fire,
    due_topic_and_fields,
    fields_of,
    fire_of,
    is_lean,
    with_tail,
)
from cluster.model.jobs import topic_refusal
from cluster.scripts.codec import Claimed
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

# Hands records to the producer, given each one's (slot, job id); one future per record.
# And the time.monotonic() their claim's reply arrived.
Send = Callable[
    [list[Fire], list[tuple[int, bytes]], float], Awaitable[list[asyncio.Future[object]]]
]

# Error of a lean job whose MySQL row is gone: its record cannot be built.
NO_ROW_ERROR = "MissingRow: the job's payload is not in Redis and MySQL has no row of it"


class SlotClaim(NamedTuple):
    """What one slot's claim returned."""

    slot: int
    epoch: int
    now_ms: int  # the claim script's Redis TIME
    jobs: list[Claimed]


@dataclass(frozen=True, slots=True)
class Sent:
    """A job handed to the producer, and the future of its broker acknowledgement."""

    job_id: bytes
    future: asyncio.Future[object]
    topic: str
    due_ms: int
    claimed_ms: int  # Redis clock; for a held job, when it was released


@dataclass(frozen=True, slots=True)
class Held:
    """A claimed job that is not due yet: published at its due time (fire advance)."""

    slot: int
    job_id: bytes
    envelope: bytes
    attempt: int
    due_ms: int
    claimed_ms: int  # the claim script's Redis TIME
    received: float  # time.monotonic() when the claim's reply had arrived

    @property
    def release_at(self) -> float:
        """A time.monotonic() by which the Redis clock has passed due_ms."""
        return self.received + (self.due_ms - self.claimed_ms) / 1000


@dataclass(frozen=True, slots=True)
class Sorted:
    """A round's claimed jobs, sorted by what happens to them next."""

    fires: list[Fire]  # due: published now
    owners: list[tuple[int, bytes, int]]  # slot, job id, claimed at: one per fire
    later: list[Held]  # not due yet: published at their due time
    # Jobs that cannot be published (no MySQL row, or a topic producers refuse, see
    # topic_refusal: a producer with other settings wrote them): each attempt fails,
    # then dead.
    refused: dict[tuple[int, int], dict[bytes, str]]  # (slot, epoch) → job id → error
    # Lean jobs whose tail could not be read (MySQL down): released, not failed.
    unbuilt: dict[tuple[int, int], list[bytes]]  # (slot, epoch) → job ids
    more: list[int]  # slots whose claim was full: they may hold more


class Answers(NamedTuple):
    """The broker's answers to a round's batches, each batch keyed by id(future)."""

    batches: int
    failed: dict[int, str]  # why a batch was not published
    acked_at: dict[int, float]  # time.time() the broker answered


@dataclass
class Tails:
    """Lean claimed jobs' envelope tails, by job id (a job without a row is absent);
    `unread`: the jobs whose MySQL server did not answer (put back, not refused), and
    `error`: why."""

    found: dict[bytes, bytes]
    unread: set[bytes]
    error: BaseException | None = None


async def load_tails(mysql: MySQLStore, job_ids: list[bytes], timeout_s: float) -> Tails:
    """The tails of lean claimed jobs from their MySQL rows, one read per server, each
    within timeout_s: a server down or frozen leaves only its own jobs unread."""
    if not job_ids:
        return Tails({}, set())
    try:
        rows, unread = await mysql.get_answering([j.decode() for j in job_ids], timeout_s)
    except Exception as exc:
        return Tails({}, set(job_ids), exc)
    found = {job_id.encode(): row.tail for job_id, row in rows.items()}
    missing = {job_id.encode() for ids, _ in unread for job_id in ids}
    return Tails(found, missing, unread[0][1] if unread else None)


def sort_claimed(
    claims: list[SlotClaim],
    tails: Tails,
    settings: Settings,
    claim_batch: int,
    received: float,
) -> Sorted:
    """Build each claimed job's record and sort it (see the module's docstring). tails:
    the tails of lean jobs (load_tails); received: the time.monotonic() the claims'
    reply had arrived."""
    found, unread = tails.found, tails.unread
    # Plain locals in the loop below: it runs once per fired job.
    fires: list[Fire] = []
    owners: list[tuple[int, bytes, int]] = []
    later: list[Held] = []
    refused: dict[tuple[int, int], dict[bytes, str]] = defaultdict(dict)
    unbuilt: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    more: list[int] = []
    ranked: list[tuple[int, int]] = []  # (index in fires, priority) of jobs with one
    for slot, epoch, now_ms, claimed in claims:
        for job in claimed:
            envelope = job.envelope
            if is_lean(envelope):
                if job.job_id in unread:
                    unbuilt[slot, epoch].append(job.job_id)
                    continue
                tail = found.get(job.job_id)
                if tail is None:
                    refused[slot, epoch][job.job_id] = NO_ROW_ERROR
                    continue
                envelope = with_tail(envelope, tail)
            try:
                due_ms, topic, fields = due_topic_and_fields(envelope)
            except ValueError as exc:  # EnvelopeError included: not an envelope we wrote
                refused[slot, epoch][job.job_id] = f"UnreadableEnvelope: {exc}"[:500]
                continue
            refusal = topic_refusal(topic, settings)
            if refusal is not None:
                refused[slot, epoch][job.job_id] = f"TopicNotAllowed: {refusal}"[:500]
                continue
            if due_ms > now_ms:
                later.append(
                    Held(slot, job.job_id, envelope, job.attempt, due_ms, now_ms, received)
                )
                continue
            try:
                fire = fire_of(envelope, job.attempt, now_ms)
            except ValueError as exc:  # a tail we did not write
                refused[slot, epoch][job.job_id] = f"UnreadableEnvelope: {exc}"[:500]
                continue
            if fields.priority:
                ranked.append((len(fires), fields.priority))
            fires.append(fire)
            owners.append((slot, job.job_id, now_ms))
        if len(claimed) == claim_batch:
            more.append(slot)
    if ranked:
        priority = [0] * len(fires)
        for at, value in ranked:
            priority[at] = value
        # Stable: equal priorities keep the claims' order (reverse=True keeps it too).
        order = sorted(range(len(fires)), key=priority.__getitem__, reverse=True)
        fires = [fires[i] for i in order]
        owners = [owners[i] for i in order]
    return Sorted(fires, owners, later, refused, unbuilt, more)


async def broker_answers(sent: dict[int, list[Sent]], delivery_timeout_ms: int) -> Answers:
    """Wait until the broker has answered every batch of `sent`, or the delivery deadline."""
    deadline = time.monotonic() + delivery_timeout_ms / 1000
    unique = list(
        {id(item.future): item.future for items in sent.values() for item in items}.values()
    )
    failed: dict[int, str] = {}
    acked_at: dict[int, float] = {}
    for future in unique:
        if future.done():
            acked_at[id(future)] = time.time()
        else:
            future.add_done_callback(lambda f: acked_at.__setitem__(id(f), time.time()))
    if unique:
        # The producer may retry a batch for longer than that (an idempotent one
        # retries forever): past the deadline the jobs are retried by delayq, and
        # a late delivery of the old batch is a duplicate after a failure.
        await asyncio.wait(unique, timeout=max(deadline - time.monotonic(), 0))
        for future in unique:
            error = error_of(future, delivery_timeout_ms)
            if error is not None:
                failed[id(future)] = error
            if not future.done():  # its late outcome is read, so asyncio logs no error
                future.add_done_callback(_retrieve)
    return Answers(len(unique), failed, acked_at)


async def publish_held(
    later: list[Held], sent: dict[int, list[Sent]], lease_ms: float, send: Send
) -> None:
    """Publish each held job once the Redis clock has passed its due time, those
    released at the same moment together; add them to `sent`."""
    later.sort(key=lambda job: job.release_at)
    start = 0
    while start < len(later):
        now = time.monotonic()
        wait_s = later[start].release_at - now
        if wait_s > 0:
            # Never interrupted by stop(): a clean stop publishes what it claimed,
            # and the wait is at most fire_advance_ms.
            await asyncio.sleep(wait_s)
            continue
        end = start
        while end < len(later) and later[end].release_at <= now:
            end += 1
        batch, start = later[start:end], end
        if any(fields_of(job.envelope).priority for job in batch):
            batch.sort(key=lambda job: fields_of(job.envelope).priority, reverse=True)
        released: list[tuple[Held, int]] = []  # job, fired_ms
        for job in batch:
            held_ms = int((now - job.received) * 1000)
            if held_ms > lease_ms:
                # This process was paused while holding it: like a stale claim, it
                # is left in flight for whoever owns the slot now.
                continue
            released.append((job, max(job.claimed_ms + held_ms, job.due_ms)))
        fires = [fire_of(job.envelope, job.attempt, fired_ms) for job, fired_ms in released]
        claimed = min((job.received for job, _ in released), default=now)
        futures = await send(fires, [(job.slot, job.job_id) for job, _ in released], claimed)
        for (job, fired_ms), future, fire in zip(released, futures, fires, strict=True):
            sent[job.slot].append(Sent(job.job_id, future, fire.topic, job.due_ms, fired_ms))


def _retrieve(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


def error_of(future: asyncio.Future[object], delivery_timeout_ms: int) -> str | None:
    """Why a batch was not published by its deadline, or None if it was."""
    if not future.done():
        return (
            f"KafkaTimeoutError: not delivered within "
            f"{delivery_timeout_ms} ms (kafka_delivery_timeout_ms)"
        )
    if future.cancelled():
        return "CancelledError: the producer dropped the batch"
    error = future.exception()
    return None if error is None else describe(error)


def describe(exc: BaseException) -> str:
    """An error as recorded with a job (type and message, at most 500 characters)."""
    return f"{type(exc).__name__}: {exc}"[:500]


def lapsed_futures(count: int) -> list[asyncio.Future[object]]:
    """Failed futures for records not handed to the producer: the lease lapsed."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[object]] = []
    for _ in range(count):
        future = loop.create_future()
        future.set_exception(LeaseLapsed("ZooKeeper has not confirmed this node's slots"))
        futures.append(future)
    return futures


def lapsed(future: asyncio.Future[object]) -> bool:
    """Whether a record was not handed to the producer because the lease lapsed (its
    job stays in flight for the slot's owner: neither acked nor nacked)."""
    return future.done() and not future.cancelled() and isinstance(future.exception(), LeaseLapsed)
