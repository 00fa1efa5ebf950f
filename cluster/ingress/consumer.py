"""The ingress loop: records of ingress_topic in, jobs stored, offsets committed after.

    ingress = Ingress(settings)
    await ingress.start()   # waits for MySQL, Redis and Kafka up to startup_timeout_s
    await ingress.run()     # rounds until stop()
    await ingress.close()

Each round takes up to ingress_batch records, refuses the ones that are not valid jobs
(to the error topic, with the reason), stores the others with one schedule_batch() call,
and only once the jobs are committed in MySQL and the error records acknowledged by the
broker commits the round's offsets. A round whose jobs could not be stored (MySQL
unreachable, a commit of unknown outcome) is tried again, with the same job ids, after
a capped exponential backoff; nothing is committed past it meanwhile. Records read again
(after a crash, a stop mid-round, a rebalance) are the same jobs: one job per id, and a
record without an id has one derived from its place in Kafka (cluster/ingress/records.py).
The next round is fetched and parsed while the current one is stored; rounds are stored
and committed one at a time, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pymysql
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka import errors as kafka_errors

from cluster.client.delay_client import DelayClient
from cluster.errors import (
    InvalidJob,
    OutcomeUnknown,
    RedisStepFailed,
    StoreUnavailable,
)
from cluster.ingress.records import (
    Accepted,
    Refused,
    error_record,
    max_error_value_bytes,
    parse_record,
)
from cluster.ingress.startup import (
    check_settings,
    error_topic_of,
    start_consumer,
    start_error_producer,
    waiting_for,
)
from cluster.model.jobs import now_ms, validate_job
from cluster.settings.config import Settings, redact_url

log = logging.getLogger(__name__)

# Backoff between attempts of a round that failed (MySQL unreachable, an unknown
# outcome, the broker refusing error records): doubling from the first to the cap.
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 10.0
# How long one fetch waits for records when there are none (also how soon an idle
# ingress sees a stop).
FETCH_TIMEOUT_MS = 500
# A summary line at most this often, when records came.
SUMMARY_EVERY_S = 10.0

# Record outcomes, the result label of delayq_ingress_records_total.
SCHEDULED = "scheduled"
ALREADY_THERE = "already_there"
INVALID = "invalid"
RESULTS = (SCHEDULED, ALREADY_THERE, INVALID)

# Errors of a round's store step after which the same round is tried again: MySQL did
# not answer or failed (pymysql.err.Error beyond what the client turns into
# StoreUnavailable, e.g. a server that turned read-only), the commit's outcome is unknown.
_STORE_RETRIED = (StoreUnavailable, OutcomeUnknown, pymysql.err.Error)


@dataclass
class Round:
    """Records read by one fetch: the valid jobs, the refused records, and each
    partition's offset to commit once the jobs are stored and the refusals sent."""

    offsets: dict[TopicPartition, int]
    accepted: list[Accepted]
    refused: list[Refused]


