"""The Kafka floor: the lateness a bare producer → broker → consumer adds by itself.

    python benchmarks/kafka_floor.py fire --jobs 50000 --rate 5000 --lead 5 --give-up 170 \\
        --raw pairs.f64 [--payload-bytes 100]

The steady load of benchmarks/harness.py without a queue: one record per "job", due
evenly at --rate per second from --lead seconds after the start, each sent by an
aiokafka producer when its due time arrives, and read by a consumer in another process
(the producer runs as `kafka_floor.py produce`, started by `fire`), as delayq's records
are published by a node and read by the benchmark's consumer.
Lateness = receive time − due time, as for every system of the harness, so whatever
delayq's lateness has above this floor is delayq's own (or its share of the machine).

- Records have the shape and size of delayq's fired records with the same payload
  (job_id, topic, biz_id, biz_type, payload, due_ms, fired_ms, attempt; about 285 bytes
  with a 100-byte payload), keyed by the job id, on a fresh topic of the same six
  partitions, spread over them round robin (as evenly as the node's murmur2 of each
  record's key spreads delayq's records).
- The producer is the node's (actors/publisher.py make_producer: acks=all, idempotence as
  kafka_idempotence says, the same batch sizes) with linger_ms 0: the sender takes a
  batch as soon as the loop gives it a turn, so the records due in one iteration of
  the send loop go out together, and none waits for more.
- The send loop sends every record whose due time has come, then sleeps until the next
  one is due.
- The consumer is benchmarks/fire_bench.py's (fetch_max_wait_ms=5, every partition),
  and so is the reading: receive time when getmany hands over a batch; records the
  live consumer missed (the local broker can make one visible out of order) are looked
  for by re-reading the topic, counted as received but kept out of lateness.

With --redis URL (the harness's "floor-redis" system) the producer keeps the records'
ids in a Redis sorted set, scored by due time (ZADD, 1,000 per pipelined call, before
the first due time), and its send loop takes what is due with one MULTI of
ZRANGEBYSCORE and ZREMRANGEBYSCORE per iteration before sending it: the least a delay
queue on Redis and Kafka must do per job, the physical floor of delayq's CPU per job.

Connects as Settings.from_env() says (cluster/connections/kafka_conn.py), so the secure stack
works too. Writes float64 (receive_ms, due_ms) pairs to --raw, as the peers do
(benchmarks/summary.py reads them), and prints one JSON line: counts, the record size,
and p50/p99/max of sent − due (how late the send loop was) and of broker ack − due.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import redis.asyncio
import uvloop
from aiokafka import AIOKafkaProducer
from fire_bench import (
    PARTITIONS,
    Received,
    consume,
    due_times,
    kafka_topic,
    start_consumer,
    write_pairs,
)
from summary import percentile

from actors.publisher import make_producer
from cluster.connections.kafka_conn import start_client
from cluster.settings.config import Settings


def record_head(job_id: bytes, topic: str, payload_bytes: int) -> bytes:
    """A fired record of delayq up to its due_ms (cluster/model/envelope.py builds the same)."""
    return orjson.dumps(
        {
            "job_id": job_id.decode(),
            "topic": topic,
            "biz_id": None,
            "biz_type": None,
            "payload": {"data": "x" * payload_bytes},
        }
    )[:-1]


def quantiles(values: list[float]) -> dict[str, float | None]:
    values.sort()
    return {
        "p50": round(percentile(values, 0.5), 1) if values else None,
        "p99": round(percentile(values, 0.99), 1) if values else None,
        "max": round(values[-1], 1) if values else None,
    }


class ZSet(NamedTuple):
    redis: Any  # redis.asyncio.Redis
    key: str


class Sender:
    """Sends record i of the run, shaped like delayq's, and keeps its lateness."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        dues: list[int],
        payload_bytes: int,
        sent_late: list[float],
        acked_late: list[float],
    ) -> None:
        self.producer, self.topic, self.dues = producer, topic, dues
        self.payload_bytes = payload_bytes
        self.sent_late, self.acked_late = sent_late, acked_late
        # The id's time part keeps ids apart between runs, as delayq's generated ids are.
        self.ids = [f"{dues[0]:012x}{i:020x}".encode() for i in range(len(dues))]
        self.acks: list[asyncio.Future[Any]] = []
        self.record_bytes = 0

    def _on_ack(self, due: int, ack: asyncio.Future[Any]) -> None:
        if not ack.exception():
            self.acked_late.append(time.time() * 1000 - due)

    async def send(self, i: int, now_ms: float) -> None:
        value = b'%s,"due_ms":%d,"fired_ms":%d,"attempt":1}' % (
            record_head(self.ids[i], self.topic, self.payload_bytes),
            self.dues[i],
            round(now_ms),
        )
        ack = await self.producer.send(self.topic, value, key=self.ids[i], partition=i % PARTITIONS)
        ack.add_done_callback(functools.partial(self._on_ack, self.dues[i]))
        self.acks.append(ack)
        self.sent_late.append(now_ms - self.dues[i])
        self.record_bytes = len(value)


