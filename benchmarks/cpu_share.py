"""Where the CPU goes while a command runs: CPU seconds per process group.

    python benchmarks/cpu_share.py -- python benchmarks/fire_bench.py --jobs 200000 \\
        --pattern burst --nodes 4
    python benchmarks/cpu_share.py --jobs 100000 --result run.json --out cpu.json -- \\
        python benchmarks/fire_bench.py --jobs 100000 --window 10 --pattern steady --out run.json

Reads user + system CPU time of every process (psutil) every SAMPLE_S while the command
runs, groups them and prints each group's CPU seconds and its share of what the machine
had (wall time × cores): over the whole run, and per phase. A total near 100 % means the
cores, not delayq, bound the run. Needs psutil (the dev extra).

Groups. The services of the stack the environment names (DELAYQ_REDIS_URL,
DELAYQ_MYSQL_URL, DELAYQ_KAFKA_BOOTSTRAP, DELAYQ_ZK_HOSTS) are the processes listening on
their ports: Redis, MariaDB, the Kafka broker(s) (Apache Kafka's JVM, `java ...
kafka.Kafka`, or Tansu), ZooKeeper. The other processes go by command line: the delayq
nodes (`cluster.cli.main`), the benchmark (anything run from benchmarks/: fire_bench's
client and consumer, kafka_floor's producer), this sampler itself, services on ports
the environment does not name (e.g. the secure stack's, the Kafka fault tests'
brokers: "other services"), and "other". Without DELAYQ_* variables the services go by
command line too (redis-server, mariadbd, kafka.Kafka or the kafka-dist jars, tansu,
ZooKeeper's main class).

Phases. With --result (the JSON the command writes, e.g. fire_bench.py --out; read once
the command ended) the firing phase is from the first due time (first_due_ms) to the
last record's receive or publish (first_due_ms + the larger drain_s), and the samples
before and after it are "before firing" (the nodes starting, the client scheduling) and
"after firing" (stopping, cleaning up). Without it, the firing phase is the samples in
which the delayq nodes used at least FIRING_CORES of a core. fire_bench's one process
is the producer before firing (schedule_many) and the consumer while firing.

--jobs N adds µs of CPU per job (CPU seconds ÷ N) to every line; --out writes the
samples and the tables as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

SAMPLE_S = 0.5
FIRING_CORES = 0.3
NODE = "delayq node"
BENCHMARK = "benchmark (client, consumer)"
SAMPLER = "this sampler (cpu_share)"
# By command line, for processes that listen on none of the stack's ports.
BY_COMMAND: tuple[tuple[str, tuple[str, ...]], ...] = (
    (NODE, ("cluster.cli.main",)),
    (BENCHMARK, ("benchmarks/",)),
)
# Services by command line: the stack's when the environment names no ports (else
# they are found by port, and these are other stacks' services on the same machine).
# Apache Kafka is a JVM whose command line has its main class and the jars' folder.
SERVICE_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Redis", ("redis-server",)),
    ("MariaDB", ("mariadbd", "mysqld")),
    ("Kafka broker", ("kafka.Kafka", "kafka-dist", "tansu")),
    ("ZooKeeper", ("zookeeper.server",)),
)
OTHER_SERVICES = "other services (not the stack's)"


def ports_of(text: str) -> set[int]:
    """Ports of host:port lists (`a:1,b:2`, a ZooKeeper chroot after /) and URLs."""
    found = set()
    for part in text.split(","):
        part = part.strip().split("/", 1)[0] if "://" not in part else part
        if "://" in part:
            port = urlparse(part).port
        else:
            port = int(part.rsplit(":", 1)[1]) if ":" in part else None
        if port:
            found.add(port)
    return found


def stack_ports() -> dict[int, str]:
    """port → service group, from the DELAYQ_* variables that are set."""
    ports: dict[int, str] = {}
    for variable, group in (
        ("DELAYQ_REDIS_URL", "Redis"),
        ("DELAYQ_MYSQL_URL", "MariaDB"),
        ("DELAYQ_KAFKA_BOOTSTRAP", "Kafka broker"),
        ("DELAYQ_ZK_HOSTS", "ZooKeeper"),
    ):
        for port in ports_of(os.environ.get(variable, "")):
            ports[port] = group
    return ports


def listeners(ports: dict[int, str]) -> dict[int, str]:
    """pid → service group of the processes listening on the stack's ports."""
    found: dict[int, str] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if (
            conn.status == psutil.CONN_LISTEN
            and conn.laddr
            and conn.laddr.port in ports
            and conn.pid is not None
        ):
            found[conn.pid] = ports[conn.laddr.port]
    return found


