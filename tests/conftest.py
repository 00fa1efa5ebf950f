"""Fixtures: the real local stack (started through `delayq services up`), and per-test
isolation by a fresh Redis key prefix and a fresh Kafka topic.

Set DELAYQ_TEST_EXTERNAL=1 to test against services already named by DELAYQ_* variables
instead of starting the local stack, and DELAYQ_TEST_REDIS_CLUSTER=1 to run the suite
against the local three-master Redis Cluster instead of the single Redis;
DELAYQ_TEST_REDIS_REPLICAS=1 gives that cluster a replica per master, makes clients and
nodes wait for it (redis_wait_replicas=1) and enables the failover scenarios.
DELAYQ_TEST_MYSQL_SERVERS=3 puts each test's shards on three MariaDB servers (`delayq
services up --mysql-servers 3`, mysql_databases 3, mysql_tables 2). DELAYQ_TEST_SECURE=1
runs it against the secure local stack (`delayq services up --secure`: TLS and passwords
everywhere; docs/security.md); the ``redis`` fixture then logs in as the
stack's Redis admin, since tests use KEYS, CONFIG SET and FLUSHALL, which the delayq user
may not, and the ``topic`` fixture and ``Collector`` use its Kafka admin, since the nodes'
Kafka user may only write the tests' topics. DELAYQ_TEST_SECURE=stores takes only Redis
and MySQL from the secure stack, and Kafka and ZooKeeper from the plain one.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
import uvloop
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from actors.node import Node
from cluster import DelayClient
from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.devstack import stack
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.service import ServicesError
from cluster.model.keys import KeySpace
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings

TOPIC_PARTITIONS = 3
SECURE_MODE = os.environ.get("DELAYQ_TEST_SECURE", "")
MYSQL_SERVERS = int(os.environ.get("DELAYQ_TEST_MYSQL_SERVERS", "1"))
SECURE_RUN = SECURE_MODE in ("1", "stores")
# What DELAYQ_TEST_SECURE=stores takes from the plain stack, and drops from the secure one.
_PLAIN_PARTS = ("DELAYQ_KAFKA_BOOTSTRAP", "DELAYQ_ZK_HOSTS")
_SECURE_ONLY_PARTS = ("DELAYQ_KAFKA_SECURITY_PROTOCOL", "DELAYQ_KAFKA_SSL_CAFILE", "DELAYQ_ZK_AUTH")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `make test`'s workers (pytest-xdist --dist loadgroup), a module with a
    private stack (tests/faults/private.py) is marked `private` and runs on one worker:
    its stack has fixed ports, and its module fixture starts it once. The `alone` tests
    form one group too: when they run beside the private ones, they run one at a time."""
    for item in items:
        if "private_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.private)
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))  # type: ignore[attr-defined]
        elif item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.xdist_group("alone"))


# The test this process runs now (set before each test), for must_run_alone().
_RUNNING: list[pytest.Item] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING[:] = [item]


