"""`delayq web`: every route of the HTTP API against the real stack, every role, bad
input (nothing written), authentication, MySQL and Redis unreachable, TLS, and the
process itself."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from aiohttp import web

from actors.node import Node
from cluster import DelayClient, JobStatus
from cluster.devstack.nodes import settings_env
from cluster.errors import ConfigError, OutcomeUnknown
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.rows import Outcome
from cluster.web.api import ROUTES, problems_middleware
from cluster.web.auth import Tokens, parse_tokens
from cluster.web.openapi import openapi_document
from cluster.web.server import API, check_exposure, make_app
from cluster.web.stats import StatsSampler
from tests.conftest import Collector, wait_for
from tests.forwarder import forwarder, free_port
from tests.mysql_tools import mysql_links
from tests.test_client import snapshot
from tests.test_dead_letters import make_dead
from tests.test_expiry import claim_all

# The HTTP layer over the client: the client's Redis side is tested in both passes.
pytestmark = pytest.mark.once

PRODUCER = "producer-token-0123456789"
OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-01234567890"
TOKENS = f"{PRODUCER}=producer,{OPERATOR}=operator,{VIEWER}=viewer"


class Api:
    """A running server over the test's settings, and an HTTP session to it."""

    def __init__(
        self, base: str, http: aiohttp.ClientSession, client: DelayClient, app: web.Application
    ) -> None:
        self.base = base
        self.app = app
        self.http = http
        self.client = client

    async def call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        token: str | None = OPERATOR,
        raw: bytes | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = raw if raw is not None else None if body is None else orjson.dumps(body)
        sent = None if data is None else io.BytesIO(data)
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.http.request(method, self.base + path, data=sent, headers=headers) as r:
            text = await r.read()
            return r.status, orjson.loads(text) if text else None, r


@contextlib.asynccontextmanager
async def serving(settings: Settings, client: DelayClient) -> AsyncIterator[Api]:
    tokens = Tokens(parse_tokens(settings.web_tokens))
    stats = StatsSampler(settings)
    app = make_app(client, tokens, stats)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Api(f"http://127.0.0.1:{port}", http, client, app)
    finally:
        await stats.close()
        await runner.cleanup()


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    settings = settings.replace(web_tokens=TOKENS, payload_max_bytes=1000, max_delay_s=3600.0)
    async with DelayClient(settings) as client, serving(settings, client) as running:
        yield running


HOUR = 3600


def ok_job(**fields: object) -> dict[str, object]:
    return {"topic": "orders.close", "payload": {"order": 1}, "delay": 60, **fields}


# ----- schedule, get, cancel, reschedule ---------------------------------------------------


async def test_schedule_one_job_then_the_same_id_again(api: Api) -> None:
    status, body, answer = await api.call("POST", "/v1/jobs", ok_job(job_id="order/42"))
    assert (status, body) == (201, {"job_id": "order/42", "created": True})
    assert answer.headers["Location"] == "/v1/jobs/order%2F42"
    status, body, _ = await api.call("POST", "/v1/jobs", ok_job(job_id="order/42", delay=5))
    assert (status, body) == (200, {"job_id": "order/42", "created": False})
    record = await api.client.get("order/42")
    assert record is not None and record.due_ms - record.created_ms >= 59_000  # unchanged


async def test_schedule_a_batch_says_which_were_created(api: Api) -> None:
    await api.client.schedule("t", 1, delay=60, job_id="old")
    jobs = [
        ok_job(job_id="old"),
        ok_job(job_id="new", delay=None, at="2026-01-01T00:00:00Z"),
        ok_job(),
        ok_job(job_id="new"),
    ]
    status, body, _ = await api.call("POST", "/v1/jobs", {"jobs": jobs})
    assert status == 200
    listed = body["jobs"]
    assert [job["created"] for job in listed] == [False, True, True, False]
    assert [job["job_id"] for job in listed][:2] == ["old", "new"]
    generated = listed[2]["job_id"]
    record = await api.client.get(generated)
    assert record is not None and record.payload_json == '{"order":1}'
    new = await api.client.get("new")
    assert new is not None and new.due_ms == 1767225600000  # due at once: in the past


