"""Faults of one MySQL server of three: real node processes fire jobs whose rows are
spread over three MariaDB servers (six logical shards, two on each) while server 1 is
killed -9 and started again, frozen (SIGSTOP) and woken, or killed in the middle of a
large schedule_many.

These scenarios kill MariaDB servers, so they run on a private stack of their own
(`delayq services up --mysql-servers 3` with its own state folder and ports: Redis 26379,
MariaDB 26306/26316/26326, ZooKeeper 22181, Kafka 29092; DELAYQ_TEST_PRIVATE_STACK_DIR
moves the folder), started by this module and stopped at its end; the shared local stack
is never touched. Each scenario checks what the fault suite checks (tests/faults/verdict.py:
nothing lost, none early, MySQL and Redis agree afterwards), and that a job named
not scheduled has no row and never fires. It prints its counts and the lateness (receive
time - due time) of the jobs on the failed server and on the others (docs/guarantees.md
has the results).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from cluster import DelayClient, StoreUnavailable
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ScheduleIncomplete
from cluster.settings.config import Settings
from cluster.store.connect import connect
from cluster.store.servers import server_specs
from cluster.store.sql import mysql_connect_args
from tests.conftest import Collector, wait_for
from tests.faults.load import reading
from tests.faults.private import (
    PrivateStack,
    env_fixture,
    gone,
    redis_fixture,
    settings_fixture,
)
from tests.faults.scenario import Run, Stage, scenario, stage
from tests.faults.settle import settle
from tests.faults.timing import spread_s
from tests.faults.verdict import Ledger, Verdict, assert_safe
from tests.mysql_tools import ids_on_server
from tests.processes import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.faults]
__all__ = ["stage"]  # a fixture of tests/faults/scenario.py

STATE_DIR = Path(os.environ.get("DELAYQ_TEST_PRIVATE_STACK_DIR", "/tmp/delayq-fault-mysql-servers"))
PORTS = {"REDIS": "26379", "MYSQL": "26306", "ZOOKEEPER": "22181", "KAFKA": "29092"}
SERVERS = 3
DATABASES = 6  # two logical shards per server
FAILED = 1  # the server the faults strike (logical shards 2 and 3)
HORIZON_MS = 4000  # small, so that most jobs wait in MySQL alone until due
OUTAGE_S = 8.0
FREEZE_S = 20.0  # a frozen batch's server: stopped this long (< mysql_statement_timeout_s)
FAULT_AT_S = 5.0  # after the load began
LOAD_S = 20.0
SPREAD_JOBS = 3000  # due over ~20 s, scheduled before the fault
TICK_S = 0.2
PER_SERVER_TICK = 5  # jobs each tick on each server, in a batch of its own
MIXED_EVERY = 3  # every third tick, a batch over all three servers too
BIG_BATCH = 50_000
# The outages run with lean envelopes (jobs due more than horizon/2 ahead wait in Redis
# without their payload, which a node reads from MySQL shortly before they are due) and
# without (payload_lead_ms 0: every envelope in Redis is whole).
# Lean envelopes (payloads read from MySQL near the due time) in make test; whole ones,
# which need MySQL less, in make faults only.
LEADS = [
    pytest.param(HORIZON_MS // 2, id="lean"),
    pytest.param(0, id="full", marks=pytest.mark.long),
]


def _kind(payload_lead_ms: int) -> str:
    return "full" if payload_lead_ms == 0 else "lean"


# ----- the private stack --------------------------------------------------------------


STACK = PrivateStack(STATE_DIR, PORTS, ("--mysql-servers", str(SERVERS)))


private_env = env_fixture(STACK)


def server_pid(index: int) -> int:
    return STACK.pid("mysql" if index == 0 else f"mysql-{index}")


async def answers(settings: Settings) -> bool:
    """Whether the failed server takes a connection."""
    try:
        conn = await connect(**mysql_connect_args(settings, server_specs(settings)[FAILED].url))
    except (pymysql.err.Error, OSError):
        return False
    conn.close()
    return True


# ----- per-test fixtures on the private stack (they replace conftest's) -------------------


@pytest.fixture
def payload_lead_ms() -> int:
    """Lean envelopes for jobs due more than this ahead (0: none); tests override it."""
    return HORIZON_MS // 2


settings = settings_fixture(
    STACK,
    healthy=answers,
    env={"DELAYQ_MYSQL_DATABASES": str(DATABASES)},
    changes=lambda request: {
        "redis_horizon_ms": HORIZON_MS,
        "payload_lead_ms": request.getfixturevalue("payload_lead_ms"),
    },
)
redis = redis_fixture()


# client, topic and collector are conftest's, made with this module's settings.


# ----- the load and what it was told ------------------------------------------------------


@dataclass
class Call:
    started: float  # time.time()
    took_s: float
    server: int | None  # None: a batch over every server
    outcome: str  # "ok", "incomplete", "unavailable", or the exception's name
    failed_jobs: list[str] = field(default_factory=list)  # not scheduled or unknown


class Producer:
    """Schedules batches and keeps what each call answered: every job is in the ledger's
    scheduled set, in not_scheduled, or in unknown."""

    def __init__(self, client: DelayClient, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.ledger = Ledger()
        self.not_scheduled: set[str] = set()
        self.unknown: set[str] = set()
        self.calls: list[Call] = []
        self._ids = (f"j{uuid.uuid4().hex[:6]}-{n}" for n in range(10**9))

    def server_of(self, job_id: str) -> int:
        return self.client.mysql.homes[self.client.mysql.shard_of(job_id)[0]]

    def ids_on(self, server: int, count: int) -> list[str]:
        """New job ids whose rows live on `server`."""
        return ids_on_server(self.client.mysql, server, f"{next(self._ids)}-", count)

    async def schedule(self, jobs: list[dict[str, Any]], server: int | None) -> Call:
        started, clock = time.time(), time.monotonic()
        failed: list[str] = []
        try:
            self.ledger.scheduled.update(await self.client.schedule_many(jobs))
            outcome = "ok"
        except ScheduleIncomplete as exc:
            self.ledger.scheduled.update(exc.scheduled)
            self.not_scheduled.update(exc.not_scheduled)
            self.unknown.update(exc.unknown)
            self.ledger.schedule_failed += len(exc.not_scheduled)
            self.ledger.schedule_unknown += len(exc.unknown)
            failed = exc.not_scheduled + exc.unknown
            outcome = "incomplete"
        except StoreUnavailable:
            failed = [str(job["job_id"]) for job in jobs]
            self.not_scheduled.update(failed)
            self.ledger.schedule_failed += len(jobs)
            outcome = "unavailable"
        except Exception as exc:
            failed = [str(job["job_id"]) for job in jobs]
            self.unknown.update(failed)
            self.ledger.schedule_unknown += len(jobs)
            outcome = type(exc).__name__
        call = Call(started, time.monotonic() - clock, server, outcome, failed)
        self.calls.append(call)
        return call

    def jobs(self, ids: list[str], rng: random.Random, low: float, high: float) -> list[Any]:
        return [
            {"topic": self.topic, "payload": {"n": n}, "delay": rng.uniform(low, high), "job_id": i}
            for n, i in enumerate(ids)
        ]

    async def spread(self, count: int) -> None:
        """`count` jobs over every server, due 1-21 s ahead (most beyond the horizon)."""
        rng = random.Random(5)
        ids = [next(self._ids) for _ in range(count)]
        for start in range(0, count, 500):
            await self.schedule(self.jobs(ids[start : start + 500], rng, 1.0, 21.0), None)

    async def per_server(self, server: int, seconds: float) -> None:
        """A batch of jobs on one server every tick, due 0.3-6 s ahead."""
        rng = random.Random(server)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await self.schedule(
                self.jobs(self.ids_on(server, PER_SERVER_TICK), rng, 0.3, 6), server
            )
            await asyncio.sleep(TICK_S)

    async def mixed(self, seconds: float) -> None:
        """Now and then a batch with jobs on every server."""
        rng = random.Random(7)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ids = [i for s in range(SERVERS) for i in self.ids_on(s, PER_SERVER_TICK)]
            await self.schedule(self.jobs(ids, rng, 0.3, 6), None)
            await asyncio.sleep(TICK_S * MIXED_EVERY)


def lateness_by_server(
    producer: Producer, records: list[dict[str, Any]], window: Window | None = None
) -> dict[str, str]:
    """Lateness of the first record of each job: of the failed server's jobs, of the
    others', and of the others' due during the fault."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(str(record["job_id"]), record)
    late: dict[str, list[float]] = {"failed server": [], "other servers": []}
    during: list[float] = []
    for job_id, record in first.items():
        lateness = record["received_ms"] - record["due_ms"]
        if producer.server_of(job_id) == FAILED:
            late["failed server"].append(lateness)
            continue
        late["other servers"].append(lateness)
        if window and window.struck * 1000 <= record["due_ms"] < window.healed * 1000:
            during.append(lateness)
    shown = {name: spread_s(values) for name, values in late.items()}
    if window:
        shown["other servers, due during the fault"] = spread_s(during)
    return shown


