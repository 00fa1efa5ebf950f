"""What a service of the local stack is and where it lives: the ``Service`` description,
the fixed ports, the state folder, and the small helpers every service module shares.

Everything (data, logs, pid files) lives under one state folder, ``$DELAYQ_STATE_DIR``
(default ``./.delayq``), with one subfolder per service. The ports are fixed and
non-default so the stack never collides with system services; each can be moved with
``DELAYQ_SERVICES_<NAME>_PORT`` (e.g. ``DELAYQ_SERVICES_KAFKA_PORT``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cluster.errors import DelayqError

if TYPE_CHECKING:
    from cluster.devstack.secure import Secrets

T = TypeVar("T")

HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {"redis": 16379, "mysql": 13306, "zookeeper": 12181, "kafka": 19092}
# With --kafka-brokers 3 (DELAYQ_SERVICES_KAFKA_BROKERS=3), two more Apache Kafka nodes;
# each node's controller listens on its port + 3 (cluster/devstack/kafka.py).
KAFKA_PORTS: dict[str, int] = {"kafka-2": 19192, "kafka-3": 19292}
SECURE_KAFKA_PORTS: dict[str, int] = {"kafka-2": 19193, "kafka-3": 19293}
# The brokers the stack can run: Apache Kafka (KRaft, from Maven Central) or Tansu.
KAFKA_BROKERS = ("apache", "tansu")
# With --redis-cluster (or DELAYQ_SERVICES_REDIS_CLUSTER=1): three cluster masters; with
# --replicas 1 as well (DELAYQ_SERVICES_REDIS_REPLICAS=1) a replica of each.
CLUSTER_PORTS: dict[str, int] = {"redis-c1": 17001, "redis-c2": 17002, "redis-c3": 17003}
REPLICA_PORTS: dict[str, int] = {"redis-c4": 17004, "redis-c5": 17005, "redis-c6": 17006}
# The secure stack (`delayq services up --secure`): TLS and passwords, its own ports and
# state folder ($DELAYQ_STATE_DIR/secure), so it runs beside the plain one. "kafka" is the
# TLS front (stunnel) of the broker, which listens in plain text on "kafka-broker".
SECURE_PORTS: dict[str, int] = {
    "redis": 16380,
    "mysql": 13307,
    "zookeeper": 12182,
    "kafka": 19093,
    "kafka-broker": 19094,
}
# With --mysql-servers N (DELAYQ_SERVICES_MYSQL_SERVERS=N): N MariaDB servers, "mysql" and
# mysql-1 .. mysql-<N-1> on the mysql port + 10 * i (cluster/devstack/mysql_servers.py).
MYSQL_SERVERS_MAX = 9
# With --zk-ensemble 3 (DELAYQ_SERVICES_ZK_ENSEMBLE=3): "zookeeper" and two more servers;
# each listens for its peers on its port + 10 and for elections on its port + 20
# (cluster/devstack/zk_ensemble.py).
ZK_PORTS: dict[str, int] = {"zookeeper-2": 12281, "zookeeper-3": 12381}
SECURE_ZK_PORTS: dict[str, int] = {"zookeeper-2": 12282, "zookeeper-3": 12382}
ZK_ENSEMBLE_SIZES = (1, 3)
SECURE_CLUSTER_PORTS: dict[str, int] = {"redis-c1": 17011, "redis-c2": 17012, "redis-c3": 17013}
SECURE_REPLICA_PORTS: dict[str, int] = {"redis-c4": 17014, "redis-c5": 17015, "redis-c6": 17016}
MYSQL_DATABASE = "delayq"
MYSQL_USER = "delayq"
MYSQL_PASSWORD = "delayq"

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.25


class ServicesError(DelayqError, RuntimeError):
    """The stack could not be installed, started or stopped; the message says why."""


@dataclass(frozen=True)
class Service:
    """One service of the stack: where it lives and how to start and probe it."""

    name: str
    port: int
    state_root: Path
    marker: str  # a substring of the process command line: guards against reused pids
    prepare: Callable[[Service], None]  # create folders and config, initialise data
    command: Callable[[Service], list[str]]
    probe: Callable[[Service], None]  # one check: returns when ready, raises otherwise
    setup: Callable[[Service], None] | None = None  # once the port accepts TCP, before probe
    secrets: Secrets | None = None  # the secure stack's certificates and passwords

    @property
    def dir(self) -> Path:
        return self.state_root / self.name

    @property
    def log_file(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


def state_dir() -> Path:
    """The state folder: ``$DELAYQ_STATE_DIR`` or ``./.delayq``, as an absolute path."""
    return Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq")).resolve()


def port_variable(name: str, *, secure: bool = False) -> str:
    """The variable that moves a service's port: DELAYQ_SERVICES_[SECURE_]<NAME>_PORT,
    with - as _ (DELAYQ_SERVICES_REDIS_C1_PORT)."""
    return f"DELAYQ_SERVICES_{'SECURE_' if secure else ''}{name.upper().replace('-', '_')}_PORT"


def service_port(name: str, *, secure: bool = False) -> int:
    """The port of a service: its default or ``DELAYQ_SERVICES_<NAME>_PORT``
    (``DELAYQ_SERVICES_SECURE_<NAME>_PORT`` in the secure stack)."""
    variable = port_variable(name, secure=secure)
    raw = os.environ.get(variable)
    if raw is None:
        server = name.removeprefix("mysql-")
        if server != name and server.isdigit():  # an extra MariaDB server: mysql-<i>
            return service_port("mysql", secure=secure) + 10 * int(server)
        if secure:
            return {
                **SECURE_PORTS,
                **SECURE_CLUSTER_PORTS,
                **SECURE_REPLICA_PORTS,
                **SECURE_KAFKA_PORTS,
                **SECURE_ZK_PORTS,
            }[name]
        return {**DEFAULT_PORTS, **CLUSTER_PORTS, **REPLICA_PORTS, **KAFKA_PORTS, **ZK_PORTS}[name]
    try:
        port = int(raw)
    except ValueError:
        raise ServicesError(f"{variable}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ServicesError(f"{variable}={raw!r} is not a port number")
    return port


def redis_cluster_wanted() -> bool:
    """Whether the stack includes the three-master Redis Cluster."""
    return _flag("DELAYQ_SERVICES_REDIS_CLUSTER") or redis_replicas_wanted()


def redis_replicas_wanted() -> bool:
    """Whether the Redis Cluster gets a replica per master (which implies the cluster)."""
    return _flag("DELAYQ_SERVICES_REDIS_REPLICAS")


def mysql_servers_wanted() -> int | None:
    """How many MariaDB servers the stack is asked to run (DELAYQ_SERVICES_MYSQL_SERVERS,
    1 to MYSQL_SERVERS_MAX), or None when the variable is not set."""
    variable = "DELAYQ_SERVICES_MYSQL_SERVERS"
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MYSQL_SERVERS_MAX:
        raise ServicesError(
            f"{variable}={raw!r}: the stack runs 1 to {MYSQL_SERVERS_MAX} MariaDB servers"
        )
    return int(raw)


def zk_ensemble_wanted() -> int | None:
    """How many ZooKeeper servers the stack is asked to run (DELAYQ_SERVICES_ZK_ENSEMBLE:
    1 or 3), or None when the variable is not set."""
    variable = "DELAYQ_SERVICES_ZK_ENSEMBLE"
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    if raw not in {str(size) for size in ZK_ENSEMBLE_SIZES}:
        raise ServicesError(f"{variable}={raw!r}: the stack runs 1 or 3 ZooKeeper servers")
    return int(raw)


def kafka_broker_wanted() -> str:
    """Which broker the stack runs: "apache" (Apache Kafka, the default) or "tansu"
    (DELAYQ_SERVICES_KAFKA)."""
    broker = os.environ.get("DELAYQ_SERVICES_KAFKA", "apache").strip().lower() or "apache"
    if broker not in KAFKA_BROKERS:
        raise ServicesError(
            f"DELAYQ_SERVICES_KAFKA={broker!r}: "
            f"the broker must be one of {', '.join(KAFKA_BROKERS)}"
        )
    return broker


def kafka_brokers_wanted(root: Path | None = None) -> int:
    """How many Apache Kafka nodes: DELAYQ_SERVICES_KAFKA_BROKERS (1 or 3), else as many
    as an earlier `up` of the stack under `root` formatted, else 1."""
    raw = os.environ.get("DELAYQ_SERVICES_KAFKA_BROKERS", "").strip()
    if not raw and root is not None and (root / "kafka-brokers").exists():
        raw = (root / "kafka-brokers").read_text().strip()
    if raw in ("", "1"):
        return 1
    if raw == "3":
        return 3
    raise ServicesError(f"DELAYQ_SERVICES_KAFKA_BROKERS={raw!r}: the stack runs 1 or 3 brokers")


def _flag(variable: str) -> bool:
    return os.environ.get(variable, "").lower() in ("1", "true", "yes")


def tcp_exchange(
    port: int, request: bytes, *, until: bytes | None = None, tls: ssl.SSLContext | None = None
) -> bytes:
    """Send a request and read the reply: up to ``until`` or until the peer closes;
    over TLS when ``tls`` is given."""
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((HOST, port), timeout=3.0))
        if tls is not None:
            # The TLS socket takes over the descriptor: it is the one to close.
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=HOST))
        sock.sendall(request)
        reply = b""
        while until is None or until not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply


def file_tail(path: Path, lines: int) -> list[str]:
    """The last lines of a log file; none if it cannot be read."""
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def log_tail(svc: Service, lines: int = 15) -> str:
    """The last lines of the service's log, indented for an error message; "" if none."""
    tail = file_tail(svc.log_file, lines)
    if not tail:
        return ""
    return "\n  last lines of the log:\n" + "\n".join(f"    {line}" for line in tail)


def say(svc: Service, message: str) -> None:
    """One line of `delayq services` output about a service."""
    print(f"{svc.name:<13}{svc.address:<17}{message}", flush=True)


def run_coroutine(coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
    """asyncio.run in a worker thread: works even when the caller runs an event loop."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, bounded()).result()


@contextlib.contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """Silence a library's connection-error logging while probing a starting service."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def kafka_broker_ids(address: str, options: dict[str, Any]) -> set[int]:
    """The ids of the brokers a Kafka node at `address` lists in its metadata: a real
    Kafka request (ApiVersions, Metadata), for the brokers' probes. `options`: aiokafka's
    security keyword arguments."""

    async def metadata() -> set[int]:
        from aiokafka.admin import AIOKafkaAdminClient

        client = AIOKafkaAdminClient(bootstrap_servers=address, request_timeout_ms=5000, **options)
        try:
            await client.start()  # bootstrap: ApiVersions + Metadata
            described = await client.describe_cluster()
        finally:
            await client.close()
        return {broker["node_id"] for broker in described["brokers"]}

    with quiet("aiokafka"):
        return run_coroutine(metadata(), timeout=10.0)
