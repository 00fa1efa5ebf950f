"""redis_url with several seed nodes, and a Redis Cluster client under many concurrent
calls: what a producer needs to ride out a dead node."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
import redis.asyncio.connection
from redis.exceptions import ConnectionError as RedisConnectionError

from cluster import ChangeStatus, DelayClient, JobStatus, ReplicationUnconfirmed
from cluster.connections.redis_conn import open_redis, seed_nodes, split_seeds
from cluster.errors import ConfigError
from cluster.scripts.runner import driver_errors
from cluster.settings.config import Settings, redact_url

CLUSTER = os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1" or (
    os.environ.get("DELAYQ_TEST_REDIS_REPLICAS") == "1"
)


def test_several_seeds_are_parsed_with_one_set_of_credentials() -> None:
    url = "rediss+cluster://delayq:s3cret@10.0.0.1:7001,10.0.0.2:7002,[fd00::3]:7003"
    first, seeds = split_seeds(url)
    assert first == "rediss+cluster://delayq:s3cret@10.0.0.1:7001"
    assert seeds == [("10.0.0.1", 7001), ("10.0.0.2", 7002), ("fd00::3", 7003)]
    assert "s3cret" not in redact_url(url)
    assert seed_nodes(Settings(redis_url="redis://h/0")) == [("h", 6379)]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://a:1,b:2/0", "only a Redis Cluster URL may"),
        ("redis+cluster://a:1,b:notaport", "bad host:port 'b:notaport'"),
        ("redis+cluster://a:1,:7002", "bad host:port ':7002'"),
    ],
)
async def test_bad_seed_lists_are_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await open_redis(Settings(redis_url=url))


@pytest.mark.skipif(not CLUSTER, reason="needs the local Redis Cluster")
async def test_a_client_starts_while_its_first_seed_is_down(settings: Settings) -> None:
    seeds = settings.redis_url.split("://", 1)[1]
    dead_first = settings.replace(redis_url=f"redis+cluster://127.0.0.1:1,{seeds}")
    async with DelayClient(dead_first) as client:
        job_id = await client.schedule("seeds.test", {"n": 1}, delay=60)
        assert await client.cancel(job_id)


@pytest.mark.skipif(not CLUSTER, reason="needs the local Redis Cluster")
async def test_hundreds_of_concurrent_calls_wait_instead_of_failing(
    client: DelayClient,
) -> None:
    ids = await client.schedule_many(
        [{"topic": "seeds.test", "payload": i, "delay": 60} for i in range(600)]
    )
    answers = await asyncio.gather(*(client.cancel(job_id) for job_id in ids))
    assert [answer.status for answer in answers] == [ChangeStatus.CANCELLED] * len(ids)


async def test_a_change_no_replica_confirms_raises_but_is_done(settings: Settings) -> None:
    """More replicas asked for than exist: cancel() and reschedule() do their change,
    then raise ReplicationUnconfirmed (an OutcomeUnknown) naming the job; calling again
    is safe and gives the same answer."""
    wanting = settings.replace(redis_wait_replicas=5, redis_wait_timeout_ms=50)
    async with DelayClient(wanting) as client:
        moved, cancelled = await client.schedule_many(
            [{"topic": "seeds.test", "payload": n, "delay": 60} for n in range(2)]
        )
        with pytest.raises(ReplicationUnconfirmed) as unconfirmed:
            await client.reschedule(moved, delay=120)
        assert unconfirmed.value.job_ids == [moved]
        with pytest.raises(ReplicationUnconfirmed):
            await client.cancel(cancelled)
        record = await client.get(cancelled)
        assert record is not None and record.status == JobStatus.CANCELLED
        with pytest.raises(ReplicationUnconfirmed):
            await client.cancel(cancelled)  # again: still done, still unconfirmed
    async with DelayClient(settings) as client:
        assert await client.cancel(cancelled)  # without waiting: True
        rescheduled = await client.get(moved)
        assert rescheduled is not None and rescheduled.status == JobStatus.PENDING
        assert rescheduled.due_ms > time.time() * 1000 + 90_000


def test_errors_from_inside_redis_py_become_connection_errors() -> None:
    """redis-py's cluster client can fail from inside itself while a failover closes its
    connections ('NoneType' object has no attribute 'writelines'); that is a lost
    connection, which callers retry. The same error from anywhere else stays a bug."""
    inside_redis_py: dict[str, Any] = {}
    source = "def send(writer):\n    writer.writelines([b'PING'])\n"
    exec(compile(source, redis.asyncio.connection.__file__, "exec"), inside_redis_py)
    with pytest.raises(RedisConnectionError, match="writelines"), driver_errors():
        inside_redis_py["send"](None)
    with pytest.raises(AttributeError), driver_errors():
        None.writelines([])  # type: ignore[attr-defined]
