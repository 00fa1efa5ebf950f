"""The production shape on one machine: ``delayq services up|down|status|env
--production-shape``.

Every store in the shape it has in production, and delayq's own processes on top:

- the stack (cluster/devstack/stack.py) with a Redis Cluster of three masters and a
  replica each, three MariaDB servers, a ZooKeeper ensemble of three and three Apache
  Kafka brokers (replication factor 3, min.insync.replicas 2);
- a cluster of its own on them (PRODUCTION_SETTINGS: key prefix ``prod``, database
  ``delayq_prod`` with six logical shards, two per server), created and migrated by ``up``;
- three ``delayq node`` processes, ``delayq web`` (the API and the console) and
  ``delayq ingress``, each started detached with a log, a pid file and a metrics port
  under ``$DELAYQ_STATE_DIR/production/<name>/``, beside the stores' data (the shape's
  own state folder: see enter()).

``up`` starts what is not running and waits until every part answers; ``down`` stops
delayq's processes (SIGTERM: nodes hand their slots over) and then the stack; ``env``
prints the settings that point a client at the shape's cluster. The parts are services
(``Service``) like the stack's, so ``start``, ``kill`` and ``wait`` below serve the soak
(benchmarks/soak.py), which kills and restarts every one of them.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import urllib.request
from pathlib import Path

import orjson

from cluster.devstack import processes, stack
from cluster.devstack.service import (
    HOST,
    READY_TIMEOUT_S,
    Service,
    ServicesError,
    port_variable,
    state_dir,
)
from cluster.errors import DelayqError

# What `up --production-shape` asks of the stack (the variables its flags set).
SHAPE = {
    "DELAYQ_SERVICES_REDIS_CLUSTER": "1",
    "DELAYQ_SERVICES_REDIS_REPLICAS": "1",
    "DELAYQ_SERVICES_KAFKA": "apache",
    "DELAYQ_SERVICES_KAFKA_BROKERS": "3",
    "DELAYQ_SERVICES_MYSQL_SERVERS": "3",
    "DELAYQ_SERVICES_ZK_ENSEMBLE": "3",
}
DATABASE = "delayq_prod"
# The shape's cluster, beside any other on the same stack (tests use their own prefixes).
PRODUCTION_SETTINGS = {
    "DELAYQ_KEY_PREFIX": "prod",
    "DELAYQ_MYSQL_DATABASES": "6",  # logical shards: two per server, room to move
    "DELAYQ_SLOTS": "32",  # a power of two: ten or eleven per node, eight with node-4
    "DELAYQ_INGRESS_TOPIC": "delayq.prod.ingress",
}
NODES = ("node-1", "node-2", "node-3")
# Each part's port: a node's and the ingress's metrics, the web server's API (its
# metrics on WEB_METRICS_PORT). Moved with DELAYQ_SERVICES_<NAME>_PORT. node-4 is not
# started by `up`: the soak adds it as the node it never kills (benchmarks/soak.py).
PORTS = {
    "node-1": 18471,
    "node-2": 18472,
    "node-3": 18473,
    "web": 18470,
    "ingress": 18475,
    "node-4": 18476,
}
WEB_METRICS_PORT = 18474
MARKER = "cluster.cli.main"
ENTERED = "DELAYQ_SERVICES_PRODUCTION_SHAPE"


def enter() -> None:
    """Point this process's stack at the shape: the flags above and a state folder of
    its own, ``$DELAYQ_STATE_DIR/production`` (the stores' data and delayq's parts), so
    the plain stack's data (another broker count, say) never mixes with the shape's.
    The shape uses the plain stack's ports: only one of them runs at a time."""
    if os.environ.get(ENTERED) == "1":
        return
    os.environ["DELAYQ_STATE_DIR"] = str(state_dir() / "production")
    os.environ.update(SHAPE)
    os.environ[ENTERED] = "1"


def root() -> Path:
    return state_dir()


def port(name: str) -> int:
    raw = os.environ.get(port_variable(name))
    return int(raw) if raw else PORTS[name]


def settings_env() -> dict[str, str]:
    """DELAYQ_* for a client of the shape's cluster: the stack's, then the cluster's."""
    env = stack.stack_env()
    main = env["DELAYQ_MYSQL_URL"]
    env["DELAYQ_MYSQL_URL"] = main.rsplit("/", 1)[0] + f"/{DATABASE}"
    servers = env.get("DELAYQ_MYSQL_SERVERS", "").split()
    env["DELAYQ_MYSQL_SERVERS"] = " ".join(
        url.rsplit("/", 1)[0] + f"/{DATABASE}" for url in servers
    )
    return {**env, **PRODUCTION_SETTINGS}


