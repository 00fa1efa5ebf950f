"""A three-node MariaDB Galera cluster for the local stack (`delayq services up --galera`):
nodes galera-1..3 on ports 13406, 13416 and 13426, each a ``mariadbd`` of its own with
Debian's galera-4 provider, database ``delayq`` and user delayq/delayq, as in the plain
stack (cluster/devstack/mariadb.py writes the base config and makes the user).

Group communication (gcomm) listens on 14567, 14577 and 14587; incremental state
transfer (IST) on the next port, full state transfer (SST, rsync) on the one after.
The first node of a new cluster is started with --wsrep-new-cluster, the others join it
one at a time (a donor serves one transfer at once); a full transfer copies a donor's
data with mariabackup. A node killed -9 is started again
with ``start_node(i)``: it rejoins with IST (or SST). When every node is down, ``up``
bootstraps the one whose state is the newest: the node marked safe_to_bootstrap (the
last one stopped cleanly), else the highest position recovered with --wsrep-recover
(after a crash of all three).

Like ``--secure``, ``--galera`` selects this cluster instead of the plain stack: ``up``,
``down``, ``status`` and ``env`` with it act on the Galera nodes only. docs/galera.md.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pymysql

from cluster.devstack import mariadb, processes
from cluster.devstack.packages import apt_install, find_program
from cluster.devstack.service import (
    HOST,
    MYSQL_DATABASE,
    MYSQL_PASSWORD,
    MYSQL_USER,
    Service,
    ServicesError,
    say,
    state_dir,
)

__all__ = [
    "NODES",
    "addresses",
    "down",
    "ensure_packages",
    "env_lines",
    "node_pid",
    "nodes",
    "run",
    "start_node",
    "status",
    "up",
    "url",
    "wait_synced",
]

NODES = 3
MYSQL_PORTS = (13406, 13416, 13426)
GCOMM_PORTS = (14567, 14577, 14587)  # IST on the next port, SST on the one after
PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
CLUSTER_NAME = "delayq-devstack"
# A joiner may need a full state transfer; two cores shared with everything else.
JOIN_TIMEOUT_S = 180.0
_RECOVERED = re.compile(r"Recovered position:\s*([0-9a-f-]{36}):(-?\d+)")


def nodes(root: Path | None = None) -> list[Service]:
    """The three nodes, galera-1..3, under the state folder (or `root`)."""
    root = root or state_dir()
    return [
        Service(
            f"galera-{i}", MYSQL_PORTS[i - 1], root, "mariadbd", _prepare, mariadb.command, _probe
        )
        for i in range(1, NODES + 1)
    ]


def addresses() -> list[tuple[str, int]]:
    return [(HOST, port) for port in MYSQL_PORTS]


def url(*, sync_wait: int | None = 1) -> str:
    """The delayq URL of the cluster: every node's address, and wsrep_sync_wait=1 (reads
    see every write the cluster committed before them, also right after a failover)."""
    hosts = ",".join(f"{host}:{port}" for host, port in addresses())
    query = "" if sync_wait is None else f"?wsrep_sync_wait={sync_wait}"
    return f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{hosts}/{MYSQL_DATABASE}{query}"


def env_lines() -> list[str]:
    return [f'export DELAYQ_SERVICES_GALERA_URL="{url()}"']


def _index(svc: Service) -> int:
    return int(svc.name.rsplit("-", 1)[1])


def _prepare(svc: Service) -> None:
    """mariadb.prepare's config and data folder, with the node's wsrep settings."""
    i = _index(svc)
    gcomm = GCOMM_PORTS[i - 1]
    members = ",".join(f"{HOST}:{port}" for port in GCOMM_PORTS)
    provider_options = "; ".join(
        [
            f"gmcast.listen_addr=tcp://{HOST}:{gcomm}",
            f"ist.recv_addr={HOST}:{gcomm + 1}",
            "gcache.size=64M",
        ]
    )
    lines = [
        "wsrep_on = ON",
        f"wsrep_provider = {PROVIDER}",
        f"wsrep_cluster_name = {CLUSTER_NAME}",
        f"wsrep_cluster_address = gcomm://{members}",
        f"wsrep_node_name = {svc.name}",
        f"wsrep_node_address = {HOST}:{gcomm}",
        f"wsrep_sst_receive_address = {HOST}:{gcomm + 2}",
        f'wsrep_provider_options = "{provider_options}"',
        # mariabackup, not rsync: rsync's daemon, started as root, drops to the user
        # nobody, who may not write the joiner's data folder.
        "wsrep_sst_method = mariabackup",
        # What Galera needs: row-based replication of InnoDB tables, and interleaved
        # auto-increment locks (a table lock would deadlock the appliers).
        "binlog_format = ROW",
        "default_storage_engine = InnoDB",
        "innodb_autoinc_lock_mode = 2",
        # Small: three of these share the machine with the rest of the stack.
        *mariadb.SMALL_MEMORY,
        "max_connections = 200",
    ]
    mariadb.prepare_with(lines)(svc)


def _state(svc: Service) -> dict[str, str]:
    """What the node noted about the cluster's state (grastate.dat); {} if nothing."""
    try:
        text = (svc.dir / "data" / "grastate.dat").read_text()
    except OSError:
        return {}
    return {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in text.splitlines())
        if value and not key.startswith("#")
    }