@dataclass
class Window:
    """When the fault struck and when it healed (time.time())."""

    struck: float = 0.0
    resumed: float = 0.0  # the restart began, or SIGCONT: down until then for sure
    healed: float = 0.0  # answering again


async def rows_of(client: DelayClient, ids: set[str]) -> set[str]:
    return set(await client.mysql.get_many(sorted(ids))) if ids else set()


async def server_outage(
    stage: Stage, name: str, fault: Callable[[Window, Settings], Awaitable[None]]
) -> tuple[Verdict, Producer, Window]:
    """Two nodes; jobs due over ~20 s on every server; then, beside producers writing a
    batch per server every tick (and a mixed one now and then), the fault on server 1
    FAULT_AT_S into the load. Settled and judged as `name`."""
    producer = Producer(stage.client, stage.topic)
    window = Window()

    async def load(ledger: Ledger, client: DelayClient, topic: str) -> None:
        per_server = [producer.per_server(server, LOAD_S) for server in range(SERVERS)]
        await asyncio.gather(*per_server, producer.mixed(LOAD_S))

    async def strike(run: Run) -> None:
        await fault(window, stage.settings)

    result, _, _ = await scenario(
        stage,
        name,
        strike,
        load=load,
        ledger=producer.ledger,
        before_load=lambda: producer.spread(SPREAD_JOBS),
        fault_at_s=FAULT_AT_S,
        settle_timeout_s=180,
    )
    report(name, producer, stage.collector, window, stage.tmp_path)
    return result, producer, window


