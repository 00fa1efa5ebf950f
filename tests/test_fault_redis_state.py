"""Fault scenarios where Redis loses track of what it did: a claim it ran whose reply
never reached the node (actors/claims.py), Redis stopped while claims run, and a
single Redis that comes back from an older append-only file while cancels and
reschedules run (actors/rollback.py). Real node processes, real Redis, checked like
the rest of the fault suite (tests/test_faults.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.scripts.runner import load_source
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.load import reading, steady_load
from tests.faults.scenario import Run, Stage, down_for, scenario, stage
from tests.faults.settle import settle
from tests.faults.shared import shared_pid
from tests.faults.verdict import Ledger, assert_safe
from tests.forwarder import Forwarder, free_port
from tests.processes import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.faults]
__all__ = ["stage"]  # a fixture of tests/faults/scenario.py


class ClaimReplyDropper(Forwarder):
    """A forwarder that, once armed, drops the reply to the first claim that took jobs
    (a reply longer than EMPTY_REPLY bytes to a connection that sent the claim script)
    and closes that connection: Redis ran the claim, the node never hears back."""

    EMPTY_REPLY = 200

    def __init__(self, listen_port: int, target_port: int) -> None:
        super().__init__(listen_port, target_port)
        self.claim_sha = hashlib.sha1(load_source("claim").encode()).hexdigest().encode()
        self.armed = False
        self.dropped = 0  # bytes of claim replies dropped

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        claimed = asyncio.Event()
        await asyncio.gather(
            self._requests(reader, up_writer, claimed), self._replies(up_reader, writer, claimed)
        )

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, claimed: asyncio.Event
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.claim_sha in data:
                    claimed.set()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _replies(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, claimed: asyncio.Event
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.armed and claimed.is_set() and len(data) > self.EMPTY_REPLY:
                    self.armed = False
                    self.dropped = len(data)
                    break  # the reply is lost and the connection drops
                claimed.clear()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


async def test_a_claim_whose_reply_is_lost_is_handed_out_again(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """The reply to a claim that took jobs is lost and its connection drops: Redis ran
    the claim, the node never heard of its jobs. They are handed out again with the
    node's next claim of the slot, with the attempt the lost claim counted (1),
    instead of waiting out the in-flight deadline to go out as attempt 2."""
    port = free_port()
    forward = ClaimReplyDropper(port, int(settings.redis_url.rsplit(":", 1)[1].split("/")[0]))
    await forward.open()
    env = {"DELAYQ_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    node = NodeProcess(settings, tmp_path, "lost-reply", env)
    ledger = Ledger()
    try:
        await node.wait_ready()
        async with reading(collector):
            load = asyncio.create_task(steady_load(ledger, client, topic, seconds=6.0))
            await asyncio.sleep(2.5)
            forward.armed = True
            await load
        result = await settle("claim-reply-lost", ledger, collector, client, redis)
    finally:
        node.kill()
        await forward.cut()
    assert forward.dropped > 0
    assert_safe(result, ledger)
    first_attempts: dict[str, int] = {}
    for record in collector.records:
        job_id = str(record["job_id"])
        first_attempts[job_id] = min(int(record["attempt"]), first_attempts.get(job_id, 99))
    stranded = sorted(job_id for job_id, attempt in first_attempts.items() if attempt > 1)
    print(f"stranded {len(stranded)}; max lateness {result.max_lateness_ms:.0f} ms")
    assert stranded == []
    assert "a claim whose reply was lost" in node.log_path.read_text()


@pytest.mark.alone
async def test_redis_stopped_while_claims_run(stage: Stage) -> None:
    """Redis stopped (SIGTERM) for 10 s under load, while the nodes claim: nothing lost,
    none early; the worst lateness after the heal is printed and recorded."""

    async def fault(run: Run) -> None:
        await down_for("redis", 10)

    result, ledger, _ = await scenario(stage, "redis-stopped-while-claiming", fault)
    assert_safe(result, ledger)


def _aof_dir() -> Path:
    return stack.state_dir() / "redis" / "appendonlydir"


@pytest.mark.alone
async def test_redis_back_from_an_older_aof_while_cancels_and_reschedules_run(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """A single Redis killed -9 and started from a copy of its append-only file taken
    2 s earlier (what a host crash with appendfsync everysec can leave, and more),
    while cancels and reschedules run: every cancel that returned true stays
    cancelled and every reschedule that returned true fires at its new time."""
    rng = random.Random(5)
    changeable: list[tuple[float, str]] = []  # (scheduled at, job id), due 4-6 s later
    ledger = Ledger()
    stop_changes = asyncio.Event()

    def longer_jobs(tick: int) -> list[dict[str, object]]:
        jobs: list[dict[str, object]] = []
        for n in range(20):
            job_id = f"older-aof-{tick}-{n}"
            changeable.append((time.monotonic(), job_id))
            jobs.append(
                {"topic": topic, "payload": n, "delay": 4 + rng.random() * 2, "job_id": job_id}
            )
        return jobs

    async def changes() -> None:
        """From 0.5 s after each such job was scheduled: cancel half, reschedule half."""
        done = 0
        while not stop_changes.is_set():
            ripe = [job_id for at, job_id in changeable[done:] if time.monotonic() - at > 0.5]
            done += len(ripe)
            for i, job_id in enumerate(ripe):
                if i % 2:
                    await ledger.cancel(client, job_id)
                else:
                    due_ms = int(time.time() * 1000) + rng.randint(3000, 6000)
                    await ledger.reschedule(client, job_id, due_ms)
            await asyncio.sleep(0.05)

    procs = [NodeProcess(settings, tmp_path, f"older-aof-{i}") for i in range(2)]
    copy = tmp_path / "appendonlydir-older"
    try:
        for proc in procs:
            await proc.wait_ready()
        async with reading(collector):
            changer = asyncio.create_task(changes())
            load = asyncio.create_task(
                steady_load(ledger, client, topic, seconds=7.0, extra=longer_jobs)
            )
            await asyncio.sleep(2.5)
            await asyncio.to_thread(shutil.copytree, _aof_dir(), copy)
            await asyncio.sleep(2.0)  # cancels and reschedules the copy will not have
            pid = shared_pid("redis")
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.3)
            shutil.rmtree(_aof_dir())
            shutil.copytree(copy, _aof_dir())
            await asyncio.to_thread(stack.up)
            await load
            stop_changes.set()
            await changer
        result = await settle("redis-back-from-older-aof", ledger, collector, client, redis)
    finally:
        for proc in procs:
            proc.kill()
    print(
        f"cancelled {len(ledger.cancelled)}, rescheduled {len(ledger.rescheduled)}, "
        f"changes that raised {ledger.change_failed}"
    )
    logs = "".join(proc.log_path.read_text() for proc in procs)
    assert "re-applied MySQL's changes" in logs
    assert_safe(result, ledger)