async def test_concurrent_single_jobs_are_stored_together_each_with_its_answer(
    api: Api, redis: Any
) -> None:
    """200 requests at once: the valid ones stored in fewer store calls than requests,
    each invalid one refused on its own, one id sent five times created once."""
    bodies: list[dict[str, object]] = [ok_job(job_id=f"c-{i}") for i in range(180)]
    bodies += [ok_job(job_id=f"bad-{i}", delay=-1) for i in range(15)]
    bodies += [ok_job(job_id="same", payload=i) for i in range(5)]
    answers = await asyncio.gather(*(api.call("POST", "/v1/jobs", body) for body in bodies))
    statuses = [status for status, _, _ in answers]
    assert statuses[:180] == [201] * 180
    assert statuses[180:195] == [422] * 15
    assert sorted(statuses[195:]) == [200, 200, 200, 200, 201]
    assert all(">= 0" in problem["detail"] for _, problem, _ in answers[180:195])
    rows = await api.client.mysql.get_many([f"c-{i}" for i in range(180)] + ["same", "bad-0"])
    assert len(rows) == 181 and "bad-0" not in rows
    batcher = api.app[API].batcher
    assert batcher.jobs == 185 and batcher.batches < 185


async def test_get_a_job_with_its_history(api: Api) -> None:
    job_id = await api.client.schedule("t", {"a": [1, 2]}, delay=60, biz_id="b-1")
    await api.client.reschedule(job_id, delay=120)
    status, body, _ = await api.call("GET", f"/v1/jobs/{job_id}", token=PRODUCER)
    assert status == 200 and "history" not in body
    assert (body["status"], body["payload"], body["biz_id"]) == ("pending", {"a": [1, 2]}, "b-1")
    status, body, _ = await api.call("GET", f"/v1/jobs/{job_id}?history=true", token=VIEWER)
    assert [entry["note"] for entry in body["history"]] == ["created", "rescheduled"]
    status, body, _ = await api.call("GET", "/v1/jobs/nobody")
    assert status == 404 and body["type"] == "urn:delayq:problem:not-found"


async def test_cancel_answers_200_404_or_409_with_the_status(api: Api, scripts: Scripts) -> None:
    job_id = await api.client.schedule("t", 1, delay=60, job_id="a {b}/c")
    status, body, _ = await api.call("DELETE", f"/v1/jobs/{quote(job_id, safe='')}")
    assert (status, body) == (200, {"job_id": job_id, "cancelled": True})
    record = await api.client.get(job_id)
    assert record is not None and record.status == JobStatus.CANCELLED
    status, body, _ = await api.call("DELETE", "/v1/jobs/never-was")
    assert status == 404
    [dead] = await make_dead(api.client, scripts, "t", 1)
    status, body, _ = await api.call("DELETE", f"/v1/jobs/{dead}")
    assert status == 409 and body["job_status"] == "dead"


async def test_reschedule(api: Api) -> None:
    job_id = await api.client.schedule("t", 1, delay=60)
    path = f"/v1/jobs/{job_id}/reschedule"
    status, body, _ = await api.call("POST", path, {"at": "2030-01-01T00:00:00+01:00"})
    assert status == 422 and "max_delay_s" in body["detail"]  # this server's limit: 1 hour
    status, body, _ = await api.call("POST", path, {"delay": 600})
    assert status == 200 and body["rescheduled"] is True
    record = await api.client.get(job_id)
    assert record is not None and body["due_ms"] == record.due_ms
    assert record.due_ms - record.created_ms >= 599_000
    status, body, _ = await api.call("POST", "/v1/jobs/ghost/reschedule", {"delay": 1})
    assert status == 404
    await api.client.cancel(job_id)
    status, body, _ = await api.call("POST", path, {"delay": 1})
    assert (status, body["job_status"]) == (409, "cancelled")


async def test_cancel_and_reschedule_say_why_not(api: Api, scripts: Scripts) -> None:
    """409 with the job's status: being published, fired (with its time and attempt once
    recorded), expired."""
    client = api.client
    in_flight, fired, expired = [
        await client.schedule("t", 1, at=now_ms() / 1000 - 10, expires_after=after)
        for after in (HOUR, HOUR, 1)
    ]
    claimed, _ = await claim_all(client, scripts, [in_flight, fired, expired])
    assert claimed == {in_flight, fired}
    slot = slot_of(fired, client.settings.slots)
    assert await scripts.ack(slot, [fired.encode()]) == 1
    changes = (("DELETE", "", None), ("POST", "/reschedule", {"delay": 5}))
    for job_id, job_status in ((in_flight, "in_flight"), (fired, "fired"), (expired, "expired")):
        for method, suffix, body in changes:
            status, problem, _ = await api.call(method, f"/v1/jobs/{job_id}{suffix}", body)
            assert (status, problem["job_status"]) == (409, job_status), problem
            assert "fired_ms" not in problem and "attempt" not in problem
    # The node records the fire (the recorder's write): now it says when.
    at = now_ms()
    await client.mysql.record_outcomes([Outcome(fired, JobStatus.FIRED, 1, at, "", slot)])
    status, problem, _ = await api.call("DELETE", f"/v1/jobs/{fired}")
    assert (status, problem["job_status"], problem["fired_ms"], problem["attempt"]) == (
        409,
        "fired",
        at,
        1,
    )