def report(
    name: str, producer: Producer, collector: Collector, window: Window, tmp_path: Path
) -> None:
    # Calls that ran at some time during the fault (from the fault to its healing).
    during = [
        c
        for c in producer.calls
        if c.started < window.healed and c.started + c.took_s > window.struck
    ]
    outcomes = Counter((c.server, c.outcome) for c in during)
    slowest = {
        server: max((c.took_s for c in during if c.server == server), default=0.0)
        for server in (*range(SERVERS), None)
    }
    fired = {str(r["job_id"]) for r in collector.records}
    with (tmp_path / "records.jsonl").open("wb") as out:  # for a closer look
        out.write(orjson.dumps(window.__dict__) + b"\n")
        for record in collector.records:
            out.write(
                orjson.dumps({**record, "server": producer.server_of(str(record["job_id"]))})
                + b"\n"
            )
    print(
        f"[{name}] scheduled {len(producer.ledger.scheduled)}, not scheduled "
        f"{len(producer.not_scheduled)}, unknown {len(producer.unknown)}, fired {len(fired)}; "
        f"lateness {lateness_by_server(producer, collector.records, window)}; calls during "
        f"the fault (server, outcome): {dict(outcomes)}; slowest call during it by server "
        f"{ {k: round(v, 2) for k, v in slowest.items()} }; "
        f"fault {window.healed - window.struck:.1f} s (records: {tmp_path / 'records.jsonl'})"
    )


def assert_calls_kept_their_word(producer: Producer, collector: Collector, rows: set[str]) -> None:
    """Nothing named not scheduled was written or fired; every job scheduled fired."""
    fired = {str(r["job_id"]) for r in collector.records}
    assert producer.not_scheduled & fired == set()
    assert producer.not_scheduled & rows == set()
    assert producer.ledger.scheduled - fired == set()


def waited_in_mysql(
    records: list[dict[str, Any]], producer: Producer, window: Window
) -> dict[str, float]:
    """Jobs on the failed server that came due while it was down and that no node could
    have loaded before (due later than the fault plus the horizon: the client put in Redis
    only jobs due within the horizon, the nodes load them horizon/2 ahead), with the time
    their first record arrived (ms)."""
    arrived: dict[str, float] = {}
    for record in records:
        job_id = str(record["job_id"])
        if job_id in arrived or producer.server_of(job_id) != FAILED:
            continue
        if window.struck * 1000 + HORIZON_MS < int(record["due_ms"]) < window.resumed * 1000:
            arrived[job_id] = float(record["received_ms"])
    return arrived


