"""N jobs due over a window: schedule rate, fire rate, lateness at a Kafka consumer.

    python benchmarks/fire_bench.py --jobs 100000 --window 10 [--nodes 1]

Starts its own `delayq node` process(es) on a fresh key prefix, schedules the jobs with
schedule_many (MySQL + Redis), and reads every fired record from Kafka in this
process. Lateness is receive time − due time, measured at the consumer; "node
lateness" is fired_ms (Redis clock at claim) − due_ms. Prints a summary and writes a
JSON result to benchmarks/results/. Needs the local stack and a migrated database.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import uvloop
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from cluster.client import DelayClient, Job
from cluster.config import Settings
from cluster.mysql_store import create_cluster_database, drop_cluster_database

PARTITIONS = 6
RESULTS = Path(__file__).parent / "results"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def start_nodes(
    count: int, settings: Settings, log_dir: Path
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "DELAYQ_KEY_PREFIX": settings.key_prefix,
           "DELAYQ_MYSQL_URL": settings.mysql_url}
    nodes = []
    for i in range(count):
        log = (log_dir / f"bench-node-{i}.log").open("wb")
        nodes.append(subprocess.Popen(
            [sys.executable, "-m", "cluster.cli", "--log-level", "INFO", "node"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        ))
    return nodes


async def wait_started(log_dir: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(b"started:" in (log_dir / f"bench-node-{i}.log").read_bytes()
               for i in range(count)):
            return
        await asyncio.sleep(0.1)
    sys.exit(f"nodes did not start; see {log_dir}/bench-node-*.log")


async def run(args: argparse.Namespace) -> dict[str, object]:
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    # A cluster of its own: its key prefix and a MySQL database of its own.
    settings = await create_cluster_database(
        Settings.from_env().replace(key_prefix=prefix), f"delayq_{prefix}"
    )
    topic = f"bench.{prefix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                                fetch_max_wait_ms=5, max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

    log_dir = Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq"))
    log_dir.mkdir(parents=True, exist_ok=True)
    nodes = start_nodes(args.nodes, settings, log_dir)
    try:
        await wait_started(log_dir, args.nodes)
        lead_s = args.lead if args.lead is not None else 3 + args.jobs / 15000
        rng = random.Random(1)
        first_due = time.time() + lead_s
        if args.pattern == "steady":  # one every window/jobs seconds, as the peers do
            dues = [first_due + i * args.window / args.jobs for i in range(args.jobs)]
        else:
            dues = sorted(first_due + rng.uniform(0, args.window) for _ in range(args.jobs))
        payload = {"data": "x" * args.payload_bytes}
        received: list[tuple[float, dict[str, object]]] = []
        consuming = asyncio.create_task(consume(consumer, received, args.jobs,
                                                first_due + args.window + 120))
        async with DelayClient(settings) as client:
            t0 = time.perf_counter()
            for start in range(0, args.jobs, args.batch):
                await client.schedule_many([
                    Job(topic, payload, at=due) for due in dues[start : start + args.batch]
                ])
            schedule_s = time.perf_counter() - t0
        scheduled_done = time.time()
        await consuming
    finally:
        for node in nodes:
            node.send_signal(signal.SIGTERM)
        for node in nodes:
            node.wait(timeout=60)
        await consumer.stop()
        await drop_cluster_database(settings)

    late = sorted(r_ms - float(rec["due_ms"]) for r_ms, rec in received)  # type: ignore
    node_late = sorted(float(rec["fired_ms"]) - float(rec["due_ms"])  # type: ignore
                       for _, rec in received)
    ids = [rec["job_id"] for _, rec in received]
    fired_ms = sorted(float(rec["fired_ms"]) for _, rec in received)  # type: ignore
    span_s = (fired_ms[-1] - fired_ms[0]) / 1000 if len(fired_ms) > 1 else float("nan")
    return {
        "benchmark": "fire_bench",
        "jobs": args.jobs,
        "window_s": args.window,
        "nodes": args.nodes,
        "received": len(received),
        "unique": len(set(ids)),
        "early": sum(1 for v in node_late if v < 0),
        "schedule_rate_per_s": round(args.jobs / schedule_s),
        "scheduling_finished_before_first_due": scheduled_done < first_due,
        "fire_rate_per_s": round(len(received) / span_s) if span_s == span_s else None,
        "lateness_ms": {q: round(percentile(late, p), 1)
                        for q, p in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))}
        | {"max": round(late[-1], 1) if late else None},
        "node_lateness_ms": {q: round(percentile(node_late, p), 1)
                             for q, p in (("p50", 0.5), ("p99", 0.99))}
        | {"max": round(node_late[-1], 1) if node_late else None},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "command": " ".join(["python", "benchmarks/fire_bench.py", *sys.argv[1:]]),
    }


async def consume(consumer: AIOKafkaConsumer, out: list[tuple[float, dict[str, object]]],
                  expected: int, give_up_at: float) -> None:
    while len(out) < expected and time.time() < give_up_at:
        batch = await consumer.getmany(timeout_ms=100, max_records=10000)
        now_ms = time.time() * 1000
        for messages in batch.values():
            for message in messages:
                out.append((now_ms, orjson.loads(message.value)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--window", type=float, default=10.0, help="seconds the dues span")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--batch", type=int, default=5000, help="jobs per schedule_many")
    parser.add_argument("--pattern", choices=["uniform", "steady"], default="uniform",
                        help="due times uniformly random over the window, or evenly spaced")
    parser.add_argument("--payload-bytes", type=int, default=80,
                        help="size of the string in each job's payload")
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from start to first due (default 3 + jobs/15000)")
    args = parser.parse_args()
    result = uvloop.run(run(args))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"fire_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    print(f"written to {path}")
    if result["received"] != args.jobs or result["early"]:
        sys.exit("some jobs were missing or early")


if __name__ == "__main__":
    main()
