"""DelayClient.open()'s connections: MySQL, then Redis. A store that does not answer
raises StoreUnavailable naming its address and the next step, not the driver's error;
a store that refuses the credentials or TLS still raises StoreAccessError."""

from __future__ import annotations

from cluster.connections.reach import REDIS_UNREACHABLE, redis_unavailable
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.reach import mysql_unavailable, mysql_unreachable


async def open_stores(settings: Settings, mysql: MySQLStore) -> RedisClient:
    """Open mysql, then a Redis connection (returned). Nothing stays open on failure."""
    try:
        await mysql.open()
    except Exception as error:
        if mysql_unreachable(error):
            raise mysql_unavailable(settings, error) from error
        raise
    try:
        return await open_redis(settings)
    except REDIS_UNREACHABLE as error:
        await mysql.close()
        raise redis_unavailable(settings, error) from error
    except BaseException:
        await mysql.close()
        raise
