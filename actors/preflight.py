"""Checks a node makes before it takes any slot: settings that would lose jobs.

Redis must never evict keys (maxmemory-policy noeviction): an evicted delay zset is a
silently lost slot. Without persistence (no AOF, no RDB snapshots) a Redis restart
loses every pending job's due time; MySQL still has them and the reconciler re-adds
them, but only after the restart is noticed, so that gets a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from cluster.connections.redis_conn import RedisClient
from cluster.errors import UnsafeConfig

log = logging.getLogger(__name__)


async def _config(redis: RedisClient, name: str) -> list[str]:
    """The value of a CONFIG parameter on every Redis (each master of a cluster)."""
    if isinstance(redis, RedisCluster):
        return [
            _value(await redis.config_get(name, target_nodes=node), name)
            for node in redis.get_primaries()
        ]
    return [_value(await redis.config_get(name), name)]


def _value(reply: Mapping[Any, Any], name: str) -> str:
    """CONFIG GET's value, whether the client decodes replies or not."""
    value = reply.get(name, reply.get(name.encode(), ""))
    return value.decode() if isinstance(value, bytes) else str(value)


async def check_redis(redis: RedisClient) -> list[str]:
    """Raise UnsafeConfig if Redis may evict keys; return warnings to log."""
    try:
        policies = await _config(redis, "maxmemory-policy")
        appendonly = await _config(redis, "appendonly")
        save = await _config(redis, "save")
    except ResponseError as exc:  # CONFIG is disabled on some managed services
        return [
            f"could not read the Redis configuration ({exc}); make sure "
            "maxmemory-policy is noeviction and persistence is on"
        ]
    unsafe = sorted({policy for policy in policies if policy != "noeviction"})
    if unsafe:
        raise UnsafeConfig(
            f"Redis maxmemory-policy is {', '.join(unsafe)}: Redis could evict delay queues "
            "and lose jobs. Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy "
            "noeviction, and in redis.conf)."
        )
    warnings = []
    if any(aof != "yes" and not saves for aof, saves in zip(appendonly, save, strict=True)):
        warnings.append(
            "Redis has no persistence (appendonly no, no save points): after a Redis "
            "restart, pending jobs are re-added from MySQL by the reconciler, but fire "
            "late. Use appendonly yes for production."
        )
    return warnings
