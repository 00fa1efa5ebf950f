"""The exactly-once journal (delivery = "exactly_once"): a Kafka topic to which every
transaction of a slot's producer also writes one record naming the slot, its epoch and
the jobs it carries (actors/transactions.py). It commits or aborts with them, so reading
it with read_committed tells which jobs a transaction committed.

The topic (kafka_journal_topic) is created by the first node that needs it: 16
partitions, a slot's records on partition slot % 16, replication factor min(brokers, 3),
the broker's log-append time (reads start from a time), kept 7 days.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.errors import ConfigError
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

JOURNAL_PARTITIONS = 16
JOURNAL_RETENTION_MS = 7 * 86_400_000
TOPIC_ALREADY_EXISTS = 36  # Kafka's error code


class Journal:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.kafka_journal_topic
        self.partitions = JOURNAL_PARTITIONS  # as the topic has them, once started
        self._reader: AIOKafkaConsumer | None = None
        self._reader_lock = asyncio.Lock()

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
        entry = {
            "slot": slot,
            "epoch": epoch,
            "node": self.settings.node_id,
            "prefix": self.settings.key_prefix,
            "jobs": [job_id.decode() for job_id in job_ids],
        }
        if barrier:
            entry["barrier"] = barrier
        return orjson.dumps(entry)

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
                    entry = orjson.loads(message.value)
                    if entry["slot"] != slot or entry["prefix"] != self.settings.key_prefix:
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
