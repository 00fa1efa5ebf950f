"""Which topics jobs may fire to, against the real stack: Kafka's internal topics, delayq's
own topics and (when allowed_topics is set) unlisted ones are refused with InvalidJob
wherever a job enters (client, schedule_in, recurring, dead-letter replay, HTTP API,
ingress) and nothing is written; a node refuses to publish such a job that got stored
anyway; and a node's /metrics stays bounded whatever number of topics producers use
(metrics_max_topics, topic="(other)")."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import aiomysql
import orjson
import pytest
from aiokafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from actors.node import Node
from cluster import DelayClient, Job, JobStatus
from cluster.connections.kafka_conn import make_admin, start_client
from cluster.errors import InvalidJob
from cluster.ingress.startup import error_topic_of
from cluster.settings.config import Settings
from cluster.store.sql import mysql_connect_args
from tests.conftest import Collector, wait_for
from tests.forwarder import free_port
from tests.processes import NodeProcess
from tests.test_ingress import (
    all_committed,
    ingress_running,
    job_count,
    make_topic,
    produce,
    read_topic,
)
from tests.test_web import OPERATOR, PRODUCER, TOKENS, serving

# Topic checks do not change with the Redis and MySQL shape.
pytestmark = pytest.mark.once

# Topics refused whatever allowed_topics says, with the words their error must contain;
# the ingress topics are those of the `policy` fixture's settings.
ALWAYS_REFUSED = {
    "__consumer_offsets": "Kafka's internal topics",
    "__transaction_state": "Kafka's internal topics",
    "delayq-journal": "kafka_journal_topic",
    "in.jobs": "ingress_topic",
    "in.jobs.errors": "ingress_error_topic",
}


@pytest.fixture
def policy(settings: Settings) -> Settings:
    """The test's settings as a producer with an ingress configured; allowed_topics
    left at its default (empty: any other topic)."""
    return settings.replace(ingress_topic="in.jobs")


async def jobs_in_mysql(client: DelayClient) -> int:
    return await job_count(client.mysql)


async def test_the_default_refuses_kafka_and_delayq_topics_everywhere_and_writes_nothing(
    policy: Settings,
) -> None:
    async with DelayClient(policy) as client:
        for topic, words in ALWAYS_REFUSED.items():
            with pytest.raises(InvalidJob, match=f"topic '{topic}' is refused.*{words}"):
                await client.schedule(topic, {"k": 1}, delay=1, job_id=f"one-{topic}")
            # A batch with one such job in it stores none of its jobs.
            with pytest.raises(InvalidJob, match=f"job 1: topic '{topic}' is refused"):
                await client.schedule_many(
                    [Job("orders.close", 1, delay=1, job_id=f"ok-{topic}"), Job(topic, 2, delay=1)]
                )
            with pytest.raises(InvalidJob, match=words):
                await client.schedule_recurring(f"r-{topic}", topic, 1, every=60)
            with pytest.raises(InvalidJob, match=words):
                await client.replay_dead(topic=topic)
            assert await client.get(f"one-{topic}") is None
            assert await client.get(f"ok-{topic}") is None
            assert await client.get_recurring(f"r-{topic}") is None
        assert await jobs_in_mysql(client) == 0
        # Any other valid topic is accepted by default.
        await client.schedule("orders.close", 1, delay=60, job_id="fine")
        assert await client.get("fine") is not None


async def test_schedule_in_refuses_them_and_writes_nothing_in_the_callers_transaction(
    policy: Settings,
) -> None:
    connection = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(policy))
    try:
        async with DelayClient(policy) as client:
            await connection.begin()
            for topic in ALWAYS_REFUSED:
                with pytest.raises(InvalidJob, match=f"topic '{topic}' is refused"):
                    await client.schedule_in(connection, topic, 1, delay=1, job_id=f"tx-{topic}")
            await connection.commit()
            assert await jobs_in_mysql(client) == 0
    finally:
        connection.close()


async def test_allowed_topics_refuses_the_rest_and_cannot_allow_a_refused_topic(
    policy: Settings,
) -> None:
    """Patterns name exact topics or prefixes; even a pattern matching delayq's own or
    Kafka's topics does not let them through."""
    allowed = policy.replace(allowed_topics="orders.*,reminders,delayq-*,__*,in.*")
    async with DelayClient(allowed) as client:
        await client.schedule("orders.close", 1, delay=60, job_id="a")
        await client.schedule("reminders", 1, delay=60, job_id="b")
        with pytest.raises(InvalidJob, match=r"topic 'remindersX' matches none of allowed"):
            await client.schedule("remindersX", 1, delay=60, job_id="c")
        for topic in ALWAYS_REFUSED:
            with pytest.raises(InvalidJob, match=f"topic '{topic}' is refused"):
                await client.schedule(topic, 1, delay=60, job_id=f"d-{topic}")
        assert await jobs_in_mysql(client) == 2


async def call(api: Any, method: str, path: str, body: object, token: str) -> tuple[int, Any]:
    """(status, JSON body) of a request with a JSON body and a bearer token."""
    headers = {"Authorization": f"Bearer {token}"}
    async with api.http.request(method, api.base + path, json=body, headers=headers) as answer:
        return answer.status, await answer.json(content_type=None)


