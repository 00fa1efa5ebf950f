"""Pending counts (cluster/store/counts.py) against the real stack: jobs due within the
Redis horizon and beyond it in several topics, counted per topic and tier, compared with
a direct COUNT(*) in MySQL; after cancels; over HTTP (GET /v1/jobs/counts, which a job
named "counts" does not shadow); in `delayq cluster status`; and as the node's
delayq_pending_jobs gauge."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest
from prometheus_client.core import Metric

from actors.metrics import NodeCollector
from actors.node import Node
from cluster import DelayClient, Job
from cluster.model.contract import WAITING_STATUSES
from cluster.observe.pending_view import read_pending_or_why
from cluster.settings.config import Settings
from cluster.store import counts as store_counts
from cluster.store import sql
from cluster.store.counts import PendingCounts
from tests.conftest import wait_for
from tests.forwarder import free_port
from tests.test_cli import cli
from tests.test_top import top
from tests.test_web import VIEWER, serving

pytestmark = pytest.mark.once

# (topic, jobs due in a minute, jobs due in an hour or two); the horizon is 5 minutes.
PLAN = [("counts.a", 5, 7), ("counts.b", 3, 11), ("counts.c", 0, 4), ("counts.d", 6, 0)]


async def direct_counts(client: DelayClient, as_of_ms: int, horizon_ms: int) -> Counter[Any]:
    """(topic, "in_redis" | "beyond_horizon") -> COUNT(*) of waiting rows, every table."""
    edge = sql.ms_to_datetime(as_of_ms + horizon_ms)
    store = client.mysql
    found: Counter[Any] = Counter()

    async def read(conn: Any, dbs: list[int]) -> None:
        async with conn.cursor() as cur:
            for shard in store.all_shards(dbs):
                table = store.shard_tables(shard)[0]
                await cur.execute(
                    f"SELECT topic, action_time <= %s, COUNT(*) FROM {table} IGNORE INDEX"
                    f" (idx_status_topic_due) WHERE status IN ({sql.int_list(WAITING_STATUSES)})"
                    " GROUP BY 1, 2",
                    (edge,),
                )
                for topic, near, count in await cur.fetchall():
                    found[topic, "in_redis" if near else "beyond_horizon"] += int(count)

    await store.router.run_grouped(range(store.settings.mysql_databases), read)
    return found


def as_counter(counts: PendingCounts) -> Counter[Any]:
    found: Counter[Any] = Counter()
    for topic, tiers in counts.topics.items():
        found[topic, "in_redis"] += tiers.in_redis
        found[topic, "beyond_horizon"] += tiers.beyond_horizon
    return +found


def listed(answer: dict[str, Any]) -> Counter[Any]:
    """The topics of an answer as JSON, as direct_counts gives them."""
    found: Counter[Any] = Counter()
    for t in answer["topics"]:
        found[t["topic"], "in_redis"] += t["in_redis"]
        found[t["topic"], "beyond_horizon"] += t["beyond_horizon"]
    return found


async def schedule_plan(client: DelayClient) -> dict[str, list[str]]:
    """The PLAN's jobs; their ids by topic, far ones last."""
    ids: dict[str, list[str]] = {}
    for topic, near, far in PLAN:
        jobs = [Job(topic, {"i": i}, delay=60 + i) for i in range(near)]
        jobs += [Job(topic, {"i": i}, delay=3600 + 60 * i) for i in range(far)]
        ids[topic] = await client.schedule_many(jobs)
    return ids


async def test_counts_match_mysql_per_topic_and_tier_and_drop_after_cancels(
    client: DelayClient,
) -> None:
    ids = await schedule_plan(client)
    counts = await client.pending_counts()
    assert counts.horizon_ms == client.settings.redis_horizon_ms
    expected = await direct_counts(client, counts.as_of_ms, counts.horizon_ms)
    assert expected == Counter(
        {(t, "in_redis"): n for t, n, _ in PLAN if n}
        | {(t, "beyond_horizon"): f for t, _, f in PLAN if f}
    )
    assert as_counter(counts) == expected
    assert counts.total.in_redis == sum(n for _, n, _ in PLAN)
    assert counts.total.beyond_horizon == sum(f for _, _, f in PLAN)
    assert not counts.total.approximate and not counts.more_topics
    assert [topic for topic, _ in counts.top(2)] == ["counts.b", "counts.a"]  # 14, then 12

    # Two far jobs of a and one near job of d cancelled: counted no more.
    for job_id in (ids["counts.a"][-1], ids["counts.a"][-2], ids["counts.d"][0]):
        assert await client.cancel(job_id)
    after = await client.pending_counts()
    assert as_counter(after) == await direct_counts(client, after.as_of_ms, after.horizon_ms)
    assert after.topics["counts.a"].beyond_horizon == 5
    assert after.topics["counts.d"].in_redis == 5
    assert after.total.pending == counts.total.pending - 3


