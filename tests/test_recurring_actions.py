"""Pausing, resuming and running now recurring schedules, and listing their ticks,
against the real stack (a node making ticks, Kafka receiving them): through the client,
the HTTP API and the CLI. Counts of ticks across windows of several intervals, never
timings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from actors.node import Node
from cluster import DelayClient, InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.jobs import now_ms
from cluster.model.tick_ids import is_run_now, parse_tick_id
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.test_cli import cli
from tests.test_recurring import FAST
from tests.test_web import OPERATOR, VIEWER, Api, serving

pytestmark = pytest.mark.once


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return settings.replace(**FAST)


@pytest.fixture
async def fast_node(fast: Settings) -> AsyncIterator[Node]:
    node = Node(fast)
    await node.start()
    yield node
    await node.stop()


@pytest.fixture
async def fast_client(fast: Settings) -> AsyncIterator[DelayClient]:
    async with DelayClient(fast) as client:
        yield client


async def all_ticks(client: DelayClient, name: str) -> list[tuple[str, JobStatus, int]]:
    """(job id, status, due ms) of every job the schedule made, newest first, page by page."""
    found: list[tuple[str, JobStatus, int]] = []
    cursor: str | None = None
    while True:
        page = await client.recurring_ticks(name, 3, cursor)
        assert page is not None
        jobs, cursor = page
        found += [(job.job_id, job.status, job.due_ms) for job in jobs]
        if cursor is None:
            return found


async def test_pause_stops_ticks_resume_restarts_and_skips_the_pause(
    fast_client: DelayClient, fast_node: Node, topic: str
) -> None:
    await fast_client.schedule_recurring("beat", topic, {"b": 1}, every=1)
    assert await wait_for(lambda: _fired(fast_client, "beat", 2), timeout_s=30)
    paused = await fast_client.pause_recurring("beat")
    assert paused is not None and paused.paused_ms is not None
    assert paused.next_fire_ms(now_ms()) is None
    pause_ms = paused.paused_ms
    made = len(await all_ticks(fast_client, "beat"))
    # Five intervals paused: no new job, and the ticks made ahead were cancelled (but
    # one being published at the moment of the pause).
    await asyncio.sleep(5)
    ticks = await all_ticks(fast_client, "beat")
    assert len(ticks) == made
    later = [s for _, s, due in ticks if due > pause_ms + 1000]
    assert later and all(s == JobStatus.CANCELLED for s in later)
    again = await fast_client.pause_recurring("beat")  # pausing again changes nothing
    assert again is not None and again.paused_ms == pause_ms
    resumed = await fast_client.resume_recurring("beat")
    assert resumed is not None and resumed.paused_ms is None
    assert resumed.generation == paused.generation + 1
    resumed_ms = resumed.modified_ms
    assert await wait_for(lambda: _fired(fast_client, "beat", 2, resumed.generation), timeout_s=30)
    ticks = await all_ticks(fast_client, "beat")
    fresh = [(due, s) for i, s, due in ticks if generation_of(i) == resumed.generation]
    # The ticks of the pause never became jobs of the new generation.
    assert fresh and all(due >= resumed_ms - 1 for due, _ in fresh)
    # Newest first: the new generation's ticks come before the old, each newest first.
    generations = [generation_of(i) for i, _, _ in ticks]
    assert generations == sorted(generations, reverse=True)
    assert [due for due, _ in fresh] == sorted((due for due, _ in fresh), reverse=True)


def generation_of(job_id: str) -> int:
    parsed = parse_tick_id(job_id)
    assert parsed is not None
    return parsed[1]


async def _fired(client: DelayClient, name: str, count: int, generation: int = 1) -> bool:
    page = await client.recurring_ticks(name, 100)
    assert page is not None
    fired = [j for j in page[0] if j.status == JobStatus.FIRED]
    return len([j for j in fired if generation_of(j.job_id) == generation]) >= count


async def test_run_now_fires_one_extra_job_and_leaves_the_ticks(
    fast_client: DelayClient, fast_node: Node, topic: str, collector: Collector
) -> None:
    schedule = await fast_client.schedule_recurring("hourly", topic, {"h": 2}, cron="0 * * * *")
    before = await all_ticks(fast_client, "hourly")
    job_id = await fast_client.run_recurring_now("hourly")
    assert job_id is not None and is_run_now(job_id)
    assert (parse_tick_id(job_id) or ("",))[:2] == ("hourly", 1)
    [record] = await collector.until(1, timeout_s=30)
    assert (record["job_id"], record["payload"], record["recurring"]) == (
        job_id,
        {"h": 2},
        "hourly",
    )
    assert await wait_for(lambda: _status(fast_client, job_id, JobStatus.FIRED), timeout_s=30)
    after = await all_ticks(fast_client, "hourly")
    assert [t for t in after if t[0] != job_id] == before  # the regular ticks unchanged
    assert [t[1] for t in after if t[0] == job_id] == [JobStatus.FIRED]
    stored = await fast_client.get_recurring("hourly")
    assert stored is not None
    assert (stored.next_tick_ms, stored.generation) == (schedule.next_tick_ms, 1)
    # A paused schedule can be run now too, and stays paused.
    await fast_client.pause_recurring("hourly")
    second = await fast_client.run_recurring_now("hourly")
    assert second is not None and second != job_id
    await collector.until(2, timeout_s=30)
    stored = await fast_client.get_recurring("hourly")
    assert stored is not None and stored.paused_ms is not None


async def _status(client: DelayClient, job_id: str, status: JobStatus) -> bool:
    job = await client.get(job_id)
    return job is not None and job.status == status


async def test_replacing_a_paused_schedule_keeps_it_paused(
    fast_client: DelayClient, topic: str
) -> None:
    await fast_client.schedule_recurring("nightly", topic, 1, cron="0 3 * * *")
    await fast_client.pause_recurring("nightly")
    replaced = await fast_client.schedule_recurring("nightly", topic, 2, cron="0 4 * * *")
    assert replaced.paused_ms is not None and replaced.generation == 2
    assert await fast_client.remove_recurring("nightly")
    again = await fast_client.schedule_recurring("nightly", topic, 2, cron="0 4 * * *")
    assert again.paused_ms is None  # removed and added again: a fresh schedule


async def test_unknown_names_and_bad_pages_change_nothing(
    fast_client: DelayClient, topic: str
) -> None:
    assert await fast_client.pause_recurring("nope") is None
    assert await fast_client.resume_recurring("nope") is None
    assert await fast_client.run_recurring_now("nope") is None
    assert await fast_client.recurring_ticks("nope", 10) is None
    await fast_client.schedule_recurring("gone", topic, 1, every=60)
    await fast_client.remove_recurring("gone")
    assert await fast_client.pause_recurring("gone") is None
    assert await fast_client.run_recurring_now("gone") is None
    await fast_client.schedule_recurring("real", topic, 1, every=60)
    for limit in (0, 1001, True, "5"):
        with pytest.raises(InvalidJob, match="limit"):
            await fast_client.recurring_ticks("real", limit)  # type: ignore[arg-type]
    for cursor in ("order-1", "@recurring:other:1:5", "@recurring:real:99:5", "x" * 300):
        with pytest.raises(InvalidJob, match="cursor"):
            await fast_client.recurring_ticks("real", 10, cursor)
    with pytest.raises(InvalidJob, match="name"):
        await fast_client.pause_recurring("bad name")
    stored = await fast_client.get_recurring("real")
    assert stored is not None and stored.paused_ms is None and stored.generation == 1


async def test_http_routes(fast: Settings, topic: str) -> None:
    async with (
        DelayClient(fast) as client,
        serving(fast.replace(web_tokens=f"{OPERATOR}=operator,{VIEWER}=viewer"), client) as api,
    ):
        await _http_routes(api, topic)


async def _http_routes(api: Api, topic: str) -> None:
    body = {"topic": topic, "payload": {"x": 1}, "every": 60}
    status, _, _ = await api.call("PUT", "/v1/recurring/web-beat", body)
    assert status == 200
    status, paused, _ = await api.call("POST", "/v1/recurring/web-beat/pause", {})
    assert status == 200 and paused["paused"] is True and paused["paused_ms"] > 0
    status, _, _ = await api.call("POST", "/v1/recurring/web-beat/pause", {}, token=VIEWER)
    assert status == 403
    status, shown, _ = await api.call("GET", "/v1/recurring/web-beat", token=VIEWER)
    assert (status, shown["paused"], shown["next_ms"]) == (200, True, None)
    status, run, _ = await api.call("POST", "/v1/recurring/web-beat/run", {})
    assert status == 200 and run["name"] == "web-beat" and run["job_id"].endswith("r")
    status, page, _ = await api.call("GET", "/v1/recurring/web-beat/ticks?limit=5", token=VIEWER)
    # Found by its id: a tick of the schedule's own, due at the next whole minute, is
    # listed before it when the PUT came within the lookahead of that minute.
    ticks = {tick["job_id"]: tick for tick in page["ticks"]}
    assert status == 200 and run["job_id"] in ticks, page
    assert ticks[run["job_id"]]["status"] in ("pending", "fired")
    assert ticks[run["job_id"]]["recurring"] == "web-beat"
    status, resumed, _ = await api.call("POST", "/v1/recurring/web-beat/resume", {})
    assert status == 200 and resumed["paused"] is False and resumed["generation"] == 2
    for method, path in (
        ("POST", "/v1/recurring/nope/pause"),
        ("POST", "/v1/recurring/nope/resume"),
        ("POST", "/v1/recurring/nope/run"),
        ("GET", "/v1/recurring/nope/ticks"),
    ):
        status, problem, _ = await api.call(method, path, {} if method == "POST" else None)
        assert status == 404 and "nope" in problem["detail"], (method, path)
    for query in ("limit=0", "limit=1001", "limit=x", "cursor=order-1"):
        status, _, _ = await api.call("GET", f"/v1/recurring/web-beat/ticks?{query}")
        assert status == 422, query


async def test_cli(fast: Settings, fast_client: DelayClient, topic: str) -> None:
    await fast_client.schedule_recurring("cli-beat", topic, 1, every=60)
    done = await cli(fast, "recurring", "pause", "cli-beat")
    assert done.returncode == 0 and "paused since" in done.stdout, done.stderr
    listed = await cli(fast, "recurring", "list")
    assert "paused since" in listed.stdout
    ran = await cli(fast, "recurring", "run", "cli-beat")
    assert ran.returncode == 0 and "@recurring:cli-beat:1:" in ran.stdout
    ticks = await cli(fast, "recurring", "ticks", "cli-beat", "--limit", "1")
    assert ticks.returncode == 0 and len(ticks.stdout.splitlines()) == 1
    # Within the lookahead of a whole minute, that minute's own tick comes first.
    ticks = await cli(fast, "recurring", "ticks", "cli-beat", "--limit", "5")
    assert ticks.returncode == 0 and "run now" in ticks.stdout
    done = await cli(fast, "recurring", "resume", "cli-beat")
    assert done.returncode == 0 and "running, next tick" in done.stdout
    missing = await cli(fast, "recurring", "pause", "nope")
    assert missing.returncode == 1 and "no recurring schedule" in missing.stderr
    bad = await cli(fast, "recurring", "ticks", "cli-beat", "--limit", "0")
    assert bad.returncode == 2
    bad = await cli(fast, "recurring", "pause", "cli-beat", "--limit", "3")
    assert bad.returncode == 2
