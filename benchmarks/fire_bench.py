"""N jobs due over a window: schedule rate, fire rate, lateness at a Kafka consumer.

    python benchmarks/fire_bench.py --jobs 100000 --window 10 [--nodes 1]
    python benchmarks/fire_bench.py --jobs 1000000 --pattern burst --nodes 2
    python benchmarks/fire_bench.py --jobs 1000000 --backlog [--nodes 0]
    python benchmarks/fire_bench.py --jobs 50000 --window 10 --pattern steady --stages

Starts its own `delayq node` process(es) on a fresh key prefix and a MySQL database of
its own, schedules the jobs with schedule_many (MySQL + Redis), and reads every fired
record from Kafka in this process; at the end the topic, the database and the keys
are deleted. Due-time patterns: uniform (random over the window),
steady (evenly spaced over the window), burst (evenly spaced within one second).

Lateness is receive time − due time, measured at the consumer; "node lateness" is
fired_ms (Redis clock at claim) − due_ms. The run waits until every job is received or
--give-up seconds after the last due time, and then reports the missing count. Jobs
the live consumer missed (the local broker can make a record visible out of order) are
looked for by re-reading the topic: they count as received (reread_found), but having
no live receive time they stay out of the lateness, series, peak and drain numbers,
which are those of benchmarks/summary.py; node lateness covers them.

--backlog schedules the jobs an hour ahead (spread over an hour), fires nothing, and
reports the Redis bytes per pending job: (INFO used_memory after − before) / N, with
--nodes node processes holding the slots (0: the client alone), and beside it the
MEMORY USAGE of the cluster's own keys / N, which other clients of the Redis cannot
disturb. MySQL is not counted in either (its approximate table size is reported).
used_memory is read again once the keys are deleted.

--caller-ids gives every job an id of its own (order-<run>-<n>-close), as most users do;
by default schedule_many generates them.

--delivery exactly_once runs the nodes with delivery = "exactly_once" (DELAYQ_DELIVERY:
each slot's records in Kafka transactions, actors/transactions.py; it needs a broker
with transactions, Apache Kafka) and reads the topic, the live consumer and any re-read
alike, with isolation_level="read_committed", as such a node's consumers must; the
nodes then serve /metrics, and the result has their transactions' counters. The default
is the environment's delivery (at_least_once), read with read_uncommitted.

The benchmark's topic has six partitions, replication factor min(brokers, 3) and, on
three brokers or more, min.insync.replicas 2 (so DELAYQ_KAFKA_BOOTSTRAP naming a
three-broker cluster gives the replicated setup; benchmarks/kafka_brokers.py starts
one). The nodes' log lines of this run at WARNING and above, and their final counters,
are in the result ("node_logs").

--stages serves each node's /metrics on a free local port and scrapes it once every
job has arrived; the result's "stages" are p50/p99 of each stage a job passes: from the
node's histograms (actors/metrics.py: move = due → moved, claim = moved → claimed,
publish = claimed → broker ack, and the fire lateness due → broker ack; interpolated
within their buckets as histogram_quantile does, cluster/observe/snapshot.py) and from the
records (fired_ms, the record's Kafka timestamp and the receive time, each − due).

Prints a summary and writes a JSON result to benchmarks/results/ (or --out). Needs the
local stack and a migrated database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import os
import platform
import random
import sys
import time
import urllib.request
import uuid
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomysql
import orjson
import redis.asyncio as aioredis
import uvloop
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families
from summary import percentile, summarize

from cluster import DelayClient, Job
from cluster.cli.progress import counting, progress_bar
from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.nodes import NodeProcess, free_port
from cluster.observe.snapshot import Buckets, merge_buckets, quantile
from cluster.settings.config import DELIVERY_MODES, SECRET_SETTINGS, Settings
from cluster.store.sql import parse_mysql_url

PARTITIONS = 6
RESULTS = Path(__file__).parent / "results"
DUE_FIELD = b'"due_ms":'
FIRED_FIELD = b'"fired_ms":'
# Starts a consumer of every partition of the benchmark's topic, from the beginning.
Reopen = Callable[[], Awaitable[AIOKafkaConsumer]]


@dataclass
class Received:
    """What the consumer saw: one entry per job, plus the distinct job ids. Records
    only a re-read found have no live receive time and are kept apart; a record the
    live consumer delivers after a re-read found it is counted once, as read again
    (reread_then_live), not as a duplicate: duplicates are records the live consumer
    delivered twice.
    publish_ms is the record's Kafka timestamp: set by the node's producer when it
    appended the record, i.e. when delayq fired the job, whenever the consumer got it."""

    receive_ms: array[float] = field(default_factory=lambda: array("d"))
    due_ms: array[float] = field(default_factory=lambda: array("d"))
    fired_ms: array[float] = field(default_factory=lambda: array("d"))
    publish_ms: array[float] = field(default_factory=lambda: array("d"))
    reread_due_ms: array[float] = field(default_factory=lambda: array("d"))
    reread_fired_ms: array[float] = field(default_factory=lambda: array("d"))
    reread_publish_ms: array[float] = field(default_factory=lambda: array("d"))
    ids: set[bytes] = field(default_factory=set)
    live_ids: set[bytes] = field(default_factory=set)
    duplicates: int = 0
    reread_then_live: int = 0

    def add(self, messages: Iterable[ConsumerRecord[bytes, bytes]], now_ms: float) -> None:
        for message in messages:
            if message.key in self.ids:
                if message.key in self.live_ids:
                    self.duplicates += 1
                else:  # a re-read found it first; the live consumer got there later
                    self.live_ids.add(message.key)
                    self.reread_then_live += 1
                continue
            self.live_ids.add(message.key)
            due, fired = due_and_fired(message.value)
            self.receive_ms.append(now_ms)
            self.due_ms.append(due)
            self.fired_ms.append(fired)
            self.publish_ms.append(message.timestamp)
            self.ids.add(message.key)

    def add_missed(self, messages: Iterable[ConsumerRecord[bytes, bytes]]) -> None:
        for message in messages:
            if message.key not in self.ids:
                due, fired = due_and_fired(message.value)
                self.reread_due_ms.append(due)
                self.reread_fired_ms.append(fired)
                self.reread_publish_ms.append(message.timestamp)
                self.ids.add(message.key)


# ----- the cluster under test ----------------------------------------------------------


def start_nodes(
    count: int, settings: Settings, log_dir: Path, metrics_ports: list[int]
) -> list[NodeProcess]:
    """`count` node processes; node i serves /metrics on metrics_ports[i] if given."""
    return [
        NodeProcess(
            f"bench-node-{i}",
            log_dir,
            settings=settings.replace(metrics_port=metrics_ports[i], metrics_host="127.0.0.1")
            if metrics_ports
            else settings,
            log_level="INFO",
        )
        for i in range(count)
    ]


async def wait_started(nodes: list[NodeProcess]) -> None:
    for node in nodes:
        await node.wait_ready(timeout_s=60)


async def stop_nodes(nodes: list[NodeProcess]) -> None:
    await asyncio.gather(*(node.stop(timeout_s=60) for node in nodes))


@contextlib.asynccontextmanager
async def bench_cluster(
    nodes: int,
    metrics_ports: list[int] | None = None,
    delivery: str | None = None,
    logs: dict[str, Any] | None = None,
    base: Settings | None = None,
) -> AsyncIterator[Settings]:
    """A cluster of its own (key prefix, MySQL database) with `nodes` node processes
    (serving /metrics on metrics_ports, one each, if given; with `delivery`, if given,
    else the environment's); on the way out the nodes are stopped, the database dropped,
    the keys deleted, and what the nodes logged meanwhile is summed up into `logs`.
    `base` (default: the environment's settings) gives the rest, e.g. the MySQL servers."""
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    base = (base or Settings.from_env()).replace(key_prefix=prefix)
    if delivery is not None:
        base = base.replace(delivery=delivery)
    settings = await create_cluster_database(base, f"delayq_{prefix}")
    log_dir = Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq"))
    log_dir.mkdir(parents=True, exist_ok=True)
    # The node logs are appended to: remember where this run's lines begin.
    offsets = {i: log_size(log_dir / f"bench-node-{i}.log") for i in range(nodes)}
    procs = start_nodes(nodes, settings, log_dir, metrics_ports or [])
    try:
        await wait_started(procs)
        yield settings
    finally:
        await stop_nodes(procs)
        if logs is not None:
            logs.update(node_log_summary(log_dir, offsets))
        await drop_cluster_database(settings)
        redis = await open_redis(settings)  # a Redis Cluster too
        try:
            await delete_keys(redis, key_pattern(settings))
        finally:
            await redis.aclose()


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


LOG_LEVELS = (" WARNING ", " ERROR ", " CRITICAL ")
FINAL_COUNTERS = "final counters: "


def node_log_summary(log_dir: Path, offsets: dict[int, int]) -> dict[str, Any]:
    """Per node of this run: how many lines it logged at WARNING, ERROR and CRITICAL
    (the first few of them) and its final counters (actors/node.py logs them on stop)."""
    summary: dict[str, Any] = {}
    for i, offset in offsets.items():
        path = log_dir / f"bench-node-{i}.log"
        try:
            with path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            continue
        lines = text.splitlines()
        flagged = [line for line in lines if any(level in line for level in LOG_LEVELS)]
        counters = next(
            (
                line.split(FINAL_COUNTERS, 1)[1]
                for line in reversed(lines)
                if FINAL_COUNTERS in line
            ),
            None,
        )
        summary[f"bench-node-{i}"] = {
            "log": str(path),
            "lines": len(lines),
            **{level.strip().lower(): sum(level in line for line in lines) for level in LOG_LEVELS},
            "first_flagged": flagged[:5],
            "final_counters": counters,
        }
    return summary


@dataclass(frozen=True)
class TopicLayout:
    """How the benchmark's topic is replicated: by the number of brokers."""

    brokers: int
    replication: int
    min_insync: int | None  # None: the broker's default


async def topic_layout(settings: Settings) -> TopicLayout:
    admin = make_admin(settings)
    await start_client(admin, settings)
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
    finally:
        await admin.close()
    return TopicLayout(brokers, min(brokers, 3), 2 if brokers >= 3 else None)


@contextlib.asynccontextmanager
async def kafka_topic(settings: Settings, topic: str) -> AsyncIterator[TopicLayout]:
    """A fresh topic of PARTITIONS partitions, replication factor min(brokers, 3) and,
    on three brokers or more, min.insync.replicas 2; deleted afterwards."""
    layout = await topic_layout(settings)
    configs = {} if layout.min_insync is None else {"min.insync.replicas": str(layout.min_insync)}
    admin = make_admin(settings)
    await start_client(admin, settings)
    try:
        reply = await admin.create_topics(
            [NewTopic(topic, PARTITIONS, layout.replication, topic_configs=configs)]
        )
        failed = [error for error in reply.topic_errors if error[1]]
        if failed:
            raise RuntimeError(f"creating the topic {topic}: {failed}")
        yield layout
    finally:
        with contextlib.suppress(Exception):
            await admin.delete_topics([topic])
        await admin.close()


# ----- scheduling ----------------------------------------------------------------------


def due_times(pattern: str, jobs: int, first_due_ms: int, window_s: float) -> list[int]:
    """Due times in epoch ms, ascending."""
    if pattern == "uniform":
        rng = random.Random(1)
        return sorted(first_due_ms + round(rng.uniform(0, window_s * 1000)) for _ in range(jobs))
    window_ms = 1000 if pattern == "burst" else round(window_s * 1000)
    return [first_due_ms + i * window_ms // jobs for i in range(jobs)]


async def schedule_all(
    settings: Settings,
    topic: str,
    dues: list[int],
    batch: int,
    payload_bytes: int,
    caller_ids: bool = False,
    scheduled: Callable[[int], None] = lambda count: None,
) -> float:
    """Schedule one job per due time with schedule_many; returns the jobs per second.
    scheduled(n) is told each batch of n jobs stored (the progress bar).
    With caller_ids each job carries its own idempotent id, as most users' jobs do
    (order-<run>-<n>-close, the run being the cluster's fresh key prefix); without,
    schedule_many generates them."""
    payload = {"data": "x" * payload_bytes}
    run = settings.key_prefix
    async with DelayClient(settings) as client:
        t0 = time.perf_counter()
        for start in range(0, len(dues), batch):
            await client.schedule_many(
                [
                    Job(
                        topic,
                        payload,
                        at=due / 1000,
                        job_id=f"order-{run}-{i}-close" if caller_ids else None,
                    )
                    for i, due in enumerate(dues[start : start + batch], start)
                ]
            )
            scheduled(len(dues[start : start + batch]))
        return len(dues) / (time.perf_counter() - t0)


# ----- consuming -----------------------------------------------------------------------


RATE_KEYS = (
    "mean_fire_rate_per_s",
    "drain_s",
    "drain_fire_rate_per_s",
    "peak_fire_rate_per_s",
    "series",
)


def due_and_fired(value: bytes) -> tuple[int, int]:
    """due_ms and fired_ms of a fired record: the dispatcher ends every record with
    `,"due_ms":D,"fired_ms":F,"attempt":A}`; anything else is parsed in full."""
    _, due, fired, _ = value.rsplit(b",", 3)
    if due.startswith(DUE_FIELD) and fired.startswith(FIRED_FIELD):
        return int(due[len(DUE_FIELD) :]), int(fired[len(FIRED_FIELD) :])
    record = orjson.loads(value)
    return int(record["due_ms"]), int(record["fired_ms"])


async def consume(
    consumer: AIOKafkaConsumer,
    reopen: Reopen,
    out: Received,
    expected: int,
    last_due_s: float,
    give_up_at: float,
    received: Callable[[int], None] = lambda count: None,
) -> None:
    """Read records until `expected` distinct jobs arrived or the give-up time passed.
    The receive time is when getmany handed over the batch.

    A live consumer can miss a record the local broker made visible out of order (as
    tests/conftest.py's collector notes), so once every job is due and a poll comes
    back empty while jobs are missing, the topic is re-read from the beginning, at
    growing intervals, up to the live consumer's positions: only records it has passed
    without receiving them count (a record beyond them is not missed, only not read
    yet: with read_committed, polls come back empty while transactions are open). What
    that finds counts as received (reread_found) but has no live receive time, so it
    stays out of the lateness and fire-rate numbers."""
    reread_every_s, last_reread = 2.0, time.monotonic()
    while len(out.ids) < expected and time.time() < give_up_at:
        batch = await consumer.getmany(timeout_ms=100, max_records=100_000)
        for messages in batch.values():
            out.add(messages, time.time() * 1000)
        received(len(out.ids))  # the progress bar: distinct jobs received so far
        if (
            not batch
            and time.time() > last_due_s + 1
            and time.monotonic() - last_reread > reread_every_s
        ):
            await reread(reopen, out, await positions(consumer))
            reread_every_s, last_reread = reread_every_s * 2, time.monotonic()


async def positions(consumer: AIOKafkaConsumer) -> dict[TopicPartition, int]:
    """The live consumer's position in each partition: the offset of the next record it
    would hand over; every record below it was handed over or passed."""
    return {tp: await consumer.position(tp) for tp in consumer.assignment()}


async def reread(reopen: Reopen, out: Received, upto: dict[TopicPartition, int]) -> None:
    """Read the topic from the beginning with a fresh consumer, up to the live
    consumer's positions `upto`; add the jobs below them not seen yet."""
    consumer = await reopen()

    async def behind() -> bool:
        return any([await consumer.position(tp) < end for tp, end in upto.items()])

    try:
        while await behind() and (
            batch := await consumer.getmany(timeout_ms=500, max_records=100_000)
        ):
            for tp, messages in batch.items():
                out.add_missed(m for m in messages if m.offset < upto.get(tp, 0))
    finally:
        await consumer.stop()


def isolation_of(delivery: str) -> str:
    """The isolation level a consumer of records published this way reads with."""
    return "read_committed" if delivery == "exactly_once" else "read_uncommitted"


async def start_consumer(
    settings: Settings, topic: str, isolation_level: str = "read_uncommitted"
) -> AIOKafkaConsumer:
    consumer = make_consumer(
        settings,
        fetch_max_wait_ms=5,
        max_partition_fetch_bytes=1 << 20,
        isolation_level=isolation_level,
    )
    await start_client(consumer, settings)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    await consumer.seek_to_beginning()
    return consumer


# ----- where the lateness goes ---------------------------------------------------------

# The node's histograms (actors/metrics.py), in the order a job passes them: the
# metric's stage label (or "ack" for delayq_fire_lateness_seconds) and the row's name.
NODE_STAGES = (
    ("move", "due → moved (node: move)"),
    ("claim", "moved → claimed (node: claim)"),
    ("publish", "claimed → broker ack (node: publish)"),
    ("ack", "due → broker ack (node: lateness)"),
)


def read_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
    return text


async def scrape(ports: list[int]) -> list[str]:
    """Every node's /metrics, once."""
    return list(await asyncio.gather(*(asyncio.to_thread(read_metrics, port) for port in ports)))


# Counters of the nodes worth keeping in the result (summed over the nodes; a labelled
# one as name{label="value"}): the exactly-once mode's transactions among them.
COUNTERS = (
    "delayq_transactions_total",
    "delayq_jobs_found_committed_total",
    "delayq_jobs_fired_total",
    "delayq_publish_failures_total",
    "delayq_jobs_retried_total",
    "delayq_fenced_total",
)


def node_counters(texts: list[str]) -> dict[str, float]:
    found: dict[str, float] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in COUNTERS:
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                name = f"{sample.name}{{{labels}}}" if labels else sample.name
                found[name] = found.get(name, 0.0) + sample.value
    return found


def stage_buckets(texts: list[str]) -> dict[str, Buckets]:
    """Cumulative buckets of delayq_stage_seconds per stage and of
    delayq_fire_lateness_seconds ("ack", every topic), summed over the nodes."""
    found: dict[str, Buckets] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "delayq_stage_seconds_bucket":
                    stage = sample.labels["stage"]
                elif sample.name == "delayq_fire_lateness_seconds_bucket":
                    stage = "ack"
                else:
                    continue
                found.setdefault(stage, []).append((float(sample.labels["le"]), sample.value))
    # merge_buckets sums the counts of equal bounds: the nodes' and the topics' series.
    return {stage: merge_buckets([pairs]) for stage, pairs in found.items()}


def stage_rows(buckets: dict[str, Buckets], got: Received) -> list[dict[str, Any]]:
    """p50/p99 (ms) of each stage a job passes: from the nodes' histograms (interpolated
    within buckets as histogram_quantile does) and from the records' own times."""
    rows = []
    for stage, name in NODE_STAGES:
        series = buckets.get(stage, [])
        p50, p99 = quantile(0.5, series), quantile(0.99, series)
        rows.append(
            {
                "stage": name,
                "source": "node metrics",
                "jobs": round(series[-1][1]) if series else 0,
                "p50_ms": None if p50 is None else round(p50 * 1000, 1),
                "p99_ms": None if p99 is None else round(p99 * 1000, 1),
            }
        )
    live_fired = [f - d for f, d in zip(got.fired_ms, got.due_ms, strict=True)]
    live_published = [p - d for p, d in zip(got.publish_ms, got.due_ms, strict=True)]
    received = [r - d for r, d in zip(got.receive_ms, got.due_ms, strict=True)]
    for name, values in (
        ("due → claimed (records: fired_ms, Redis clock)", live_fired),
        ("due → appended to a batch (records: Kafka timestamp)", live_published),
        ("due → received (records: at the consumer)", received),
    ):
        values.sort()
        rows.append(
            {
                "stage": name,
                "source": "records",
                "jobs": len(values),
                "p50_ms": round(percentile(values, 0.5), 1) if values else None,
                "p99_ms": round(percentile(values, 0.99), 1) if values else None,
            }
        )
    return rows


# ----- the two modes -------------------------------------------------------------------


async def run_fire(args: argparse.Namespace) -> dict[str, Any]:
    window_s = 1.0 if args.pattern == "burst" else args.window
    lead_s = args.lead if args.lead is not None else 3 + args.jobs / 15000
    give_up_s = args.give_up if args.give_up is not None else 120 + args.jobs / 1000
    received = Received()
    delivery = args.delivery or Settings.from_env().delivery
    isolation = isolation_of(delivery)
    # exactly_once: the nodes serve /metrics too, for their transactions' counters.
    serve_metrics = args.stages or delivery == "exactly_once"
    ports = [free_port() for _ in range(args.nodes)] if serve_metrics else []
    stages: dict[str, Buckets] = {}
    counters: dict[str, float] = {}
    logs: dict[str, Any] = {}
    async with bench_cluster(args.nodes, ports, delivery, logs) as settings:
        topic = f"bench.{settings.key_prefix}"
        async with kafka_topic(settings, topic) as layout:
            reopen = functools.partial(start_consumer, settings, topic, isolation)
            consumer = await reopen()
            try:
                first_due_ms = round((time.time() + lead_s) * 1000)
                dues = due_times(args.pattern, args.jobs, first_due_ms, window_s)
                with progress_bar() as bar:  # on a terminal: scheduled and fired so far
                    storing = bar.add_task("scheduled", total=args.jobs)
                    firing = bar.add_task("fired", total=args.jobs)
                    consuming = asyncio.create_task(
                        consume(
                            consumer,
                            reopen,
                            received,
                            args.jobs,
                            dues[-1] / 1000,
                            dues[-1] / 1000 + give_up_s,
                            lambda count: bar.update(firing, completed=count),
                        )
                    )
                    rate = await schedule_all(
                        settings,
                        topic,
                        dues,
                        args.batch,
                        args.payload_bytes,
                        args.caller_ids,
                        lambda count: bar.advance(storing, count),
                    )
                    added_in_time = time.time() * 1000 < first_due_ms
                    await consuming
            finally:
                await consumer.stop()
        if ports:  # once every job arrived, before the nodes stop
            texts = await scrape(ports)
            stages, counters = stage_buckets(texts), node_counters(texts)
    if args.raw:
        write_pairs(args.raw, received)
    result = fire_result(
        args, settings, received, first_due_ms, window_s, lead_s, rate, added_in_time
    )
    result |= {
        "delivery": delivery,
        "isolation_level": isolation,
        "kafka": dataclasses.asdict(layout),
        "node_logs": logs,
    }
    if counters:
        result["node_counters"] = counters
    if args.stages:
        result["stages"] = stage_rows(stages, received)
    return result


def fire_result(
    args: argparse.Namespace,
    settings: Settings,
    got: Received,
    first_due_ms: int,
    window_s: float,
    lead_s: float,
    rate: float,
    added_in_time: bool,
) -> dict[str, Any]:
    summary = summarize(got.receive_ms, got.due_ms, first_due_ms, args.jobs)
    all_fired, all_due = got.fired_ms + got.reread_fired_ms, got.due_ms + got.reread_due_ms
    # The fire rate of a burst is the node's, from the records' publish times: one
    # Python consumer on the same two cores reads a million records slower than the
    # node publishes them, so receive times would measure the consumer.
    published = summarize(got.publish_ms + got.reread_publish_ms, all_due, first_due_ms, args.jobs)
    if args.pattern == "burst":
        summary = (
            summary
            | {"at_consumer": {k: summary[k] for k in RATE_KEYS}}
            | {k: published[k] for k in RATE_KEYS}
        )
        summary["fire_times"] = "publish"
    else:
        summary["fire_times"] = "receive"
        summary["at_publish"] = {k: published[k] for k in RATE_KEYS}
    node_late = sorted(f - d for f, d in zip(all_fired, all_due, strict=True))
    fired = sorted(all_fired)
    span_s = (fired[-1] - fired[0]) / 1000 if len(fired) > 1 else 0.0
    return {
        "benchmark": "fire_bench",
        "pattern": args.pattern,
        "jobs": args.jobs,
        "caller_ids": args.caller_ids,
        "window_s": window_s,
        "nodes": args.nodes,
        "payload_bytes": args.payload_bytes,
        "lead_s": round(lead_s, 1),
        "first_due_ms": first_due_ms,
        **summary,
        "received": len(got.receive_ms) + len(got.reread_due_ms),
        "unique": len(got.ids),
        "duplicates": got.duplicates,
        "reread_then_live": got.reread_then_live,
        "reread_found": len(got.reread_due_ms),
        "missing": max(0, args.jobs - len(got.ids)),
        # Fired (Redis clock) or received before the due time, whichever counts more.
        "early": max(sum(1 for v in node_late if v < 0), summary["early"]),
        "schedule_rate_per_s": round(rate),
        "scheduling_finished_before_first_due": added_in_time,
        "fire_rate_per_s": round(len(fired) / span_s) if span_s > 0 else None,
        "node_lateness_ms": {
            q: round(percentile(node_late, p), 1) for q, p in (("p50", 0.5), ("p99", 0.99))
        }
        | {"max": round(node_late[-1], 1) if node_late else None},
        "settings": delayq_settings(settings),
        "machine": machine(),
        "command": command(),
    }


async def run_backlog(args: argparse.Namespace) -> dict[str, Any]:
    window_s = args.window if args.window is not None else 3600.0
    lead_s = args.lead if args.lead is not None else 3600.0
    redis = aioredis.from_url(Settings.from_env().redis_url)
    try:
        async with bench_cluster(args.nodes) as settings:
            before = await redis_facts(redis)
            first_due_ms = round((time.time() + lead_s) * 1000)
            dues = due_times("steady", args.jobs, first_due_ms, window_s)
            with counting("scheduled", args.jobs) as advance:
                rate = await schedule_all(
                    settings,
                    f"bench.{settings.key_prefix}",
                    dues,
                    args.batch,
                    args.payload_bytes,
                    args.caller_ids,
                    advance,
                )
            if args.nodes:
                await asyncio.sleep(args.settle)  # whatever the nodes do with far jobs
            after = await redis_facts(redis)
            own_bytes, own_keys = await key_usage(redis, key_pattern(settings))
            mysql_bytes = await mysql_size(settings)
        cleaned = await redis_facts(redis)
    finally:
        await redis.aclose()
    return {
        "benchmark": "fire_bench",
        "mode": "backlog",
        "jobs": args.jobs,
        "caller_ids": args.caller_ids,
        "batch": args.batch,
        "nodes": args.nodes,
        "payload_bytes": args.payload_bytes,
        "due": f"from {lead_s:g} s ahead, spread over {window_s:g} s",
        "schedule_rate_per_s": round(rate),
        "redis": {
            "used_memory_before": before[0],
            "used_memory_after": after[0],
            "used_memory_after_cleanup": cleaned[0],
            "keys_added": after[1] - before[1],
            "own_keys": own_keys,
            "own_keys_memory_usage": own_bytes,
        },
        "redis_bytes_per_job": round((after[0] - before[0]) / args.jobs, 1),
        "own_keys_bytes_per_job": round(own_bytes / args.jobs, 1),
        "mysql_bytes_per_job_approx": round(mysql_bytes / args.jobs, 1),
        "settings": delayq_settings(settings),
        "machine": machine(),
        "command": command(),
    }


async def redis_facts(redis: aioredis.Redis) -> tuple[int, int]:
    """(used_memory, keys in the database), after any lazy free has finished."""
    for _ in range(100):
        memory = await redis.info("memory")
        if not memory.get("lazyfree_pending_objects"):
            break
        await asyncio.sleep(0.1)
    return int(memory["used_memory"]), int(await redis.dbsize())


def key_pattern(settings: Settings) -> str:
    """Every Redis key of the cluster (they all start with its slots' hash tags)."""
    return f"{{{settings.key_prefix}:*"


async def key_usage(redis: aioredis.Redis, pattern: str) -> tuple[int, int]:
    """(bytes, keys): MEMORY USAGE (every element counted) summed over the matching keys;
    unlike used_memory, other clients of the same Redis do not change it."""
    keys = [key async for key in redis.scan_iter(match=pattern, count=1000)]
    total = 0
    for start in range(0, len(keys), 1000):
        pipe = redis.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            pipe.memory_usage(key, samples=0)
        total += sum(size or 0 for size in await pipe.execute())
    return total, len(keys)


async def delete_keys(redis: RedisClient, pattern: str) -> None:
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            await redis.unlink(*batch)
            batch.clear()
    if batch:
        await redis.unlink(*batch)


async def mysql_size(settings: Settings) -> int:
    """Data + index bytes of the cluster's tables (InnoDB estimates, after ANALYZE)."""
    conn = await aiomysql.connect(**parse_mysql_url(settings.mysql_url))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW TABLES")
            for (table,) in await cur.fetchall():
                await cur.execute(f"ANALYZE TABLE `{table}`")
                await cur.fetchall()
            await cur.execute(
                "SELECT COALESCE(SUM(data_length + index_length), 0)"
                " FROM information_schema.tables WHERE table_schema = DATABASE()"
            )
            (size,) = await cur.fetchone()
            return int(size)
    finally:
        conn.close()


# ----- output --------------------------------------------------------------------------


def write_pairs(path: Path, got: Received) -> None:
    """Raw float64 (receive_ms, due_ms) pairs, the format the peers write."""
    pairs = array("d", [0.0]) * (2 * len(got.receive_ms))
    pairs[0::2], pairs[1::2] = got.receive_ms, got.due_ms
    path.write_bytes(pairs.tobytes())


def delayq_settings(settings: Settings) -> dict[str, Any]:
    """The cluster's settings, without addresses and credentials."""
    hidden = {"redis_url", "mysql_url", "kafka_bootstrap", "zk_hosts", "node_id", *SECRET_SETTINGS}
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in hidden}


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def command() -> str:
    return " ".join(["python", "benchmarks/fire_bench.py", *sys.argv[1:]])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="seconds the dues span (default 10; 3600 with --backlog)",
    )
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--batch", type=int, default=5000, help="jobs per schedule_many")
    parser.add_argument(
        "--pattern",
        choices=["uniform", "steady", "burst"],
        default="uniform",
        help="due times uniformly random over the window, evenly spaced "
        "over it, or evenly spaced within one second",
    )
    parser.add_argument(
        "--payload-bytes", type=int, default=80, help="size of the string in each job's payload"
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=None,
        help="seconds from start to first due (default 3 + jobs/15000; 3600 with --backlog)",
    )
    parser.add_argument(
        "--give-up",
        type=float,
        default=None,
        help="seconds after the last due time to stop waiting for missing "
        "jobs (default 120 + jobs/1000)",
    )
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="schedule far-future jobs and measure Redis memory per job",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="--backlog with nodes: seconds to wait before reading memory",
    )
    parser.add_argument(
        "--raw",
        type=Path,
        default=None,
        help="also write float64 (receive_ms, due_ms) pairs to this file",
    )
    parser.add_argument(
        "--caller-ids",
        action="store_true",
        help="give every job an id of its own, order-<run>-<n>-close (default: generated)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="serve the nodes' /metrics on free ports, scrape them at the end and report "
        "p50/p99 of each stage from due to received",
    )
    parser.add_argument(
        "--delivery",
        choices=DELIVERY_MODES,
        default=None,
        help="the nodes' delivery (default: the environment's, DELAYQ_DELIVERY, else "
        "at_least_once); exactly_once is read with isolation_level=read_committed",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args()
    if args.nodes < (0 if args.backlog else 1):
        parser.error("--nodes must be >= 1 (>= 0 with --backlog)")
    if args.stages and args.backlog:
        parser.error("--stages measures fired jobs; --backlog fires none")
    if args.window is None and not args.backlog:
        args.window = 10.0
    return args


def main() -> None:
    args = parse_args()
    result = uvloop.run(run_backlog(args) if args.backlog else run_fire(args))
    path = args.out or RESULTS / f"fire_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    brief = {k: v for k, v in result.items() if k not in ("series", "lateness_cdf_ms")}
    print(orjson.dumps(brief, option=orjson.OPT_INDENT_2).decode())
    print(f"written to {path}")
    if not args.backlog and (result["missing"] or result["early"]):
        sys.exit("some jobs were missing or early")


if __name__ == "__main__":
    main()
