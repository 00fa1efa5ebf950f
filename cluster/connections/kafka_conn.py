"""Kafka connections from Settings: the one place that turns the security settings into
aiokafka's keyword arguments, and a broker's refusal at start into one clear error.

    producer = AIOKafkaProducer(**connection_options(settings), acks="all")
    await start_client(producer, settings)  # KafkaAccessError: wrong password, TLS, CA

kafka_security_protocol picks the transport and authentication (docs/security.md):
PLAINTEXT (neither), SSL (TLS; a client certificate if kafka_ssl_certfile is set),
SASL_PLAINTEXT (SASL over plain TCP: trusted networks only) and SASL_SSL (SASL over TLS).
TLS always verifies the broker's certificate and host name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from pathlib import Path
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from cluster.errors import ConfigError, KafkaAccessError
from cluster.settings.config import Settings
from cluster.settings.logs import kafka_answered, name_kafka
from cluster.settings.security import client_tls, describe_tls_error, tls_cause

log = logging.getLogger(__name__)

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# How long the diagnosis after a failed start waits for one broker.
PROBE_TIMEOUT_S = 10.0
_SASL_REFUSALS = (
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.AuthenticationFailedError,
    kafka_errors.IllegalSaslStateError,
)


class ConnectionOptions(dict[str, Any]):
    """aiokafka's connection keyword arguments; repr and str hide the SASL password."""

    def __repr__(self) -> str:
        shown = {k: ("***" if k == "sasl_plain_password" and v else v) for k, v in self.items()}
        return f"ConnectionOptions({shown!r})"

    __str__ = __repr__


def bootstrap_servers(settings: Settings) -> list[str]:
    return [host.strip() for host in settings.kafka_bootstrap.split(",") if host.strip()]


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """The TLS context for SSL and SASL_SSL: the broker's certificate must be signed by
    kafka_ssl_cafile (or the system's CAs when it is "") and issued for its host name.
    ConfigError names the setting whose file is missing or unreadable."""
    files = {
        "kafka_ssl_cafile": settings.kafka_ssl_cafile,
        "kafka_ssl_certfile": settings.kafka_ssl_certfile,
        "kafka_ssl_keyfile": settings.kafka_ssl_keyfile,
    }
    for name, path in files.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{name} {path!r}: no such file (Kafka TLS)")
    if settings.kafka_ssl_keyfile and not settings.kafka_ssl_certfile:
        raise ConfigError("kafka_ssl_keyfile is set without kafka_ssl_certfile")
    try:
        return client_tls(
            settings.kafka_ssl_cafile, settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile
        )
    except (ssl.SSLError, OSError) as exc:
        # e.g. a CA file that holds no certificate, or a key that does not match.
        names = ", ".join(name for name, path in files.items() if path)
        raise ConfigError(f"cannot load the Kafka TLS files ({names}): {exc}") from None


def connection_options(settings: Settings) -> ConnectionOptions:
    """bootstrap_servers, security_protocol and, as the protocol needs them, ssl_context
    and sasl_mechanism/sasl_plain_username/sasl_plain_password: for any aiokafka client."""
    protocol = settings.kafka_security_protocol
    options = ConnectionOptions(
        bootstrap_servers=bootstrap_servers(settings), security_protocol=protocol
    )
    if protocol in TLS_PROTOCOLS:
        options["ssl_context"] = ssl_context(settings)
    if protocol in SASL_PROTOCOLS:
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = settings.kafka_sasl_password
    return options


def make_consumer(settings: Settings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer connected as the settings say; options go to AIOKafkaConsumer."""
    consumer = AIOKafkaConsumer(*topics, **connection_options(settings), **options)
    report_outages(consumer._client.cluster, settings)
    return consumer


def report_outages(cluster: Any, settings: Settings) -> None:
    """Have an aiokafka client's metadata (its ClusterMetadata) tell the log when Kafka
    answers again, and name the brokers in the outage lines (cluster/settings/logs.py)."""
    name_kafka(settings.kafka_bootstrap)
    cluster.add_listener(kafka_answered)


async def broker_answers(client: Any) -> bool:
    """Whether a broker of an aiokafka client (`producer.client`) answers a metadata
    request for no topic, trying the known brokers in turn. It names no topic on
    purpose: a client that tracks none asks for every topic on a refresh, thousands on
    a shared broker (about 30 ms of CPU per 1,400 topics), and a health check runs
    every second. A broker's answer ends a Kafka outage in the log."""
    brokers = [broker.nodeId for broker in client.cluster.brokers()]
    if not brokers:  # not bootstrapped: the client's own refresh knows the servers
        return bool(await client.force_metadata_update())
    random.shuffle(brokers)
    last: Exception | None = None
    for node_id in brokers:
        try:
            answer = await client.send(node_id, MetadataRequest([]))
        except (TimeoutError, kafka_errors.KafkaError, OSError) as exc:
            last = exc
            continue
        if answer.brokers:
            kafka_answered()
            return True
    if last is not None:
        raise last
    return False


def make_admin(settings: Settings, **options: Any) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**connection_options(settings), **options)