class Ingress:
    """One ingress process's consumer, producer (for error records) and client."""

    def __init__(self, settings: Settings) -> None:
        check_settings(settings)
        self.settings = settings
        self.topic = settings.ingress_topic
        self.error_topic = error_topic_of(settings)
        self.client = DelayClient(settings)
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self._stopping = asyncio.Event()
        self._max_error_value = max_error_value_bytes(settings)
        # Counters, read by cluster/ingress/metrics.py and the summary lines.
        self.records_total: Counter[str] = Counter({result: 0 for result in RESULTS})
        self.rounds_total = 0
        self.committed_rounds_total = 0
        self.commit_failures_total = 0
        self.store_failures_total = 0
        self.error_send_failures_total = 0
        self.last_round_ms = 0
        self._summarized: Counter[str] = Counter()
        self._summary_at = time.monotonic()

    # ----- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the client (MySQL and Redis), the error producer and the consumer, each
        waited for with capped backoff while it does not answer, for up to
        startup_timeout_s in all. Refusals (credentials, TLS, schema) raise at once."""
        s = self.settings
        deadline = time.monotonic() + s.startup_timeout_s
        mysql_at = f"{self.client.mysql.conn_args['host']}:{self.client.mysql.conn_args['port']}"
        await waiting_for(
            f"MySQL at {mysql_at} and Redis at {redact_url(s.redis_url)}",
            self._open_client,
            deadline,
        )
        try:
            self.producer = await waiting_for(
                f"Kafka at {s.kafka_bootstrap}", lambda: start_error_producer(s), deadline
            )
            self.consumer = await waiting_for(
                f"Kafka at {s.kafka_bootstrap}", lambda: start_consumer(s), deadline
            )
        except BaseException:
            await self.close()
            raise
        log.info(
            "ingress %s started: topic %s, group %s, errors to %s, up to %d records a round",
            s.node_id,
            self.topic,
            s.ingress_group,
            self.error_topic,
            s.ingress_batch,
        )

    async def _open_client(self) -> DelayClient:
        try:
            await self.client.open()
        except BaseException:
            await self.client.close()
            raise
        return self.client

    def stop(self) -> None:
        """Ask run() to return: at once between rounds; a round that is storing its
        jobs finishes that attempt, and one waiting to try again is abandoned (its
        offsets not committed, so its records are read again)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def close(self) -> None:
        """Leave the group and close everything (without committing anything)."""
        consumer, self.consumer = self.consumer, None
        producer, self.producer = self.producer, None
        try:
            if consumer is not None:
                await consumer.stop()
        finally:
            try:
                if producer is not None:
                    await producer.stop()
            finally:
                await self.client.close()

    # ----- rounds ------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds until stop(). The next round is fetched and parsed while the current
        one is being stored (the store waits on MySQL and Redis most of its time);
        rounds are stored and committed one after the other, in order. An unexpected
        error ends it (raised) without committing the round it happened in."""
        upcoming = asyncio.create_task(self._next_round())
        try:
            while not self.stopping:
                current = await upcoming
                if self.stopping:
                    break  # read, not stored: never committed
                upcoming = asyncio.create_task(self._next_round())
                if current is not None:
                    await self.complete(current)
                self._maybe_summarize()
        finally:
            upcoming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await upcoming
        self._maybe_summarize(force=True)

    async def _next_round(self) -> Round | None:
        """The next records (None when none came within FETCH_TIMEOUT_MS), parsed."""
        batch = await self._consumer.getmany(
            timeout_ms=FETCH_TIMEOUT_MS, max_records=self.settings.ingress_batch
        )
        return self.parse_round(batch) if batch else None

    def parse_round(self, batch: dict[TopicPartition, list[ConsumerRecord[Any, Any]]]) -> Round:
        """A fetch's records as jobs and refusals, with the offsets to commit after."""
        self.rounds_total += 1
        now = now_ms()
        accepted: list[Accepted] = []
        refused: list[Refused] = []
        for records in batch.values():
            for record in records:
                outcome = parse_record(record, self.settings, now)
                if isinstance(outcome, Accepted):
                    accepted.append(outcome)
                else:
                    refused.append(outcome)
        offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
        return Round(offsets, accepted, refused)

    async def complete(self, current: Round) -> bool:
        """Store a round's jobs, send its refused records to the error topic, then
        commit its offsets. False when it was abandoned because of stop()."""
        if current.accepted and not await self._store(current.accepted, current.refused):
            return False
        if current.refused and not await self._send_errors(current.refused):
            return False
        await self._commit(current.offsets)
        self.last_round_ms = now_ms()
        return True

    async def _store(self, accepted: list[Accepted], refused: list[Refused]) -> bool:
        """schedule_batch() the accepted jobs until they are stored (or stop()); False
        if abandoned. A job refused by the client after all (it was valid when parsed)
        moves to `refused`."""
        pause = FIRST_BACKOFF_S
        while True:
            try:
                results = await self.client.schedule_batch([a.job for a in accepted])
            except RedisStepFailed as exc:
                # Committed in MySQL: they fire; their nodes add them to Redis.
                log.warning(
                    "ingress: %d job(s) stored in MySQL, but adding them to Redis failed "
                    "(their nodes re-add them from MySQL): %s",
                    len(accepted),
                    exc,
                )
                self.records_total[SCHEDULED] += len(accepted)
                return True
            except _STORE_RETRIED as exc:
                self.store_failures_total += 1
                log.warning(
                    "ingress: could not store a round of %d job(s), nothing committed; trying "
                    "again with the same job ids in %.1f s: %s: %s",
                    len(accepted),
                    pause,
                    type(exc).__name__,
                    exc,
                )
            except InvalidJob as exc:
                still_valid = self._revalidated(accepted, refused)
                if len(still_valid) < len(accepted):
                    accepted = still_valid
                    if not accepted:
                        return True
                    continue
                raise RuntimeError(f"schedule_batch refused a round of valid jobs: {exc}") from exc
            else:
                created = sum(result.created for result in results)
                self.records_total[SCHEDULED] += created
                self.records_total[ALREADY_THERE] += len(results) - created
                return True
            if not await self._pause(pause):
                log.info("ingress: stopping; the round's offsets were not committed")
                return False
            pause = min(pause * 2, MAX_BACKOFF_S)

    def _revalidated(self, accepted: list[Accepted], refused: list[Refused]) -> list[Accepted]:
        """The accepted jobs that are still valid now; the others join `refused`."""
        now = now_ms()
        valid: list[Accepted] = []
        for job in accepted:
            try:
                validate_job(job.job, self.settings, now)
            except InvalidJob as exc:
                refused.append(Refused(job.record, str(exc)))
            else:
                valid.append(job)
        return valid

    async def _send_errors(self, refused: list[Refused]) -> bool:
        """Produce an error record for each refused record and wait until the broker
        acknowledged them all (again for those it did not, with backoff); False if
        abandoned because of stop()."""
        producer = self._producer
        refused_ms = now_ms()
        todo = [(r, self._max_error_value) for r in refused]
        pause = FIRST_BACKOFF_S
        first = refused[0]
        log.warning(
            "ingress: %d record(s) are not valid jobs, sent to %s; the first, %s:%d@%d: %s",
            len(refused),
            self.error_topic,
            first.record.topic,
            first.record.partition,
            first.record.offset,
            first.reason,
        )
        while True:
            outcomes = await asyncio.gather(
                *(self._send_error(producer, r, limit, refused_ms) for r, limit in todo),
                return_exceptions=True,
            )
            failed: list[tuple[Refused, int]] = []
            for (refusal, limit), outcome in zip(todo, outcomes, strict=True):
                if isinstance(outcome, kafka_errors.MessageSizeTooLargeError) and limit:
                    failed.append((refusal, 0))  # again without key and value
                elif isinstance(outcome, BaseException):
                    if not isinstance(outcome, Exception):
                        raise outcome  # cancelled
                    failed.append((refusal, limit))
            if not failed:
                self.records_total[INVALID] += len(refused)
                return True
            self.error_send_failures_total += 1
            errors = {type(o).__name__ for o in outcomes if isinstance(o, BaseException)}
            log.warning(
                "ingress: %d error record(s) not acknowledged by the broker (%s), nothing "
                "committed; sending them again in %.1f s",
                len(failed),
                ", ".join(sorted(errors)),
                pause,
            )
            if not await self._pause(pause):
                log.info("ingress: stopping; the round's offsets were not committed")
                return False
            pause = min(pause * 2, MAX_BACKOFF_S)
            todo = failed

    async def _send_error(
        self, producer: AIOKafkaProducer, refusal: Refused, limit: int, refused_ms: int
    ) -> None:
        value = error_record(refusal, refused_ms=refused_ms, max_value_bytes=limit)
        record = refusal.record
        sent = await producer.send(
            self.error_topic,
            value=value,
            key=record.key[:limit] if record.key is not None and limit else None,
            headers=list(record.headers) if limit else None,
        )
        await sent

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit a stored round's offsets. A failure commits nothing and loses nothing:
        the records are read again (by this process or the partition's new owner) and
        are the same jobs."""
        try:
            await self._consumer.commit(offsets)
        except (kafka_errors.CommitFailedError, kafka_errors.IllegalStateError) as exc:
            self.commit_failures_total += 1
            log.info(
                "ingress: the group rebalanced during a round; its offsets were not "
                "committed and its records will be read again (the same jobs): %s",
                exc,
            )
        except kafka_errors.KafkaError as exc:
            self.commit_failures_total += 1
            log.warning(
                "ingress: committing a round's offsets failed; its records may be read "
                "again (the same jobs): %s: %s",
                type(exc).__name__,
                exc,
            )
        else:
            self.committed_rounds_total += 1

    async def _pause(self, seconds: float) -> bool:
        """Sleep `seconds`; False (at once) when stop() was called."""
        try:
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        except TimeoutError:
            return True
        return False

    def _maybe_summarize(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._summary_at < SUMMARY_EVERY_S:
            return
        since = self.records_total - self._summarized
        if since.total():
            log.info(
                "ingress: %d record(s) in %.0f s: %d scheduled, %d already there, %d invalid",
                since.total(),
                now - self._summary_at,
                since[SCHEDULED],
                since[ALREADY_THERE],
                since[INVALID],
            )
        self._summarized = self.records_total.copy()
        self._summary_at = now

    @property
    def _consumer(self) -> AIOKafkaConsumer:
        if self.consumer is None:
            raise RuntimeError("Ingress is not started")
        return self.consumer

    @property
    def _producer(self) -> AIOKafkaProducer:
        if self.producer is None:
            raise RuntimeError("Ingress is not started")
        return self.producer
