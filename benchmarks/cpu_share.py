"""Where the CPU goes while a command runs: CPU seconds per process group.

    python benchmarks/cpu_share.py -- python benchmarks/fire_bench.py --jobs 200000 \\
        --pattern burst --nodes 4

Reads user + system CPU time of every process (psutil) every SAMPLE_S while the command runs,
groups them (delayq nodes, the benchmark, Redis, MariaDB, the Kafka broker, ZooKeeper,
everything else) and prints each group's CPU seconds and its share of what the machine
had (wall time × cores), twice: over the whole run, and over the firing phase alone
(the samples in which the delayq nodes used at least FIRING_CORES of a core). A total
near 100 % means the cores, not delayq, bound the run. Needs psutil (the dev extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

SAMPLE_S = 0.5
FIRING_CORES = 0.3
GROUPS = (
    ("delayq node", ("cluster.cli.main",)),
    ("benchmark (client, consumer)", ("benchmarks/",)),
    ("Redis", ("redis-server",)),
    ("MariaDB", ("mariadbd", "mysqld")),
    ("Kafka broker", ("tansu", "kafka")),
    ("ZooKeeper", ("zookeeper",)),
)


def group_of(cmdline: str) -> str:
    for name, needles in GROUPS:
        if any(needle in cmdline for needle in needles):
            return name
    return "other"


def snapshot() -> dict[int, tuple[str, float]]:
    """pid → (group, CPU seconds so far) for every process readable now."""
    found: dict[int, tuple[str, float]] = {}
    # Processes that end meanwhile are skipped; unreadable fields come back as None.
    for proc in psutil.process_iter(["cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])  # None for a zombie
        found[proc.pid] = (group_of(cmdline), times.user + times.system)
    return found


def usage(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds per group between two snapshots."""
    used: dict[str, float] = {}
    for pid, (group, cpu_s) in after.items():
        used[group] = used.get(group, 0.0) + cpu_s - before.get(pid, (group, 0.0))[1]
    return used


def report(title: str, used: dict[str, float], wall_s: float) -> None:
    capacity = wall_s * (os.cpu_count() or 1)
    print(f"\n{title}: {wall_s:.1f} s × {os.cpu_count()} cores = {capacity:.1f} CPU-s")
    for group, cpu_s in sorted(used.items(), key=lambda item: -item[1]):
        print(f"  {group:<30} {cpu_s:7.1f} CPU-s  {100 * cpu_s / capacity:5.1f} %")
    total = sum(used.values())
    print(f"  {'total':<30} {total:7.1f} CPU-s  {100 * total / capacity:5.1f} %")


def main() -> None:
    if "--" not in sys.argv:
        sys.exit(__doc__)
    command = sys.argv[sys.argv.index("--") + 1 :]
    first = previous = snapshot()
    readings = dict(first)  # keeps the last reading of processes that ended
    groups = {pid: group for pid, (group, _) in first.items()}
    started = time.monotonic()
    firing: dict[str, float] = {}
    firing_s = 0.0
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(SAMPLE_S)
        now = snapshot()
        for pid, (group, cpu_s) in now.items():
            # An exiting process has an empty command line: keep its first group.
            groups.setdefault(pid, group)
            readings[pid] = (groups[pid], cpu_s)
        step = usage(previous, readings)
        if step.get("delayq node", 0.0) >= FIRING_CORES * SAMPLE_S:
            firing_s += SAMPLE_S
            for group, cpu_s in step.items():
                firing[group] = firing.get(group, 0.0) + cpu_s
        previous = dict(readings)
    wall_s = time.monotonic() - started
    for pid, (group, cpu_s) in snapshot().items():
        readings[pid] = (groups.setdefault(pid, group), cpu_s)
    report("whole run", usage(first, readings), wall_s)
    if firing_s:
        report("firing phase", firing, firing_s)
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
