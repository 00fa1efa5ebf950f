"""Redis of the local stack: ``redis-server`` with AOF (appendfsync everysec, noeviction),
and with ``--redis-cluster`` three more instances joined into a three-master Redis
Cluster (``--replicas 1``: three more, a replica of each master, so masters can fail
over; cluster-node-timeout 2 s). How to prepare, start and probe them, and how to form
the cluster.

In the secure stack (``svc.secrets`` set) Redis speaks TLS only (``port 0``,
``tls-port``; the cluster bus too) and knows two ACL users, no ``default``: ``delayq``,
with what producers and nodes need and nothing more, and ``admin`` for tests and
operators (see docs/security.md).
"""

from __future__ import annotations

import os
import subprocess
import time

from cluster.devstack.packages import require_program
from cluster.devstack.secure import REDIS_ADMIN, REDIS_USER, Secrets
from cluster.devstack.service import (
    CLUSTER_PORTS,
    HOST,
    POLL_S,
    READY_TIMEOUT_S,
    REPLICA_PORTS,
    Service,
    ServicesError,
    service_port,
    tcp_exchange,
)

# The delayq user's rights: every hash-tagged key ({<prefix>:<slot>}:…, any prefix, so
# each test may use its own) and the wake channels; reading, writing, scripts, pub/sub,
# and what redis-py's cluster client asks at connect. -@dangerous takes away FLUSHALL,
# FLUSHDB, KEYS, CONFIG, DEBUG, SHUTDOWN, CLIENT KILL, MIGRATE, …; INFO comes back (the
# reconciler reads the server's run_id to notice restarts).
DELAYQ_ACL = (
    "resetkeys ~{* resetchannels &*:wake -@all +@read +@write +@pubsub +@connection "
    "+@transaction -@dangerous +eval +evalsha +eval_ro +evalsha_ro +script|load "
    "+script|exists +info +time +command +cluster|slots +cluster|shards +cluster|nodes "
    "+cluster|info +cluster|myid +readonly +readwrite"
)


def _acl_file(svc: Service) -> str:
    return str(svc.dir / "users.acl")


def prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)
    if svc.secrets is None:
        return
    # Rewritten on every start, from secrets.json: the passwords never change otherwise.
    path = svc.dir / "users.acl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(
            "user default off resetpass -@all\n"
            f"user {REDIS_USER} on >{svc.secrets.password('redis_delayq')} {DELAYQ_ACL}\n"
            f"user {REDIS_ADMIN} on >{svc.secrets.password('redis_admin')} ~* &* +@all\n"
        )
    # A replica logs in to its master as the admin user (the default user is off); a
    # config file, so the password never shows on a command line.
    fd = os.open(_replication_conf(svc), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"masteruser {REDIS_ADMIN}\nmasterauth {svc.secrets.password('redis_admin')}\n")


def _replication_conf(svc: Service) -> str:
    return str(svc.dir / "replication.conf")


def _listen(svc: Service) -> list[str]:
    """Plain text on the port, or (secure stack) TLS only, with the ACL users."""
    if svc.secrets is None:
        return ["--port", str(svc.port)]
    return [
        "--port",
        "0",
        "--tls-port",
        str(svc.port),
        "--tls-cert-file",
        str(svc.secrets.cert_file),
        "--tls-key-file",
        str(svc.secrets.key_file),
        "--tls-ca-cert-file",
        str(svc.secrets.ca_file),
        # A client certificate is accepted (and checked) but not required.
        "--tls-auth-clients",
        "optional",
        "--aclfile",
        _acl_file(svc),
    ]