def must_run_alone(what: str) -> None:
    """Fail the running test unless it is marked `alone`: it is about to do `what` to a
    service every test shares, and the tests `make test` runs beside it would fail."""
    if _RUNNING and _RUNNING[0].get_closest_marker("alone") is None:
        pytest.fail(f"{_RUNNING[0].nodeid} {what}: mark it @pytest.mark.alone (CONTRIBUTING.md)")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run a grouped test ungrouped: pytest-xdist marks a group by a suffix
    of the test's id, which some pytest releases drop (pytest-xdist#1386); two workers
    would then start one private stack at once."""
    if not session.config.getoption("loadgroup", default=False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"{item.nodeid}: pytest-xdist did not group it (pytest {pytest.__version__}); "
                "use the pytest release pyproject.toml allows"
            )


@pytest.fixture(scope="session")
def event_loop_policy() -> uvloop.EventLoopPolicy:
    return uvloop.EventLoopPolicy()


# How long the session's event loop keeps running after the last test: see below.
CLOSING_GRACE_S = 0.5


@pytest.fixture(scope="session", autouse=True)
async def let_connections_finish_closing() -> AsyncIterator[None]:
    """aiokafka closes its connections without waiting for them; a TLS connection then
    needs the event loop a moment longer to finish its shutdown with the server. Were
    the loop closed first, uvloop would fail the last test's teardown.

    Then any connection still open is closed here, and named on stderr. uvloop's
    close() closes leftover handles itself, but warns first, and with warnings as
    errors (pyproject's filterwarnings) the warning raises before the close: the loop
    then waits forever for that connection, and the session never ends."""
    yield
    await asyncio.sleep(CLOSING_GRACE_S)
    left_open = left_open_by_tests()
    for thing in left_open:
        print(f"\nclosing what a test left open: {thing!r}", file=sys.stderr)
        # A stream's abort() closes it at once; servers and subprocesses have close().
        getattr(thing, "abort", thing.close)()
    if left_open:
        await asyncio.sleep(0)  # the closes' callbacks run


def left_open_by_tests() -> list[Any]:
    """uvloop's transports not closed or closing, and its servers still serving (found
    through the garbage collector: nothing else lists them)."""
    found: list[Any] = []
    for candidate in gc.get_objects():
        kind = type(candidate)
        if kind.__module__ != "uvloop.loop":
            continue
        if kind.__name__.endswith("Transport") and not candidate.is_closing():
            found.append(candidate)
        elif kind.__name__ == "Server" and candidate.is_serving():
            found.append(candidate)
    return found


@pytest.fixture(scope="session")
def stack_env() -> Iterator[dict[str, str]]:
    """Start the local stack once per session (idempotent) and point DELAYQ_* at it."""
    if os.environ.get("DELAYQ_TEST_EXTERNAL") == "1":
        yield {}
        return
    if os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1":
        os.environ["DELAYQ_SERVICES_REDIS_CLUSTER"] = "1"
    if os.environ.get("DELAYQ_TEST_REDIS_REPLICAS") == "1":
        # The cluster with a replica per master; every client and node waits for one.
        os.environ["DELAYQ_SERVICES_REDIS_CLUSTER"] = "1"
        os.environ["DELAYQ_SERVICES_REDIS_REPLICAS"] = "1"
        os.environ["DELAYQ_REDIS_WAIT_REPLICAS"] = "1"
    if MYSQL_SERVERS > 1:
        # Several MariaDB servers, one logical shard (database) on each to start with.
        os.environ["DELAYQ_SERVICES_MYSQL_SERVERS"] = str(MYSQL_SERVERS)
        os.environ.setdefault("DELAYQ_MYSQL_DATABASES", str(MYSQL_SERVERS))
        # Two tables a database: several shards per server, and each test's database
        # made on three servers about as fast as one server's four tables.
        os.environ.setdefault("DELAYQ_MYSQL_TABLES", "2")
    stack.up(secure=SECURE_RUN)
    env = stack.stack_env(secure=SECURE_RUN)
    if SECURE_MODE == "stores":
        stack.up()
        plain = stack.stack_env()
        env = {k: v for k, v in env.items() if k not in _SECURE_ONLY_PARTS}
        env.update({k: plain[k] for k in _PLAIN_PARTS})
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def secure_env() -> dict[str, str]:
    """The secure local stack, started once per session (whichever stack the suite runs
    against): its DELAYQ_* settings, not exported. Skips when it cannot start here."""
    if os.environ.get("DELAYQ_TEST_EXTERNAL") == "1" and not SECURE_RUN:
        pytest.skip("DELAYQ_TEST_EXTERNAL=1: the secure local stack is not started")
    # The secure stack runs one MariaDB server, whatever the plain one runs.
    servers = os.environ.pop("DELAYQ_SERVICES_MYSQL_SERVERS", None)
    try:
        stack.up(secure=True)
        return stack.stack_env(secure=True)
    except ServicesError as exc:
        pytest.skip(f"the secure local stack cannot start on this machine: {exc}")
    finally:
        if servers is not None:
            os.environ["DELAYQ_SERVICES_MYSQL_SERVERS"] = servers


def redis_admin(settings: Settings) -> Settings:
    """settings with a Redis user allowed admin commands (KEYS, CONFIG SET, FLUSHALL):
    the secure stack's admin when DELAYQ_TEST_REDIS_ADMIN_URL names it, else unchanged."""
    admin_url = os.environ.get("DELAYQ_TEST_REDIS_ADMIN_URL")
    return settings.replace(redis_url=admin_url) if admin_url else settings


def kafka_admin(settings: Settings) -> Settings:
    """settings with a Kafka user allowed to create and read the tests' topics: the
    secure stack's admin when DELAYQ_TEST_KAFKA_ADMIN_USERNAME names it, else unchanged."""
    user = os.environ.get("DELAYQ_TEST_KAFKA_ADMIN_USERNAME")
    if not user or settings.kafka_sasl_username == user:
        return settings
    password = os.environ.get("DELAYQ_TEST_KAFKA_ADMIN_PASSWORD", "")
    return settings.replace(kafka_sasl_username=user, kafka_sasl_password=password)


@pytest.fixture
def redis_settings(stack_env: dict[str, str]) -> Settings:
    """Settings of the stack with a Redis key prefix of this test's own; no MySQL
    database is made (for tests of Redis and the scripts alone)."""
    return Settings.from_env().replace(
        key_prefix=f"t{uuid.uuid4().hex[:10]}", node_id=f"test-{uuid.uuid4().hex[:6]}"
    )


@pytest.fixture
async def settings(redis_settings: Settings) -> AsyncIterator[Settings]:
    """redis_settings plus a MySQL database of this test's own, migrated (one database
    serves one cluster)."""
    prefix = redis_settings.key_prefix
    settings = await create_cluster_database(redis_settings, f"delayq_{prefix}")
    yield settings
    await drop_cluster_database(settings)


