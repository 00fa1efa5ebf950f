"""redis_wait_fallback (docs/cluster.md) against a Redis master of the test's own with
one replica, both real redis-server processes: what cancel() and reschedule() answer
with redis_wait_replicas=1 once the replica is gone (as on a promoted master after a
hard failover), is frozen (attached but silent), or attaches again.

- "raise": ReplicationUnconfirmed, saying that no replica is attached.
- "mysql": the change is made, MySQL records it, and the answer is true.
- "mysql" with a replica attached that does not answer: still ReplicationUnconfirmed
  (the fallback is for a master with no replica at all, not for a slow one).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from cluster import ChangeStatus, DelayClient, JobStatus, ReplicationUnconfirmed
from cluster.devstack.nodes import free_port
from cluster.scripts.wait_fallback import replicas_attached
from cluster.settings.config import Settings

pytestmark = pytest.mark.once  # a Redis of its own: the same in both passes


class RedisPair:
    """A master and a replica of it, redis-server processes without persistence."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.master_port, self.replica_port = free_port(), free_port()
        self.master = self._start("master", self.master_port)
        self.replica: subprocess.Popen[bytes] | None = None

    def _start(self, name: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(folder), *extra]
        with (folder / "redis.log").open("ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def start_replica(self) -> None:
        self.replica = self._start(
            "replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port)
        )

    def stop_replica(self) -> None:
        if self.replica is not None:
            self.replica.send_signal(signal.SIGCONT)
            self.replica.kill()
            self.replica.wait()
            self.replica = None

    def stop(self) -> None:
        self.stop_replica()
        self.master.kill()
        self.master.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.master_port}/0"

    async def attached(self, online: bool = True, timeout_s: float = 30.0) -> None:
        """Wait until the master lists `online` replicas: 1, or 0 (none)."""
        redis = Redis(port=self.master_port)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with_replica = await self._online(redis)
                if with_replica == online:
                    return
                assert time.monotonic() < deadline, "replica did not (de)attach"
                await asyncio.sleep(0.05)
        finally:
            await redis.aclose()

    @staticmethod
    async def _online(redis: Redis) -> bool:
        """A replica is attached and in sync (INFO: state=online)."""
        try:
            info = await redis.info("replication")
        except OSError:
            return False
        return bool(replicas_attached(info)) and info.get("slave0", {}).get("state") == "online"


@pytest.fixture
def redis_pair(tmp_path: Path) -> Iterator[RedisPair]:
    pair = RedisPair(tmp_path)
    try:
        pair.start_replica()
        yield pair
    finally:
        pair.stop()


async def open_client(settings: Settings, pair: RedisPair, fallback: str) -> DelayClient:
    client = DelayClient(
        settings.replace(
            redis_url=pair.url,
            redis_wait_replicas=1,
            redis_wait_timeout_ms=200,
            redis_wait_fallback=fallback,
        )
    )
    await client.open()
    return client


@pytest.fixture
async def jobs(settings: Settings, redis_pair: RedisPair) -> AsyncIterator[list[str]]:
    """Ten jobs due in two minutes (in Redis: within redis_horizon_ms), scheduled while
    the replica confirms; no node runs, so none fires."""
    await redis_pair.attached()
    async with await open_client(settings, redis_pair, "raise") as client:
        yield [await client.schedule("t", {"n": n}, delay=120) for n in range(10)]


async def test_raise_says_no_replica_is_attached(
    settings: Settings, redis_pair: RedisPair, jobs: list[str]
) -> None:
    redis_pair.stop_replica()
    await redis_pair.attached(online=False)
    async with await open_client(settings, redis_pair, "raise") as client:
        with pytest.raises(ReplicationUnconfirmed) as unconfirmed:
            await client.cancel(jobs[0])
        assert "no replica attached" in str(unconfirmed.value)
        assert unconfirmed.value.job_ids == [jobs[0]]
        # Done on the master and in MySQL all the same.
        record = await client.get(jobs[0])
        assert record is not None and record.status is JobStatus.CANCELLED


async def test_mysql_confirms_when_no_replica_is_attached(
    settings: Settings, redis_pair: RedisPair, jobs: list[str]
) -> None:
    redis_pair.stop_replica()
    await redis_pair.attached(online=False)
    async with await open_client(settings, redis_pair, "mysql") as client:
        for job_id in jobs[:3]:
            assert (await client.cancel(job_id)).status is ChangeStatus.CANCELLED
        moved = [await client.reschedule(job_id, delay=200) for job_id in jobs[3:6]]
        assert all(moved)
        for job_id in jobs[:3]:
            record = await client.get(job_id)
            assert record is not None and record.status is JobStatus.CANCELLED
        for result in moved:
            record = await client.get(result.job_id)
            assert record is not None and record.due_ms == result.due_ms
        notes = client._opened.scripts.fallback_notes  # type: ignore[union-attr]
        assert notes.confirmed_by_mysql == 6

        # A replica attaches again: changes wait for it again.
        redis_pair.start_replica()
        await redis_pair.attached()
        with pytest.raises(ReplicationUnconfirmed):  # the one that found it attached
            await client.cancel(jobs[6])
        assert await client.cancel(jobs[7])
        assert notes.confirmed_by_mysql == 6


async def test_mysql_fallback_is_not_for_a_replica_that_is_slow(
    settings: Settings, redis_pair: RedisPair, jobs: list[str]
) -> None:
    """A frozen replica stays attached (until repl-timeout): no fallback."""
    assert redis_pair.replica is not None
    redis_pair.replica.send_signal(signal.SIGSTOP)
    async with await open_client(settings, redis_pair, "mysql") as client:
        with pytest.raises(ReplicationUnconfirmed) as unconfirmed:
            await client.cancel(jobs[0])
        assert "no replica attached" not in str(unconfirmed.value)
        notes = client._opened.scripts.fallback_notes  # type: ignore[union-attr]
        assert notes.confirmed_by_mysql == 0
    redis_pair.replica.send_signal(signal.SIGCONT)


def test_bad_fallback_is_refused() -> None:
    with pytest.raises(Exception, match="redis_wait_fallback must be 'raise' or 'mysql'"):
        Settings(redis_wait_fallback="maybe")