async def send_when_due(sender: Sender, zset: ZSet | None = None) -> int:
    """Send each record once its due time has come (taken from `zset` if given); returns
    the bytes of the last record. The broker's acknowledgements are awaited at the end."""
    if zset is not None:
        await send_from_zset(sender, zset)
    else:
        dues, i = sender.dues, 0
        while i < len(dues):
            now_ms = time.time() * 1000
            while i < len(dues) and dues[i] <= now_ms:
                await sender.send(i, now_ms)
                i += 1
            if i < len(dues):
                await asyncio.sleep(max(0.0, dues[i] - time.time() * 1000) / 1000)
    await asyncio.gather(*sender.acks)
    return sender.record_bytes


async def send_from_zset(sender: Sender, zset: ZSet) -> None:
    """send_when_due's loop with the due records taken from a Redis sorted set."""
    ids, dues = sender.ids, sender.dues
    index = {job_id: i for i, job_id in enumerate(ids)}
    for start in range(0, len(ids), 1000):
        await zset.redis.zadd(
            zset.key, {ids[i]: dues[i] for i in range(start, min(start + 1000, len(ids)))}
        )
    sent_count = 0
    while sent_count < len(ids):
        now_ms = time.time() * 1000
        async with zset.redis.pipeline(transaction=True) as pipe:
            pipe.zrangebyscore(zset.key, "-inf", int(now_ms))
            pipe.zremrangebyscore(zset.key, "-inf", int(now_ms))
            due_ids, _ = await pipe.execute()
        for job_id in due_ids:
            await sender.send(index[job_id], now_ms)
        sent_count += len(due_ids)
        head = await zset.redis.zrange(zset.key, 0, 0, withscores=True)
        if head:
            await asyncio.sleep(max(0.0, head[0][1] - time.time() * 1000) / 1000)


async def run_produce(args: argparse.Namespace) -> dict[str, Any]:
    """The producer's side, in a process of its own (as delayq's node is)."""
    settings = Settings.from_env().replace(node_id="kafka-floor", kafka_linger_ms=0)
    dues = due_times("steady", args.jobs, args.first_due_ms, args.jobs / args.rate)
    sent_late: list[float] = []
    acked_late: list[float] = []
    producer = make_producer(settings)
    zset = None
    if args.redis:
        zset = ZSet(redis.asyncio.Redis.from_url(args.redis), f"floor:{args.topic}")
    try:
        await start_client(producer, settings)
        sender = Sender(producer, args.topic, dues, args.payload_bytes, sent_late, acked_late)
        record_bytes = await send_when_due(sender, zset)
    finally:
        await producer.stop()
        if zset is not None:
            await zset.redis.delete(zset.key)
            await zset.redis.aclose()
    return {
        "redis": bool(zset),
        "record_bytes": record_bytes,
        "producer": {"acks": "all", "linger_ms": 0, "idempotence": settings.kafka_idempotence},
        "sent_lateness_ms": quantiles(sent_late),
        "broker_ack_lateness_ms": quantiles(acked_late),
    }