def _probe(svc: Service) -> None:
    """Ready = logged in as delayq and the node is Synced with the primary component."""
    conn = pymysql.connect(
        host=HOST,
        port=svc.port,
        user=MYSQL_USER,
        password=MYSQL_PASSWORD,
        database=MYSQL_DATABASE,
        connect_timeout=3,
        read_timeout=5,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SHOW STATUS WHERE Variable_name IN "
                "('wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_ready')"
            )
            status = dict(cur.fetchall())
    finally:
        conn.close()
    wanted = {
        "wsrep_local_state_comment": "Synced",
        "wsrep_cluster_status": "Primary",
        "wsrep_ready": "ON",
    }
    if status != wanted:
        raise ServicesError(f"{svc.name} not synced yet: {status}")


def node_pid(i: int, root: Path | None = None) -> int | None:
    """The pid of node i (1..3), if it runs; for fault tests."""
    return processes.running_pid(nodes(root)[i - 1])


def _spawn(svc: Service, *, bootstrap: bool) -> int:
    """Start the node (a new primary component: bootstrap). After a crash its state
    file has no position: the one InnoDB recovers is passed on, so that the node asks
    for the transactions it missed (IST) rather than for a full copy (SST)."""
    extra = ["--wsrep-new-cluster"] if bootstrap else []
    state = _state(svc)
    if state.get("uuid", "").strip("0-") and state.get("seqno") == "-1":
        position = _recovered_position(svc)
        if position is not None:
            extra.append(f"--wsrep-start-position={position}")

    def command(node: Service) -> list[str]:
        return [*mariadb.command(node), *extra]

    return processes.spawn(dataclasses.replace(svc, command=command))


def wait_synced(svc: Service, pid: int, *, set_up: bool = False) -> None:
    """Wait until the node is Synced (after creating the database and user: set_up)."""
    setup = mariadb.setup if set_up else None
    processes.wait_ready(
        svc,
        pid,
        timeout_s=JOIN_TIMEOUT_S,
        setup=setup,
        ready="synced",
        stop="delayq services down --galera",
    )