async def kill_and_restart(window: Window, settings: Settings) -> None:
    pid = server_pid(FAILED)
    os.kill(pid, signal.SIGKILL)
    await gone(pid)
    # From here on no connection to it is left open: calls meet a refusal, not a
    # connection that breaks under them (an unknown outcome).
    window.struck = time.time()
    await asyncio.sleep(OUTAGE_S)
    window.resumed = time.time()
    restart = asyncio.create_task(STACK.restart_servers())

    async def back() -> bool:
        return await answers(settings) or restart.done()

    await wait_for(back, timeout_s=300, interval_s=0.1)
    window.healed = time.time()
    await restart


async def freeze(window: Window, settings: Settings) -> None:
    pid = server_pid(FAILED)
    os.kill(pid, signal.SIGSTOP)
    window.struck = time.time()
    try:
        await asyncio.sleep(OUTAGE_S)
    finally:
        os.kill(pid, signal.SIGCONT)
        window.resumed = window.healed = time.time()


async def check_outage(
    name: str,
    result: Verdict,
    producer: Producer,
    window: Window,
    collector: Collector,
    client: DelayClient,
) -> None:
    """What both outage scenarios assert."""
    assert_safe(result, producer.ledger)
    assert result.unfinished == 0
    rows = await rows_of(client, producer.not_scheduled | producer.unknown)
    assert_calls_kept_their_word(producer, collector, rows)
    # Calls on the healthy servers alone were served throughout.
    healthy = [c for c in producer.calls if c.server not in (FAILED, None)]
    assert [c for c in healthy if c.outcome != "ok"] == []
    # A batch over every server lost at most the failed server's jobs.
    for call in producer.calls:
        if call.server is None:
            assert {producer.server_of(job_id) for job_id in call.failed_jobs} <= {FAILED}
    # Jobs that waited in MySQL alone on the failed server fired once it was back.
    waited = waited_in_mysql(collector.records, producer, window)
    assert waited, "no job of the failed server came due during the fault"
    assert min(waited.values()) >= window.resumed * 1000
    print(
        f"[{name}] {len(waited)} job(s) of the failed server waited in MySQL during the "
        f"fault; unknown jobs that have a row: {len(rows & producer.unknown)}"
    )


@pytest.mark.parametrize("payload_lead_ms", LEADS)
async def test_one_server_killed_and_restarted(payload_lead_ms: int, stage: Stage) -> None:
    """Server 1 killed -9, started again 8 s later: its jobs' calls fail with a clear
    answer meanwhile, the other servers' jobs fire on time, and its jobs beyond the
    horizon fire once it is back."""
    name = f"mysql-server-killed-{_kind(payload_lead_ms)}"
    result, producer, window = await server_outage(stage, name, kill_and_restart)
    await check_outage(name, result, producer, window, stage.collector, stage.client)
    during = [c for c in producer.calls if window.struck <= c.started < window.resumed]
    failed_server = [c for c in during if c.server == FAILED]
    assert failed_server and all(c.outcome == "unavailable" for c in failed_server)
    assert all(c.outcome == "incomplete" for c in during if c.server is None)


@pytest.mark.parametrize("payload_lead_ms", LEADS)
async def test_one_server_frozen(payload_lead_ms: int, stage: Stage) -> None:
    """Server 1 stopped (SIGSTOP) for 8 s, then continued: calls on it wait for it."""
    name = f"mysql-server-frozen-{_kind(payload_lead_ms)}"
    result, producer, window = await server_outage(stage, name, freeze)
    await check_outage(name, result, producer, window, stage.collector, stage.client)


async def rows_written_on(conn: Any, tables: list[str]) -> int:
    """Job rows in these tables, uncommitted ones included (the connection reads
    uncommitted): how far a transaction writing them has come."""
    total = 0
    async with conn.cursor() as cur:
        for table in tables:
            await cur.execute(f"SELECT COUNT(*) FROM {table}")
            total += int((await cur.fetchone())[0])
    return total


