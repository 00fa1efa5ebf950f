"""Redis connections from the settings' URL: redis://host:port/db, rediss:// for TLS, or
redis+cluster://host:port (rediss+cluster:// with TLS) for a Redis Cluster: one node
of it or several, comma-separated (redis+cluster://h1:7001,h2:7002,h3:7003); the client
starts while any one of them answers and discovers the rest. A user and password in the URL
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
from redis.asyncio.cluster import ClusterNode, RedisCluster

from cluster.errors import ConfigError, StoreAccessError
from cluster.settings.config import Settings, redact_url
from cluster.settings.security import describe_tls_error, tls_cause

RedisClient = Redis | RedisCluster

CLUSTER_SCHEME = "redis+cluster"
TLS_CLUSTER_SCHEME = "rediss+cluster"
# A cluster URL's scheme → the plain scheme redis-py parses.
_CLUSTER_SCHEMES = {CLUSTER_SCHEME: "redis", TLS_CLUSTER_SCHEME: "rediss"}
MAX_CONNECTIONS = 64
POOL_WAIT_S = 30.0
# redis-py's cluster client fails a call (MaxConnectionsError) rather than wait when a
# node's pool is used up; script batches to a node share one connection, so this only
# bounds bursts of single calls (hundreds of concurrent cancels).
CLUSTER_MAX_CONNECTIONS = 1000
DEFAULT_PORT = 6379
# A plaintext client on a TLS port: the server drops the connection at the first bytes.
_DROPPED = ("Connection closed by server", "Connection reset by peer", "Connection lost")


def split_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(the URL naming only its first host, every host:port it names). Hosts are
    comma-separated; an IPv6 address goes in brackets ([::1]:7001)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, []
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hosts = netloc.rpartition("@")
    seeds: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, port = _host_port(item.strip(), url)
        seeds.append((host, port))
    first = hosts.split(",")[0].strip()
    return f"{scheme}://{userinfo}{at}{first}{tail}", seeds


def _host_port(item: str, url: str) -> tuple[str, int]:
    if item.startswith("["):
        host, _, port_text = item[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise ConfigError(f"redis_url names a bad host:port {item!r} in {redact_url(url)}")
    return host, port


def seed_nodes(settings: Settings) -> list[tuple[str, int]]:
    """Every (host, port) that redis_url names."""
    return split_seeds(settings.redis_url)[1]


def _url_and_tls(settings: Settings) -> tuple[str, bool, dict[str, Any]]:
    """(URL redis-py understands, whether it names a cluster, TLS keyword arguments)."""
    url = settings.redis_url
    scheme = urlparse(url.split(",", 1)[0]).scheme
    cluster = scheme in _CLUSTER_SCHEMES
    if "," in url.split("?", 1)[0] and not cluster:
        raise ConfigError(
            f"redis_url names several hosts, which only a Redis Cluster URL may "
            f"({CLUSTER_SCHEME}:// or {TLS_CLUSTER_SCHEME}://): {redact_url(url)}"
        )
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
        first, seeds = split_seeds(url)
        client = RedisCluster.from_url(
            first,
            decode_responses=False,
            # The first seed comes from the URL; the others may stand in for it.
            startup_nodes=[ClusterNode(host, port) for host, port in seeds[1:]],
            max_connections=CLUSTER_MAX_CONNECTIONS,
            **tls,
        )
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
    open_redis, to the (first) node the URL names."""
    url, _, tls = _url_and_tls(settings)
    return Redis.from_url(split_seeds(url)[0], decode_responses=False, **tls)


def subscriber_for(settings: Settings, host: str, port: int) -> Redis:
    """connect_subscriber, to one given node of a Redis Cluster: on a cluster a PUBLISH
    (even from a script) reaches the subscribers of every node, replicas included, so
    any node that answers will do."""
    url, _, tls = _url_and_tls(settings)
    first = urlparse(split_seeds(url)[0])
    netloc = first.netloc.rpartition("@")
    where = f"[{host}]" if ":" in host else host
    node_url = first._replace(netloc=f"{netloc[0]}{netloc[1]}{where}:{port}").geturl()
    return Redis.from_url(node_url, decode_responses=False, **tls)


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
