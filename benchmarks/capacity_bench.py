"""The measured inputs of docs/capacity.md: bytes and CPU per job, by process.

    python benchmarks/capacity_bench.py --jobs 200000                      # every step
    python benchmarks/capacity_bench.py --steps pending --payloads 100,1024
    python benchmarks/capacity_bench.py --steps fired,node-rss,slots-idle,spread

Steps (each on a fresh key prefix and a MySQL database of its own, dropped afterwards):

- pending: for each payload size and each way a pending job is kept (whole: its
  envelope in Redis with the payload, payload_lead_ms = 0; lean: without it, due 180-290 s
  ahead, beyond payload_lead_ms and inside redis_horizon_ms; far: due an hour ahead, in
  MySQL alone), schedules --jobs jobs with schedule_many and no node running. Reports
  Redis bytes per job ((INFO used_memory after - before) / N, and MEMORY USAGE of the
  cluster's own keys / N), MySQL bytes per row (DATA_LENGTH + INDEX_LENGTH after
  ANALYZE TABLE, and the .ibd files when the server's datadir is readable here), the
  redo log InnoDB wrote per job (Innodb_os_log_written), and the CPU per job scheduled
  of this process (the producer), Redis and MariaDB (psutil; less each one's idle rate).
- fired: one node; --jobs jobs (100-byte payload) due evenly at --rate per second.
  --paths near: due within seconds of scheduling (whole envelopes, the benchmarks'
  usual load); far: due beyond the Redis horizon, so each is loaded from MySQL by the
  node's reconciler and its payload by the filler before it fires (the horizon and lead
  shortened to 20 s and 5 s so the run is short). From the first schedule_many until
  every job is fired and recorded (and of the scheduling alone): CPU per job by
  process, the MySQL bytes per fired job (its row and history row), the redo log per
  job, the Kafka log bytes per record on disk (when the broker's log folder is under
  $DELAYQ_STATE_DIR) and the node's largest RSS.
- node-rss: one node; its RSS once started, then after --backlog-jobs lean jobs due
  180-290 s ahead were scheduled into Redis (does a node's memory follow the backlog?).
- slots-idle: one node owning 16, 256 and 1024 slots, nothing due: CPU per second of
  the node, Redis and MariaDB (what each owned slot costs when idle).
- spread: no service; how evenly a cluster's delayq slots fall on M Redis Cluster
  masters holding equal hash-slot ranges (the largest master's share ÷ the mean).

Needs the local stack (`eval "$(delayq services env)"`), best a private one with
nothing else on it: the processes' CPU is read whole, less the idle rate measured
just before. Writes benchmarks/results/capacity-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomysql
import orjson
import psutil
import redis.asyncio as aioredis
import uvloop
from capacity_model import MASTER_COLUMNS
from capacity_model import spread as spread_factor
from cpu_share import NODE, SAMPLER, Grouper, snapshot, usage
from fire_bench import (
    bench_cluster,
    due_times,
    kafka_topic,
    key_pattern,
    key_usage,
    machine,
    redis_facts,
)

from cluster import DelayClient, Job
from cluster.model.keys import KeySpace
from cluster.settings.config import Settings
from cluster.store.sql import parse_mysql_url

RESULTS = Path(__file__).parent / "results"
PRODUCER = "producer (this process)"
IDLE_S = 5.0
SETTLE_S = 3.0
OTHER_NODES = "other stacks' delayq nodes"
# Inside redis_horizon_ms (5 min) and beyond payload_lead_ms (2 min) for the whole run.
NEAR_S = (180.0, 290.0)
FAR_S = (3600.0, 7200.0)


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ----- CPU by process ------------------------------------------------------------------


class OwnNodes(Grouper):
    """cpu_share's groups, but only this run's node processes (its children) count as
    the node: other stacks' nodes on the same machine go under OTHER_NODES."""

    def group_of(self, pid: int, cmdline: str) -> str:
        group = super().group_of(pid, cmdline)
        return OTHER_NODES if group == NODE and pid not in self.children else group

    def refresh(self) -> None:
        self.children = {child.pid for child in psutil.Process().children(recursive=True)}


