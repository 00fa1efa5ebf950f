"""Searching jobs over every shard (cluster/store/search.py) through DelayClient.search_jobs,
GET /v1/jobs and POST /v1/jobs/cancel: filters, keyset paging, refusals, the indexes each
shape rides (EXPLAIN), and the bulk cancel confirmed by its count."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from cluster import DelayClient
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.jobs import Job
from cluster.settings.config import Settings
from cluster.store.search import make_search, shard_selects, time_bounded
from cluster.web.server import API
from tests.mysql_tools import on_job, on_shard
from tests.test_cli_actions import cli_with
from tests.test_web import OPERATOR, TOKENS, VIEWER, serving

# Jobs due from BASE_S on, a few per second (so that some share a due ms).
BASE_S = int(time.time()) + 10 * 86_400
TOPICS = ("search.a", "search.b")
TYPES = ("order", "invoice", None)


@dataclass(frozen=True)
class Made:
    job_id: str
    topic: str
    biz_id: str
    biz_type: str | None
    due_ms: int
    status: JobStatus


@pytest.fixture
async def shards(redis_settings: Settings) -> AsyncIterator[Settings]:
    """A cluster of 3 logical shards of 3 tables each (on one server, or on the test
    stack's servers)."""
    base = redis_settings.replace(mysql_databases=3, mysql_tables=3)
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    yield settings
    await drop_cluster_database(settings)


@pytest.fixture
async def made(shards: Settings) -> AsyncIterator[tuple[DelayClient, list[Made]]]:
    """60 jobs over every shard: two topics, three business types, 20 business keys,
    due times shared by threes; some cancelled, fired or dead."""
    async with DelayClient(shards) as client:
        jobs = [
            Job(
                topic=TOPICS[n % 2],
                payload={"n": n},
                at=BASE_S + n // 3,
                job_id=f"job-{n:03d}",
                biz_id=f"key-{n % 20}",
                biz_type=TYPES[n % 3],
            )
            for n in range(60)
        ]
        await client.schedule_many(jobs)
        statuses = {}
        for n in range(60):
            status = JobStatus.PENDING
            if n % 7 == 1:
                assert (await client.cancel(f"job-{n:03d}")).status == "cancelled"
                status = JobStatus.CANCELLED
            elif n % 7 == 2:
                status = JobStatus.FIRED
            elif n % 7 == 3:
                status = JobStatus.DEAD
            elif n % 7 == 4:
                status = JobStatus.FIRING
            if status in (JobStatus.FIRED, JobStatus.DEAD, JobStatus.FIRING):
                await on_job(
                    client.mysql,
                    f"job-{n:03d}",
                    "UPDATE {jobs} SET status = %s WHERE job_id = %s",
                    (int(status), f"job-{n:03d}"),
                )
            statuses[n] = status
        yield (
            client,
            [
                Made(
                    f"job-{n:03d}",
                    TOPICS[n % 2],
                    f"key-{n % 20}",
                    TYPES[n % 3],
                    (BASE_S + n // 3) * 1000,
                    statuses[n],
                )
                for n in range(60)
            ],
        )


async def every_page(client: DelayClient, limit: int, **filters: Any) -> list[tuple[int, str]]:
    """(due ms, job id) of every page of a search, walked with its cursor."""
    found: list[tuple[int, str]] = []
    cursor = None
    for _ in range(100):
        page = await client.search_jobs(limit=limit, cursor=cursor, **filters)
        assert len(page.jobs) <= limit
        found += [(job.due_ms, job.job_id) for job in page.jobs]
        cursor = page.next_cursor
        if cursor is None:
            return found
    raise AssertionError("the cursor never ended")


def expected(jobs: list[Made], latest: bool = False, **filters: Any) -> list[tuple[int, str]]:
    statuses = filters.get("status")
    if isinstance(statuses, str):
        statuses = [statuses]
    names = {JobStatus.FIRING: "retrying"}
    chosen = [
        (job.due_ms, job.job_id)
        for job in jobs
        if filters.get("topic") in (None, job.topic)
        and filters.get("biz_id") in (None, job.biz_id)
        and filters.get("biz_type") in (None, job.biz_type)
        and (statuses is None or names.get(job.status, str(job.status)) in statuses)
        and job.due_ms >= filters.get("due_from", 0)
        and job.due_ms < filters.get("due_to", 2**62)
    ]
    return sorted(chosen, reverse=latest)


SHAPES: list[dict[str, Any]] = [
    {},
    {"topic": "search.a"},
    {"status": "pending"},
    {"status": ["pending", "retrying"], "topic": "search.b"},
    {"biz_id": "key-7"},
    {"biz_id": "key-3", "status": ["cancelled", "pending"]},
    {"biz_type": "order"},
    {"biz_type": "invoice", "status": "dead"},
    {"biz_type": "order", "topic": "search.a", "status": ["pending", "fired"]},
    {"status": "pending", "due_from": (BASE_S + 3) * 1000, "due_to": (BASE_S + 12) * 1000},
    {"topic": "search.a", "due_from": (BASE_S + 5) * 1000},
]


@pytest.mark.parametrize("shape", SHAPES, ids=[str(sorted(s)) for s in SHAPES])
async def test_paging_gives_every_match_once_in_order(
    made: tuple[DelayClient, list[Made]], shape: dict[str, Any]
) -> None:
    client, jobs = made
    want = expected(jobs, **shape)
    assert want, "the shape matches some jobs"
    assert await every_page(client, 4, **shape) == want
    assert await every_page(client, 1000, **shape) == want
    assert await every_page(client, 3, order="latest", **shape) == expected(
        jobs, latest=True, **shape
    )


async def test_a_page_holds_the_records(made: tuple[DelayClient, list[Made]]) -> None:
    client, jobs = made
    page = await client.search_jobs(biz_id="key-5", limit=2)
    first = [job for job in jobs if job.biz_id == "key-5"][:2]
    assert [job.job_id for job in page.jobs] == [job.job_id for job in first]
    assert page.jobs[0].payload_json == '{"n":5}'
    assert page.jobs[0].status == first[0].status
    assert page.next_cursor is not None


async def test_bad_searches_are_refused(made: tuple[DelayClient, list[Made]]) -> None:
    client, _ = made
    bad: list[tuple[dict[str, Any], str]] = [
        ({"limit": 0}, "limit must be an int 1..1000"),
        ({"limit": 1001}, "limit must be an int 1..1000"),
        ({"order": "random"}, "order must be one of soonest, latest"),
        ({"status": "sleeping"}, "status 'sleeping' is not one of"),
        ({"topic": "no spaces"}, "not a valid Kafka topic"),
        ({"biz_id": "x" * 201}, "biz_id must be 1..200"),
        ({"due_from": -1}, "due_from must be epoch milliseconds"),
        ({"cursor": "not a cursor!"}, "cursor is not one a search returned"),
    ]
    for filters, message in bad:
        with pytest.raises(InvalidJob, match=message):
            await client.search_jobs(**filters)


async def test_a_cursor_is_refused_with_other_filters(
    made: tuple[DelayClient, list[Made]],
) -> None:
    client, _ = made
    page = await client.search_jobs(topic="search.a", limit=2)
    assert page.next_cursor is not None
    for other in ({"topic": "search.b"}, {"topic": "search.a", "order": "latest"}):
        with pytest.raises(InvalidJob, match="cursor belongs to a search with other filters"):
            await client.search_jobs(cursor=page.next_cursor, **other)
    # The limit may change between pages.
    more = await client.search_jobs(topic="search.a", limit=5, cursor=page.next_cursor)
    assert len(more.jobs) == 5


def _shapes() -> list[tuple[dict[str, Any], str]]:
    """Every combination of the equality filters, with and without a due range, and the
    index it rides."""
    shapes = []
    for bits in range(32):
        shape: dict[str, Any] = {}
        if bits & 1:
            shape["biz_id"] = "key-1"
        if bits & 2:
            shape["biz_type"] = "order"
        if bits & 4:
            shape["topic"] = "search.a"
        if bits & 8:
            shape["status"] = "pending"
        if bits & 16:
            shape["due_from"] = 0
        if "biz_id" in shape:
            index = "idx_biz_id"
        elif "biz_type" in shape:
            index = "idx_biz_type_topic" if "topic" in shape else "idx_biz_type"
        elif "topic" in shape:
            index = "idx_status_topic_due"
        else:
            index = "idx_status_action_time"
        shapes.append((shape, index))
    return shapes


@pytest.mark.parametrize(("shape", "index"), _shapes())
async def test_each_shape_rides_its_index(
    made: tuple[DelayClient, list[Made]], shape: dict[str, Any], index: str
) -> None:
    client, _ = made
    store = client.mysql
    search = make_search(limit=10, **shape)
    assert search.index == index
    search = make_search(limit=10, cursor=None, **shape)
    first = await client.search_jobs(limit=10, **shape)
    if first.next_cursor is not None:  # and with the cursor's range too
        search = make_search(limit=10, cursor=first.next_cursor, **shape)
    table = store.shard_tables((0, 0))[0]
    statement, params = shard_selects(search, [table])
    for part in statement.split(" UNION ALL "):
        marks = part.count("%s")
        plan = await on_shard(store, 0, "EXPLAIN " + part.strip()[1:-1], params[:marks])
        params = params[marks:]
        # One table, its rows found through the index (an equality or a range on it, never
        # a scan of all of it), in the index's order (no filesort).
        assert [(row[5], row[3]) for row in plan] in ([(index, "ref")], [(index, "range")]), plan
        assert "filesort" not in (plan[0][9] or ""), plan


async def test_cancel_by_count(made: tuple[DelayClient, list[Made]]) -> None:
    client, jobs = made
    waiting = [
        job.job_id
        for job in jobs
        if job.topic == "search.a"
        and job.biz_type == "order"
        and job.status in (JobStatus.PENDING, JobStatus.FIRING)
    ]
    assert waiting
    asked = await client.cancel_matching(topic="search.a", biz_type="order")
    assert (asked.matched, asked.done, asked.cancelled) == (len(waiting), False, 0)
    wrong = await client.cancel_matching(
        topic="search.a", biz_type="order", expected=len(waiting) + 1
    )
    assert (wrong.matched, wrong.done, wrong.cancelled) == (len(waiting), False, 0)
    still = await client.search_jobs(
        topic="search.a", biz_type="order", status=["pending", "retrying"], limit=1000
    )
    assert sorted(job.job_id for job in still.jobs) == sorted(waiting)

    done = await client.cancel_matching(topic="search.a", biz_type="order", expected=len(waiting))
    assert (done.done, done.cancelled, done.already_final, done.unknown) == (
        True,
        len(waiting),
        0,
        0,
    )
    rows = await client.mysql.get_many([job.job_id for job in jobs])
    for job in jobs:
        want = JobStatus.CANCELLED if job.job_id in waiting else job.status
        assert rows[job.job_id].status == want, job.job_id
    again = await client.cancel_matching(topic="search.a", biz_type="order")
    assert again.matched == 0


async def test_cancel_by_count_refuses_bad_input(made: tuple[DelayClient, list[Made]]) -> None:
    client, _ = made
    with pytest.raises(InvalidJob, match="expected must be an int >= 0"):
        await client.cancel_matching(topic="search.a", expected=-1)
    with pytest.raises(InvalidJob, match="status 'sleeping'"):
        await client.cancel_matching(status="sleeping", expected=1)
    # Only final statuses asked for: nothing can be cancelled.
    final = await client.cancel_matching(status="fired")
    assert (final.matched, final.done) == (0, False)


async def test_the_http_routes_answer_the_same(made: tuple[DelayClient, list[Made]]) -> None:
    client, jobs = made
    settings = client.settings.replace(web_tokens=TOKENS)
    async with serving(settings, client) as api:
        found: list[str] = []
        cursor = ""
        for _ in range(50):
            status, body, _ = await api.call(
                "GET", f"/v1/jobs?topic=search.b&status=pending,retrying&limit=4{cursor}"
            )
            assert status == 200, body
            found += [job["job_id"] for job in body["jobs"]]
            if body["next_cursor"] is None:
                break
            cursor = f"&cursor={body['next_cursor']}"
        assert found == [
            job_id for _, job_id in expected(jobs, topic="search.b", status=["pending", "retrying"])
        ]

        due_from = dt.datetime.fromtimestamp(BASE_S + 3, dt.UTC).isoformat()
        status, body, _ = await api.call(
            "GET", f"/v1/jobs?due_from={quote(due_from)}&due_to={(BASE_S + 4) * 1000}&order=latest"
        )
        assert status == 200, body
        assert [job["job_id"] for job in body["jobs"]] == ["job-011", "job-010", "job-009"]
        assert body["jobs"][0]["status"] in ("pending", "firing", "fired", "cancelled", "dead")

        for query, message in [
            ("limit=0", "limit must be an int 1..1000"),
            ("order=up", "order must be one of"),
            ("status=asleep", "is not one of"),
            ("due_from=tomorrow", "due_from must be epoch milliseconds or an RFC 3339 time"),
            ("topik=search.a", "unknown query parameters ['topik']"),
            ("cursor=abc", "cursor is not one a search returned"),
        ]:
            status, body, _ = await api.call("GET", f"/v1/jobs?{query}")
            assert (status, message in body["detail"]) == (422, True), (query, body)
        for path, message in [
            ("/v1/jobs/counts?topik=x", "unknown query parameters ['topik']"),
            ("/v1/jobs/counts?limit=1&limit=2", "limit may be given once"),
            # PAD SPACE would match 'tenant-1' too: refused, not widened
            ("/v1/jobs?biz_id=tenant-1%20", "biz_id must not start or end with whitespace"),
        ]:
            status, body, _ = await api.call("GET", path)
            assert (status, message in body["detail"]) == (422, True), (path, body)
        status, body, _ = await api.call("POST", "/v1/jobs/cancel", {"biz_id": "tenant-1 "})
        assert status == 422 and "must not start or end with whitespace" in body["detail"], body

        status, body, _ = await api.call("GET", "/v1/jobs?topic=search.a", token=VIEWER)
        assert status == 200, body

        waiting = expected(
            jobs, topic="search.b", biz_type="invoice", status=["pending", "retrying"]
        )
        # status as the query takes it (the console sends that), or as an array
        filters = {"topic": "search.b", "biz_type": "invoice", "status": "pending,retrying"}
        status, body, _ = await api.call(
            "POST", "/v1/jobs/cancel", {**filters, "status": ["retrying", "pending"]}
        )
        assert (status, body["matched"]) == (409, len(waiting)), body
        status, body, _ = await api.call("POST", "/v1/jobs/cancel", filters)
        assert (status, body["matched"]) == (409, len(waiting)), body
        confirm = {**filters, "expected": len(waiting), "selection": body["selection"]}
        status, body, _ = await api.call(
            "POST", "/v1/jobs/cancel", {**confirm, "expected": len(waiting) + 2}
        )
        assert (status, body["matched"]) == (409, len(waiting)), body
        # A count alone is a preview over HTTP: the set is confirmed by its token.
        status, body, _ = await api.call(
            "POST", "/v1/jobs/cancel", {**filters, "expected": len(waiting)}
        )
        assert (status, body["matched"]) == (409, len(waiting)), body
        status, body, _ = await api.call("POST", "/v1/jobs/cancel", confirm, token=VIEWER)
        assert status == 403, body
        status, body, _ = await api.call("POST", "/v1/jobs/cancel", confirm)
        assert status == 200, body
        assert (body["matched"], body["cancelled"], body["unknown"]) == (
            len(waiting),
            len(waiting),
            0,
        )
        rows = await client.mysql.get_many([job_id for _, job_id in waiting])
        assert {row.status for row in rows.values()} == {JobStatus.CANCELLED}

        status, body, _ = await api.call(
            "POST", "/v1/jobs/cancel", {"topic": "search.a", "nope": 1}
        )
        assert status == 422 and "unknown fields" in body["detail"], body


async def test_the_command_line_lists_and_cancels(made: tuple[DelayClient, list[Made]]) -> None:
    client, jobs = made
    extra = {"DELAYQ_MYSQL_DATABASES": "3", "DELAYQ_MYSQL_TABLES": "3"}
    settings = client.settings
    listed = await cli_with(
        settings, None, extra, "jobs", "list", "--biz-id", "key-4", "--limit", "2"
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:4] == ["JOB", "ID", "TOPIC", "STATUS"]
    assert [line.split()[0] for line in lines[1:3]] == ["job-004", "job-024"]
    assert lines[3].startswith("next page: --cursor ")
    cursor = lines[3].split()[-1]
    rest = await cli_with(
        settings, None, extra, "jobs", "list", "--biz-id", "key-4", "--cursor", cursor, "--json"
    )
    assert rest.returncode == 0, rest.stderr
    assert [job["job_id"] for job in orjson.loads(rest.stdout)["jobs"]] == ["job-044"]
    wrong = await cli_with(settings, None, extra, "jobs", "list", "--cursor", cursor)
    assert wrong.returncode == 1 and "other filters" in wrong.stderr

    waiting = expected(jobs, biz_id="key-6", status=["pending", "retrying"])
    asked = await cli_with(settings, "n\n", extra, "jobs", "cancel", "--biz-id", "key-6")
    assert asked.returncode == 2 and f"{len(waiting)} pending or retrying" in asked.stdout
    assert (await client.get(waiting[0][1])).status != JobStatus.CANCELLED  # type: ignore[union-attr]
    done = await cli_with(settings, None, extra, "jobs", "cancel", "--biz-id", "key-6", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"cancelled {len(waiting)}," in done.stdout
    rows = await client.mysql.get_many([job_id for _, job_id in waiting])
    assert {row.status for row in rows.values()} == {JobStatus.CANCELLED}


async def test_cancel_by_count_is_bounded(
    made: tuple[DelayClient, list[Made]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, jobs = made
    monkeypatch.setattr("cluster.client.job_search.CANCEL_MOST", 5)
    waiting = expected(jobs, topic="search.a", status=["pending", "retrying"])
    assert len(waiting) > 5
    with pytest.raises(InvalidJob, match=r"more than 5 jobs match.*narrow the filter"):
        await client.cancel_matching(topic="search.a", expected=len(waiting))
    rows = await client.mysql.get_many([job_id for _, job_id in waiting])
    assert JobStatus.CANCELLED not in {row.status for row in rows.values()}


async def test_a_cancel_confirms_the_previewed_set_not_a_count(settings: Settings) -> None:
    """Preview 10; one of them is cancelled and a new matching job scheduled, so 10
    still match but not the same 10: the confirm cancels nothing (409), the new job
    stays pending. Then the new preview's set is cancelled."""
    async with DelayClient(settings) as client:
        ids = await client.schedule_many(
            [Job(topic="bulk.set", payload={}, delay=3600, biz_type="trial") for _ in range(10)]
        )
        async with serving(settings.replace(web_tokens=TOKENS), client) as api:
            filters = {"topic": "bulk.set", "biz_type": "trial"}
            status, preview, _ = await api.call("POST", "/v1/jobs/cancel", filters)
            assert (status, preview["matched"]) == (409, 10), preview
            assert await client.cancel(ids[0])
            newcomer = await client.schedule("bulk.set", {}, delay=3600, biz_type="trial")
            confirm = {**filters, "expected": 10, "selection": preview["selection"]}
            status, body, _ = await api.call("POST", "/v1/jobs/cancel", confirm)
            assert (status, body["matched"]) == (409, 10), body
            assert body["selection"] != preview["selection"]
            record = await client.get(newcomer)
            assert record is not None and record.status == JobStatus.PENDING
            confirm["selection"] = body["selection"]
            status, body, _ = await api.call("POST", "/v1/jobs/cancel", confirm)
            assert (status, body["matched"], body["cancelled"]) == (200, 10, 10), body
        rows = await client.mysql.get_many([*ids[1:], newcomer])
        assert {row.status for row in rows.values()} == {JobStatus.CANCELLED}


async def test_a_filter_outside_the_index_is_bounded_in_time(shards: Settings) -> None:
    """A business key with 60,000 jobs searched with a topic none of them has walks every
    one of them (topic is outside idx_biz_id): the server stops the statement at
    search_statement_max_ms and the search is refused, naming the setting."""
    hot = 60_000
    async with DelayClient(shards) as client:
        table = client.mysql.shard_tables((0, 0))[0]
        await on_shard(
            client.mysql,
            0,
            f"INSERT INTO {table} (job_id, topic, biz_id, biz_type, status, action_time,"
            " payload, slot) SELECT CONCAT('hot-', seq), 'search.hot', 'hot-key', 'bulk',"
            " seq % 6, UTC_TIMESTAMP(3) + INTERVAL seq SECOND, '{}', 0"
            f" FROM seq_1_to_{hot}",
        )
        # Bounded generously, the search walks them all and finds none.
        page = await client.search_jobs(biz_id="hot-key", topic="search.nomatch")
        assert (page.jobs, page.next_cursor) == ([], None)
    async with DelayClient(shards.replace(search_statement_max_ms=1)) as tight:
        with pytest.raises(InvalidJob, match="search_statement_max_ms"):
            await tight.search_jobs(biz_id="hot-key", topic="search.nomatch")


def test_a_statement_bound_takes_the_servers_form() -> None:
    select = "(SELECT 0 AS t, action_time, job_id FROM j WHERE status = 0 LIMIT 2)"
    assert time_bounded(select, "10.11.19-MariaDB-0+deb12u1", 1500) == (
        f"SET STATEMENT max_statement_time=1.500 FOR {select}"
    )
    assert time_bounded(select, "8.0.40", 1500) == (
        f"SELECT /*+ MAX_EXECUTION_TIME(1500) */ * FROM ({select}) AS bounded"
    )


async def test_searches_are_limited_per_token(made: tuple[DelayClient, list[Made]]) -> None:
    """With web_searches_per_token=1 and a search of the viewer's token running, its
    next search, bulk cancel and pending counts are answered 429 with Retry-After and run
    nothing; another token's are not; once it ends, the viewer's are answered again."""
    client, _ = made
    settings = client.settings.replace(web_tokens=TOKENS, web_searches_per_token=1)
    async with DelayClient(settings) as limited, serving(settings, limited) as api:
        searches = api.app[API].searches
        with searches.slot(VIEWER):
            for method, path, body, token in (
                ("GET", "/v1/jobs?topic=search.a", None, VIEWER),
                ("GET", "/v1/jobs/counts", None, VIEWER),
            ):
                status, problem, answer = await api.call(method, path, body, token=token)
                assert status == 429, problem
                assert problem["type"] == "urn:delayq:problem:too-many-requests"
                assert "web_searches_per_token=1" in problem["detail"]
                assert answer.headers["Retry-After"] == "1"
            status, page, _ = await api.call("GET", "/v1/jobs?topic=search.a")  # operator
            assert status == 200 and page["jobs"]
            with searches.slot(OPERATOR):
                status, problem, _ = await api.call(
                    "POST", "/v1/jobs/cancel", {"topic": "search.a", "expected": 1}
                )
                assert status == 429, problem
            assert searches.running(OPERATOR) == 0
        assert searches.running(VIEWER) == 0
        status, page, _ = await api.call("GET", "/v1/jobs?topic=search.a", token=VIEWER)
        assert status == 200 and page["jobs"]