async def batch_killed_mid_write(
    producer: Producer, settings: Settings, size: int
) -> tuple[Call, int, float]:
    """schedule_many of `size` jobs over every server, due 20-40 s ahead; server 1 killed
    -9 as soon as rows of the batch appear in its tables. Returns the call, the rows seen
    there at the kill, and how long after the call began the kill came."""
    store = producer.client.mysql
    dbs = [d for d, server in store.homes.items() if server == FAILED]
    tables = [store.shard_tables(shard)[0] for shard in store.all_shards(dbs)]
    conn = await connect(**mysql_connect_args(settings, store.servers[FAILED].url))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        before = await rows_written_on(conn, tables)
        ids = [next(producer._ids) for _ in range(size)]
        jobs = producer.jobs(ids, random.Random(size), 20.0, 40.0)
        began = time.monotonic()
        task = asyncio.create_task(producer.schedule(jobs, None))
        seen = before
        while not task.done() and seen == before:
            seen = await rows_written_on(conn, tables)
    finally:
        conn.close()
    pid = server_pid(FAILED)
    os.kill(pid, signal.SIGKILL)
    killed_after = time.monotonic() - began
    await gone(pid)
    return await task, seen - before, killed_after


async def test_a_batch_whose_server_is_killed_mid_write(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """A schedule_many of 50,000 jobs over three servers, one of them killed -9 while it
    writes its part: ScheduleIncomplete names every job once; after the restart each
    scheduled job has its row and fires once, and no job named not scheduled has a row
    or fires. Should the batch finish before the kill, it is tried again, bigger."""
    name = "mysql-server-killed-mid-batch"
    procs = [NodeProcess(settings, tmp_path, f"{name}-{i}") for i in range(2)]
    producer = Producer(client, topic)
    size = BIG_BATCH
    tries: list[str] = []
    total = 0
    try:
        for proc in procs:
            await proc.wait_ready()
        async with reading(collector):
            for _ in range(3):
                call, seen, killed_after = await batch_killed_mid_write(producer, settings, size)
                await STACK.restart_servers()
                total += size
                tries.append(
                    f"{size} jobs: {call.outcome} after {call.took_s:.2f} s, server {FAILED} "
                    f"killed {killed_after:.2f} s in with {seen} of its rows written"
                )
                if call.outcome != "ok":
                    break
                size = min(2 * size, 100_000)
        result = await settle(name, producer.ledger, collector, client, redis, timeout_s=240)
    finally:
        for proc in procs:
            proc.kill()
    print(f"[{name}] tries: {tries}")
    assert call.outcome == "incomplete", tries
    scheduled = producer.ledger.scheduled
    rows = await rows_of(client, producer.not_scheduled | producer.unknown)
    fired = Counter(str(r["job_id"]) for r in collector.records)
    print(
        f"[{name}] scheduled {len(scheduled)}, not scheduled {len(producer.not_scheduled)}, "
        f"unknown {len(producer.unknown)} (with a row after the restart: "
        f"{len(rows & producer.unknown)}), fired {len(fired)}, fired twice or more "
        f"{sum(n > 1 for n in fired.values())}; lateness "
        f"{lateness_by_server(producer, collector.records)}"
    )
    assert_safe(result, producer.ledger)
    # Every job of the batch in exactly one list.
    assert len(scheduled) + len(producer.not_scheduled) + len(producer.unknown) == total
    assert await rows_of(client, scheduled) == scheduled
    assert_calls_kept_their_word(producer, collector, rows)
    assert {fired[job_id] for job_id in scheduled} == {1}


@pytest.mark.timeout(300)
async def test_a_frozen_server_holds_back_only_its_own_jobs(
    settings: Settings,
    client: DelayClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Server 1 stopped (SIGSTOP) for FREEZE_S, less than mysql_statement_timeout_s,
    while a batch over every logical shard is scheduled (half the jobs with the caller's
    ids, half with delayq's), then a schedule_batch: before SIGCONT is sent, both have
    answered, the healthy servers' jobs scheduled and fired, the frozen server's named
    unknown (schedule_many: its part cut off mid-write after mysql_stall_s) or not
    scheduled (schedule_batch: its ids' existence could not be read, so not written).
    After SIGCONT an unknown job either has its row and fires, or has none and never
    fires; a job not scheduled has no row and never fires."""
    name = "mysql-server-frozen-batch"
    node = NodeProcess(settings, tmp_path, f"{name}-0")
    pid = server_pid(FAILED)
    woken_at: list[float] = []

    async def wake_later() -> None:
        try:
            await asyncio.sleep(FREEZE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
            woken_at.append(time.time())

    try:
        await node.wait_ready()
        async with reading(collector):
            keyed = [f"k{uuid.uuid4().hex[:6]}-{n}" for n in range(60)]
            jobs: list[dict[str, Any]] = [
                {"topic": topic, "payload": {"n": n}, "delay": 0.5, "job_id": job_id}
                for n, job_id in enumerate(keyed)
            ] + [{"topic": topic, "payload": {"n": n}, "delay": 0.5} for n in range(60)]
            os.kill(pid, signal.SIGSTOP)
            wake = asyncio.create_task(wake_later())
            try:
                clock = time.monotonic()
                with pytest.raises(ScheduleIncomplete) as raised:
                    await client.schedule_many(jobs)
                took_s = time.monotonic() - clock
                outcome = raised.value
                # schedule_batch reads first which caller ids exist: those whose server
                # does not answer that read are not written, the others are scheduled.
                batch_ids = [f"b{uuid.uuid4().hex[:6]}-{n}" for n in range(30)]
                with pytest.raises(ScheduleIncomplete) as batch_raised:
                    await client.schedule_batch(
                        [
                            {"topic": topic, "payload": {}, "delay": 0.5, "job_id": job_id}
                            for job_id in batch_ids
                        ]
                    )
                batch = batch_raised.value
                scheduled = set(outcome.scheduled) | set(batch.scheduled)

                async def healthy_fired() -> bool:
                    return scheduled <= {str(r["job_id"]) for r in collector.records}

                assert await wait_for(healthy_fired, timeout_s=90, interval_s=0.1)
                # All of it before SIGCONT was sent.
                assert not woken_at
            finally:
                await wake
            server_of = Producer(client, topic).server_of
            # Every healthy server's job was scheduled; every job of server 1 was named
            # unknown or not scheduled.
            assert {server_of(j) for j in scheduled} == {0, 2}
            lists = [set(outcome.scheduled), set(outcome.not_scheduled), set(outcome.unknown)]
            everyone = set(keyed).union(*lists)
            assert len(everyone) == len(jobs)
            assert sum(map(len, lists)) == len(jobs)
            assert {server_of(j) for j in everyone - scheduled} == {FAILED}
            assert {server_of(j) for j in everyone} == {0, 1, 2}
            assert set(outcome.unknown) & set(keyed)  # a caller's id and one of delayq's
            assert set(outcome.unknown) - set(keyed)
            assert {server_of(j) for j in batch.scheduled} == {0, 2}
            assert set(batch.not_scheduled) == {j for j in batch_ids if server_of(j) == FAILED}
            assert batch.unknown == []

            # After SIGCONT: a job not scheduled has no row and never fires; an unknown
            # job that has a row fires, one that has none never does.
            async def answering() -> bool:
                return await answers(settings)

            assert await wait_for(answering, timeout_s=60, interval_s=0.2)
            unknown = set(outcome.unknown)
            with_rows: set[str] = set()

            async def rows_fired() -> bool:
                with_rows.update(await rows_of(client, unknown))
                fired = {str(r["job_id"]) for r in collector.records}
                return with_rows <= fired and await rows_of(client, unknown) == with_rows

            assert await wait_for(rows_fired, timeout_s=90, interval_s=0.5)
            fired = {str(r["job_id"]) for r in collector.records}
            not_scheduled = set(outcome.not_scheduled) | set(batch.not_scheduled)
            assert await rows_of(client, not_scheduled) == set()
            assert fired & not_scheduled == set()
            assert fired & (unknown - with_rows) == set()
            print(
                f"[{name}] answered in {took_s:.2f} s of a {FREEZE_S:g} s freeze: "
                f"scheduled {len(scheduled)} (all fired before SIGCONT), not "
                f"scheduled {len(not_scheduled)}, unknown {len(unknown)} of which "
                f"{len(with_rows)} had a row after SIGCONT and fired"
            )
    finally:
        if not woken_at:
            os.kill(pid, signal.SIGCONT)
        node.kill()