async def test_expires_after_and_the_expired_list(api: Api, scripts: Scripts) -> None:
    status, body, _ = await api.call(
        "POST", "/v1/jobs", {"topic": "t.x", "payload": 1, "at": 1, "expires_after": 0.5}
    )
    assert status == 201
    job_id = body["job_id"]
    status, record, _ = await api.call("GET", f"/v1/jobs/{job_id}")
    assert (record["status"], record["expires_after"]) == ("pending", 0.5)
    assert await claim_all(api.client, scripts, [job_id]) == (set(), 1)
    slot = slot_of(job_id, api.client.settings.slots)
    await api.client.mysql.record_outcomes(
        [Outcome(job_id, JobStatus.EXPIRED, 0, now_ms(), "expired: too late", slot)]
    )
    status, body, _ = await api.call("GET", "/v1/expired?topic=t.x", token=VIEWER)
    assert status == 200 and body["count"] == 1
    [listed] = body["expired"]
    assert (listed["job_id"], listed["status"], listed["last_error"]) == (
        job_id,
        "expired",
        "expired: too late",
    )
    status, body, _ = await api.call("GET", "/v1/expired?topic=other&limit=5")
    assert (status, body) == (200, {"expired": [], "count": 0})
    status, _, _ = await api.call("GET", "/v1/expired", token=PRODUCER)
    assert status == 403


# ----- recurring schedules ------------------------------------------------------------------


async def test_recurring_schedules_put_get_list_remove(api: Api) -> None:
    definition = {
        "topic": "reports.daily",
        "payload": {"report": "sales"},
        "cron": "0 9 * * 1-5",
        "tz": "Europe/Berlin",
        "end_at": "2099-01-01T00:00:00Z",
        "missed": "skip",
        "expires_after": 600,
        "biz_type": "report",
    }
    status, created, _ = await api.call("PUT", "/v1/recurring/morning", definition, token=PRODUCER)
    assert status == 200, created
    assert (created["name"], created["generation"], created["removed"]) == ("morning", 1, False)
    assert (created["cron"], created["tz"], created["missed"]) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        "skip",
    )
    assert created["payload"] == {"report": "sales"} and created["expires_after_s"] == 600
    assert created["end_ms"] == 4070908800000 and created["next_ms"] is not None
    stored = await api.client.get_recurring("morning")
    assert stored is not None and stored.definition.expires_after_ms == 600_000

    # The same definition again changes nothing; another one is the next generation.
    status, again, _ = await api.call("PUT", "/v1/recurring/morning", definition)
    assert (status, again["generation"]) == (200, 1)
    start = int(time.time()) + 60
    changed = {**definition, "cron": None, "tz": None, "every": 3600, "start_at": start}
    status, replaced, _ = await api.call("PUT", "/v1/recurring/morning", changed)
    assert (status, replaced["generation"], replaced["every_s"]) == (200, 2, 3600.0)
    assert (replaced["start_ms"], replaced["cron"]) == (start * 1000, None)

    status, shown, _ = await api.call("GET", "/v1/recurring/morning", token=VIEWER)
    assert (status, shown) == (200, replaced)
    status, listed, _ = await api.call("GET", "/v1/recurring", token=VIEWER)
    assert (status, [s["name"] for s in listed["recurring"]]) == (200, ["morning"])

    status, removed, _ = await api.call("DELETE", "/v1/recurring/morning", token=PRODUCER)
    assert (status, removed) == (200, {"name": "morning", "removed": True})
    status, problem, _ = await api.call("DELETE", "/v1/recurring/morning")
    assert status == 404 and problem["detail"] == "no recurring schedule 'morning'"
    status, problem, _ = await api.call("GET", "/v1/recurring/nothing")
    assert status == 404 and problem["type"] == "urn:delayq:problem:not-found"
    status, listed, _ = await api.call("GET", "/v1/recurring")
    assert listed == {"recurring": []}
    status, listed, _ = await api.call("GET", "/v1/recurring?removed=true")
    assert [(s["name"], s["removed"]) for s in listed["recurring"]] == [("morning", True)]


