"""Kafka TLS and SASL end to end, through cluster/connections/kafka_conn.py, against the
Apache Kafka of the secure local stack (`delayq services up --secure`; docs/security.md):
one SASL_SSL listener, SCRAM-SHA-512 only, the nodes' user `delayq-node`, and a
certificate signed by the stack's own CA.

With the stack's credentials a producer (the nodes' user), an admin client and a
consumer in a group (the admin user: the nodes' user may not read) work. A wrong
password, an unknown user, a mechanism the broker does not offer, a plain TCP client, a
TLS client without SASL and a CA that did not sign the broker's certificate are each
refused at start with one KafkaAccessError that names Kafka and the cause, never the
password, and a node stops at once with one line saying so.

A node firing jobs through this listener is tested by the secure pass of `make test`
(tests/test_end_to_end.py and others with DELAYQ_TEST_SECURE=1, where every client and
node uses these settings). With `--kafka tansu` the secure stack has no SASL, and these
tests are skipped.
"""

from __future__ import annotations

import logging
import time
import uuid

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from actors.node import Node, run_node
from actors.publisher import make_producer
from cluster.connections.kafka_conn import (
    connection_options,
    make_admin,
    make_consumer,
    start_client,
)
from cluster.devstack import kafka as kafka_stack
from cluster.devstack import kafka_acls, stack
from cluster.devstack import secure as secure_stack
from cluster.devstack.secure import make_ca
from cluster.errors import KafkaAccessError
from cluster.settings.config import Settings
from tests.conftest import Collector

# Kafka's listeners and credentials do not change with the Redis and MySQL shape.
pytestmark = pytest.mark.once

# What a Kafka connection is made of: copied from the secure stack onto a test's settings.
KAFKA_CONNECTION = (
    "kafka_bootstrap",
    "kafka_security_protocol",
    "kafka_ssl_cafile",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "kafka_idempotence",
)
# Bounds a read-back waits within; none of them is what a test checks.
READ_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def secure_kafka(secure_env: dict[str, str]) -> Settings:
    """Kafka settings of the secure local stack: SASL_SSL, SCRAM-SHA-512, its CA."""
    kafka = Settings.from_env(
        {k: v for k, v in secure_env.items() if k.startswith("DELAYQ_KAFKA_")}
    )
    if kafka.kafka_security_protocol != "SASL_SSL":
        pytest.skip(
            f"the secure stack's Kafka speaks {kafka.kafka_security_protocol}, not SASL_SSL "
            "(Tansu, `--kafka tansu`, has no SASL): these tests need Apache Kafka"
        )
    assert kafka.kafka_sasl_mechanism == "SCRAM-SHA-512" and kafka.kafka_sasl_password
    return kafka


def as_admin(kafka: Settings) -> Settings:
    """The secure stack's Kafka settings with its admin user (a super user), who creates
    and reads the tests' topics."""
    keys = secure_stack.load(stack.stack_root(secure=True))
    password = keys.password(kafka_stack.USERS[kafka_stack.ADMIN_USER])
    return kafka.replace(kafka_sasl_username=kafka_stack.ADMIN_USER, kafka_sasl_password=password)


@pytest.fixture(scope="module")
def foreign_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA that did not sign the secure stack's certificates."""
    cert, _ = make_ca(tmp_path_factory.mktemp("foreign-ca"), "a CA the broker never heard of")
    return str(cert)


def _on_secure_kafka(settings: Settings, kafka: Settings, **changes: object) -> Settings:
    """settings (this run's MySQL, Redis, ZooKeeper) with the secure stack's Kafka."""
    moved = {name: getattr(kafka, name) for name in KAFKA_CONNECTION}
    return settings.replace(**{**moved, **changes})


async def _create_topic(kafka: Settings, partitions: int = 1) -> str:
    topic = f"test.sasl.{uuid.uuid4().hex[:10]}"
    kafka = as_admin(kafka)
    admin = make_admin(kafka)
    try:
        await start_client(admin, kafka)
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    return topic


# ----- the stack's credentials -----------------------------------------------------------


