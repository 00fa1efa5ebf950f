"""A node refuses to start when Redis could evict keys, and warns without persistence."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from actors.node import Node
from actors.preflight import check_redis
from cluster.connections.redis_conn import RedisClient
from cluster.errors import UnsafeConfig
from cluster.settings.config import Settings

# CONFIG SET changes the shared Redis for every test running meanwhile.
pytestmark = [pytest.mark.alone]


async def set_everywhere(redis: RedisClient, name: str, value: str) -> None:
    if isinstance(redis, RedisCluster):
        for node in redis.get_primaries():
            await redis.config_set(name, value, target_nodes=node)
    else:
        await redis.config_set(name, value)


@pytest.fixture
async def restore_config(redis: RedisClient) -> AsyncIterator[None]:
    yield
    await set_everywhere(redis, "maxmemory-policy", "noeviction")
    await set_everywhere(redis, "appendonly", "yes")


async def test_the_local_stack_is_safe(redis: RedisClient) -> None:
    assert await check_redis(redis) == []


async def test_evicting_redis_is_refused(
    settings: Settings, redis: RedisClient, restore_config: None
) -> None:
    await set_everywhere(redis, "maxmemory-policy", "allkeys-lru")
    with pytest.raises(UnsafeConfig, match="allkeys-lru"):
        await check_redis(redis)
    node = Node(settings)
    with pytest.raises(UnsafeConfig):
        await node.start()


async def test_redis_without_persistence_is_a_warning(
    redis: RedisClient, restore_config: None
) -> None:
    await set_everywhere(redis, "appendonly", "no")
    [warning] = await check_redis(redis)
    assert "no persistence" in warning