async def test_bad_recurring_requests_change_nothing(api: Api, redis: Any) -> None:
    before = await snapshot(api.client, redis)
    ok = {"topic": "t.x", "payload": 1, "every": 60}
    for path, body, message in [
        ("/v1/recurring/x", {**ok, "when": 1}, "unknown fields"),
        ("/v1/recurring/x", {"payload": 1, "every": 60}, "needs 'topic'"),
        ("/v1/recurring/x", {"topic": "t.x", "every": 60}, "needs 'payload'"),
        ("/v1/recurring/x", {**ok, "topic": None}, "topic must be"),
        ("/v1/recurring/x", [], "JSON object"),
        ("/v1/recurring/x", {**ok, "cron": "* * * * *"}, "exactly one"),
        ("/v1/recurring/x", {"topic": "t.x", "payload": 1}, "exactly one"),
        ("/v1/recurring/x", {**ok, "every": 0.5}, "every must be at least"),
        ("/v1/recurring/x", {**ok, "every": "60"}, "every must be seconds"),
        ("/v1/recurring/x", {**ok, "every": None, "cron": "61 * * * *"}, "cron"),
        ("/v1/recurring/x", {**ok, "every": None, "cron": "* * * * *", "tz": "Nowhere"}, "Nowhere"),
        ("/v1/recurring/x", {**ok, "tz": "UTC"}, "tz applies to cron"),
        ("/v1/recurring/x", {**ok, "start_at": "tomorrow"}, "start_at must be"),
        ("/v1/recurring/x", {**ok, "end_at": "2020-01-01T00:00:00"}, "UTC offset"),
        ("/v1/recurring/x", {**ok, "end_at": 1}, "no tick from now on"),
        ("/v1/recurring/x", {**ok, "missed": "storm"}, "missed must be"),
        ("/v1/recurring/x", {**ok, "expires_after": 0}, "expires_after"),
        ("/v1/recurring/x", {**ok, "max_attempts": 0}, "max_attempts"),
        ("/v1/recurring/x", {**ok, "topic": "a b"}, "Kafka topic"),
        ("/v1/recurring/bad%20name", ok, "name 'bad name' must be"),
    ]:
        status, problem, _ = await api.call("PUT", path, body)
        assert status == 422 and message in problem["detail"], (body, problem)
    for method, path in (("GET", "/v1/recurring/a%20b"), ("DELETE", "/v1/recurring/a%20b")):
        status, problem, _ = await api.call(method, path)
        assert status == 422 and "must be 1..120" in problem["detail"], problem
    status, problem, _ = await api.call("GET", "/v1/recurring?removed=maybe")
    assert status == 422 and "removed must be" in problem["detail"]
    status, problem, _ = await api.call("PUT", "/v1/recurring/x", raw=b"{")
    assert status == 400
    assert await snapshot(api.client, redis) == before
    assert await api.client.recurring(removed=True) == []


# ----- dead letters and the cluster ----------------------------------------------------------


async def test_dead_letters_list_show_replay_purge(api: Api, scripts: Scripts) -> None:
    ids = await make_dead(api.client, scripts, "t.dead", 3)
    status, body, _ = await api.call("GET", "/v1/dead-letters?limit=2", token=VIEWER)
    assert status == 200 and body["count"] == 3 and len(body["dead_letters"]) == 2
    status, body, _ = await api.call("GET", "/v1/dead-letters?topic=other")
    assert body == {"dead_letters": [], "count": 0}
    status, body, _ = await api.call("GET", f"/v1/dead-letters/{ids[0]}")
    assert status == 200 and body["topic"] == "t.dead" and body["record"]["job_id"] == ids[0]
    assert body["history"] == []  # no node ran to record the death in MySQL
    status, body, _ = await api.call("POST", "/v1/dead-letters/replay", {"job_ids": [ids[0]]})
    assert (status, body) == (200, {"replayed": 1})
    record = await api.client.get(ids[0])
    assert record is not None and record.status == JobStatus.PENDING
    status, body, _ = await api.call("POST", "/v1/dead-letters/purge", {"topic": "t.dead"})
    assert (status, body) == (200, {"purged": 2})
    assert await api.client.count_dead() == 0
    status, body, _ = await api.call("GET", f"/v1/dead-letters/{ids[1]}")
    assert status == 404


@pytest.mark.parametrize(
    "selection",
    [
        {},
        {"all": False},
        {"job_ids": []},
        {"job_ids": "x"},
        {"topic": "a b"},
        {"all": True, "topic": "t"},
    ],
)
async def test_replay_needs_exactly_one_selection(
    api: Api, scripts: Scripts, selection: dict[str, object]
) -> None:
    await make_dead(api.client, scripts, "t", 1)
    for action in ("replay", "purge"):
        status, body, _ = await api.call("POST", f"/v1/dead-letters/{action}", selection)
        assert status == 422, body
    assert await api.client.count_dead() == 1


async def test_cluster_and_its_figures(api: Api) -> None:
    node = Node(api.client.settings.replace(metrics_port=free_port()))
    await node.start()
    try:

        async def owns_every_slot() -> bool:
            status, body, _ = await api.call("GET", "/v1/cluster", token=VIEWER)
            assert status == 200 and body["slots"] == api.client.settings.slots
            assert [m["node_id"] for m in body["members"].values()] == [node.settings.node_id]
            return {s["owner_node"] for s in body["slot_status"]} == {node.settings.node_id}

        assert await wait_for(owns_every_slot, timeout_s=60)
        status, body, _ = await api.call("GET", "/v1/cluster/stats")
        assert status == 200 and body["error"] is None and len(body["points"]) >= 1
        assert body["snapshot"]["members"][0]["metrics"] == "ok"
    finally:
        await node.stop()