class Grouper:
    def __init__(self) -> None:
        self.ports = stack_ports()
        self.services = listeners(self.ports)
        self.me = os.getpid()

    def group_of(self, pid: int, cmdline: str) -> str:
        if pid in self.services:
            return self.services[pid]
        if pid == self.me:
            return SAMPLER
        for name, needles in BY_COMMAND:
            if any(needle in cmdline for needle in needles):
                return name
        for name, needles in SERVICE_COMMANDS:
            if any(needle in cmdline for needle in needles):
                return OTHER_SERVICES if self.ports else name
        return "other"


def snapshot(grouper: Grouper) -> dict[int, tuple[str, float]]:
    """pid → (group, CPU seconds so far) for every process readable now."""
    found: dict[int, tuple[str, float]] = {}
    # Processes that end meanwhile are skipped; unreadable fields come back as None.
    for proc in psutil.process_iter(["cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])  # None for a zombie
        found[proc.pid] = (grouper.group_of(proc.pid, cmdline), times.user + times.system)
    return found


def usage(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds per group between two snapshots."""
    used: dict[str, float] = {}
    for pid, (group, cpu_s) in after.items():
        used[group] = used.get(group, 0.0) + cpu_s - before.get(pid, (group, 0.0))[1]
    return used


def add(into: dict[str, float], step: dict[str, float]) -> None:
    for group, cpu_s in step.items():
        into[group] = into.get(group, 0.0) + cpu_s


def table(used: dict[str, float], wall_s: float, jobs: int | None) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    capacity = wall_s * cores
    rows = {
        group: {
            "cpu_s": round(cpu_s, 2),
            "share_pct": round(100 * cpu_s / capacity, 1) if capacity else None,
            **({"us_per_job": round(cpu_s / jobs * 1e6, 1)} if jobs else {}),
        }
        for group, cpu_s in sorted(used.items(), key=lambda item: -item[1])
    }
    total = sum(used.values())
    rows["total"] = {
        "cpu_s": round(total, 2),
        "share_pct": round(100 * total / capacity, 1) if capacity else None,
        **({"us_per_job": round(total / jobs * 1e6, 1)} if jobs else {}),
    }
    return {"wall_s": round(wall_s, 1), "cores": cores, "groups": rows}


def report(title: str, t: dict[str, Any]) -> None:
    capacity = t["wall_s"] * t["cores"]
    print(f"\n{title}: {t['wall_s']:.1f} s × {t['cores']} cores = {capacity:.1f} CPU-s")
    for group, row in t["groups"].items():
        per_job = f"  {row['us_per_job']:7.1f} µs/job" if "us_per_job" in row else ""
        print(f"  {group:<34} {row['cpu_s']:7.1f} CPU-s  {row['share_pct']:5.1f} %{per_job}")


class CpuMeter:
    """CPU seconds per group while a block runs, read in a thread every SAMPLE_S (a
    process that ends meanwhile keeps its last reading):

        with CpuMeter() as meter:
            run_the_system()
        meter.used  # {"Redis": 1.9, "delayq node": 3.1, ...}
    """

    def __init__(self) -> None:
        self.grouper = Grouper()
        self.used: dict[str, float] = {}
        self.wall_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CpuMeter:
        self._first = snapshot(self.grouper)
        self._readings = dict(self._first)
        self._groups = {pid: group for pid, (group, _) in self._first.items()}
        self._started = time.monotonic()
        self._thread.start()
        return self

    def _read(self) -> None:
        for pid, (group, cpu_s) in snapshot(self.grouper).items():
            self._readings[pid] = (self._groups.setdefault(pid, group), cpu_s)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._read()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self.wall_s = time.monotonic() - self._started
        self.used = {
            group: round(cpu_s, 3)
            for group, cpu_s in usage(self._first, self._readings).items()
            if group != SAMPLER
        }


def firing_window(path: Path) -> tuple[float, float] | None:
    """(start, end) in epoch seconds of the firing phase, from a fire_bench result."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    first = result.get("first_due_ms")
    drains = [result.get("drain_s"), (result.get("at_consumer") or {}).get("drain_s")]
    drain = max((d for d in drains if d is not None), default=None)
    if first is None or drain is None:
        return None
    return first / 1000, first / 1000 + drain


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    if "--" not in sys.argv:
        sys.exit(__doc__)
    at = sys.argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="jobs the command fires: adds µs per job")
    parser.add_argument(
        "--result", type=Path, help="the command's JSON result: its firing phase's times"
    )
    parser.add_argument("--out", type=Path, help="write the samples and tables as JSON")
    return parser.parse_args(sys.argv[1:at]), sys.argv[at + 1 :]


def main() -> None:
    args, command = parse_args()
    grouper = Grouper()
    first = previous = snapshot(grouper)
    readings = dict(first)  # keeps the last reading of processes that ended
    groups = {pid: group for pid, (group, _) in first.items()}
    started, started_at = time.monotonic(), time.time()
    samples: list[tuple[float, float, dict[str, float]]] = []  # (from, to, CPU-s per group)
    process = subprocess.Popen(command)
    last_at = started_at
    while process.poll() is None:
        time.sleep(SAMPLE_S)
        now = snapshot(grouper)
        now_at = time.time()
        for pid, (group, cpu_s) in now.items():
            # An exiting process has an empty command line: keep its first group.
            groups.setdefault(pid, group)
            readings[pid] = (groups[pid], cpu_s)
        samples.append((last_at, now_at, usage(previous, readings)))
        previous, last_at = dict(readings), now_at
    wall_s = time.monotonic() - started
    for pid, (group, cpu_s) in snapshot(grouper).items():
        readings[pid] = (groups.setdefault(pid, group), cpu_s)
    tables = {"whole run": table(usage(first, readings), wall_s, args.jobs)}

    window = firing_window(args.result) if args.result else None
    phases: dict[str, tuple[float, dict[str, float]]] = {}
    for began, ended, step in samples:
        if window is not None:
            middle = (began + ended) / 2
            phase = (
                "before firing"
                if middle < window[0]
                else "firing"
                if middle <= window[1]
                else "after firing"
            )
        elif step.get(NODE, 0.0) >= FIRING_CORES * (ended - began):
            phase = "firing"
        else:
            continue
        seconds, used = phases.get(phase, (0.0, {}))
        add(used, step)
        phases[phase] = (seconds + ended - began, used)
    for phase in ("before firing", "firing", "after firing"):
        if phase in phases:
            seconds, used = phases[phase]
            tables[phase] = table(used, seconds, args.jobs)
    how = (
        f"from the result's times ({args.result})"
        if window is not None
        else f"the samples in which the nodes used ≥ {FIRING_CORES} of a core"
    )
    for title, t in tables.items():
        report(title if title == "whole run" else f"{title} ({how})", t)
    print(
        "\nservices by port: "
        + ", ".join(f"{group} pid {pid}" for pid, group in sorted(grouper.services.items()))
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "command": command,
                    "jobs": args.jobs,
                    "firing_window": window,
                    "phases_from": how,
                    "services": {str(pid): group for pid, group in grouper.services.items()},
                    "tables": tables,
                    "samples": [
                        {"from": a, "to": b, "cpu_s": {g: round(v, 3) for g, v in s.items()}}
                        for a, b, s in samples
                    ],
                },
                indent=1,
            )
        )
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
