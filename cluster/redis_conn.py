"""Redis connections from the settings' URL: redis://host:port/db, rediss:// for TLS, or
redis+cluster://host:port (rediss+cluster:// with TLS) for a Redis Cluster (any one node of
it; the client discovers the rest). A user and password in the URL
(redis://user:password@host) authenticate with Redis ACLs; with TLS the server's
certificate is verified (redis_ssl_cafile, or the system's CAs) including its host name,
and redis_ssl_certfile/keyfile is the client certificate, if Redis asks for one.

A Redis that refuses the client (wrong password, TLS on one side only, an untrusted
certificate) raises StoreAccessError at open, naming Redis and the cause.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from redis import exceptions as redis_exc
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from cluster.config import ConfigError, Settings, redact_url
from cluster.security import StoreAccessError, describe_tls_error, tls_cause

RedisClient = Redis | RedisCluster

CLUSTER_SCHEME = "redis+cluster"
TLS_CLUSTER_SCHEME = "rediss+cluster"
# A cluster URL's scheme → the plain scheme redis-py parses.
_CLUSTER_SCHEMES = {CLUSTER_SCHEME: "redis", TLS_CLUSTER_SCHEME: "rediss"}
MAX_CONNECTIONS = 64
POOL_WAIT_S = 30.0
# A plaintext client on a TLS port: the server drops the connection at the first bytes.
_DROPPED = ("Connection closed by server", "Connection reset by peer", "Connection lost")


def _url_and_tls(settings: Settings) -> tuple[str, bool, dict[str, Any]]:
    """(URL redis-py understands, whether it names a cluster, TLS keyword arguments)."""
    url = settings.redis_url
    scheme = urlparse(url).scheme
    cluster = scheme in _CLUSTER_SCHEMES
    if cluster:
        url = url.replace(f"{scheme}://", f"{_CLUSTER_SCHEMES[scheme]}://", 1)
        scheme = _CLUSTER_SCHEMES[scheme]
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            "redis_url must start with redis://, rediss://, "
            f"{CLUSTER_SCHEME}:// or {TLS_CLUSTER_SCHEME}://, got {scheme or 'no'} scheme"
        )
    if scheme != "rediss":
        return url, cluster, {}
    tls: dict[str, Any] = {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": settings.redis_ssl_cafile or None,  # None: the system's CAs
        "ssl_certfile": settings.redis_ssl_certfile or None,
        "ssl_keyfile": settings.redis_ssl_keyfile or None,
    }
    return url, cluster, tls


async def open_redis(settings: Settings) -> RedisClient:
    """A client that returns bytes (delayq decodes only what it needs), checked with one
    round trip. A cluster client learns the slot map before it is returned: concurrent
    first calls on an uninitialised redis-py cluster client race and fail.

    Raises StoreAccessError when Redis refuses the client; other errors (Redis not
    reachable yet) are the driver's, so a starting node can wait them out."""
    url, cluster, tls = _url_and_tls(settings)
    client: RedisClient
    if cluster:
        client = RedisCluster.from_url(url, decode_responses=False, **tls)
    else:
        # Callers past the pool's size wait for a connection instead of failing.
        pool = BlockingConnectionPool.from_url(
            url,
            decode_responses=False,
            max_connections=MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
            **tls,
        )
        client = Redis.from_pool(pool)
    try:
        if isinstance(client, RedisCluster):
            await client.initialize()
        else:
            await client.ping()
    except BaseException as error:
        await client.aclose()
        refusal = _refusal(error, bool(tls))
        if refusal is not None:
            raise StoreAccessError(
                f"Redis at {redact_url(settings.redis_url)} refused the connection: {refusal}"
            ) from error
        raise
    return client


def connect_subscriber(settings: Settings) -> Redis:
    """A plain connection for SUBSCRIBE, with the same credentials and TLS as
    open_redis. On a Redis Cluster a PUBLISH (even from a script) reaches the
    subscribers of every node, so the node named in the URL will do."""
    url, _, tls = _url_and_tls(settings)
    return Redis.from_url(url, decode_responses=False, **tls)


def _refusal(error: BaseException, tls: bool) -> str | None:
    """Why Redis refused the client, when waiting cannot help; None otherwise."""
    causes: list[BaseException] = [error]
    if isinstance(error, redis_exc.RedisClusterException):
        # "cannot be connected": the cluster client hides each node's error in its cause.
        causes += [e for e in (error.__cause__, error.__context__) if e is not None]
    for cause in causes:
        ssl_error = tls_cause(cause)
        if ssl_error is not None:
            return describe_tls_error(ssl_error, "redis_ssl_cafile")
        if isinstance(cause, redis_exc.AuthenticationError):
            return (
                f"authentication failed ({' '.join(str(cause).split())}): check the user "
                "and password in redis_url (redis://user:password@host)"
            )
        if isinstance(cause, redis_exc.NoPermissionError):
            return f"the user may not run PING or the cluster commands ({cause})"
        text = str(cause)
        if not tls and isinstance(cause, redis_exc.ConnectionError):
            if any(dropped in text for dropped in _DROPPED):
                return (
                    f"it closed the connection at once ({text.strip()}): a TLS-only port? "
                    "Use rediss:// (or rediss+cluster://)"
                )
        if tls and "Connection closed by server" in text:
            return f"it closed the connection during the TLS handshake ({text.strip()})"
    return None