# ----- roles and authentication --------------------------------------------------------------

# Which roles each route admits (the others get 403).
ADMITS = {
    "schedule": {"producer", "operator"},
    "get_job": {"producer", "operator", "viewer"},
    "pending_counts": {"operator", "viewer"},
    "search_jobs": {"operator", "viewer"},
    "cancel_matching": {"operator"},
    "cancel": {"producer", "operator"},
    "reschedule": {"producer", "operator"},
    "list_dead": {"operator", "viewer"},
    "get_dead": {"operator", "viewer"},
    "replay_dead": {"operator"},
    "purge_dead": {"operator"},
    "list_expired": {"operator", "viewer"},
    "list_recurring": {"producer", "operator", "viewer"},
    "get_recurring": {"producer", "operator", "viewer"},
    "put_recurring": {"producer", "operator"},
    "remove_recurring": {"producer", "operator"},
    "pause_recurring": {"producer", "operator"},
    "resume_recurring": {"producer", "operator"},
    "run_recurring": {"producer", "operator"},
    "recurring_ticks": {"producer", "operator", "viewer"},
    "cluster": {"operator", "viewer"},
    "cluster_stats": {"operator", "viewer"},
}


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
async def test_every_route_and_role(api: Api, route: Any) -> None:
    path = route.path.replace("{job_id}", "no-such-job").replace("{name}", "no-such-schedule")
    body = {"job_ids": ["no-such-job"]} if "dead-letters/" in path else ok_job()
    if route.name == "reschedule":
        body = {"delay": 1}
    if route.name == "put_recurring":
        body = {"topic": "t.x", "payload": 1, "every": 60}
    sent = body if route.method in ("POST", "PUT") else None
    for role, token in (("producer", PRODUCER), ("operator", OPERATOR), ("viewer", VIEWER)):
        status, answer, _ = await api.call(route.method, path, sent, token=token)
        if role in ADMITS[route.name]:
            assert status not in (401, 403), (role, answer)
        else:
            assert status == 403 and answer["type"] == "urn:delayq:problem:forbidden", role
    for header in (None, "not-a-known-token-0000", OPERATOR + "x"):
        status, answer, response = await api.call(route.method, path, sent, token=header)
        assert status == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    status, _, _ = await api.call(route.method, path, sent, token=f"{OPERATOR}")
    assert status not in (401, 403)


async def test_each_role_reaches_what_the_role_table_says(api: Api) -> None:
    """A producer acts on the jobs whose ids it knows and searches nothing; a viewer
    searches and reads records but never payloads; a bulk cancel is an operator's, and
    never with an empty filter."""
    job = {**ok_job(), "payload": {"secret": "card-4242"}, "biz_type": "roles"}
    status, made, _ = await api.call("POST", "/v1/jobs", job, token=PRODUCER)
    assert status == 201, made
    path = f"/v1/jobs/{made['job_id']}"
    status, seen, _ = await api.call("GET", path, token=PRODUCER)
    assert (status, seen["payload"], seen.get("payload_hidden")) == (
        200,
        {"secret": "card-4242"},
        None,
    )
    status, seen, _ = await api.call("GET", path, token=VIEWER)
    assert (status, seen["payload"], seen["payload_hidden"]) == (200, None, True)
    status, found, _ = await api.call("GET", "/v1/jobs?biz_type=roles", token=VIEWER)
    assert status == 200 and [j["payload"] for j in found["jobs"]] == [None], found
    assert "card-4242" not in orjson.dumps(found).decode()
    status, found, _ = await api.call("GET", "/v1/jobs?biz_type=roles", token=OPERATOR)
    assert status == 200 and found["jobs"][0]["payload"] == {"secret": "card-4242"}
    for method, route, body in [
        ("GET", "/v1/jobs?biz_type=roles", None),
        ("GET", "/v1/jobs/counts", None),
        ("POST", "/v1/jobs/cancel", {"biz_type": "roles"}),
    ]:
        status, answer, _ = await api.call(method, route, body, token=PRODUCER)
        assert status == 403, (route, answer)
    for token in (OPERATOR, PRODUCER, VIEWER):
        status, answer, _ = await api.call("POST", "/v1/jobs/cancel", {}, token=token)
        assert status in (403, 422), answer
        if token == OPERATOR:
            assert "give at least one filter" in answer["detail"], answer
    status, seen, _ = await api.call("GET", path, token=PRODUCER)
    assert seen["status"] == "pending"  # nothing was cancelled


