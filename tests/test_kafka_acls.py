"""The secure local stack's Kafka runs as docs/security.md says production should: an
authorizer (StandardAuthorizer) with the page's ACLs and nothing more
(cluster/devstack/kafka_acls.py), one SCRAM user per role, no topic created by writing to
it, and the brokers' password in files only their owner may read.

- a node user with exactly the documented ACLs runs ``delivery = exactly_once`` (key
  prefix ``dq``, fired topic ``orders.*``, as on the page), and its job fires once;
- the producer's and the ingress's credentials are refused when they write the journal
  topic; the nodes' credential is refused on a topic outside its prefixes;
- writing to a topic that does not exist creates nothing, even as a super user;
- ``server.properties`` (the brokers' password) is 0600 in a 0700 folder.

The stores other than Kafka are this run's (plain in the first pass of ``make test``).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewTopic
from aiokafka.errors import (
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from actors.journal import Journal, journal_key_name
from actors.node import Node
from cluster import DelayClient
from cluster.connections.kafka_conn import connection_options, make_admin, start_client
from cluster.connections.redis_conn import open_redis
from cluster.devstack import kafka, kafka_acls, stack
from cluster.devstack import secure as secure_stack
from cluster.devstack.databases import create_cluster_database, forget_cluster
from cluster.settings.config import Settings
from tests.conftest import Collector, redis_admin

pytestmark = pytest.mark.once

# Bounds of the waits; none of them is what a test checks.
FIRE_WITHIN_S = 60.0
SEND_TIMEOUT_MS = 5000


@pytest.fixture(scope="module")
def secure_kafka(secure_env: dict[str, str]) -> Settings:
    """The secure stack's Kafka settings (the nodes' user)."""
    kafka_env = {k: v for k, v in secure_env.items() if k.startswith("DELAYQ_KAFKA_")}
    found = Settings.from_env(kafka_env)
    if found.kafka_security_protocol != "SASL_SSL":
        pytest.skip("the secure stack's Kafka has no SASL (`--kafka tansu`): no users, no ACLs")
    return found


def as_user(kafka_settings: Settings, user: str) -> Settings:
    """The secure stack's Kafka settings with another of its users."""
    keys = secure_stack.load(stack.stack_root(secure=True))
    password = keys.password(kafka.USERS[user])
    return kafka_settings.replace(kafka_sasl_username=user, kafka_sasl_password=password)


def on_secure_kafka(settings: Settings, kafka_settings: Settings, **changes: object) -> Settings:
    """settings (this run's MySQL, Redis, ZooKeeper) with the secure stack's Kafka."""
    names = [name for name in Settings.__dataclass_fields__ if name.startswith("kafka_")]
    return settings.replace(**{name: getattr(kafka_settings, name) for name in names} | changes)


async def create_topic(admin_settings: Settings, prefix: str) -> str:
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    admin = make_admin(admin_settings)
    try:
        await start_client(admin, admin_settings)
        await admin.create_topics([NewTopic(name, 3, 1)])
    finally:
        await admin.close()
    return name


async def list_topics(admin_settings: Settings) -> list[str]:
    admin = make_admin(admin_settings)
    try:
        await start_client(admin, admin_settings)
        return await admin.list_topics()
    finally:
        await admin.close()


async def send_once(kafka_settings: Settings, topic: str) -> None:
    """One record to topic, with a bounded wait for its metadata."""
    producer = AIOKafkaProducer(
        **connection_options(kafka_settings), request_timeout_ms=SEND_TIMEOUT_MS
    )
    await start_client(producer, kafka_settings)
    try:
        await producer.send_and_wait(topic, b"{}", key=b"k")
    finally:
        await producer.stop()


async def drop_redis_keys(settings: Settings) -> None:
    """Forget what an earlier run left under the key prefix."""
    redis = await open_redis(redis_admin(settings))
    try:
        names = [name async for name in redis.scan_iter(match=f"{{{settings.key_prefix}:*")]
        names.append(journal_key_name(settings.key_prefix))
        await redis.delete(*names)
    finally:
        await redis.aclose()


async def test_a_node_with_the_documented_acls_runs_exactly_once(
    redis_settings: Settings, secure_kafka: Settings
) -> None:
    names = kafka_acls.AclNames()
    assert secure_kafka.kafka_sasl_username == kafka_acls.NODE_USER
    admin = as_user(secure_kafka, kafka.ADMIN_USER)
    topic = await create_topic(admin, names.fired_topics_prefix)
    cluster = redis_settings.replace(key_prefix=names.key_prefix)
    await drop_redis_keys(cluster)
    database = f"delayq_{names.key_prefix}_{uuid.uuid4().hex[:8]}"
    node_settings = on_secure_kafka(
        await create_cluster_database(cluster, database),
        secure_kafka,
        delivery="exactly_once",
        kafka_journal_topic=names.journal_topic,
        startup_timeout_s=60.0,
    )
    collector = Collector(admin, topic, isolation_level="read_committed")
    await collector.start()
    node = Node(node_settings)
    try:
        await node.start()
        async with DelayClient(node_settings) as client:
            job_id = await client.schedule(topic, {"acl": "documented"}, delay=0.2)
        # read_committed: the record is there only if its transaction committed.
        records = await collector.until(1, timeout_s=FIRE_WITHIN_S)
        assert [record["job_id"] for record in records] == [job_id]
    finally:
        await node.stop()
        await collector.stop()
        await forget_cluster(node_settings)
        await drop_redis_keys(node_settings)


@pytest.mark.parametrize("user", [kafka_acls.PRODUCER_USER, kafka_acls.INGRESS_USER])
async def test_other_credentials_cannot_write_the_journal(
    secure_kafka: Settings, user: str
) -> None:
    admin = as_user(secure_kafka, kafka.ADMIN_USER)
    await Journal(admin).create_topic()  # as a node would, whatever ran before
    with pytest.raises(TopicAuthorizationFailedError):
        await send_once(as_user(secure_kafka, user), secure_kafka.kafka_journal_topic)


async def test_the_nodes_credential_writes_only_its_prefixes(secure_kafka: Settings) -> None:
    admin = as_user(secure_kafka, kafka.ADMIN_USER)
    outside = await create_topic(admin, "billing.")
    with pytest.raises(TopicAuthorizationFailedError):
        await send_once(secure_kafka, outside)
    await send_once(secure_kafka, await create_topic(admin, "orders."))  # allowed


async def test_writing_to_a_missing_topic_creates_nothing(
    secure_kafka: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="aiokafka.cluster")  # "not found", repeated
    admin = as_user(secure_kafka, kafka.ADMIN_USER)  # a super user: Create on everything
    missing = f"test.never-created.{uuid.uuid4().hex[:12]}"
    with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
        await send_once(admin, missing)
    assert missing not in await list_topics(admin)


def test_the_brokers_password_is_in_private_files_only(secure_env: dict[str, str]) -> None:
    root = stack.stack_root(secure=True)
    keys = secure_stack.load(root)
    folder = root / "kafka"
    properties = folder / "server.properties"
    assert properties.stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    secrets = [keys.password(name) for name in kafka.USERS.values()]
    readable: list[Path] = [
        path
        for path in folder.rglob("*")
        if path.is_file() and path.stat().st_mode & 0o077 and path.stat().st_size < 10_000_000
    ]
    leaked = [
        str(path)
        for path in readable
        if any(secret.encode() in path.read_bytes() for secret in secrets)
    ]
    assert leaked == []
