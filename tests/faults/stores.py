"""What Redis holds of a job, for the fault modules' checks and their logs."""

from __future__ import annotations

from typing import cast

from cluster.connections.redis_conn import RedisClient
from cluster.model.contract import member_id
from cluster.model.keys import KeySpace, slot_of
from cluster.settings.config import Settings


def byte_list(reply: object) -> list[bytes]:
    """A Redis reply of members, as delayq's clients get it (bytes; redis-py's types
    allow more)."""
    return cast(list[bytes], reply)


async def in_redis(redis: RedisClient, settings: Settings, job_id: str) -> bool:
    """Whether Redis holds the job's envelope (in its slot's jobs hash)."""
    keys = KeySpace(settings.key_prefix).slot(slot_of(job_id, settings.slots))
    return bool(await redis.hexists(keys.jobs, job_id))


async def redis_places(redis: RedisClient, settings: Settings, job_id: str) -> dict[str, object]:
    """Where Redis has the job: its envelope, delay entry, in-flight, tomb and acked
    scores (a lost job's, for the log)."""
    k = KeySpace(settings.key_prefix).slot(slot_of(job_id, settings.slots))
    return {
        "jobs": await redis.hexists(k.jobs, job_id),
        "delay": job_id.encode()
        in {member_id(m) for m in byte_list(await redis.zrange(k.delay, 0, -1))},
        "inflight": await redis.zscore(k.inflight, job_id),
        "tomb": await redis.zscore(k.tomb, job_id),
        "acked": await redis.zscore(k.acked, job_id),
    }
