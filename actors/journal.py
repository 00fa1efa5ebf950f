"""The exactly-once journal (delivery = "exactly_once"): a Kafka topic to which every
transaction of a slot's producer also writes one record naming the slot, its epoch and
the jobs it carries (actors/transactions.py). It commits or aborts with them, so reading
it with read_committed tells which jobs a transaction committed.

The topic (kafka_journal_topic) is created by the first node that needs it: 16
partitions, a slot's records on partition slot % 16, replication factor min(brokers, 3),
the broker's log-append time (reads start from a time), kept 7 days.

A record counts only when it is the cluster's own: each carries an HMAC-SHA256 over its
slot, epoch, prefix, jobs and barrier, under a key only the cluster's Redis holds
(`{<key_prefix>:journal}:key`, made by the first node). A record any other writer of
the topic put there (outside the slot's transactions, or not from delayq at all) fails
the check and is skipped, as is one that does not parse: each is counted
(delayq_journal_records_skipped_total) and logged once, and none stops a read.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ConfigError
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

JOURNAL_PARTITIONS = 16
JOURNAL_RETENTION_MS = 7 * 86_400_000
TOPIC_ALREADY_EXISTS = 36  # Kafka's error code
KEY_BYTES = 32
# Skipped records already logged, by (partition, offset): each is logged once, however
# often a lookup window reads it; bounded, forgotten wholesale when full.
LOGGED_SKIPS_MAX = 10_000


def journal_key_name(key_prefix: str) -> str:
    """The Redis key holding the journal's HMAC key (inside the prefix's ACL pattern)."""
    return f"{{{key_prefix}:journal}}:key"


def record_mac(
    key: bytes, slot: int, epoch: int, prefix: str, jobs: list[str], barrier: str
) -> str:
    """The HMAC a record of these fields carries under `key`."""
    message = orjson.dumps([slot, epoch, prefix, barrier, jobs])
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def parse_record(value: bytes | None) -> dict[str, Any] | None:
    """A journal record's fields, or None when it is not one delayq writes: JSON with
    slot and epoch integers, prefix, mac and (optional) barrier strings, jobs a list of
    strings."""
    if value is None:
        return None
    try:
        entry = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entry, dict):
        return None
    ints = (entry.get("slot"), entry.get("epoch"))
    strs = (entry.get("prefix"), entry.get("mac"), entry.get("barrier", ""))
    jobs = entry.get("jobs")
    if not all(type(v) is int for v in ints) or not all(isinstance(v, str) for v in strs):
        return None
    if not isinstance(jobs, list) or not all(isinstance(job, str) for job in jobs):
        return None
    return entry


class Journal:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.kafka_journal_topic
        self.partitions = JOURNAL_PARTITIONS  # as the topic has them, once started
        self._reader: AIOKafkaConsumer | None = None
        self._reader_lock = asyncio.Lock()
        self._key = b""  # load_key()
        # Records skipped by a lookup: unreadable (not a record delayq writes) or
        # unauthenticated (the HMAC does not match: not written by this cluster's nodes).
        self.skipped = {"unreadable": 0, "unauthenticated": 0}
        self._logged_skips: set[tuple[int, int]] = set()

    async def load_key(self, redis: RedisClient) -> None:
        """The cluster's journal key from Redis, made there by the first node to ask."""
        name = journal_key_name(self.settings.key_prefix)
        await redis.set(name, os.urandom(KEY_BYTES), nx=True)
        key = await redis.get(name)
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise ConfigError(
                f"the journal key {name!r} in Redis is not {KEY_BYTES} bytes: delete it "
                "(no transaction may be in doubt meanwhile) and start the node again"
            )
        self._key = key

    async def create_topic(self) -> None:
        """Create the topic unless it exists; ConfigError when Kafka refuses."""
        admin = make_admin(self.settings)
        await start_client(admin, self.settings)
        try:
            brokers = len((await admin.describe_cluster())["brokers"])
            topic = NewTopic(
                self.topic,
                JOURNAL_PARTITIONS,
                min(brokers, 3),
                topic_configs={
                    "message.timestamp.type": "LogAppendTime",
                    "retention.ms": str(JOURNAL_RETENTION_MS),
                    "min.insync.replicas": str(min(brokers, 2)),
                },
            )
            reply = await admin.create_topics([topic])
            for name, code, *message in reply.topic_errors:
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    raise ConfigError(
                        f"cannot create the journal topic {name!r} (kafka_journal_topic): "
                        f"Kafka error {code} {message}"
                    )
        finally:
            await admin.close()

    async def start_reader(self, partitions: int) -> None:
        self.partitions = partitions
        reader = make_consumer(
            self.settings,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
        )
        await start_client(reader, self.settings)
        self._reader = reader

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.stop()

    def partition_of(self, slot: int) -> int:
        return slot % self.partitions

    async def send(
        self,
        producer: AIOKafkaProducer,
        slot: int,
        epoch: int,
        job_ids: list[bytes],
        barrier: str = "",
    ) -> asyncio.Future[object]:
        """Add the slot's record to the producer's open transaction, on the slot's
        partition; returns its delivery future."""
        sent: asyncio.Future[object] = await producer.send(
            self.topic,
            self.record(slot, epoch, job_ids, barrier),
            key=str(slot).encode(),
            partition=self.partition_of(slot),
        )
        return sent

    def record(self, slot: int, epoch: int, job_ids: list[bytes], barrier: str = "") -> bytes:
        """A transaction's record: the jobs it carries; or, with `barrier`, a record
        that carries none and marks how far a read must go (committed)."""
        assert self._key, "load_key() first"
        prefix = self.settings.key_prefix
        jobs = [job_id.decode() for job_id in job_ids]
        entry: dict[str, object] = {
            "slot": slot,
            "epoch": epoch,
            "node": self.settings.node_id,
            "prefix": prefix,
            "jobs": jobs,
            "mac": record_mac(self._key, slot, epoch, prefix, jobs, barrier),
        }
        if barrier:
            entry["barrier"] = barrier
        return orjson.dumps(entry)

    def _accepted(
        self, slot: int, value: bytes | None, partition: int, offset: int
    ) -> dict[str, Any] | None:
        """The record's fields when it is one of this slot's, written by this cluster's
        nodes; None (counted and logged once when it is not the cluster's own) else."""
        entry = parse_record(value)
        if entry is None:
            self._skip("unreadable", partition, offset)
            return None
        if entry["slot"] != slot or entry["prefix"] != self.settings.key_prefix:
            return None  # another slot sharing the partition, or another cluster
        mac = record_mac(
            self._key,
            slot,
            entry["epoch"],
            entry["prefix"],
            entry["jobs"],
            entry.get("barrier", ""),
        )
        if not hmac.compare_digest(mac, entry["mac"]):
            self._skip("unauthenticated", partition, offset)
            return None
        return entry

    def _skip(self, reason: str, partition: int, offset: int) -> None:
        self.skipped[reason] += 1
        if (partition, offset) in self._logged_skips:
            return
        if len(self._logged_skips) >= LOGGED_SKIPS_MAX:
            self._logged_skips.clear()
        self._logged_skips.add((partition, offset))
        log.warning(
            "journal %s partition %d offset %d skipped: %s",
            self.topic,
            partition,
            offset,
            "not a journal record"
            if reason == "unreadable"
            else "its HMAC does not match (not written by this cluster's nodes)",
        )

    async def committed(
        self, slot: int, job_ids: set[bytes], since_ms: int, barrier: str
    ) -> set[bytes]:
        """Which of `job_ids` the slot's records from since_ms (the broker's clock) up
        to the barrier record `barrier` name, read with read_committed. The caller
        committed the barrier in a transaction of a producer it had just started, which
        waited until every earlier transaction of the slot had ended: once the barrier
        is visible to a read_committed reader, so is every transaction before it."""
        reader = self._reader
        assert reader is not None, "start_reader() first"
        tp = TopicPartition(self.topic, self.partition_of(slot))
        found: set[bytes] = set()
        read = 0
        async with (
            self._reader_lock,
            asyncio.timeout(self.settings.kafka_delivery_timeout_ms / 1000),
        ):
            reader.assign([tp])
            # A time lookup under read_committed finds nothing past the last stable
            # offset: until the barrier's markers are written, asked again.
            # Polled: the markers are written by the broker, nothing here can wait on it.
            while (start := (await reader.offsets_for_times({tp: max(since_ms, 0)}))[tp]) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            reader.seek(tp, start.offset)
            while True:
                batch = await reader.getmany(tp, timeout_ms=500)
                for message in batch.get(tp, []):
                    read += 1
                    entry = self._accepted(slot, message.value, tp.partition, message.offset)
                    if entry is None:
                        continue
                    if entry.get("barrier") == barrier:
                        log.debug(
                            "journal of slot %d from offset %d to the barrier at %d: "
                            "%d record(s), %d of %d job(s) committed",
                            slot,
                            start.offset,
                            message.offset,
                            read,
                            len(found & job_ids),
                            len(job_ids),
                        )
                        return found & job_ids
                    found.update(job_id.encode() for job_id in entry["jobs"])