async def test_estimates_are_marked_and_a_topic_cap_keeps_the_total(
    client: DelayClient,
) -> None:
    await schedule_plan(client)
    horizon = client.settings.redis_horizon_ms
    exact = await store_counts.pending_counts(client.mysql, horizon)
    estimated = await store_counts.pending_counts(client.mysql, horizon, exact_rows=0)
    assert set(estimated.topics) == set(exact.topics)
    assert all(tiers.approximate for tiers in estimated.topics.values())
    assert estimated.total.approximate and not exact.total.approximate
    capped = await store_counts.pending_counts(client.mysql, horizon, max_topics=1)
    assert capped.more_topics  # some table holds jobs of more than one topic
    assert (capped.total.in_redis, capped.total.beyond_horizon) == (
        exact.total.in_redis,
        exact.total.beyond_horizon,
    )


async def test_http_route_answers_the_same(settings: Settings) -> None:
    settings = settings.replace(web_tokens=f"{VIEWER}=viewer")
    async with DelayClient(settings) as client, serving(settings, client) as api:
        await schedule_plan(client)
        # A job named "counts" is still reached by its id for anything but GET.
        await client.schedule_many([Job("counts.e", {}, delay=7200, job_id="counts")])
        status, answer, _ = await api.call("GET", "/v1/jobs/counts", token=VIEWER)
        assert status == 200, answer
        direct = await direct_counts(client, answer["as_of_ms"], answer["horizon_ms"])
        assert +listed(answer) == direct
        assert answer["total"] == {
            "in_redis": sum(n for _, n, _ in PLAN),
            "beyond_horizon": sum(f for _, _, f in PLAN) + 1,
            "approximate": False,
        }
        status, limited, _ = await api.call("GET", "/v1/jobs/counts?limit=1", token=VIEWER)
        assert status == 200 and len(limited["topics"]) == 1 and limited["more_topics"]
        for bad in ("0", "1001", "x", "-1"):
            status, problem, _ = await api.call("GET", f"/v1/jobs/counts?limit={bad}", token=VIEWER)
            assert status == 422 and "limit" in problem["detail"]
        # Counts take no ?history= (a job's parameter): refused, not read as a job lookup.
        status, problem, _ = await api.call("GET", "/v1/jobs/counts?history=true", token=VIEWER)
        assert status == 422 and "history" in problem["detail"] and "job_id" not in problem
        settings_op = settings.replace(web_tokens=f"{VIEWER}=operator")
        async with serving(settings_op, client) as operator:
            status, cancelled, _ = await operator.call("DELETE", "/v1/jobs/counts", token=VIEWER)
        assert status == 200, cancelled
        record = await client.get("counts")
        assert record is not None and record.topic == "counts.e" and record.status == 3


async def test_cluster_status_and_top_show_the_pending_section(
    client: DelayClient, node: Node
) -> None:
    await schedule_plan(client)
    settings = client.settings
    shown = await cli(settings, "cluster", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    pending = orjson.loads(shown.stdout)["pending"]
    direct = await direct_counts(client, pending["as_of_ms"], pending["horizon_ms"])
    assert +listed(pending) == direct
    text = await cli(settings, "cluster", "status")
    assert text.returncode == 0, text.stderr
    total = sum(n + f for _, n, f in PLAN)
    assert f"pending (MySQL, ~: estimate): {total}" in text.stdout
    assert "counts.b" in text.stdout and "beyond it (MySQL only) 22" in text.stdout
    shown = await asyncio.to_thread(top, settings, "--json")
    assert shown.returncode == 0, shown.stderr
    pending = orjson.loads(shown.stdout)["pending"]
    assert +listed(pending) == await direct_counts(
        client, pending["as_of_ms"], pending["horizon_ms"]
    )
    screen = await asyncio.to_thread(top, settings)
    assert screen.returncode == 0, screen.stderr
    assert f"pending in MySQL: {total}" in screen.stdout and "counts.b" in screen.stdout


def gauge_values(metrics: list[Metric]) -> dict[tuple[str, str], float]:
    return {
        (s.labels["topic"], s.labels["tier"]): s.value
        for m in metrics
        if m.name == "delayq_pending_jobs"
        for s in m.samples
    }


async def test_the_node_holding_slot_0_serves_the_gauge(
    settings: Settings, client: DelayClient, node: Node
) -> None:
    await schedule_plan(client)
    collector = NodeCollector(node)
    expected = {
        **{(t, "redis"): float(n) for t, n, _ in PLAN},
        **{(t, "beyond_horizon"): float(f) for t, _, f in PLAN},
    }

    async def counted() -> bool:  # the node counts every few seconds
        return gauge_values(list(collector.collect())) == expected

    assert await wait_for(counted, 60, 0.2), gauge_values(list(collector.collect()))


async def test_status_says_why_when_mysql_does_not_answer(settings: Settings) -> None:
    port = free_port()  # nothing listens there
    away = settings.replace(mysql_url=f"mysql://delayq:delayq@127.0.0.1:{port}/delayq")
    why = await read_pending_or_why(away)
    assert isinstance(why, str) and str(port) in why