async def test_the_http_api_answers_422_and_stores_nothing(policy: Settings) -> None:
    settings = policy.replace(web_tokens=TOKENS)
    async with DelayClient(settings) as client, serving(settings, client) as api:
        for topic in ALWAYS_REFUSED:
            job = {"topic": topic, "payload": 1, "delay": 60, "job_id": f"h-{topic}"}
            status, body = await call(api, "POST", "/v1/jobs", job, PRODUCER)
            assert status == 422, body
            assert body["type"].endswith("invalid-job") and f"'{topic}'" in body["detail"]
            batch = {"jobs": [{**job, "topic": "orders.ok", "job_id": "h-ok"}, job]}
            status, body = await call(api, "POST", "/v1/jobs", batch, PRODUCER)
            assert status == 422 and "job 1" in body["detail"], body
            recurring = {"topic": topic, "payload": 1, "every": 60}
            status, body = await call(api, "PUT", "/v1/recurring/r1", recurring, PRODUCER)
            assert status == 422, body
            replay = {"topic": topic}
            status, body = await call(api, "POST", "/v1/dead-letters/replay", replay, OPERATOR)
            assert status == 422, body
        assert await jobs_in_mysql(client) == 0
        assert await client.get_recurring("r1") is None


async def test_ingress_sends_such_records_to_the_error_topic_and_stores_nothing(
    settings: Settings,
) -> None:
    name = f"test.in.{uuid.uuid4().hex[:10]}"
    await make_topic(settings, name, 1)
    await make_topic(settings, f"{name}.errors", 1)
    ingress = settings.replace(ingress_topic=name, ingress_group=f"test-ingress-{name}")
    refused = ["__consumer_offsets", "delayq-journal", name, f"{name}.errors"]
    values = [orjson.dumps({"topic": t, "payload": 1, "delay": 60}) for t in refused]
    async with DelayClient(ingress) as client, ingress_running(ingress):
        placed = await produce(ingress, name, values, partition=0)
        assert await wait_for(lambda: all_committed(ingress, placed), timeout_s=60)
        errors = [orjson.loads(r.value) for r in await read_topic(ingress, f"{name}.errors", 1)]
        assert error_topic_of(ingress) == f"{name}.errors"
        assert [e["offset"] for e in errors] == [offset for _, offset, _ in placed]
        for topic, error in zip(refused, errors, strict=True):
            assert f"topic '{topic}'" in error["error"], error
        assert await jobs_in_mysql(client) == 0


async def test_a_node_never_publishes_a_stored_job_to_its_own_ingress_topic(
    settings: Settings, topic: str, collector: Collector
) -> None:
    """A producer without the ingress settings stores a job for the ingress topic; the
    node, whose settings name that topic as its ingress topic, never publishes it: the
    job goes dead with TopicNotAllowed."""
    node_settings = settings.replace(ingress_topic=topic, retry_backoff_ms=50)
    async with DelayClient(settings) as client:
        node = Node(node_settings)
        await node.start()
        try:
            job_id = await client.schedule(topic, "never", delay=0, max_attempts=2)

            async def dead() -> bool:
                row = await client.get(job_id)
                return row is not None and row.status == JobStatus.DEAD

            assert await wait_for(dead, timeout_s=30)
        finally:
            await node.stop()
        assert await collector.caught_up()
        assert collector.records == []
        [dead_job] = await client.dead_letters()
        assert dead_job.last_error is not None
        assert dead_job.last_error.startswith("TopicNotAllowed: ")
        assert "delayq's own ingress_topic" in dead_job.last_error


# ----- metrics: label values bounded ---------------------------------------------------------

TOPICS = 300


@pytest.fixture
async def many_topics(settings: Settings) -> AsyncIterator[list[str]]:
    """TOPICS new Kafka topics of one partition, made in one request and deleted after."""
    names = [f"test.many.{uuid.uuid4().hex[:8]}.{i}" for i in range(TOPICS)]
    admin = make_admin(settings)
    await start_client(admin, settings)
    try:
        await admin.create_topics([NewTopic(name, 1, 1) for name in names])
        yield names
    finally:
        try:
            await admin.delete_topics(names)
        finally:
            await admin.close()


async def scrape(port: int) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as answer,
    ):
        assert answer.status == 200
        return await answer.text()


def samples(text: str, name: str) -> list[Any]:
    return [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def test_300_topics_do_not_grow_metrics_beyond_the_cap(
    settings: Settings, many_topics: list[str], tmp_path: Path
) -> None:
    port = free_port()
    node = NodeProcess(
        settings,
        tmp_path,
        "node-topics",
        {"DELAYQ_METRICS_PORT": str(port), "DELAYQ_METRICS_HOST": "127.0.0.1"},
    )
    try:
        await node.wait_ready()
        idle = await scrape(port)
        assert samples(idle, "delayq_metrics_topics_folded")[0].value == 0
        async with DelayClient(settings) as client:
            await client.schedule_many(
                [Job(t, {"i": i}, delay=0) for i, t in enumerate(many_topics)]
            )
        seen: list[str] = [idle]

        async def all_fired() -> bool:
            seen[0] = await scrape(port)
            return sum(s.value for s in samples(seen[0], "delayq_jobs_fired_total")) == TOPICS

        assert await wait_for(all_fired, timeout_s=120, interval_s=0.5)
        text = seen[0]
        limit = settings.metrics_max_topics
        fired = {s.labels["topic"]: s.value for s in samples(text, "delayq_jobs_fired_total")}
        assert len(fired) == limit + 1
        assert fired["(other)"] == TOPICS - limit
        assert set(fired) - {"(other)"} <= set(many_topics)
        lateness = samples(text, "delayq_fire_lateness_seconds_count")
        assert {s.labels["topic"] for s in lateness} == set(fired)
        assert sum(s.value for s in lateness) == TOPICS
        assert samples(text, "delayq_metrics_topics_folded")[0].value == TOPICS - limit
        print(
            f"\n/metrics: {len(idle.encode())} bytes idle, {len(text.encode())} bytes after "
            f"firing to {TOPICS} topics ({len(fired)} topic label values)"
        )
    finally:
        await node.stop()
