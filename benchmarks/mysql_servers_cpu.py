"""CPU accounting for benchmarks/mysql_servers_bench.py: the processes of a run, and the
MariaDB threads split by whom they serve.

MariaDB runs one thread per connection (thread_handling = one-thread-per-connection, the
default), and INFORMATION_SCHEMA.PROCESSLIST names each connection's thread (TID) and
database (DB). Every connection of a delayq cluster (its nodes' and clients') has the
cluster's main database as DB, so the CPU of the threads serving those connections is the
run's own, whatever other clients of the same server do meanwhile. ThreadCpu reads the
processlist and every thread's CPU time (psutil) of each server every SAMPLE_S and sums
each thread's CPU since the last sample into one of:

- "ours": a thread serving a connection of the run's database (a thread that served
  another connection at the last sample is left out: it cannot be split);
- "others": a thread serving another connection (other databases, the sampler itself);
- "background": a thread serving no connection, then and now: InnoDB's page cleaner, log
  writer, purge and I/O threads, for every database of the server (and idle cached
  connection threads, which spend nothing).

A thread that exited between two samples is missing from all three; the process's
cpu_times() (Watched) has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from cluster.settings.config import Settings
from cluster.store.connect import connect
from cluster.store.servers import server_specs
from cluster.store.sql import mysql_connect_args, parse_mysql_url

SAMPLE_S = 0.5
MARIADB = ("mariadbd", "mysqld")
KINDS = ("ours", "others", "background")


@dataclass(frozen=True)
class Watched:
    """A process whose CPU time a run reads."""

    name: str  # "mysql 0", "node", "bench", "redis"
    process: psutil.Process


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def snapshot(watched: Sequence[Watched]) -> dict[str, float]:
    """CPU seconds of each watched process, and "machine": of every core, all but idle."""
    times = psutil.cpu_times()
    busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
    return {w.name: cpu_seconds(w.process) for w in watched} | {"machine": busy}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before[name], 3) for name in after}


def listening_on(port: int, names: tuple[str, ...]) -> psutil.Process:
    """The process named one of `names` that listens on TCP `port`."""
    for process in psutil.process_iter(["name"]):
        if process.info["name"] not in names:
            continue
        try:
            sockets = process.net_connections(kind="tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets):
            return process
    raise SystemExit(f"no {'/'.join(names)} process listens on port {port}")


def server_processes(all_servers: Settings) -> list[Watched]:
    """Every MariaDB server of `all_servers` (unused ones show the shared machine's
    noise); exits if one is not running."""
    return [
        Watched(f"mysql {spec.index}", listening_on(parse_mysql_url(spec.url)["port"], MARIADB))
        for spec in server_specs(all_servers)
    ]


def watched_processes(settings: Settings, servers: list[Watched]) -> list[Watched]:
    """The MariaDB `servers`, the node(s) this process started, this process and Redis."""
    found = list(servers)
    nodes = [
        child
        for child in psutil.Process().children()
        if "cluster.cli.main" in " ".join(child.cmdline())
    ]
    found += [Watched(f"node {i}" if i else "node", p) for i, p in enumerate(nodes)]
    found.append(Watched("bench", psutil.Process()))
    redis_port = int(settings.redis_url.rsplit(":", 1)[1].split("/", 1)[0])
    found.append(Watched("redis", listening_on(redis_port, ("redis-server",))))
    return found


@dataclass
class ServerThreads:
    name: str  # "mysql 0"
    process: psutil.Process
    conn: Any  # an aiomysql.Connection
    # thread id -> (CPU seconds, connection id or None, serving the run's database)
    last: dict[int, tuple[float, int | None, bool]] | None = None
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))


class ThreadCpu:
    """The run's MariaDB threads' CPU, per server (see the module docstring)."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.servers: list[ServerThreads] = []
        self.lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    def ours(self, db: str | None) -> bool:
        return db is not None and (db == self.database or db.startswith(self.database + "_"))

    async def open(self, settings: Settings, watched: Sequence[Watched]) -> None:
        """A connection to every server of `settings`; sampling starts."""
        processes = {w.name: w.process for w in watched}
        for spec in server_specs(settings):
            conn = await connect(**{**mysql_connect_args(settings, spec.url), "db": None})
            name = f"mysql {spec.index}"
            self.servers.append(ServerThreads(name, processes[name], conn))
        await self.sample()
        self.task = asyncio.create_task(self.keep_sampling())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        for server in self.servers:
            server.conn.close()

    async def keep_sampling(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            await self.sample()

    async def sample(self) -> dict[str, dict[str, float]]:
        """Sample now; returns the running totals per server."""
        async with self.lock:
            for server in self.servers:
                await self.sample_server(server)
            return {s.name: dict(s.totals) for s in self.servers}

    async def sample_server(self, server: ServerThreads) -> None:
        async with server.conn.cursor() as cur:
            await cur.execute("SELECT ID, TID, DB FROM information_schema.PROCESSLIST")
            serving = {int(tid): (int(cid), self.ours(db)) for cid, tid, db in await cur.fetchall()}
        now = {t.id: t.user_time + t.system_time for t in server.process.threads()}
        current = {tid: (cpu, *serving.get(tid, (None, False))) for tid, cpu in now.items()}
        if server.last is not None:
            for tid, (cpu, cid, ours) in current.items():
                before_cpu, before_cid, before_ours = server.last.get(tid, (0.0, None, False))
                kind = classify(cid, ours, before_cid, before_ours)
                if kind is not None:
                    server.totals[kind] += cpu - before_cpu
        server.last = current


def classify(cid: int | None, ours: bool, before_cid: int | None, before_ours: bool) -> str | None:
    """Whose a thread's CPU since the last sample is, by the connection it served then
    and serves now (None: no connection); None when it cannot be told."""
    if cid is None and before_cid is None:
        return "background"
    if cid is None or before_cid is None or cid == before_cid:
        # One connection (begun or ended in between, or throughout).
        return "ours" if (ours if cid is not None else before_ours) else "others"
    return None  # two connections in turn


def thread_delta(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    return {
        server: {kind: round(after[server][kind] - before[server][kind], 3) for kind in KINDS}
        for server in after
    }


# ----- the CPU table ---------------------------------------------------------------------


def median_of(runs: list[dict[str, Any]], phase: str, name: str, key: str) -> float:
    return float(statistics.median(r["phases"][phase][key][name] for r in runs))


def cpu_table(runs: list[dict[str, Any]], servers_max: int) -> str:
    """µs of CPU per job, the median of the runs, per phase and process: MariaDB's by
    thread (ThreadCpu), less the node's idle polling unless said; the processes' less
    their idle rate."""
    head = ["MySQL servers", "phase"]
    head += [f"MariaDB {i}: run's threads" for i in range(servers_max)]
    head += [
        "MariaDB: run's threads, all servers",
        "the same with the node's idle polling",
        "MariaDB: background threads, all servers",
        "node",
        "benchmark process",
        "Redis",
        "machine busy",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sorted({r["servers"] for r in runs}):
        mine = [r for r in runs if r["servers"] == n]
        for phase, bench in (("schedule", "producer"), ("fire", "consumer")):
            ours = [median_of(mine, phase, f"mysql {i}", "ours_net_us_per_job") for i in range(n)]
            polling = sum(median_of(mine, phase, f"mysql {i}", "ours_us_per_job") for i in range(n))
            background = sum(
                median_of(mine, phase, f"mysql {i}", "background_us_per_job") for i in range(n)
            )
            cells = [str(n), phase]
            cells += [f"{v:.1f}" for v in ours] + ["—"] * (servers_max - n)
            cells += [f"{sum(ours):.1f}", f"{polling:.1f}", f"{background:.1f}"]
            for name in ("node", "bench"):
                cells.append(f"{median_of(mine, phase, name, 'cpu_us_per_job_net_of_idle'):.1f}")
            cells[-1] += f" ({bench})"
            cells.append(f"{median_of(mine, phase, 'redis', 'cpu_us_per_job_net_of_idle'):.1f}")
            busy = statistics.median(r["phases"][phase]["machine_busy"] for r in mine)
            cells.append(f"{busy:.0%}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
