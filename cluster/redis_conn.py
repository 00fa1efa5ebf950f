"""Redis connections from a URL: redis://host:port/db, or redis+cluster://host:port for a
Redis Cluster (any one node of it; the client discovers the rest)."""

from __future__ import annotations

from urllib.parse import urlparse

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from cluster.config import ConfigError

RedisClient = Redis | RedisCluster

CLUSTER_SCHEME = "redis+cluster"


def connect_redis(url: str) -> RedisClient:
    """A client that returns bytes (delayq decodes only what it needs)."""
    scheme = urlparse(url).scheme
    if scheme == CLUSTER_SCHEME:
        return RedisCluster.from_url(
            url.replace(f"{CLUSTER_SCHEME}://", "redis://", 1), decode_responses=False
        )
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"redis_url must start with redis://, rediss:// or {CLUSTER_SCHEME}://")
    return Redis.from_url(url, decode_responses=False)