async def test_a_basic_or_malformed_authorization_header_is_refused(api: Api) -> None:
    for header in ("Basic b3BlcmF0b3I6eA==", OPERATOR, f"Bearer{OPERATOR}", "Bearer "):
        async with api.http.get(
            api.base + "/v1/jobs/x", headers={"Authorization": header}
        ) as answer:
            assert answer.status == 401


async def test_the_console_the_document_and_healthz_need_no_token(api: Api) -> None:
    for path in ("/", "/openapi.json", "/healthz"):
        async with api.http.get(api.base + path) as answer:
            assert answer.status == 200, path
            assert "default-src 'self'" in answer.headers["Content-Security-Policy"]


def test_tokens_setting_is_checked() -> None:
    assert parse_tokens(TOKENS)[VIEWER] == "viewer"
    for bad, message in [
        ("justatokenwithoutrole", "TOKEN=ROLE"),
        (f"{OPERATOR}=admin", "TOKEN=ROLE"),
        (f"operator={OPERATOR}", "looks like ROLE=TOKEN"),  # the token is not printed
        ("short=operator", "shorter than"),
        (f"{OPERATOR}=operator,{OPERATOR}=viewer", "repeats"),
        ("=operator", "TOKEN=ROLE"),
    ]:
        with pytest.raises(ConfigError, match=message) as caught:
            parse_tokens(bad)
        assert OPERATOR not in str(caught.value)  # a token is a secret


def test_no_tokens_means_loopback_only(settings: Settings) -> None:
    assert not check_exposure(settings, "127.0.0.1").required
    assert not check_exposure(settings, "::1").required
    with pytest.raises(ConfigError, match="without authentication"):
        check_exposure(settings, "0.0.0.0")
    assert check_exposure(settings.replace(web_tokens=TOKENS), "0.0.0.0").required
    assert "***" in repr(settings.replace(web_tokens=TOKENS))
    assert OPERATOR not in repr(settings.replace(web_tokens=TOKENS))


# ----- bad input: a clear answer, nothing written --------------------------------------------

LONG_ID = "x" * 201
BAD_BODIES: list[tuple[object, int, str]] = [
    (b"{not json", 400, "not valid JSON"),
    (b"NaN", 400, "not valid JSON"),
    ([1, 2], 422, "JSON object"),
    ("job", 422, "JSON object"),
    ({"payload": 1, "delay": 1}, 422, "'topic' and 'payload'"),
    ({**ok_job(), "colour": "red"}, 422, "unknown job fields"),
    (ok_job(topic="a b"), 422, "not a valid Kafka topic"),
    (ok_job(topic="x" * 250), 422, "not a valid Kafka topic"),
    (ok_job(topic=5), 422, "topic must be a str"),
    (ok_job(job_id=LONG_ID), 422, "job_id must be 1..200"),
    (ok_job(job_id=7), 422, "job_id must be a str"),
    (ok_job(job_id="trailing "), 422, "end with a space"),
    (ok_job(job_id="a\u202eb"), 422, "control characters"),
    (ok_job(job_id="a\x00b"), 422, "control characters"),
    (ok_job(biz_id=""), 422, "biz_id must be 1..200"),
    (ok_job(biz_type="x" * 65), 422, "biz_type must be 1..64"),
    (ok_job(delay=None), 422, "exactly one"),
    (ok_job(at=1), 422, "exactly one"),
    (ok_job(delay=-1), 422, ">= 0"),
    (ok_job(delay="10"), 422, "must be a number"),
    (ok_job(delay=True), 422, "must be a number"),
    (ok_job(delay=3601), 422, "max_delay_s"),
    ({"topic": "t", "payload": 1, "at": "tomorrow"}, 422, "RFC 3339"),
    ({"topic": "t", "payload": 1, "at": "2026-11-24T09:00:00"}, 422, "UTC offset"),
    ({"topic": "t", "payload": 1, "at": -5}, 422, ">= 0"),
    (ok_job(max_attempts=0), 422, "max_attempts"),
    (ok_job(max_attempts=2.5), 422, "max_attempts"),
    (ok_job(max_attempts=True), 422, "max_attempts"),
    (ok_job(payload="x" * 2000), 422, "payload_max_bytes"),
    (ok_job(expires_after=0), 422, "expires_after must be more than 0"),
    (ok_job(expires_after=-1), 422, "expires_after must be more than 0"),
    (ok_job(expires_after="60"), 422, "expires_after must be a number"),
    (ok_job(expires_after=True), 422, "expires_after must be a number"),
    (ok_job(expires_after=3601), 422, "max_delay_s"),
    (b'{"topic": "t", "payload": 1, "delay": 1, "expires_after": 1e999}', 400, "not valid JSON"),
    ({"jobs": "x"}, 422, "array of jobs"),
    ({"jobs": [ok_job()], "more": 1}, 422, "unknown fields"),
    ({"jobs": [ok_job(), ok_job(delay=-1)]}, 422, "job 1: delay must be >= 0"),
    ({"jobs": [ok_job(), 5]}, 422, "job 1: a job must be a JSON object"),
    ({"jobs": [ok_job()] * 100_001}, 422, "at most 100000"),
]