def _recovered_position(svc: Service) -> str | None:
    """The node's last committed position, uuid:seqno, read from InnoDB (mariadbd
    --wsrep-recover, as the packages' galera_recovery does); None if none is found."""
    svc.prepare(svc)
    log = svc.dir / "wsrep-recover.log"
    log.unlink(missing_ok=True)
    subprocess.run(
        [*mariadb.command(svc), "--wsrep-recover", f"--log-error={log}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    found = _RECOVERED.findall(log.read_text(errors="replace") if log.exists() else "")
    return f"{found[-1][0]}:{found[-1][1]}" if found else None


def _bootstrap_node(stack: list[Service]) -> Service:
    """The node to start a new primary component from: the one whose state is newest."""
    states = [_state(svc) for svc in stack]
    if not any(state.get("uuid", "").strip("0-") for state in states):
        return stack[0]  # a new cluster
    for svc, state in zip(stack, states, strict=True):
        if state.get("safe_to_bootstrap") == "1":
            return svc
    # Every node crashed (or was killed): none is marked; take the newest position.
    seqnos = [int(state.get("seqno", "-1")) for state in states]
    seqnos = [
        seqno if seqno >= 0 else int((_recovered_position(svc) or ":-1").rsplit(":", 1)[1])
        for svc, seqno in zip(stack, seqnos, strict=True)
    ]
    chosen = stack[max(range(len(stack)), key=lambda k: seqnos[k])]
    say(chosen, f"bootstrapping from the newest state (seqno {max(seqnos)})")
    grastate = chosen.dir / "data" / "grastate.dat"
    grastate.write_text(
        re.sub(r"safe_to_bootstrap:\s*0", "safe_to_bootstrap: 1", grastate.read_text())
    )
    return chosen


def ensure_packages() -> None:
    """galera-4 (the provider), mariadb-backup and socat (the full state transfer):
    installed with apt-get when missing."""
    present = {
        "galera-4": PROVIDER.exists(),
        "mariadb-backup": find_program("mariabackup") is not None,
        "socat": find_program("socat") is not None,
    }
    missing = [package for package, there in present.items() if not there]
    if missing:
        apt_install(missing)


def up(root: Path | None = None) -> None:
    """Start every node that is not running and wait until all are Synced: bootstrap a
    primary component when none runs, then join the others one at a time."""
    ensure_packages()
    stack = nodes(root)
    for svc in stack:
        svc.dir.mkdir(parents=True, exist_ok=True)
        if processes.running_pid(svc) is None and processes.port_open(svc.port):
            raise ServicesError(
                f"{svc.name}: port {svc.port} is already in use by "
                f"{processes.describe_owner(svc.port)}"
            )
    set_up = True  # the database and user, made on the first node that runs
    bootstrapped: Service | None = None
    if all(processes.running_pid(svc) is None for svc in stack):
        bootstrapped = _bootstrap_node(stack)
        started = time.monotonic()
        pid = _spawn(bootstrapped, bootstrap=True)
        wait_synced(bootstrapped, pid, set_up=True)
        say(bootstrapped, f"started (pid {pid}, a new primary component, {_since(started)})")
        set_up = False
    for svc in stack:
        running = processes.running_pid(svc)
        if running is None:
            start_node(_index(svc), root)
        elif svc is not bootstrapped:
            wait_synced(svc, running, set_up=set_up)
            set_up = False
            say(svc, f"running (pid {running})")


def start_node(i: int, root: Path | None = None) -> int:
    """Start node i (1..3) again, e.g. after a kill -9, and wait until it has rejoined
    (Synced); bootstraps a new primary component when no other node runs. Its pid."""
    stack = nodes(root)
    svc = stack[i - 1]
    pid = processes.running_pid(svc)
    if pid is not None:
        wait_synced(svc, pid)
        return pid
    others = [other for other in stack if other is not svc and processes.running_pid(other)]
    if not others:
        up(root)
        pid = processes.running_pid(svc)
        assert pid is not None
        return pid
    started = time.monotonic()
    pid = _spawn(svc, bootstrap=False)
    wait_synced(svc, pid)
    say(svc, f"joined (pid {pid}, {_since(started)})")
    return pid


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def down(purge: bool = False, root: Path | None = None) -> None:
    """Stop the nodes, the last one first: the first node then stops last and is the
    one marked safe to bootstrap from. purge: also delete their folders."""
    stack = nodes(root)
    for svc in reversed(stack):
        pid = processes.read_pid(svc)
        if pid is None or not processes.is_ours(svc, pid):
            say(svc, "not running")
        else:
            killed = processes.stop_pid(pid)
            say(svc, f"stopped (pid {pid}{', killed after timeout' if killed else ''})")
        processes.forget(pid or 0)
        svc.pid_file.unlink(missing_ok=True)
    if purge:
        for svc in stack:
            shutil.rmtree(svc.dir, ignore_errors=True)
            mariadb.socket_path(svc).unlink(missing_ok=True)
        print(f"purged {', '.join(svc.name for svc in stack)}", flush=True)


def status(root: Path | None = None) -> dict[str, bool]:
    """One line per node; map each name to whether it runs and listens on its port."""
    result: dict[str, bool] = {}
    for svc in nodes(root):
        pid = processes.read_pid(svc)
        alive = pid is not None and processes.is_ours(svc, pid)
        running = alive and pid is not None and processes.serves(svc, pid)
        shown = f"pid {pid}" if alive else "pid -"
        print(
            f"{svc.name:<13}{svc.address:<17}{shown:<12}{'running' if running else 'stopped'}",
            flush=True,
        )
        result[svc.name] = running
    return result


def run(command: str, *, purge: bool = False, secure: bool = False) -> int:
    """`delayq services up|down|status|env --galera`; the process exit code."""
    if secure:
        print("delayq services: --galera runs in the plain stack only", file=sys.stderr)
        return 2
    try:
        if command == "up":
            up()
        elif command == "down":
            down(purge=purge)
        elif command == "status":
            return 0 if all(status().values()) else 1
        elif command == "env":
            print("\n".join(env_lines()), flush=True)
        else:
            print(f"delayq services: unknown command {command!r}", file=sys.stderr)
            return 2
    except ServicesError as exc:
        print(f"delayq services {command} --galera: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