async def run_fire(args: argparse.Namespace) -> dict[str, Any]:
    """The consumer's side: it starts the producer process and reads every record. Two
    processes, as for delayq (a node, and the benchmark's consumer), so that neither
    side's work delays the other's on one event loop."""
    settings = Settings.from_env()
    topic = f"bench.floor{uuid.uuid4().hex[:6]}"
    received = Received()
    async with kafka_topic(settings, topic) as layout:
        reopen = functools.partial(start_consumer, settings, topic)
        consumer = await reopen()
        try:
            first_due_ms = round((time.time() + args.lead) * 1000)
            dues = due_times("steady", args.jobs, first_due_ms, args.jobs / args.rate)
            # about the lead: the producer process must be up before the first due time
            producing = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "produce",
                f"--jobs={args.jobs}",
                f"--rate={args.rate}",
                f"--payload-bytes={args.payload_bytes}",
                f"--topic={topic}",
                f"--first-due-ms={first_due_ms}",
                *([f"--redis={args.redis}"] if args.redis else []),
                stdout=asyncio.subprocess.PIPE,
            )
            await consume(
                consumer,
                reopen,
                received,
                args.jobs,
                dues[-1] / 1000,
                dues[-1] / 1000 + args.give_up,
            )
            out, _ = await producing.communicate()
            if producing.returncode != 0:
                raise SystemExit(f"the producer process failed (exit {producing.returncode})")
            produced: dict[str, Any] = orjson.loads(out.splitlines()[-1])
        finally:
            await consumer.stop()
    write_pairs(args.raw, received)
    return {
        "system": "floor-redis" if args.redis else "floor",
        "mode": "fire",
        "jobs": args.jobs,
        "rate_per_s": args.rate,
        "unique": len(received.ids),
        "duplicates": received.duplicates,
        "reread_found": len(received.reread_due_ms),
        "first_due_ms": first_due_ms,
        "consumer": {"fetch_max_wait_ms": 5},
        "kafka": dataclasses.asdict(layout),
        **produced,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode",
        choices=["fire", "produce"],
        help="fire: the harness's steady load (starts a produce process and consumes); "
        "produce: the producer's side alone",
    )
    parser.add_argument("--jobs", type=int, required=True, help="records to send")
    parser.add_argument("--rate", type=int, required=True, help="records due per second")
    parser.add_argument("--lead", type=float, default=5.0, help="seconds to the first due")
    parser.add_argument(
        "--give-up",
        type=float,
        default=120.0,
        help="seconds after the last due time to stop waiting for missing records",
    )
    parser.add_argument("--raw", type=Path, help="fire: where to write (receive_ms, due_ms) pairs")
    parser.add_argument(
        "--payload-bytes", type=int, default=100, help="size of the string in each payload"
    )
    parser.add_argument(
        "--redis", help="a Redis URL: keep the due times in a sorted set there (the full floor)"
    )
    parser.add_argument("--topic", help="produce: the topic (fire makes one)")
    parser.add_argument("--first-due-ms", type=int, help="produce: the first record's due time")
    args = parser.parse_args()
    if args.mode == "fire" and args.raw is None:
        parser.error("fire needs --raw")
    if args.mode == "produce" and (args.topic is None or args.first_due_ms is None):
        parser.error("produce needs --topic and --first-due-ms")
    return args


def main() -> None:
    args = parse_args()
    if args.mode == "produce":
        print(orjson.dumps(uvloop.run(run_produce(args))).decode())
        return
    result = uvloop.run(run_fire(args))
    print(orjson.dumps(result).decode())
    if result["unique"] < args.jobs:
        sys.exit(f"{args.jobs - result['unique']} records missing")


if __name__ == "__main__":
    main()