@pytest.mark.parametrize(
    ("body", "status", "message"), BAD_BODIES, ids=[str(i) for i in range(len(BAD_BODIES))]
)
async def test_bad_input_matrix_changes_nothing(
    api: Api, redis: Any, body: object, status: int, message: str
) -> None:
    before = await snapshot(api.client, redis)
    raw = body if isinstance(body, bytes) else None
    answered, problem, response = await api.call("POST", "/v1/jobs", body, raw=raw)
    assert answered == status, problem
    assert response.content_type == "application/problem+json"
    assert message in problem["detail"] and problem["status"] == status
    assert await snapshot(api.client, redis) == before


async def test_bad_ids_and_arguments_elsewhere(api: Api, redis: Any) -> None:
    before = await snapshot(api.client, redis)
    for method, path, body, message in [
        ("GET", "/v1/jobs/trailing%20", None, "end with a space"),
        ("DELETE", f"/v1/jobs/{LONG_ID}", None, "1..200"),
        ("POST", "/v1/jobs/x/reschedule", {"delay": 1, "at": 2}, "exactly one"),
        ("POST", "/v1/jobs/x/reschedule", {"when": 1}, "unknown fields"),
        ("POST", "/v1/jobs/x/reschedule", [], "JSON object"),
        ("GET", "/v1/jobs/x?history=maybe", None, "history must be"),
        ("GET", "/v1/dead-letters?limit=0", None, "limit"),
        ("GET", "/v1/dead-letters?limit=ten", None, "limit"),
        ("GET", "/v1/dead-letters?topic=a%20b", None, "Kafka topic"),
        ("GET", "/v1/expired?limit=0", None, "limit"),
        ("GET", "/v1/expired?topic=a%20b", None, "Kafka topic"),
        ("POST", "/v1/dead-letters/replay", {"job_ids": ["ok", "x "]}, "end with a space"),
    ]:
        status, problem, _ = await api.call(method, path, body)
        assert status == 422 and message in problem["detail"], (path, problem)
    assert await snapshot(api.client, redis) == before


async def test_unknown_routes_methods_and_a_body_too_large(settings: Settings) -> None:
    small = settings.replace(web_body_max_bytes=1000)
    async with DelayClient(small) as client, serving(small, client) as api:
        status, problem, _ = await api.call("POST", "/v1/jobs", ok_job(payload="x" * 2000))
        assert status == 413 and problem["type"] == "urn:delayq:problem:too-large"
        status, problem, _ = await api.call("GET", "/v2/jobs")
        assert status == 404 and problem["type"] == "urn:delayq:problem:no-route"
        status, problem, response = await api.call("PUT", "/v1/dead-letters/purge", {})
        assert status == 405 and response.headers["Allow"] == "POST"
        status, problem, response = await api.call("PUT", "/v1/jobs/x")
        assert status == 405 and response.headers["Allow"] == "DELETE, GET"
        assert await client.mysql.get_many(["x"]) == {}


# ----- stores unreachable ----------------------------------------------------------------


async def test_mysql_unreachable_answers_503_and_writes_nothing(
    settings: Settings, redis: Any
) -> None:
    async with mysql_links(settings) as link:  # every MySQL server behind a forwarder
        cut_settings = link.settings
        async with DelayClient(cut_settings) as client, serving(cut_settings, client) as api:
            before = await snapshot(client, redis)
            await link.cut()
            status, problem, response = await api.call("POST", "/v1/jobs", ok_job(job_id="j1"))
            assert status == 503 and problem["type"] == "urn:delayq:problem:store-unavailable"
            assert response.headers["Retry-After"] == "5"
            status, problem, _ = await api.call("GET", "/v1/jobs/j1")
            assert status == 503
            await link.open()
            assert await snapshot(client, redis) == before
            status, _, _ = await api.call("POST", "/v1/jobs", ok_job(job_id="j1"))
            assert status == 201


