"""Cancels and reschedules that fail half-way, on the real stack: the client reaches
MySQL through a gate in this process that cuts the connection exactly at the change's
UPDATE (before MySQL gets it, or after MySQL ran it and before its answer comes back),
holds that UPDATE back, or lets nothing through at all. A node runs in this process on
the same stores, reaching MySQL directly.

What must hold: the call says what is known (StoreUnavailable only when nothing was
changed, OutcomeUnknown naming the job otherwise), a job whose cancel did not reach
MySQL is back in Redis within seconds and fires (not at the reconciler's full pass,
reconcile_interval_ms, 300 s here), and a cancel that returned true never fires, even
when its UPDATE lands after the node restored the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

import pytest

from actors.node import Node
from actors.tombstones import Tombstones
from cluster import DelayClient, JobStatus, OutcomeUnknown, StoreUnavailable
from cluster.connections.redis_conn import RedisClient
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.stores import in_redis
from tests.forwarder import Forwarder, free_port
from tests.mysql_tools import mysql_ports, through_ports
from tests.test_web import TOKENS, serving

# The cancel's UPDATE (to status 3, cancelled) and the reschedule's.
CANCEL_UPDATE = b"SET status = 3 WHERE"
RESCHEDULE_UPDATE = b"SET action_time"

Action = Literal["drop", "lose_reply", "hold"]


@dataclass
class _Armed:
    marker: bytes
    action: Action
    hold_s: float


class _Switch:
    """What the gates of one client (one per MySQL server) share: the next query to act
    on, whichever server it goes to, and whether that was done."""

    def __init__(self) -> None:
        self.armed: _Armed | None = None
        self.done = asyncio.Event()


class QueryGate(Forwarder):
    """A Forwarder to MySQL that does one thing to the next query containing a marker:
    "drop" cuts the connection before MySQL gets the query, "lose_reply" lets MySQL run
    it and cuts the connection before the answer comes back, "hold" sends it hold_s
    late. `done` is set once it has. Gates sharing a switch act on the first such query
    that any of them sees."""

    def __init__(self, listen_port: int, target_port: int, switch: _Switch | None = None) -> None:
        super().__init__(listen_port, target_port)
        self.switch = switch or _Switch()

    @property
    def done(self) -> asyncio.Event:
        return self.switch.done

    def arm(self, marker: bytes, action: Action, hold_s: float = 0.0) -> None:
        self.switch.armed = _Armed(marker, action, hold_s)
        self.done.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        lose_reply = asyncio.Event()

        def cut() -> None:
            writer.close()
            up_writer.close()
            self.done.set()

        async def up() -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(65536):
                    armed = self.switch.armed
                    if armed is not None and armed.marker in data:
                        self.switch.armed = None
                        if armed.action == "drop":
                            cut()
                            return
                        if armed.action == "hold":
                            await asyncio.sleep(armed.hold_s)
                            self.done.set()
                        else:
                            lose_reply.set()
                    up_writer.write(data)
                    await up_writer.drain()
            up_writer.close()

        async def down() -> None:
            with contextlib.suppress(OSError):
                while data := await up_reader.read(65536):
                    if lose_reply.is_set():
                        cut()
                        return
                    writer.write(data)
                    await writer.drain()
            writer.close()

        await asyncio.gather(up(), down())


class QueryGates:
    """A QueryGate in front of every MySQL server of `settings`, sharing one switch;
    `settings` (the attribute) reach MySQL through them."""

    def __init__(self, settings: Settings) -> None:
        self.switch = _Switch()
        self.gates = [QueryGate(free_port(), port, self.switch) for port in mysql_ports(settings)]
        self.settings = through_ports(settings, [gate.listen_port for gate in self.gates])

    @property
    def done(self) -> asyncio.Event:
        return self.switch.done

    def arm(self, marker: bytes, action: Action, hold_s: float = 0.0) -> None:
        self.gates[0].arm(marker, action, hold_s)

    async def open(self) -> None:
        for gate in self.gates:
            await gate.open()

    async def cut(self) -> None:
        for gate in self.gates:
            await gate.cut()


@contextlib.asynccontextmanager
async def gated_client(settings: Settings) -> AsyncIterator[tuple[DelayClient, QueryGates]]:
    """A client whose MySQL connections (to every server) go through QueryGates."""
    gate = QueryGates(settings)
    await gate.open()
    try:
        async with DelayClient(gate.settings) as client:
            yield client, gate
    finally:
        await gate.cut()


@contextlib.asynccontextmanager
async def running_node(settings: Settings) -> AsyncIterator[Tombstones]:
    """A node in this process owning every slot; yields its tombstones actor."""
    assert settings.reconcile_interval_ms == 300_000  # the full pass is far away
    node = Node(settings)
    await node.start()
    try:
        assert node.parts is not None
        parts = node.parts

        async def owns_all() -> bool:
            return len(parts.reconciler.reconciled_slots()) == settings.slots

        assert await wait_for(owns_all, timeout_s=30)
        [actor] = [a for a in parts.supervisor.actors if isinstance(a, Tombstones)]
        yield actor
    finally:
        await node.stop()


async def test_a_cancel_whose_update_never_reached_mysql_is_put_back_by_the_node(
    settings: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """The connection breaks as the cancel's UPDATE is sent: MySQL never gets it, and
    the client cannot tell. The call raises OutcomeUnknown naming the job; the node
    finds the tombstone of a job MySQL calls pending and puts the job back, which then
    fires."""
    async with running_node(settings) as tombstones, gated_client(settings) as (client, gate):
        job_id = await client.schedule(topic, {"n": 1}, delay=3.0)
        gate.arm(CANCEL_UPDATE, "drop")
        with pytest.raises(OutcomeUnknown, match="may or may not") as caught:
            await client.cancel(job_id)
        assert caught.value.job_ids == [job_id]
        assert gate.done.is_set()
        assert not await in_redis(redis, client.settings, job_id)  # removed by the Redis step
        row = await client.get(job_id)
        assert row is not None and row.status == JobStatus.PENDING
        [record] = await collector.until(1, timeout_s=60)
        assert record["job_id"] == job_id
        assert tombstones.restored_total == 1
        print(f"restored and fired {record['received_ms'] - record['due_ms']:.0f} ms late")


async def test_a_cancel_whose_answer_was_lost_is_not_undone(
    settings: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """MySQL ran the cancel's UPDATE, and the connection broke before its answer: the
    call raises OutcomeUnknown, the node leaves the cancelled job alone (MySQL says
    cancelled), it never fires, and cancelling again answers true."""
    async with running_node(settings) as tombstones, gated_client(settings) as (client, gate):
        job_id = await client.schedule(topic, {"n": 1}, delay=2.0)
        gate.arm(CANCEL_UPDATE, "lose_reply")
        with pytest.raises(OutcomeUnknown) as caught:
            await client.cancel(job_id)
        assert caught.value.job_ids == [job_id]
        row = await client.get(job_id)
        assert row is not None and row.status == JobStatus.CANCELLED
        k = client.keys.slot(slot_of(job_id, client.settings.slots))
        tomb_ms = await redis.zscore(k.tomb, job_id)
        assert tomb_ms is not None
        checks = tombstones.checks_total

        async def judged() -> bool:  # a check made after the tombstone's grace
            return tombstones.checks_total > checks + 1 and time.time() * 1000 > (
                tomb_ms - settings.marker_retention_ms + 6000
            )

        assert await wait_for(judged, timeout_s=30)
        assert await collector.quiet_for(3.0) == []
        assert tombstones.restored_total == 0
        assert not await in_redis(redis, client.settings, job_id)
        assert await client.cancel(job_id)


async def test_a_cancel_while_mysql_is_unreachable_changes_nothing(
    settings: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """MySQL cannot be reached at all: the UPDATE is never sent, the client puts the
    job back itself and raises StoreUnavailable (nothing was changed); it fires."""
    async with running_node(settings), gated_client(settings) as (client, gate):
        job_id = await client.schedule(topic, {"n": 1}, delay=2.0)
        await gate.cut()
        await asyncio.sleep(0.2)  # the pool sees its connections closed
        with pytest.raises(StoreUnavailable, match="was not cancelled"):
            await client.cancel(job_id)
        assert await in_redis(redis, client.settings, job_id)
        [record] = await collector.until(1, timeout_s=30)
        assert record["job_id"] == job_id


async def test_a_cancel_whose_update_lands_after_the_restore_cancels_again(
    settings: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """A cancel's UPDATE is held back past the node's restore of the job (a frozen
    client): it then changes nothing (restored_ms), the client cancels again (the job
    is back in Redis, and goes), and the answer is true: the job never fires."""
    async with running_node(settings) as tombstones, gated_client(settings) as (client, gate):
        job_id = await client.schedule(topic, {"n": 1}, delay=14.0)
        gate.arm(CANCEL_UPDATE, "hold", hold_s=9.0)
        cancel = asyncio.create_task(client.cancel(job_id))

        async def restored() -> bool:
            return tombstones.restored_total == 1

        assert await wait_for(restored, timeout_s=30)
        assert not gate.done.is_set() and not cancel.done()  # the UPDATE is still held
        assert await in_redis(redis, client.settings, job_id)
        assert await cancel
        assert not await in_redis(redis, client.settings, job_id)
        row = await client.get(job_id)
        assert row is not None and row.status == JobStatus.CANCELLED
        assert row.due_ms > time.time() * 1000  # not due yet: the quiet below covers it
        await collector.quiet_for((row.due_ms - time.time() * 1000) / 1000 + 3.0)
        assert collector.records == []


async def test_a_reschedule_whose_update_is_lost_says_where_the_job_is(
    settings: Settings, topic: str, collector: Collector
) -> None:
    """Redis moved the job, then recording the new time in MySQL failed: the call
    raises OutcomeUnknown saying the job fires at its new time, and it does."""
    async with running_node(settings), gated_client(settings) as (client, gate):
        job_id = await client.schedule(topic, {"n": 1}, delay=60.0)
        new_due_ms = int(time.time() * 1000) + 2000
        gate.arm(RESCHEDULE_UPDATE, "drop")
        with pytest.raises(OutcomeUnknown, match="in Redis with its new due time") as caught:
            await client.reschedule(job_id, at=new_due_ms / 1000)
        assert caught.value.job_ids == [job_id]
        [record] = await collector.until(1, timeout_s=30)
        assert (record["job_id"], record["due_ms"]) == (job_id, new_due_ms)


@pytest.mark.once
async def test_a_cancel_whose_redis_step_fails_names_the_job(
    settings: Settings, topic: str
) -> None:
    """Redis cannot be reached for the cancel's first step: OutcomeUnknown naming the
    job, not the driver's ConnectionError; MySQL is not changed."""
    port = free_port()
    url = urlparse(settings.redis_url)
    through = settings.replace(
        redis_url=url._replace(netloc=f"{url.netloc.rsplit(':', 1)[0]}:{port}").geturl()
    )
    link = Forwarder(port, url.port or 6379)
    await link.open()
    try:
        async with DelayClient(through) as client:
            job_id = await client.schedule(topic, {"n": 1}, delay=60.0)
            await link.cut()
            with pytest.raises(OutcomeUnknown, match="Redis did not answer") as caught:
                await client.cancel(job_id)
            assert caught.value.job_ids == [job_id]
            row = await client.get(job_id)
            assert row is not None and row.status == JobStatus.PENDING
    finally:
        await link.cut()


async def test_a_cancel_over_http_whose_update_is_lost_answers_outcome_unknown(
    settings: Settings, topic: str, collector: Collector
) -> None:
    """`DELETE /v1/jobs/{id}` whose UPDATE never reached MySQL: 500 outcome-unknown naming
    the job (not 503 "nothing was written"), and the job fires."""
    async with running_node(settings), gated_client(settings) as (client, gate):
        web_settings = client.settings.replace(web_tokens=TOKENS)
        async with serving(web_settings, client) as api:
            job_id = await client.schedule(topic, {"n": 1}, delay=2.0)
            gate.arm(CANCEL_UPDATE, "drop")
            status, problem, _ = await api.call("DELETE", f"/v1/jobs/{job_id}")
            assert status == 500, problem
            assert problem["type"] == "urn:delayq:problem:outcome-unknown"
            assert problem["job_ids"] == [job_id]
            [record] = await collector.until(1, timeout_s=60)
            assert record["job_id"] == job_id