async def test_the_stack_credentials_produce_and_consume_in_a_group(secure_kafka: Settings) -> None:
    options = connection_options(secure_kafka)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == kafka_acls.NODE_USER
    topic = await _create_topic(secure_kafka)
    producer = make_producer(secure_kafka)  # the node's producer: acks=all, idempotent
    try:
        await start_client(producer, secure_kafka)
        sent = [{"over": "sasl_ssl", "n": n} for n in range(3)]
        for record in sent:
            await producer.send_and_wait(topic, orjson.dumps(record), key=b"k")
    finally:
        await producer.stop()
    # A consumer group: its coordinator, joining and committing go over SASL_SSL too.
    group = f"test.sasl.group.{uuid.uuid4().hex[:8]}"
    reader = as_admin(secure_kafka)
    consumer = make_consumer(
        reader,
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    received: list[object] = []
    try:
        await start_client(consumer, reader)
        deadline = time.monotonic() + READ_WITHIN_S
        while len(received) < len(sent) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            received += [orjson.loads(m.value) for ms in batch.values() for m in ms]
        await consumer.commit()
        assert await consumer.committed(TopicPartition(topic, 0)) == len(sent)
    finally:
        await consumer.stop()
    assert received == sent


async def test_the_collector_reads_through_sasl(secure_kafka: Settings) -> None:
    """tests/conftest.py's Collector takes its Kafka connection from the settings."""
    kafka = secure_kafka
    topic = await _create_topic(kafka, partitions=3)
    producer = make_producer(kafka)
    try:
        await start_client(producer, kafka)
        for partition in range(3):
            record = {"job_id": f"j{partition}", "payload": {}}
            await producer.send_and_wait(topic, orjson.dumps(record), partition=partition)
    finally:
        await producer.stop()
    collector = Collector(as_admin(kafka), topic)
    await collector.start()
    try:
        received = await collector.until(3, READ_WITHIN_S)
    finally:
        await collector.stop()
    assert sorted(str(r["job_id"]) for r in received) == ["j0", "j1", "j2"]


async def test_the_topic_fixture_and_collector_use_the_settings(
    settings: Settings, topic: str
) -> None:
    """tests/conftest.py makes its Kafka clients through cluster/connections/kafka_conn.py
    too, whichever stack this run uses."""
    producer = make_producer(settings)
    try:
        await start_client(producer, settings)
        record = {"job_id": "j1", "payload": {}}
        await producer.send_and_wait(topic, orjson.dumps(record), key=b"j1", partition=0)
    finally:
        await producer.stop()
    collector = Collector(settings, topic)
    await collector.start()
    try:
        received = await collector.until(1, READ_WITHIN_S)
    finally:
        await collector.stop()
    assert [r["job_id"] for r in received] == ["j1"]


# ----- refusals --------------------------------------------------------------------------


# Stands for the file of the foreign_ca fixture, a CA that never signed the broker's
# certificate.
FOREIGN_CA = "<foreign CA>"

# Each case: the settings it changes, and what the refusal must say.
REFUSALS: dict[str, tuple[dict[str, str], str]] = {
    "wrong password": (
        {"kafka_sasl_password": "not-the-stack-password"},
        "(SASL_SSL) refused SASL authentication as 'delayq-node' with SCRAM-SHA-512: "
        "wrong kafka_sasl_username or kafka_sasl_password",
    ),
    "unknown user": (
        {"kafka_sasl_username": "nobody-here"},
        "(SASL_SSL) refused SASL authentication as 'nobody-here' with SCRAM-SHA-512: "
        "wrong kafka_sasl_username or kafka_sasl_password",
    ),
    "the brokers' user with the client's password": (
        {"kafka_sasl_username": "kafka-broker"},  # with the client's password
        "(SASL_SSL) refused SASL authentication as 'kafka-broker' with SCRAM-SHA-512",
    ),
    "SCRAM-SHA-256, not offered": (
        {"kafka_sasl_mechanism": "SCRAM-SHA-256"},
        "(SASL_SSL) does not offer SASL SCRAM-SHA-256",
    ),
    "PLAIN, not offered": (
        {"kafka_sasl_mechanism": "PLAIN"},
        "(SASL_SSL) does not offer SASL PLAIN",
    ),
    "plain TCP without SASL": (
        {"kafka_security_protocol": "PLAINTEXT"},
        "(PLAINTEXT) closed the connection on the first request: the listener probably "
        "expects TLS (kafka_security_protocol SSL or SASL_SSL)",
    ),
    "SASL over plain TCP": (
        {"kafka_security_protocol": "SASL_PLAINTEXT"},
        "(SASL_PLAINTEXT) closed the connection on the first request: the listener "
        "probably expects TLS",
    ),
    "TLS without SASL": (
        {"kafka_security_protocol": "SSL"},
        "(SSL) closed the connection after the handshake: the listener probably requires "
        "SASL (kafka_security_protocol SASL_SSL or SASL_PLAINTEXT)",
    ),
    "a CA that did not sign the broker's certificate": (
        {"kafka_ssl_cafile": FOREIGN_CA},
        "(SASL_SSL) refused the connection: its TLS certificate is not trusted "
        "(unable to get local issuer certificate): set kafka_ssl_cafile",
    ),
}


def refused_settings(kafka: Settings, case: str, foreign_ca: str) -> Settings:
    """The secure stack's Kafka settings changed as REFUSALS[case] says."""
    changes, _ = REFUSALS[case]
    return kafka.replace(
        **{name: foreign_ca if value == FOREIGN_CA else value for name, value in changes.items()}
    )


def _assert_one_clean_line(message: str, kafka: Settings, refused: Settings) -> None:
    assert message.startswith(f"Kafka at {kafka.kafka_bootstrap} ("), message
    assert "\n" not in message, message
    for password in {kafka.kafka_sasl_password, refused.kafka_sasl_password}:
        assert password not in message, message


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_a_refusal_is_one_clear_error(
    secure_kafka: Settings, foreign_ca: str, case: str
) -> None:
    _, expected = REFUSALS[case]
    refused = refused_settings(secure_kafka, case, foreign_ca)
    producer = make_producer(refused)
    try:
        with pytest.raises(KafkaAccessError) as caught:
            await start_client(producer, refused)
    finally:
        await producer.stop()
    message = str(caught.value)
    assert expected in message, message
    _assert_one_clean_line(message, secure_kafka, refused)


async def test_consumers_and_admin_clients_are_refused_the_same_way(
    secure_kafka: Settings,
) -> None:
    refused = refused_settings(secure_kafka, "wrong password", "")
    expected = "refused SASL authentication as 'delayq-node' with SCRAM-SHA-512"
    consumer = make_consumer(refused, group_id="never-joins")
    try:
        with pytest.raises(KafkaAccessError, match=expected):
            await start_client(consumer, refused)
    finally:
        await consumer.stop()
    admin = make_admin(refused)
    try:
        with pytest.raises(KafkaAccessError, match=expected):
            await start_client(admin, refused)
    finally:
        await admin.close()


@pytest.mark.parametrize(
    "case", ["wrong password", "a CA that did not sign the broker's certificate"]
)
async def test_a_node_start_is_refused_without_waiting(
    settings: Settings,
    secure_kafka: Settings,
    foreign_ca: str,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal is not waited out: no "waiting for Kafka" retry, KafkaAccessError rather
    than StartupFailed after startup_timeout_s."""
    _, expected = REFUSALS[case]
    refused = refused_settings(secure_kafka, case, foreign_ca)
    node_settings = _on_secure_kafka(settings, refused, startup_timeout_s=60)
    caplog.set_level(logging.WARNING)
    with pytest.raises(KafkaAccessError) as caught:
        await Node(node_settings).start()
    assert expected in str(caught.value)
    _assert_one_clean_line(str(caught.value), secure_kafka, refused)
    assert not [r for r in caplog.records if "waiting for Kafka" in r.getMessage()]


async def test_the_node_reports_a_sasl_refusal_in_one_line(
    settings: Settings, secure_kafka: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    refused = refused_settings(secure_kafka, "wrong password", "")
    node_settings = _on_secure_kafka(settings, refused, startup_timeout_s=60)
    code = await run_node(node_settings)
    assert code == 1
    lines = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "refused SASL authentication as 'delayq-node' with SCRAM-SHA-512" in lines[0]
    assert "waiting for Kafka" not in caplog.text
    assert refused.kafka_sasl_password not in caplog.text
    assert secure_kafka.kafka_sasl_password not in caplog.text
