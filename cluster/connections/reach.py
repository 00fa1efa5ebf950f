"""A store that does not answer at open, said in one line: StoreUnavailable naming the
store's address (host:port, never a password) and the next step to take.

The drivers' own errors name no port ("Can't connect to MySQL server on '127.0.0.1'")
and suggest nothing; callers that open stores turn them into this.
"""

from __future__ import annotations

from redis import exceptions as redis_exc

from cluster.connections.redis_conn import split_seeds
from cluster.errors import StoreUnavailable
from cluster.settings.config import Settings


def next_step(store: str) -> str:
    """What to try next when store (MySQL, Redis) does not answer."""
    return f'is {store} running? for the local stack: eval "$(delayq services env)"'


# What redis-py raises when no Redis answers at the address (RedisClusterException:
# no node of a cluster answered while it learnt the slot map).
REDIS_UNREACHABLE = (
    redis_exc.ConnectionError,
    redis_exc.TimeoutError,
    redis_exc.RedisClusterException,
    OSError,
    TimeoutError,
)


def redis_address(settings: Settings) -> str:
    """Every host:port redis_url names, comma-separated: no user, no password."""
    _, seeds = split_seeds(settings.redis_url)
    return ",".join(f"{host}:{port}" for host, port in seeds) or "(no address)"


def redis_unavailable(settings: Settings, error: BaseException) -> StoreUnavailable:
    """The StoreUnavailable to raise when Redis did not answer at open."""
    return StoreUnavailable(
        f"Redis at {redis_address(settings)} does not answer ({_cause(error)}): "
        + next_step("Redis")
    )


def _cause(error: BaseException) -> str:
    """The driver's reason in a few words, or the error's type when it gives none."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text[:200] or type(error).__name__