def _process_env(name: str) -> dict[str, str]:
    """What one of delayq's processes runs with, beyond settings_env()."""
    if name.startswith("node-"):
        return {"DELAYQ_NODE_ID": name, "DELAYQ_METRICS_PORT": str(port(name))}
    if name == "web":
        return {"DELAYQ_NODE_ID": "web", "DELAYQ_METRICS_PORT": str(WEB_METRICS_PORT)}
    return {"DELAYQ_NODE_ID": "ingress", "DELAYQ_METRICS_PORT": str(port(name))}


def _command(svc: Service) -> list[str]:
    env = [f"{key}={value}" for key, value in _process_env(svc.name).items()]
    head = ["env", *env, sys.executable, "-m", MARKER]
    if svc.name == "web":
        return [*head, "web", "--host", HOST, "--port", str(svc.port)]
    kind = "node" if svc.name.startswith("node-") else "ingress"
    return [*head, kind, "--ready-file", str(svc.dir / "ready")]


def _prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)
    (svc.dir / "ready").unlink(missing_ok=True)


def _probe(svc: Service) -> None:
    if svc.name == "web":
        with urllib.request.urlopen(f"http://{svc.address}/healthz", timeout=2) as answer:
            if answer.status != 200:
                raise ServicesError(f"/healthz answered {answer.status}")
        return
    info = orjson.loads((svc.dir / "ready").read_bytes())  # OSError until written
    if info.get("pid") != processes.read_pid(svc):
        raise ServicesError("the ready file is an earlier process's")


def parts() -> list[Service]:
    """delayq's processes of the shape, in start order (stopped in reverse), and node-4
    when an earlier soak started it (so that `down` and `status` cover it)."""
    names = [*NODES, "web", "ingress"]
    if (root() / "node-4").is_dir():
        names.append("node-4")
    return [part(name) for name in names]


def part(name: str) -> Service:
    if name not in PORTS:
        raise ServicesError(f"no part named {name!r}: {', '.join(PORTS)}")
    return Service(name, port(name), root(), MARKER, _prepare, _command, _probe)


def start(svc: Service) -> int:
    """Start one part (its environment: settings_env() plus its own) and wait until it
    answers; its pid."""
    os.environ.update(settings_env())
    pid = processes.spawn(svc)
    processes.wait_ready(svc, pid, timeout_s=READY_TIMEOUT_S, stop="delayq services down")
    return pid


def stop(svc: Service) -> None:
    """SIGTERM and wait (SIGKILL after the stack's stop timeout)."""
    pid = processes.running_pid(svc)
    if pid is not None:
        processes.stop_pid(pid)
        processes.forget(pid)
    svc.pid_file.unlink(missing_ok=True)


async def _create_cluster() -> None:
    """The cluster's database on every server, migrated (again: a no-op once done)."""
    from cluster.settings.config import Settings
    from cluster.store.connect import connect
    from cluster.store.mysql_store import MySQLStore
    from cluster.store.servers import server_specs
    from cluster.store.sql import mysql_connect_args

    settings = Settings.from_env()
    for server in server_specs(settings):
        conn = await connect(**{**mysql_connect_args(settings, server.url), "db": None})
        try:
            async with conn.cursor() as cur:
                await cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        finally:
            conn.close()
    store = MySQLStore(settings, "setup")
    await store.open(check_schema=False)
    try:
        await store.migrate()
    finally:
        await store.close()


def up() -> None:
    stack.up()
    os.environ.update(settings_env())
    asyncio.run(_create_cluster())
    for svc in parts():
        pid = processes.running_pid(svc)
        if pid is not None:
            print(f"{svc.name:<13}{svc.address:<17}already running (pid {pid})", flush=True)
            continue
        pid = start(svc)
        print(f"{svc.name:<13}{svc.address:<17}started (pid {pid})", flush=True)


def down(purge: bool) -> None:
    for svc in reversed(parts()):
        pid = processes.running_pid(svc)
        stop(svc)
        shown = f"stopped (pid {pid})" if pid else "not running"
        print(f"{svc.name:<13}{svc.address:<17}{shown}", flush=True)
    stack.down(purge=purge)


def status() -> bool:
    running = True
    for svc in parts():
        pid = processes.running_pid(svc)
        serving = pid is not None and processes.serves(svc, pid)
        running = running and serving
        shown = f"pid {pid}" if pid else "pid -"
        print(
            f"{svc.name:<13}{svc.address:<17}{shown:<12}{'running' if serving else 'stopped'}",
            flush=True,
        )
    return all(stack.status().values()) and running


def run(command: str, *, purge: bool = False) -> int:
    """`delayq services COMMAND --production-shape`; the exit code."""
    enter()
    try:
        if command == "up":
            up()
        elif command == "down":
            down(purge)
        elif command == "status":
            return 0 if status() else 1
        elif command == "env":
            lines = [f"export {k}={shlex.quote(v)}" for k, v in settings_env().items()]
            print("\n".join(lines), flush=True)
        else:
            raise ServicesError(f"unknown command {command!r} (up, down, status, env)")
    except (ServicesError, DelayqError) as exc:
        print(f"delayq services {command}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
