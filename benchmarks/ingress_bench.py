"""The Kafka ingress's scheduling rate against the Python client's, on the same jobs.

    python benchmarks/ingress_bench.py --jobs 100000
    python benchmarks/ingress_bench.py --jobs 100000 --caller-ids --batch 1000

1. Produces --jobs records to a fresh ingress topic (--partitions, one producer, acks=all):
   job requests due --due-in seconds ahead and spread over as many again (by default
   2-4 minutes: inside redis_horizon_ms, so each job is a MySQL row and a Redis add),
   a 100-byte payload each, without job_id (the ingress derives one) unless
   --caller-ids.
2. Starts `delayq ingress` in a process of its own (ingress_batch = --batch) and times
   it from its ready file (it has joined its consumer group) until the group's
   committed offsets reach the end of every partition: every job stored, every round
   committed.
3. Schedules the same jobs (the same ids) with DelayClient.schedule_many in calls of
   --batch jobs, one after another, into a database of its own; then, as the ingress
   does it, with schedule_batch (one more MySQL read per call, to tell new jobs from
   ones already there).

Each part gets a fresh key prefix and database (dropped afterwards, with the keys, and
the topics).
Prints one line per part and the ratio. Needs the local stack (`eval "$(delayq services
env)"`); the broker is the local Tansu, whose produce and fetch costs differ from Apache
Kafka's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from cluster import DelayClient
from cluster.connections.kafka_conn import connection_options, make_admin, start_client
from cluster.devstack.databases import create_cluster_database, forget_cluster
from cluster.devstack.nodes import NodeProcess
from cluster.ingress.records import derived_job_id
from cluster.settings.config import Settings

PAYLOAD = "x" * 100
JOB_TOPIC = "bench.ingress"


async def fresh(tag: str) -> Settings:
    prefix = f"ingbench{tag}{os.getpid()}"
    return await create_cluster_database(
        Settings.from_env().replace(key_prefix=prefix), f"delayq_{prefix}"
    )


def requests(args: argparse.Namespace) -> list[dict[str, Any]]:
    start = time.time() + args.due_in
    return [
        {
            "topic": JOB_TOPIC,
            "payload": PAYLOAD,
            "at": start + args.due_in * i / args.jobs,
            **({"job_id": f"order-{os.getpid()}-{i}-close"} if args.caller_ids else {}),
        }
        for i in range(args.jobs)
    ]


async def produce(
    settings: Settings, topic: str, jobs: list[dict[str, Any]]
) -> tuple[dict[int, int], list[str]]:
    """Produce each job as a record; returns partition → the offset after its last
    record, and each job's id (its own or the one the ingress derives)."""
    producer = AIOKafkaProducer(
        **connection_options(settings),
        acks="all",
        enable_idempotence=settings.kafka_idempotence,
        linger_ms=5,
        max_batch_size=256 * 1024,
    )
    await start_client(producer, settings)
    try:
        stamps = [int(time.time() * 1000) for _ in jobs]
        futures = [
            await producer.send(topic, value=orjson.dumps(job), timestamp_ms=ts)
            for job, ts in zip(jobs, stamps, strict=True)
        ]
        sent = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    ends: dict[int, int] = {}
    ids = []
    for job, meta, ts in zip(jobs, sent, stamps, strict=True):
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
        ids.append(job.get("job_id") or derived_job_id(topic, meta.partition, meta.offset, ts))
    return ends, ids


async def committed(admin: Any, settings: Settings, partitions: int) -> dict[int, int]:
    offsets = await admin.list_consumer_group_offsets(
        settings.ingress_group,
        partitions=[TopicPartition(settings.ingress_topic, p) for p in range(partitions)],
    )
    return {tp.partition: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


async def ingress_rate(args: argparse.Namespace, jobs: list[dict[str, Any]]) -> tuple[float, Any]:
    settings = await fresh("i")
    name = f"bench.in.{uuid.uuid4().hex[:8]}"
    settings = settings.replace(
        ingress_topic=name, ingress_group=f"bench-{name}", ingress_batch=args.batch
    )
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        await admin.create_topics(
            [NewTopic(name, args.partitions, 1), NewTopic(f"{name}.errors", 1, 1)]
        )
    finally:
        await admin.close()
    try:
        ends, ids = await produce(settings, name, jobs)
        with tempfile.TemporaryDirectory() as folder:
            process = NodeProcess(
                "ingress",
                Path(folder),
                settings=settings,
                node_id="bench-ingress",
                command="ingress",
            )
            admin = make_admin(settings)
            try:
                await start_client(admin, settings)
                await process.wait_ready(timeout_s=120)
                began = time.perf_counter()
                while await committed(admin, settings, args.partitions) != ends:
                    if process.returncode is not None:
                        raise RuntimeError(f"the ingress exited{process.log_tail()}")
                    await asyncio.sleep(0.1)
                elapsed = time.perf_counter() - began
                await process.stop()
            finally:
                process.kill()
                await admin.close()
        async with DelayClient(settings) as client:
            found = 0
            for first in range(0, len(ids), 10_000):
                found += len(await client.mysql.get_many(ids[first : first + 10_000]))
        if found != len(ids):
            raise RuntimeError(f"only {found} of {len(ids)} jobs were stored")
        return len(jobs) / elapsed, ids
    finally:
        await forget_cluster(settings)
        admin = make_admin(settings)
        try:
            await start_client(admin, settings)
            await admin.delete_topics([name, f"{name}.errors"])
        finally:
            await admin.close()


async def client_rate(
    args: argparse.Namespace,
    jobs: list[dict[str, Any]],
    call: Callable[[DelayClient], Callable[[list[dict[str, Any]]], Awaitable[Any]]],
    tag: str,
) -> float:
    settings = await fresh(tag)
    try:
        async with DelayClient(settings) as client:
            schedule = call(client)
            began = time.perf_counter()
            for first in range(0, len(jobs), args.batch):
                await schedule(jobs[first : first + args.batch])
            return len(jobs) / (time.perf_counter() - began)
    finally:
        await forget_cluster(settings)


async def run(args: argparse.Namespace) -> None:
    jobs = requests(args)
    rate, ids = await ingress_rate(args, jobs)
    ids_kind = "caller-given" if args.caller_ids else "derived"
    print(
        f"ingress: {args.jobs:,} records ({ids_kind} ids, {args.partitions} partitions, "
        f"rounds of {args.batch:,}): {rate:,.0f} jobs/s"
    )
    # The same jobs with the same ids: the ingress's (derived) ids are caller-given here.
    same = [{**job, "job_id": job_id} for job, job_id in zip(jobs, ids, strict=True)]
    many = await client_rate(args, same, lambda c: c.schedule_many, "m")
    print(f"schedule_many, calls of {args.batch:,}: {many:,.0f} jobs/s")
    batch = await client_rate(args, same, lambda c: c.schedule_batch, "b")
    print(f"schedule_batch, calls of {args.batch:,}: {batch:,.0f} jobs/s")
    print(
        f"ingress / schedule_many: {rate / many:.2f}; ingress / schedule_batch: {rate / batch:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument(
        "--batch", type=int, default=1000, help="ingress_batch, and jobs per client call"
    )
    parser.add_argument("--partitions", type=int, default=3, help="of the ingress topic")
    parser.add_argument("--caller-ids", action="store_true", help="order-<pid>-<n>-close ids")
    parser.add_argument(
        "--due-in", type=float, default=120.0, help="seconds to the first due time (default 120)"
    )
    args = parser.parse_args()
    uvloop.run(run(args))


if __name__ == "__main__":
    main()
