"""Starting an ingress: which settings it can run with, its Kafka consumer and error
producer, and waiting for stores that do not answer yet (capped backoff, up to
startup_timeout_s; refusals that waiting cannot cure raise at once)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pymysql
import redis.exceptions
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors

from cluster.client.delay_client import MAX_BATCH
from cluster.connections.kafka_conn import connection_options, make_consumer, start_client
from cluster.errors import (
    ConfigError,
    InvalidJob,
    SchemaError,
    StartupFailed,
    StoreAccessError,
    StoreUnavailable,
)
from cluster.model.jobs import check_topic
from cluster.process.runner import one_line
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

# How long the broker holds an empty fetch: low, so a record is scheduled soon after
# it is produced.
FETCH_MAX_WAIT_MS = 50
# Waiting for a store that does not answer yet.
START_FIRST_RETRY_S = 0.5
START_MAX_RETRY_S = 10.0

# What a store that is not there (yet) raises at start-up: worth waiting for.
_START_TRANSIENT = (
    OSError,
    TimeoutError,
    pymysql.err.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    StoreUnavailable,  # DelayClient.open(): MySQL or Redis does not answer (yet)
    kafka_errors.KafkaConnectionError,
    kafka_errors.KafkaTimeoutError,
)

T = TypeVar("T")


def error_topic_of(settings: Settings) -> str:
    return settings.ingress_error_topic or f"{settings.ingress_topic}.errors"


def check_settings(settings: Settings) -> None:
    """ConfigError unless the settings can run an ingress."""
    if not settings.ingress_topic:
        raise ConfigError("ingress_topic is not set (DELAYQ_INGRESS_TOPIC): nothing to read")
    error_topic = error_topic_of(settings)
    for name, topic in (("ingress_topic", settings.ingress_topic), ("error topic", error_topic)):
        try:
            check_topic(topic)
        except InvalidJob as exc:
            hint = " (set ingress_error_topic)" if name == "error topic" else ""
            raise ConfigError(f"{name}: {exc}{hint}") from None
    if error_topic == settings.ingress_topic:
        raise ConfigError(
            "ingress_error_topic must differ from ingress_topic: a refused record would "
            "be read again and refused again, for ever"
        )
    if settings.ingress_batch > MAX_BATCH:
        raise ConfigError(
            f"ingress_batch must be <= {MAX_BATCH} (schedule_many()'s limit per call), "
            f"got {settings.ingress_batch}"
        )


async def start_error_producer(settings: Settings) -> AIOKafkaProducer:
    """The producer of error records, started."""
    s = settings
    producer = AIOKafkaProducer(
        **connection_options(s),
        client_id=f"delayq-ingress-{s.node_id}",
        acks="all",
        enable_idempotence=s.kafka_idempotence,
        linger_ms=s.kafka_linger_ms,
        request_timeout_ms=s.kafka_request_timeout_ms,
        max_request_size=s.kafka_max_batch_bytes,
    )
    try:
        await start_client(producer, s)
    except BaseException:
        await producer.stop()
        raise
    return producer


async def start_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The consumer of ingress_topic in ingress_group, started; offsets are committed by
    the ingress itself, after each round is stored."""
    s = settings
    consumer = make_consumer(
        s,
        s.ingress_topic,
        group_id=s.ingress_group,
        client_id=f"delayq-ingress-{s.node_id}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        # Records of a transaction that was aborted are not jobs.
        isolation_level="read_committed",
        max_poll_records=s.ingress_batch,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
    )
    try:
        await start_client(consumer, s)
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def waiting_for(what: str, attempt: Callable[[], Awaitable[T]], deadline: float) -> T:
    """attempt() until it succeeds, waiting out errors of a store that does not answer
    yet with capped backoff until `deadline` (time.monotonic()). Refusals that waiting
    cannot cure (StoreAccessError, SchemaError, ConfigError) and other errors raise."""
    pause = START_FIRST_RETRY_S
    while True:
        try:
            return await attempt()
        except (StoreAccessError, SchemaError, ConfigError):
            raise
        except _START_TRANSIENT as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StartupFailed(
                    f"{what} did not answer within startup_timeout_s: {one_line(exc)}"
                ) from exc
            pause = min(pause, left)
            log.warning("waiting for %s: %s; retrying in %.1f s", what, one_line(exc), pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, START_MAX_RETRY_S)
