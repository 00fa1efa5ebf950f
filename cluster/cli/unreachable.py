"""The one line a command prints, instead of a traceback, when a store it opens does not
answer: the store's address and the next step (cluster/connections/reach.py,
cluster/store/reach.py). DelayClient raises StoreUnavailable itself; the commands that
open MySQL or Redis directly (db, cluster status, top, recover) raise the drivers'
errors, which main() turns into the same line here."""

from __future__ import annotations

import pymysql
from pymysql.constants import ER
from redis import exceptions as redis_exc

from cluster.connections.reach import redis_unavailable
from cluster.errors import ConfigError, DelayqError
from cluster.settings.config import Settings
from cluster.store.reach import mysql_unavailable, mysql_unreachable
from cluster.store.servers import server_specs


def unavailable(settings: Settings, error: BaseException) -> DelayqError | None:
    """The StoreUnavailable that error means, or None when it is not a store that did
    not answer (then it is shown as it is). A database that does not exist is a
    ConfigError naming it."""
    if isinstance(error, pymysql.err.MySQLError) and mysql_unreachable(error):
        return mysql_unavailable(settings, error)
    if isinstance(error, pymysql.err.OperationalError) and error.args[:1] == (ER.BAD_DB_ERROR,):
        names = ", ".join(spec.name for spec in server_specs(settings))
        return ConfigError(
            f"MySQL at {names}: {error.args[1]}: create it, or point mysql_url at one "
            '(for the local stack: eval "$(delayq services env)")'
        )
    if isinstance(error, (redis_exc.ConnectionError, redis_exc.TimeoutError)):
        return redis_unavailable(settings, error)
    if isinstance(error, redis_exc.RedisClusterException) and "connect" in str(error):
        return redis_unavailable(settings, error)
    return None