class Cpu:
    """CPU seconds per process group (cpu_share's groups; this process is the producer)
    between start() and stop(), less each group's rate over IDLE_S measured first."""

    def __init__(self) -> None:
        self.grouper = OwnNodes()
        self.idle_rate: dict[str, float] = {}

    def snapshot(self) -> dict[int, tuple[str, float]]:
        self.grouper.refresh()
        return snapshot(self.grouper)

    async def idle(self) -> None:
        await asyncio.sleep(SETTLE_S)  # the database, topic or node just created
        first = self.snapshot()
        await asyncio.sleep(IDLE_S)
        self.idle_rate = {g: s / IDLE_S for g, s in usage(first, self.snapshot()).items()}

    def start(self) -> None:
        self.first, self.began = self.snapshot(), time.monotonic()

    def stop(self, jobs: int) -> dict[str, Any]:
        wall = time.monotonic() - self.began
        used = usage(self.first, self.snapshot())
        rows = {}
        for group, cpu_s in sorted(used.items(), key=lambda item: -item[1]):
            net = max(0.0, cpu_s - self.idle_rate.get(group, 0.0) * wall)
            name = PRODUCER if group == SAMPLER else group
            rows[name] = {"cpu_s": round(cpu_s, 3), "us_per_job": round(net / jobs * 1e6, 2)}
        return {"wall_s": round(wall, 2), "groups": rows}


def show_cpu(cpu: dict[str, Any]) -> None:
    for group, row in cpu["groups"].items():
        if row["us_per_job"] >= 0.5:
            log(f"    {group:<36} {row['us_per_job']:7.1f} µs/job")


# ----- MySQL ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def mysql(settings: Settings) -> AsyncIterator[aiomysql.Cursor]:
    conn = await aiomysql.connect(**parse_mysql_url(settings.mysql_url))
    try:
        async with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


async def redo_written(settings: Settings) -> int:
    """Bytes of redo log written so far (the server's; the LSN where that counter is gone)."""
    async with mysql(settings) as cur:
        for name in ("Innodb_os_log_written", "Innodb_lsn_current"):
            await cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
            row = await cur.fetchone()
            if row:
                return int(row[1])
        return 0


async def table_sizes(settings: Settings) -> dict[str, Any]:
    """Rows and bytes of the job and history tables (one database: mysql_databases 1):
    DATA_LENGTH + INDEX_LENGTH after ANALYZE TABLE, and the .ibd files if readable."""
    async with mysql(settings) as cur:
        await cur.execute("SELECT DATABASE(), @@datadir")
        database, datadir = await cur.fetchone()
        await cur.execute("SHOW TABLES")
        tables = [t for (t,) in await cur.fetchall()]
        sizes: dict[str, Any] = {}
        for kind in ("job", "job_history"):
            mine = [t for t in tables if re.fullmatch(rf"{kind}_\d{{4}}", t)]
            rows = data = index = files = 0
            for table in mine:
                await cur.execute(f"ANALYZE TABLE `{table}`")
                await cur.fetchall()
                await cur.execute(f"SELECT COUNT(*) FROM `{table}`")
                rows += (await cur.fetchone())[0]
                await cur.execute(
                    "SELECT data_length, index_length FROM information_schema.tables"
                    " WHERE table_schema = DATABASE() AND table_name = %s",
                    (table,),
                )
                lengths = await cur.fetchone()
                data, index = data + int(lengths[0]), index + int(lengths[1])
                with contextlib.suppress(OSError):
                    files += (Path(datadir) / database / f"{table}.ibd").stat().st_size
            sizes[kind] = {
                "rows": rows,
                "data_bytes": data,
                "index_bytes": index,
                "data_index_bytes": data + index,
                "ibd_bytes": files,
            }
    return sizes


# ----- steps ---------------------------------------------------------------------------


