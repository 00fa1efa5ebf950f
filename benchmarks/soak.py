"""A soak of the production shape with rolling faults.

    delayq services down --production-shape --purge     # optional: a fresh shape
    delayq services up --production-shape
    python benchmarks/soak.py --minutes 30 --rate 100
    delayq services down --production-shape

For --minutes, jobs are scheduled at a steady rate through the Python client
(schedule_many every 0.1 s; due 1-120 s ahead, and one in ten 400-600 s ahead, beyond the
Redis horizon, while they can still fire before the end), through the HTTP API (`delayq
web`) and through the ingress topic (`delayq ingress`), with cancels and reschedules
mixed in, while one consumer reads every fired record from Kafka. After a warm-up,
every part is killed -9 and started again, one after another (each node, each Redis
master, each MariaDB server, each ZooKeeper server, the leader first, each Kafka broker:
benchmarks/soak_faults.py), then the nodes get a rolling upgrade (stop, start).
A fourth node (node-4), the web server and the ingress are never killed: their memory,
open files, threads, asyncio tasks and store connections are sampled every --sample-s
(benchmarks/soak_watch.py), with every other process's memory.

At the end, once every job due has had its time, the fault suite's checker
(tests/faults/verdict.py) judges: nothing lost, none early, no cancelled job fired, no
rescheduled job fired at its old time, MySQL and Redis agree. The report gives those
counts, lateness p50/p99/max of the jobs due in each phase, duplicates by phase, the
longest pause (the longest gap between two records read while a job was already due)
and every process's figures at the first and last sample; benchmarks/results/
soak-<time>.json has everything. docs/operations.md has the latest run.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import logging
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/faults/verdict.py, tests/conftest.py

from aiokafka import AIOKafkaProducer  # noqa: E402
from soak_faults import Faults, plan  # noqa: E402  (beside this file)
from soak_watch import sample, store_ports, watched  # noqa: E402

from cluster import DelayClient  # noqa: E402
from cluster.connections.kafka_conn import connection_options, make_admin, start_client  # noqa: E402
from cluster.connections.redis_conn import open_redis  # noqa: E402
from cluster.devstack import processes, production  # noqa: E402
from cluster.settings.config import Settings  # noqa: E402
from tests.conftest import TOPIC_PARTITIONS, Collector  # noqa: E402
from tests.faults.load import reading  # noqa: E402
from tests.faults.settle import settle  # noqa: E402
from tests.faults.verdict import Ledger, all_rows  # noqa: E402

LONG_RUNNER = "node-4"
BEYOND = (400.0, 600.0)  # beyond the default 300 s Redis horizon
TICK_S = 0.1


class Soak:
    def __init__(self, args: argparse.Namespace, settings: Settings, topic: str) -> None:
        self.args = args
        self.settings = settings
        self.topic = topic
        self.ledger = Ledger()
        self.due: dict[str, float] = {}  # the client's jobs: id -> due (s), for changes
        self.phases: list[tuple[float, str]] = []
        self.samples: list[dict[str, dict[str, object]]] = []
        self.began = time.time()
        self.stopping = asyncio.Event()
        self.http_n = 0
        self.ingress_n = 0

    def elapsed(self) -> float:
        return time.time() - self.began

    # ----- the load ------------------------------------------------------------------

    async def schedule(self, client: DelayClient) -> None:
        rng = random.Random(1)
        per_tick = self.args.rate * TICK_S
        owed = 0.0
        total = self.args.minutes * 60
        while not self.stopping.is_set():
            owed += per_tick
            count, owed = int(owed), owed - int(owed)
            jobs = []
            for _ in range(count):
                late_enough = self.elapsed() < total - BEYOND[1] - 60
                delay = (
                    rng.uniform(*BEYOND)
                    if late_enough and rng.random() < 0.1
                    else (rng.uniform(1.0, self.args.max_delay_s))
                )
                jobs.append({"topic": self.topic, "payload": {"n": rng.random()}, "delay": delay})
            if jobs:
                before = set(self.ledger.scheduled)
                now = time.time()
                await self.ledger.schedule_many(client, jobs)
                for job_id in self.ledger.scheduled - before:
                    self.due[job_id] = now + self.args.max_delay_s  # an upper bound is enough here
            await asyncio.sleep(TICK_S)

    async def change(self, client: DelayClient) -> None:
        """Every second: cancel three jobs and reschedule three, among those due later."""
        rng = random.Random(2)
        while not self.stopping.is_set():
            await asyncio.sleep(1.0)
            ids = [
                job_id for job_id in list(self.due)[-2000:] if job_id not in self.ledger.cancelled
            ]
            rng.shuffle(ids)
            for job_id in ids[:3]:
                await self.ledger.cancel(client, job_id)
                self.due.pop(job_id, None)
            for job_id in ids[3:6]:
                due_ms = int((time.time() + rng.uniform(10, 60)) * 1000)
                await self.ledger.reschedule(client, job_id, due_ms)

    async def http(self) -> None:
        base = f"http://127.0.0.1:{production.port('web')}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            while not self.stopping.is_set():
                await asyncio.sleep(1.0 / self.args.http_rate)
                self.http_n += 1
                job_id = f"{self.topic}-h-{self.http_n}"  # ids unique per run
                body = {
                    "topic": self.topic,
                    "payload": {"h": self.http_n},
                    "delay": 30.0,
                    "job_id": job_id,
                }
                try:
                    async with http.post(f"{base}/v1/jobs", json=body) as answer:
                        if answer.status in (200, 201):
                            self.ledger.scheduled.add(job_id)
                        elif answer.status < 500:
                            self.ledger.schedule_failed += 1
                        else:
                            self.ledger.schedule_unknown += 1
                except (aiohttp.ClientError, TimeoutError):
                    self.ledger.schedule_unknown += 1

    async def ingress(self) -> None:
        producer = AIOKafkaProducer(**connection_options(self.settings), acks="all")
        await start_client(producer, self.settings)
        try:
            while not self.stopping.is_set():
                await asyncio.sleep(1.0 / self.args.ingress_rate)
                self.ingress_n += 1
                job_id = f"{self.topic}-i-{self.ingress_n}"
                record = {
                    "topic": self.topic,
                    "payload": {"i": self.ingress_n},
                    "delay": 30.0,
                    "job_id": job_id,
                }
                try:
                    await producer.send_and_wait(
                        self.settings.ingress_topic, orjson.dumps(record), key=job_id.encode()
                    )
                except Exception:
                    self.ledger.schedule_unknown += 1  # maybe in the topic, maybe not
                    continue
                self.ledger.scheduled.add(job_id)  # in the topic: the ingress will store it
        finally:
            await producer.stop()

    # ----- faults, samples, progress ---------------------------------------------------

    async def faults(self) -> list[dict[str, object]]:
        faults = Faults()
        steps = [step for step in plan() if not self.args.only or step.kind in self.args.only]
        total = self.args.minutes * 60
        gap = (total - self.args.warmup_s - self.args.tail_s) / len(steps)
        self.phases.append((self.began, "steady, before the faults"))
        for index, step in enumerate(steps):
            await self._until(self.args.warmup_s + index * gap)
            self.phases.append((time.time(), step.label))
            print(f"[{self.elapsed():6.0f} s] {step.label}", flush=True)
            entry = await faults.run(step)
            print(f"[{self.elapsed():6.0f} s]   done: {entry}", flush=True)
        await self._until(total - self.args.tail_s)
        self.phases.append((time.time(), "steady, after the faults"))
        await self._until(total)
        return faults.log

    async def _until(self, at_s: float) -> None:
        await asyncio.sleep(max(0.0, at_s - self.elapsed()))

    async def watch(self, collector: Collector) -> None:
        items = watched([LONG_RUNNER])
        ports = store_ports()
        while not self.stopping.is_set():
            self.samples.append(await asyncio.to_thread(sample, items, ports))
            print(
                f"[{self.elapsed():6.0f} s] scheduled {len(self.ledger.scheduled):,} "
                f"(unknown {self.ledger.schedule_unknown}), read {len(collector.records):,}, "
                f"cancelled {len(self.ledger.cancelled):,}, "
                f"rescheduled {len(self.ledger.rescheduled):,}",
                flush=True,
            )
            try:
                await asyncio.wait_for(self.stopping.wait(), self.args.sample_s)
            except TimeoutError:
                pass


# ----- the report ---------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def by_phase(soak: Soak, records: list[dict[str, Any]]) -> list[dict[str, object]]:
    starts = [at for at, _ in soak.phases]
    first: dict[str, dict[str, Any]] = {}
    dupes: Counter[int] = Counter()
    for record in records:
        job_id = str(record["job_id"])
        if job_id in first:
            dupes[bisect.bisect_right(starts, record["received_ms"] / 1000) - 1] += 1
        else:
            first[job_id] = record
    late: dict[int, list[float]] = {}
    for record in first.values():
        index = max(0, bisect.bisect_right(starts, record["due_ms"] / 1000) - 1)
        late.setdefault(index, []).append(record["received_ms"] - record["due_ms"])
    rows = []
    for index, (at, label) in enumerate(soak.phases):
        values = late.get(index, [])
        rows.append(
            {
                "phase": label,
                "from_s": round(at - soak.began),
                "jobs": len(values),
                "p50_ms": round(percentile(values, 0.5), 1),
                "p99_ms": round(percentile(values, 0.99), 1),
                "max_ms": round(max(values, default=0.0), 1),
                "duplicates": dupes.get(index, 0),
            }
        )
    return rows


def longest_pause_ms(records: list[dict[str, Any]]) -> float:
    """The longest time in which some job was already due and not yet read, yet no
    record arrived: between two reads, from the later of the first read and the
    earliest due time among the jobs still to come."""
    first: dict[str, tuple[float, float]] = {}
    for record in records:
        first.setdefault(str(record["job_id"]), (record["received_ms"], record["due_ms"]))
    reads = sorted(first.values())
    if not reads:
        return 0.0
    earliest_due_after = [0.0] * len(reads)  # over reads[i:]
    lowest = float("inf")
    for i in range(len(reads) - 1, -1, -1):
        lowest = min(lowest, reads[i][1])
        earliest_due_after[i] = lowest
    longest = 0.0
    for i in range(1, len(reads)):
        since = max(reads[i - 1][0], earliest_due_after[i])
        longest = max(longest, reads[i][0] - since)
    return longest


def memory(soak: Soak) -> list[dict[str, object]]:
    if not soak.samples:
        return []
    first = soak.samples[min(1, len(soak.samples) - 1)]  # after the warm-up started
    last = soak.samples[-1]
    rows = []
    for name in sorted(set(first) | set(last)):
        a, b = first.get(name, {}), last.get(name, {})
        rows.append(
            {
                "process": name,
                "restarted": a.get("pid") != b.get("pid"),
                **{f"start_{k}": v for k, v in a.items() if k not in ("t", "pid")},
                **{f"end_{k}": v for k, v in b.items() if k not in ("t", "pid")},
            }
        )
    return rows


async def create_topic(settings: Settings, topic: str) -> None:
    from aiokafka.admin import NewTopic

    admin = make_admin(settings)
    await start_client(admin, settings)
    try:
        await admin.create_topics(
            [NewTopic(topic, TOPIC_PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})]
        )
    finally:
        await admin.close()


async def main(args: argparse.Namespace) -> int:
    # The clients' reconnect messages would drown the progress: the report counts
    # what the faults did to the calls.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    production.enter()
    os.environ.update(production.settings_env())
    settings = Settings.from_env()
    long_runner = production.part(LONG_RUNNER)
    if processes.running_pid(long_runner) is None:
        await asyncio.to_thread(production.start, long_runner)
    topic = f"soak.{time.strftime('%Y%m%d-%H%M%S')}"
    await create_topic(settings, topic)
    collector = Collector(settings, topic)
    await collector.start()
    redis = await open_redis(settings)
    async with DelayClient(settings) as client:
        before = set(await all_rows(client))  # jobs of earlier runs on this cluster
        soak = Soak(args, settings, topic)
        print(
            f"soak on topic {topic} for {args.minutes} min; {len(before):,} earlier jobs",
            flush=True,
        )
        async with reading(collector):
            load = [
                asyncio.create_task(soak.schedule(client)),
                asyncio.create_task(soak.change(client)),
                asyncio.create_task(soak.http()),
                asyncio.create_task(soak.ingress()),
                asyncio.create_task(soak.watch(collector)),
            ]
            fault_log = await soak.faults()
            soak.stopping.set()
            await asyncio.gather(*load)
            print(
                f"[{soak.elapsed():6.0f} s] load stopped; waiting for the last due jobs", flush=True
            )
            await asyncio.sleep(args.max_delay_s + 5)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = args.out or ROOT / "benchmarks" / "results" / f"soak-{stamp}.json"
        # What was read and done, kept before judging (which can take minutes).
        raw = {"records": collector.records, "phases": soak.phases, "faults": fault_log}
        Path(tempfile.gettempdir(), f"soak-{stamp}.raw.json").write_bytes(orjson.dumps(raw))
        result = await settle("soak", soak.ledger, collector, client, redis, timeout_s=600)
        rows = await all_rows(client)
    await redis.aclose()
    await collector.stop()
    fired = {str(r["job_id"]) for r in collector.records}
    unexpected = (fired | set(rows)) - soak.ledger.scheduled - before
    report = {
        "topic": topic,
        "minutes": args.minutes,
        "rate": args.rate,
        "verdict": {
            **result.row(),
            "unexpected": len(unexpected),
            "cancelled_but_fired": len(result.cancelled_but_fired),
            "violations": result.violations[:20],
            "lost_ids": result.lost[:20],
        },
        "ledger": {
            "scheduled": len(soak.ledger.scheduled),
            "schedule_failed": soak.ledger.schedule_failed,
            "schedule_unknown": soak.ledger.schedule_unknown,
            "cancelled": len(soak.ledger.cancelled),
            "rescheduled": len(soak.ledger.rescheduled),
            "change_failed": soak.ledger.change_failed,
        },
        "phases": by_phase(soak, collector.records),
        "longest_pause_ms": round(longest_pause_ms(collector.records), 1),
        "faults": fault_log,
        "memory": memory(soak),
        "samples": soak.samples,
    }
    Path(out).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(
        orjson.dumps(
            {k: report[k] for k in ("verdict", "ledger", "longest_pause_ms")},
            option=orjson.OPT_INDENT_2,
        ).decode()
    )
    for row in report["phases"]:
        print(row)
    for row in report["memory"]:
        print(row)
    print(f"written to {out}")
    ok = (
        not result.lost
        and result.early == 0
        and not result.cancelled_but_fired
        and not result.fired_at_old_time
        and not result.violations
        and not unexpected
    )
    return 0 if ok else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="load and faults (30)")
    parser.add_argument("--rate", type=float, default=100.0, help="client jobs/s (100)")
    parser.add_argument("--http-rate", type=float, default=2.0, help="HTTP jobs/s (2)")
    parser.add_argument("--ingress-rate", type=float, default=2.0, help="ingress jobs/s (2)")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="before the faults (60)")
    parser.add_argument("--tail-s", type=float, default=120.0, help="after the faults (120)")
    parser.add_argument("--sample-s", type=float, default=30.0, help="between samples (30)")
    parser.add_argument(
        "--max-delay-s", type=float, default=120.0, help="jobs due 1 s to this ahead (120)"
    )
    parser.add_argument("--out", type=Path, help="the JSON report (benchmarks/results/)")
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        help="only these kinds of step, comma-separated: node, redis, mysql, zookeeper, "
        "kafka, upgrade (default: all; a short run to try the soak)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    import uvloop

    sys.exit(uvloop.run(main(parse())))
