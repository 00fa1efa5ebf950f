"""Redis connections from a URL: redis://host:port/db, or redis+cluster://host:port for a
Redis Cluster (any one node of it; the client discovers the rest)."""

from __future__ import annotations

from urllib.parse import urlparse

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from cluster.config import ConfigError

RedisClient = Redis | RedisCluster

CLUSTER_SCHEME = "redis+cluster"
MAX_CONNECTIONS = 64
POOL_WAIT_S = 30.0


async def open_redis(url: str) -> RedisClient:
    """A client that returns bytes (delayq decodes only what it needs). A cluster client
    learns the slot map before it is returned: concurrent first calls on an
    uninitialised redis-py cluster client race and fail."""
    scheme = urlparse(url).scheme
    if scheme == CLUSTER_SCHEME:
        cluster = RedisCluster.from_url(
            url.replace(f"{CLUSTER_SCHEME}://", "redis://", 1), decode_responses=False
        )
        await cluster.initialize()
        return cluster
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"redis_url must start with redis://, rediss:// or {CLUSTER_SCHEME}://")
    # Callers past the pool's size wait for a connection instead of failing.
    pool = BlockingConnectionPool.from_url(
        url, decode_responses=False, max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT_S
    )
    return Redis.from_pool(pool)


def connect_subscriber(url: str) -> Redis:
    """A plain connection for SUBSCRIBE. On a Redis Cluster a PUBLISH (even from a
    script) reaches the subscribers of every node, so the node named in the URL will do."""
    if urlparse(url).scheme == CLUSTER_SCHEME:
        url = url.replace(f"{CLUSTER_SCHEME}://", "redis://", 1)
    return Redis.from_url(url, decode_responses=False)