@pytest.fixture
async def redis(redis_settings: Settings) -> AsyncIterator[RedisClient]:
    client = await open_redis(redis_admin(redis_settings))
    yield client
    await client.aclose()


@pytest.fixture
def scripts(redis: RedisClient, redis_settings: Settings) -> Scripts:
    return Scripts(redis, KeySpace(redis_settings.key_prefix))


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[DelayClient]:
    async with DelayClient(settings) as c:
        yield c


@pytest.fixture
async def node(settings: Settings) -> AsyncIterator[Node]:
    n = Node(settings)
    await n.start()
    yield n
    await n.stop()


# How long a test's teardown tries to delete its topic.
TOPIC_DELETE_S = 10.0


@pytest.fixture
async def topic(settings: Settings) -> AsyncIterator[str]:
    """A new Kafka topic with a few partitions, deleted after the test: a broker left
    with thousands of them takes minutes to start again after a kill, which the fault
    tests do."""
    name = f"test.{uuid.uuid4().hex[:12]}"
    settings = kafka_admin(settings)
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        await admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 1)])
    finally:
        await admin.close()
    yield name
    admin = make_admin(settings)
    try:
        async with asyncio.timeout(TOPIC_DELETE_S):
            await start_client(admin, settings)
            await admin.delete_topics([name])
    except Exception as error:  # a broker a failed test left down: the topic stays
        print(f"\ntopic {name} not deleted: {error!r}", file=sys.stderr)
    finally:
        await admin.close()


class Collector:
    """Reads every record of a topic from the beginning, with its receive time, through
    one live consumer (isolation_level: read_committed for nodes that publish with
    delivery = exactly_once). The broker keeps and shows what it acknowledged, so the
    live consumer is all there is: what it has not read yet, it reads later."""

    def __init__(
        self, settings: Settings, topic: str, isolation_level: str = "read_uncommitted"
    ) -> None:
        settings = kafka_admin(settings)  # a user allowed to read every test topic
        self.settings = settings  # its Kafka connection and security settings
        self.topic = topic
        self.consumer = make_consumer(
            settings, enable_auto_commit=False, fetch_max_wait_ms=5, isolation_level=isolation_level
        )
        self.records: list[dict[str, object]] = []
        self.keys: list[bytes] = []
        self._seen: set[tuple[int, int]] = set()  # (partition, offset)

    @property
    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(TOPIC_PARTITIONS)]

    async def start(self) -> None:
        await start_client(self.consumer, self.settings)
        self.consumer.assign(self.partitions)
        await self.consumer.seek_to_beginning(*self.partitions)

    async def stop(self) -> None:
        await self.consumer.stop()

    async def poll(self, timeout_s: float = 0.2) -> int:
        batch = await self.consumer.getmany(timeout_ms=int(timeout_s * 1000))
        return self._add(batch, time.time() * 1000)

    async def caught_up(self, timeout_s: float = 30.0) -> bool:
        """Poll until the live consumer has read up to the end offsets the broker
        reports now (the last stable offsets, for read_committed); False on timeout."""
        ends = await self.consumer.end_offsets(self.partitions)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            positions = [await self.consumer.position(tp) for tp in self.partitions]
            if all(at >= ends[tp] for at, tp in zip(positions, self.partitions, strict=True)):
                return True
            await self.poll()
        return False

    def _add(self, batch: dict[TopicPartition, list[Any]], received_ms: float) -> int:
        count = 0
        for partition, messages in batch.items():
            for message in messages:
                where = (partition.partition, message.offset)
                if where in self._seen:
                    continue
                self._seen.add(where)
                record = orjson.loads(message.value)
                record["received_ms"] = received_ms
                record["node"] = dict(message.headers).get("delayq-node", b"").decode()
                record["created_ms"] = message.timestamp  # when the node put it in a batch
                self.records.append(record)
                self.keys.append(message.key)
                count += 1
        return count

    async def until(self, count: int, timeout_s: float) -> list[dict[str, object]]:
        """Poll until `count` records arrived or timeout_s passed; returns all records."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count and time.monotonic() < deadline:
            await self.poll()
        return self.records

    async def quiet_for(self, seconds: float) -> list[dict[str, object]]:
        """Keep polling for `seconds` (to catch records that should not come)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.poll(min(0.2, max(deadline - time.monotonic(), 0.01)))
        return self.records


@pytest.fixture
async def collector(settings: Settings, topic: str) -> AsyncIterator[Collector]:
    c = Collector(settings, topic)
    await c.start()
    yield c
    await c.stop()


async def wait_for(predicate: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll an async predicate until true or timeout; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await predicate()  # type: ignore[operator]
        if result or time.monotonic() >= deadline:
            return bool(result)
        await asyncio.sleep(interval_s)