def command(svc: Service) -> list[str]:
    # A config file must come first; only the secure stack has one.
    conf = [_replication_conf(svc)] if svc.secrets is not None else []
    return [
        require_program("redis-server", "redis-server"),
        *conf,
        *_listen(svc),
        "--bind",
        HOST,
        "--dir",
        str(svc.dir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--maxmemory-policy",
        "noeviction",
        "--daemonize",
        "no",
        "--logfile",
        str(svc.log_file),
    ]


def cluster_command(svc: Service) -> list[str]:
    """One master of the Redis Cluster: the plain command plus cluster mode."""
    tls = ["--tls-cluster", "yes", "--tls-replication", "yes"] if svc.secrets else []
    return [
        *command(svc),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(svc.dir / "nodes.conf"),
        # A dead master's replica takes over within a few seconds.
        "--cluster-node-timeout",
        "2000",
        *tls,
    ]


def probe(svc: Service) -> None:
    if svc.secrets is None:
        reply = tcp_exchange(svc.port, b"PING\r\n", until=b"\r\n")
    else:
        auth = f"AUTH {REDIS_ADMIN} {svc.secrets.password('redis_admin')}\r\n".encode()
        reply = tcp_exchange(
            svc.port, auth + b"PING\r\n", until=b"PONG\r\n", tls=svc.secrets.client_tls()
        ).removeprefix(b"+OK\r\n")
    if not reply.startswith(b"+PONG"):
        # "-LOADING ..." while the AOF is being replayed.
        raise ServicesError(f"PING answered {reply.strip()!r}")


def _cli(secrets: Secrets | None) -> tuple[list[str], dict[str, str]]:
    """redis-cli and its environment: over TLS as the admin user in the secure stack
    (the password goes in REDISCLI_AUTH, never on the command line)."""
    cli = [require_program("redis-cli", "redis-server")]
    env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
    if secrets is not None:
        cli += ["--tls", "--cacert", str(secrets.ca_file), "--user", REDIS_ADMIN]
        env["REDISCLI_AUTH"] = secrets.password("redis_admin")
    return cli, env


def form_cluster(secrets: Secrets | None = None, *, replicas: bool = False) -> None:
    """Join the three masters into one cluster (once; they remember it in nodes.conf),
    give each a replica when asked (also to a cluster made without them), and wait
    until every hash slot is served and every master's replica is in sync."""
    cli, env = _cli(secrets)
    secure = secrets is not None
    masters = [service_port(name, secure=secure) for name in CLUSTER_PORTS]
    spares = [service_port(name, secure=secure) for name in REPLICA_PORTS] if replicas else []

    def ask(port: int, *command: str) -> str:
        return subprocess.run(
            [*cli, "-h", HOST, "-p", str(port), *command],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
        ).stdout

    def run(*command: str) -> None:
        result = subprocess.run(
            [*cli, *command], capture_output=True, text=True, timeout=60, env=env
        )
        if result.returncode != 0:
            raise ServicesError(
                f"redis-cli {' '.join(command[:2])} failed: "
                f"{result.stdout[-500:]}{result.stderr[-500:]}"
            )

    def state(port: int) -> str:
        out = ask(port, "cluster", "info")
        return "ok" if "cluster_state:ok" in out else out.split("cluster_slots_assigned:")[-1]

    if state(masters[0]) != "ok" and state(masters[0]).startswith("0"):
        nodes = [f"{HOST}:{p}" for p in masters + spares]
        replicas_each = "1" if spares else "0"
        run("--cluster", "create", *nodes, "--cluster-replicas", replicas_each, "--cluster-yes")
    for master, spare in zip(masters, spares, strict=False):
        if len(ask(spare, "cluster", "nodes").strip().splitlines()) == 1:
            # A new node that knows only itself: join it as its master's replica.
            master_id = ask(master, "cluster", "myid").strip()
            run(
                "--cluster",
                "add-node",
                f"{HOST}:{spare}",
                f"{HOST}:{master}",
                "--cluster-slave",
                "--cluster-master-id",
                master_id,
            )
    ports = masters + spares

    def ready() -> bool:
        if not all(state(port) == "ok" for port in ports):
            return False
        if not spares:
            return True
        # Roles may have moved (a failover): count masters with an online replica.
        infos = [ask(port, "info", "replication") for port in ports]
        synced = [
            i for i in infos if "role:master" in i and "state=online" in i.partition("slave0:")[2]
        ]
        return len(synced) == len(masters)

    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise ServicesError(
                "the Redis Cluster did not reach cluster_state:ok with every replica in sync"
            )
        time.sleep(POLL_S)
    shape = f"{len(masters)} masters" + (f" and {len(spares)} replicas" if spares else "")
    print(f"{'cluster':<12}{HOST}:{masters[0]:<6}  redis cluster of {shape} ready", flush=True)