class _Startable(Protocol):
    async def start(self) -> None: ...


async def start_client(
    client: AIOKafkaProducer | AIOKafkaConsumer | AIOKafkaAdminClient | _Startable,
    settings: Settings,
) -> None:
    """client.start(); if it fails, find out why. A refusal waiting cannot cure raises
    KafkaAccessError; anything else (broker not up yet, timeouts) is re-raised as it
    was, so callers may retry it. The caller stops the client either way."""
    try:
        await client.start()
    except Exception as error:
        # aiokafka reports every bootstrap failure as "Unable to bootstrap" and only
        # logs the cause: connect once more ourselves to learn it.
        reason = await diagnose(settings)
        if reason is None:
            raise
        # Not chained: aiokafka's error ("Unable to bootstrap", or a parser's KeyError)
        # adds nothing to the reason but noise in the one-line start-up report.
        log.debug("Kafka client start failed: %r", error)
        raise KafkaAccessError(reason) from None


async def diagnose(settings: Settings) -> str | None:
    """Why Kafka refuses these settings, in one line naming Kafka, or None when no
    broker refused (it did not answer, or it accepted)."""
    for server in bootstrap_servers(settings):
        reason = await _probe(settings, server)
        if reason is not None:
            return hide_password(reason, settings)
    return None


def hide_password(text: str, settings: Settings) -> str:
    """text with the SASL password (should a library ever echo it) replaced by ***."""
    password = settings.kafka_sasl_password
    return text.replace(password, "***") if password else text


async def _probe(settings: Settings, server: str) -> str | None:
    """Connect to one broker in steps (transport and ApiVersions, then SASL, then a
    metadata request), so that a refusal can be told apart from the step it hit."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        return f"Kafka bootstrap server {server!r} is not host:port (kafka_bootstrap)"
    options = connection_options(settings)
    protocol = settings.kafka_security_protocol
    tls = protocol in TLS_PROTOCOLS
    where = f"Kafka at {server} ({protocol})"
    steps = ["transport", "sasl"] if protocol in SASL_PROTOCOLS else ["transport"]
    for step in steps:
        conn = None
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                conn = await create_conn(
                    host,
                    int(port),
                    security_protocol=protocol
                    if step == "sasl"
                    else ("SSL" if tls else "PLAINTEXT"),
                    ssl_context=options.get("ssl_context"),
                    sasl_mechanism=options.get("sasl_mechanism", "PLAIN"),
                    sasl_plain_username=options.get("sasl_plain_username"),
                    sasl_plain_password=options.get("sasl_plain_password"),
                    request_timeout_ms=int(PROBE_TIMEOUT_S * 1000),
                )
                if step == steps[-1]:
                    step = "metadata"
                    await conn.send(MetadataRequest([]))
        except Exception as error:
            return _refusal(settings, where, step, error)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
    return None


def _refusal(settings: Settings, where: str, step: str, error: BaseException) -> str | None:
    """The refusal `error` (met at `step`) stands for, or None when it may pass: the
    broker is not there (yet), or did not answer in time."""
    tls_error = tls_cause(error)
    if tls_error is not None:
        return (
            f"{where} refused the connection: {describe_tls_error(tls_error, 'kafka_ssl_cafile')}"
        )
    closed = isinstance(error, kafka_errors.KafkaConnectionError) and "closed" in str(error)
    who = f"as {settings.kafka_sasl_username!r} with {settings.kafka_sasl_mechanism}"
    if step == "transport":
        if closed and settings.kafka_security_protocol not in TLS_PROTOCOLS:
            return (
                f"{where} closed the connection on the first request: the listener "
                "probably expects TLS (kafka_security_protocol SSL or SASL_SSL)"
            )
        return None
    if step == "sasl":
        if isinstance(error, kafka_errors.UnsupportedSaslMechanismError):
            return f"{where} does not offer SASL {settings.kafka_sasl_mechanism}: {error}"
        if isinstance(error, _SASL_REFUSALS) or isinstance(error, KeyError | ValueError):
            # KeyError/ValueError: aiokafka's SCRAM client cannot parse the broker's
            # "e=..." error reply.
            detail = str(error) if isinstance(error, kafka_errors.KafkaError) else ""
            return (
                f"{where} refused SASL authentication {who}: wrong kafka_sasl_username or "
                "kafka_sasl_password" + (f" ({detail})" if detail and detail != "None" else "")
            )
        if closed:
            return (
                f"{where} closed the connection during SASL authentication {who}: wrong "
                "credentials, or the broker does not offer that mechanism "
                "(kafka_sasl_mechanism)"
            )
        return None
    if closed and settings.kafka_security_protocol not in SASL_PROTOCOLS:
        return (
            f"{where} closed the connection after the handshake: the listener probably "
            "requires SASL (kafka_security_protocol SASL_SSL or SASL_PLAINTEXT)"
        )
    return None