@pytest.mark.skipif(
    os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1"
    or bool(os.environ.get("DELAYQ_TEST_SECURE")),
    reason="the forwarder stands in front of the single plain Redis",
)
async def test_redis_unreachable_for_cancel_answers_503(settings: Settings) -> None:
    port = free_port()
    real_port = int(settings.redis_url.rsplit(":", 1)[1].split("/", 1)[0])
    async with forwarder(port, real_port) as link:
        cut = settings.replace(redis_url=f"redis://127.0.0.1:{port}/0")
        async with DelayClient(cut) as client, serving(cut, client) as api:
            job_id = await client.schedule("t", 1, delay=60)
            await link.cut()
            status, problem, response = await api.call("DELETE", f"/v1/jobs/{job_id}")
            assert status == 503 and problem["type"] == "urn:delayq:problem:redis-unavailable"
            assert "Retry-After" in response.headers


async def test_an_unknown_outcome_is_its_own_answer() -> None:
    """OutcomeUnknown (a MySQL commit whose answer was lost) cannot be made to happen on
    purpose against the real server; the answer it gets is checked here."""

    async def handler(_: web.Request) -> web.Response:
        raise OutcomeUnknown("MySQL connection lost while committing", ["a", "b"])

    app = web.Application(middlewares=[problems_middleware])
    app.router.add_post("/v1/jobs", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/v1/jobs") as answer:
                body = await answer.json(content_type=None)
                assert answer.status == 500
                assert body["type"] == "urn:delayq:problem:outcome-unknown"
                assert body["job_ids"] == ["a", "b"] and "same job_id is safe" in body["detail"]
    finally:
        await runner.cleanup()


# ----- the OpenAPI document ------------------------------------------------------------------


def test_the_document_has_every_route_and_only_those(settings: Settings) -> None:
    document = openapi_document(settings)
    documented = {
        (method.upper(), path, operation["operationId"])
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    assert documented == {(route.method, route.path, route.name) for route in ROUTES}
    assert document["openapi"] == "3.1.0"


# ----- the process ---------------------------------------------------------------------------


async def test_delayq_web_process_with_tls_and_tokens(
    settings: Settings, topic: str, collector: Collector, tmp_path: Path
) -> None:
    from cluster.devstack.secure import make_ca, make_server_cert

    ca_cert, ca_key = make_ca(tmp_path, "test-ca")
    cert, key = tmp_path / "web.pem", tmp_path / "web.key"
    make_server_cert(ca_cert, ca_key, cert, key)
    env = {
        **os.environ,
        **settings_env(settings),
        "DELAYQ_WEB_TOKENS": TOKENS,
        "DELAYQ_WEB_TLS_CERTFILE": str(cert),
        "DELAYQ_WEB_TLS_KEYFILE": str(key),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cluster.cli.main",
        "web",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        line = b""
        while b"delayq web on" not in line:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, "delayq web exited"
        base = line.decode().split(" on ", 1)[1].strip().rstrip("/")
        assert base.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(ca_cert))
        node = Node(settings)
        await node.start()
        try:
            async with aiohttp.ClientSession() as http:
                headers = {
                    "Authorization": f"Bearer {PRODUCER}",
                    "Content-Type": "application/json",
                }
                async with http.post(
                    base + "/v1/jobs",
                    data=orjson.dumps({"topic": topic, "payload": {"hi": 1}, "delay": 0.2}),
                    headers=headers,
                    ssl=context,
                ) as answer:
                    assert answer.status == 201
                    job_id = (await answer.json())["job_id"]
            [record] = await collector.until(1, timeout_s=30)
            assert (record["job_id"], record["payload"]) == (job_id, {"hi": 1})
        finally:
            await node.stop()
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0


def test_delayq_web_refuses_to_serve_everyone_without_tokens(settings: Settings) -> None:
    env = {**os.environ, **settings_env(settings), "DELAYQ_WEB_TOKENS": ""}
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "web", "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "without authentication" in done.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="examples/producer.mjs needs Node 18+")
async def test_the_javascript_producer_example(settings: Settings) -> None:
    settings = settings.replace(web_tokens=TOKENS)
    async with DelayClient(settings) as client, serving(settings, client) as api:
        env = {**os.environ, "DELAYQ_API": api.base, "DELAYQ_TOKEN": PRODUCER}
        script = str(Path(__file__).resolve().parent.parent / "examples" / "producer.mjs")
        outputs = []
        for _ in range(2):
            process = await asyncio.create_subprocess_exec(
                "node", script, "order-7", env=env, stdout=subprocess.PIPE
            )
            output, _ = await process.communicate()
            assert process.returncode == 0
            outputs.append(output.decode().splitlines())
        assert outputs == [
            ["order-7-close created", "order-7-remind created"],
            ["order-7-close already there", "order-7-remind already there"],
        ]
        rows = await client.mysql.get_many(["order-7-close", "order-7-remind"])
        assert {row.topic for row in rows.values()} == {"orders.close", "reminders"}