async def schedule(
    settings: Settings, topic: str, dues: list[int], payload_bytes: int, batch: int
) -> float:
    """schedule_many in batches, a progress line every tenth; returns jobs per second."""
    payload = {"data": "x" * payload_bytes}
    step = max(batch, len(dues) // 10 // batch * batch)
    async with DelayClient(settings) as client:
        began = time.perf_counter()
        for first in range(0, len(dues), batch):
            await client.schedule_many(
                [Job(topic, payload, at=due / 1000) for due in dues[first : first + batch]]
            )
            if (first + batch) % step == 0:
                log(f"    scheduled {first + batch:,} of {len(dues):,}")
        return len(dues) / (time.perf_counter() - began)


def spread_dues(jobs: int, window: tuple[float, float]) -> list[int]:
    start = time.time() + window[0]
    return due_times("steady", jobs, round(start * 1000), window[1] - window[0])


async def pending_one(args: argparse.Namespace, payload: int, how: str) -> dict[str, Any]:
    base = Settings.from_env()
    if how == "whole":
        base = base.replace(payload_lead_ms=0)
    redis = aioredis.from_url(base.redis_url)
    cpu = Cpu()
    try:
        async with bench_cluster(0, base=base) as settings:
            await cpu.idle()
            memory, redo = await redis_facts(redis), await redo_written(settings)
            dues = spread_dues(args.jobs, FAR_S if how == "far" else NEAR_S)
            cpu.start()
            rate = await schedule(settings, f"bench.{settings.key_prefix}", dues, payload, 5000)
            spent = cpu.stop(args.jobs)
            redo = await redo_written(settings) - redo
            after = await redis_facts(redis)
            own_bytes, own_keys = await key_usage(redis, key_pattern(settings))
            sizes = await table_sizes(settings)
    finally:
        await redis.aclose()
    rows = sizes["job"]
    result = {
        "payload_bytes": payload,
        "kept": how,
        "jobs": args.jobs,
        "schedule_rate_per_s": round(rate),
        "redis_bytes_per_job": round((after[0] - memory[0]) / args.jobs, 1),
        "redis_own_keys_bytes_per_job": round(own_bytes / args.jobs, 1),
        "redis_own_keys": own_keys,
        "mysql_tables": sizes,
        "mysql_bytes_per_row": round(rows["data_index_bytes"] / args.jobs, 1),
        "mysql_index_bytes_per_row": round(rows["index_bytes"] / args.jobs, 1),
        "mysql_ibd_bytes_per_row": round(rows["ibd_bytes"] / args.jobs, 1),
        "redo_bytes_per_job": round(redo / args.jobs, 1),
        "cpu": spent,
    }
    log(
        f"  {how}, {payload} B payload: {rate:,.0f} jobs/s; Redis "
        f"{result['redis_bytes_per_job']} B/job; MySQL {result['mysql_bytes_per_row']} B/row "
        f"(.ibd {result['mysql_ibd_bytes_per_row']}); redo {result['redo_bytes_per_job']} B/job"
    )
    show_cpu(spent)
    return result


async def redis_left(redis: aioredis.Redis, settings: Settings) -> int:
    """Jobs of the cluster Redis still holds (delay, ready, in flight) and journal entries."""
    keys = KeySpace(settings.key_prefix)
    pipe = redis.pipeline(transaction=False)
    for slot in range(settings.slots):
        k = keys.slot(slot)
        pipe.zcard(k.delay).llen(k.ready).zcard(k.inflight).llen(k.done)
    return int(sum(await pipe.execute()))


def node_pids() -> list[int]:
    return [
        child.pid
        for child in psutil.Process().children()
        if "cluster.cli.main" in " ".join(child.cmdline())
    ]


def rss_mib(pids: list[int]) -> float:
    return sum(psutil.Process(pid).memory_info().rss for pid in pids) / 2**20


def topic_log_bytes(topic: str) -> int:
    state = Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq"))
    return sum(
        f.stat().st_size
        for folder in state.glob(f"kafka*/data/{topic}-*")
        for f in folder.glob("*.log")
    )


# The far path with short times: jobs due beyond the horizon, loaded by the node's
# reconciler from half of it ahead, stored lean and filled by the filler before firing.
FAR_PATH = {"redis_horizon_ms": 20_000, "payload_lead_ms": 5_000}


async def fired_count(settings: Settings) -> int:
    async with mysql(settings) as cur:
        await cur.execute("SHOW TABLES")
        tables = [t for (t,) in await cur.fetchall() if re.fullmatch(r"job_\d{4}", t)]
        count = 0
        for table in tables:
            await cur.execute(f"SELECT COUNT(*) FROM `{table}` WHERE status = 2")
            count += (await cur.fetchone())[0]
        return count


async def fired(args: argparse.Namespace, path: str) -> dict[str, Any]:
    """CPU per job from the first schedule_many until every job is fired and recorded
    (scheduled and fired: the firing may begin before the scheduling ends on a busy
    machine), and of the scheduling alone: near = due within seconds (whole envelopes,
    the benchmarks' usual load); far = each job loaded from MySQL and filled before it
    fires (FAR_PATH)."""
    base = Settings.from_env()
    lead = 10 + args.jobs / 8000
    if path == "far":
        base, lead = base.replace(**FAR_PATH), 25 + args.jobs / 8000
    redis = aioredis.from_url(base.redis_url)
    cpu = Cpu()
    try:
        async with bench_cluster(1, base=base) as settings:
            topic = f"bench.{settings.key_prefix}"
            async with kafka_topic(settings, topic):
                await cpu.idle()
                dues = spread_dues(args.jobs, (lead, lead + args.jobs / args.rate))
                log(f"  scheduling {args.jobs:,} jobs due at {args.rate:,}/s from {lead:.0f} s")
                redo, peak, done = await redo_written(settings), 0.0, 0
                cpu.start()
                rate = await schedule(settings, topic, dues, 100, 5000)
                scheduling = cpu.stop(args.jobs)
                deadline = dues[-1] / 1000 + 120
                while time.time() < deadline:
                    left = await redis_left(redis, settings)
                    peak = max(peak, rss_mib(node_pids()))
                    if time.time() > dues[-1] / 1000 and not left:
                        done = await fired_count(settings)
                        if done >= args.jobs:
                            break
                    log(f"    {left:,} jobs or outcomes in Redis")
                    await asyncio.sleep(1.0)
                spent = cpu.stop(args.jobs)
                redo = await redo_written(settings) - redo
                sizes = await table_sizes(settings)
                kafka_bytes = topic_log_bytes(topic)
    finally:
        await redis.aclose()
    stored = sizes["job"]["data_index_bytes"] + sizes["job_history"]["data_index_bytes"]
    result = {
        "path": path,
        "settings": FAR_PATH if path == "far" else {},
        "jobs": args.jobs,
        "fired_and_recorded": done,
        "rate_due_per_s": args.rate,
        "schedule_rate_per_s": round(rate),
        "mysql_tables": sizes,
        "mysql_bytes_per_fired_job": round(stored / args.jobs, 1),
        "redo_bytes_per_job": round(redo / args.jobs, 1),
        "kafka_log_bytes_per_record": round(kafka_bytes / args.jobs, 1),
        "node_rss_peak_mib": round(peak, 1),
        "cpu_scheduling": scheduling,
        "cpu": spent,
    }
    log(
        f"  fired ({path}): {done:,} recorded; MySQL {result['mysql_bytes_per_fired_job']} B/job "
        f"(row + history); redo {result['redo_bytes_per_job']} B/job; Kafka "
        f"{result['kafka_log_bytes_per_record']} B/record; node RSS peak {peak:.0f} MiB"
    )
    show_cpu(spent)
    return result


async def node_rss(args: argparse.Namespace) -> dict[str, Any]:
    redis = aioredis.from_url(Settings.from_env().redis_url)
    try:
        async with bench_cluster(1) as settings:
            await asyncio.sleep(5)
            pids = node_pids()
            before, memory = rss_mib(pids), await redis_facts(redis)
            log(f"  node RSS {before:.1f} MiB; scheduling {args.backlog_jobs:,} lean jobs")
            dues = spread_dues(args.backlog_jobs, NEAR_S)
            await schedule(settings, f"bench.{settings.key_prefix}", dues, 100, 5000)
            await asyncio.sleep(15)
            after, filled = rss_mib(pids), await redis_facts(redis)
    finally:
        await redis.aclose()
    log(f"  node RSS {after:.1f} MiB with the backlog")
    return {
        "backlog_jobs": args.backlog_jobs,
        "node_rss_mib_before": round(before, 1),
        "node_rss_mib_with_backlog": round(after, 1),
        "redis_used_memory_mib_added": round((filled[0] - memory[0]) / 2**20, 1),
    }


async def slots_idle(args: argparse.Namespace) -> list[dict[str, Any]]:
    found = []
    for slots in (16, 256, 1024):
        base = Settings.from_env().replace(slots=slots)
        async with bench_cluster(1, base=base):
            await asyncio.sleep(10 + slots / 32)  # taking the slots, their first passes
            cpu = Cpu()
            cpu.start()
            await asyncio.sleep(args.idle_s)
            spent = cpu.stop(1)
        per_s = {
            group: round(row["cpu_s"] / spent["wall_s"] * 1000, 1)
            for group, row in spent["groups"].items()
            if group in ("delayq node", "Redis", "MariaDB")
        }
        log(f"  {slots} slots, idle: CPU ms per second {per_s}")
        found.append({"slots": slots, "cpu_ms_per_s": per_s})
    return found


def spread() -> list[dict[str, Any]]:
    """Largest master's delayq slots ÷ the mean, masters holding equal hash-slot ranges
    (as redis-cli --cluster create splits them), for the default prefix `dq`."""
    found = []
    for slots in (16, 64, 256, 1024, 4096):
        row: dict[str, Any] = {"slots": slots}
        for masters in MASTER_COLUMNS:
            if masters <= slots:
                row[str(masters)] = round(spread_factor(slots, masters), 2)
        found.append(row)
        log(f"  spread {row}")
    return found


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine(), "started": time.strftime("%F %T %Z")}
    if "pending" in args.steps:
        result["pending"] = []
        for payload in args.payloads:
            for how in ("whole", "lean", "far"):
                log(f"pending: {how}, {payload}-byte payload, {args.jobs:,} jobs")
                result["pending"].append(await pending_one(args, payload, how))
    if "fired" in args.steps:
        result["fired"] = []
        for path in args.paths:
            log(f"fired ({path}): {args.jobs:,} jobs at {args.rate:,}/s, one node")
            result["fired"].append(await fired(args, path))
    if "node-rss" in args.steps:
        log("node-rss")
        result["node_rss"] = await node_rss(args)
    if "slots-idle" in args.steps:
        log("slots-idle")
        result["slots_idle"] = await slots_idle(args)
    if "spread" in args.steps:
        result["spread"] = spread()
    return result


STEPS = ("pending", "fired", "node-rss", "slots-idle", "spread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default=",".join(STEPS), help=f"of {','.join(STEPS)}")
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs per pending/fired run")
    parser.add_argument("--payloads", default="100,1024", help="payload sizes for pending")
    parser.add_argument("--rate", type=int, default=10_000, help="fired: jobs due per second")
    parser.add_argument("--paths", default="near,far", help="fired: near, far or both")
    parser.add_argument("--backlog-jobs", type=int, default=500_000, help="node-rss backlog")
    parser.add_argument("--idle-s", type=float, default=20.0, help="slots-idle: seconds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}; choose from {','.join(STEPS)}")
    args.payloads = [int(p) for p in args.payloads.split(",")]
    args.paths = [p for p in args.paths.split(",") if p]
    if set(args.paths) - {"near", "far"}:
        parser.error("--paths takes near, far or near,far")
    result = uvloop.run(run(args))
    result["command"] = " ".join(["python", "benchmarks/capacity_bench.py", *sys.argv[1:]])
    path = args.out or RESULTS / f"capacity-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    log(f"written to {path}")


if __name__ == "__main__":
    main()
