"""A Galera node lost under load: a delayq cluster with two logical shards, shard 0 on the
plain MariaDB of the local stack (server 0) and shard 1 on the three-node Galera cluster
(server 1, `delayq services up --galera`: all three addresses in one URL, with
wsrep_sync_wait=1). Two real node processes fire jobs due over ~20 s (most beyond a 4 s
Redis horizon, so loaded from MySQL while the fault lasts) as producers schedule, cancel
and reschedule; the Galera node the nodes' connections are on is killed -9, and started
again 8 s later, rejoining by IST.

What is checked is what the fault suite checks (tests/faults/verdict.py: nothing lost, none
early, no cancelled job fired, MySQL and Redis agree afterwards), no duplicate, every
schedule the producers retried with the same job_id scheduled once, and the rejoined
node holding the same rows as the others. Printed: the counts, what the calls raised,
the pause (longest gap between successful schedules on the Galera shard, longest gap
between records received) and the lateness per shard (docs/galera.md has the results).

A second test races two clients on two different Galera nodes over the same jobs
(cancel against reschedule, two reschedules, two cancels, the same job ids scheduled by
both), the case of a certification conflict: each call must answer with a result or a
delayq error, both schedules ok (the loser's transaction is run again), and it prints
what each answered.

Only the Galera nodes are killed; the plain stack is shared and never touched.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import psutil
import pymysql
import pytest

from cluster import DelayClient, OutcomeUnknown, StoreUnavailable
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import galera
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings
from cluster.store.connect import connect
from cluster.store.sql import mysql_connect_args
from tests.conftest import Collector
from tests.faults.load import reading
from tests.faults.settle import settle
from tests.faults.verdict import Ledger, assert_safe
from tests.processes import NodeProcess

# One worker runs both Galera modules: they share the stack's Galera cluster.
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.xdist_group("galera")]

GALERA = 1  # the server index of the Galera cluster: logical shard 1 lives there
HORIZON_MS = 4000  # small: most jobs wait in MySQL alone until due
SPREAD_JOBS = 1500  # due 1-21 s ahead, scheduled before the fault
LOAD_S = 20.0
KILL_AT_S = 5.0  # into the load
DOWN_S = 8.0  # the killed node is started again this long after the kill
TICK_S = 0.1
RETRY_S = 0.1  # pause before a producer calls again with the same job ids
GIVE_UP_S = 60.0  # a producer stops retrying a call this long after it began


@pytest.fixture(scope="module")
def galera_url() -> Iterator[str]:
    """The Galera cluster of the local stack, every node up; its URL (wsrep_sync_wait=1)."""
    galera.up()
    yield galera.url()
    galera.up()  # every node running again, also after a failed test


@pytest.fixture
async def settings(redis_settings: Settings, galera_url: str) -> AsyncIterator[Settings]:
    """Shard 0 on the plain MariaDB (mysql_url), shard 1 on the Galera cluster."""
    base = redis_settings.replace(
        mysql_servers=galera_url,
        mysql_databases=2,
        redis_horizon_ms=HORIZON_MS,
        payload_lead_ms=HORIZON_MS // 2,
    )
    made = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    yield made
    await drop_cluster_database(made)


# ----- which Galera node, and the rows each node holds ------------------------------------


def galera_node_of_port(port: int) -> int:
    return [p for _, p in galera.addresses()].index(port) + 1


def galera_nodes_used_by(pid: int) -> set[int]:
    """The Galera nodes a process has TCP connections to."""
    ports = {p for _, p in galera.addresses()}
    return {
        galera_node_of_port(c.raddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port in ports and c.status == psutil.CONN_ESTABLISHED
    }


async def client_galera_node(client: DelayClient) -> int:
    """The Galera node a connection of the client's pool for server 1 is on."""
    pool = await client.mysql.server_pool(GALERA)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SELECT @@port")
        return galera_node_of_port(int((await cur.fetchone())[0]))


async def rows_on_node(settings: Settings, client: DelayClient, node: int) -> tuple[int, int]:
    """(count, checksum) of logical shard 1's job rows as one Galera node holds them."""
    _, port = galera.addresses()[node - 1]
    args = {**mysql_connect_args(settings, client.mysql.servers[GALERA].url)}
    args.pop("addresses", None)
    conn = await connect(**{**args, "port": port})
    count = checksum = 0
    try:
        async with conn.cursor() as cur:
            for shard in client.mysql.all_shards([1]):
                table, _ = client.mysql.shard_tables(shard)
                await cur.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(',', job_id, status,"
                    f" action_time))), 0) FROM {table}"
                )
                n, s = await cur.fetchone()
                count, checksum = count + int(n), checksum + int(s)
    finally:
        conn.close()
    return count, checksum


# ----- the load and what it was told ------------------------------------------------------


@dataclass
class Calls:
    """What the producers were told, with when (time.time())."""

    ok: list[tuple[float, int]] = field(default_factory=list)  # (answered, shard) schedules
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (call, exception)
    retried_ok: int = 0  # schedules that succeeded after an error, same job ids
    gave_up: set[str] = field(default_factory=set)

    said: dict[tuple[str, str], str] = field(default_factory=dict)  # the first message

    def error(self, call: str, exc: BaseException) -> None:
        self.errors[(call, type(exc).__name__)] += 1
        self.said.setdefault((call, type(exc).__name__), str(exc))


class Producer:
    def __init__(self, client: DelayClient, topic: str, ledger: Ledger, calls: Calls) -> None:
        self.client, self.topic, self.ledger, self.calls = client, topic, ledger, calls
        self._ids = (f"g{uuid.uuid4().hex[:6]}-{n}" for n in range(10**9))
        self.spread: list[tuple[str, float]] = []  # (job id, due s) of the spread jobs

    def shard(self, job_id: str) -> int:
        return self.client.mysql.shard_of(job_id)[0]

    def ids_on(self, shard: int, count: int) -> list[str]:
        found: list[str] = []
        while len(found) < count:
            job_id = next(self._ids)
            if self.shard(job_id) == shard:
                found.append(job_id)
        return found

    async def until_scheduled(self, call: str, jobs: list[dict[str, Any]], one: bool) -> None:
        """schedule() (one) or schedule_many() of these jobs, called again with the same
        job ids after StoreUnavailable or OutcomeUnknown until it answers ok."""
        ids = [str(job["job_id"]) for job in jobs]
        began = time.monotonic()
        failed = False
        while True:
            try:
                if one:
                    [job] = jobs
                    await self.client.schedule(
                        job["topic"], job["payload"], at=job["at"], job_id=job["job_id"]
                    )
                else:
                    await self.client.schedule_many(jobs)
            except (StoreUnavailable, OutcomeUnknown) as exc:
                self.calls.error(call, exc)
                failed = True
                if time.monotonic() - began > GIVE_UP_S:
                    self.calls.gave_up.update(ids)
                    self.ledger.schedule_unknown += len(ids)
                    return
                await asyncio.sleep(RETRY_S)
                continue
            self.ledger.scheduled.update(ids)
            self.calls.ok.append((time.time(), self.shard(ids[0])))
            self.calls.retried_ok += failed
            return

    def jobs(self, ids: list[str], rng: random.Random, low: float, high: float) -> list[Any]:
        now = time.time()
        return [
            {"topic": self.topic, "payload": {"n": n}, "at": now + rng.uniform(low, high),
             "job_id": job_id}
            for n, job_id in enumerate(ids)
        ]  # fmt: skip

    async def schedule_spread(self) -> None:
        rng = random.Random(5)
        ids = [next(self._ids) for _ in range(SPREAD_JOBS)]
        for start in range(0, SPREAD_JOBS, 250):
            jobs = self.jobs(ids[start : start + 250], rng, 1.0, 21.0)
            await self.until_scheduled("schedule_many", jobs, one=False)
            self.spread += [(str(job["job_id"]), float(job["at"])) for job in jobs]

    async def batches(self, shard: int, seconds: float) -> None:
        """A batch of five jobs on one shard every tick, due 0.3-8 s ahead."""
        rng = random.Random(shard)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            jobs = self.jobs(self.ids_on(shard, 5), rng, 0.3, 8.0)
            await self.until_scheduled("schedule_many", jobs, one=False)
            await asyncio.sleep(TICK_S)

    async def singles(self, seconds: float) -> None:
        """One job at a time on the Galera shard, due 0.3-8 s ahead."""
        rng = random.Random(11)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await self.until_scheduled("schedule", self.jobs(self.ids_on(1, 1), rng, 0.3, 8), True)
            await asyncio.sleep(TICK_S / 2)

    async def changes(self, seconds: float) -> None:
        """Every tick, cancel one spread job and reschedule another (5 s later), each due
        at least 3 s ahead, on either shard."""
        end = time.monotonic() + seconds
        pending = list(self.spread)
        random.Random(9).shuffle(pending)
        while time.monotonic() < end and len(pending) >= 2:
            later = [(j, due) for j, due in pending if due > time.time() + 3]
            if len(later) < 2:
                break
            (cancel, _), (move, due) = later[:2]
            pending = [p for p in pending if p[0] not in (cancel, move)]
            for call, job_id in (("cancel", cancel), ("reschedule", move)):
                try:
                    if call == "cancel":
                        answer: Any = await self.client.cancel(job_id)
                    else:
                        answer = await self.client.reschedule(job_id, at=due + 5)
                except (StoreUnavailable, OutcomeUnknown) as exc:
                    self.calls.error(call, exc)
                    self.ledger.change_failed += 1
                    if call == "cancel":
                        self.ledger.cancel_unknown.add(job_id)
                    continue
                if call == "cancel":
                    (self.ledger.cancelled if answer else self.ledger.not_cancelled).add(job_id)
                elif answer:
                    self.ledger.rescheduled[job_id] = int((due + 5) * 1000)
            await asyncio.sleep(TICK_S)


@dataclass
class Fault:
    victim: int = 0
    killed: float = 0.0  # time.time()
    restarted: float = 0.0
    rejoin_s: float = 0.0
    nodes_before: dict[str, set[int]] = field(default_factory=dict)
    nodes_after: dict[str, set[int]] = field(default_factory=dict)


async def kill_the_nodes_galera_node(
    procs: list[NodeProcess], client: DelayClient, fault: Fault
) -> None:
    """Kill -9 the Galera node the node processes are connected to; DOWN_S later, start
    it again and wait until it has rejoined (Synced)."""
    for proc in procs:
        fault.nodes_before[proc.name] = galera_nodes_used_by(proc.pid)
    fault.nodes_before["client"] = {await client_galera_node(client)}
    used = set().union(*fault.nodes_before.values())
    assert len(used) == 1, f"not all on one Galera node: {fault.nodes_before}"
    [fault.victim] = used
    pid = galera.node_pid(fault.victim)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    fault.killed = time.time()
    await asyncio.sleep(DOWN_S)
    for proc in procs:
        fault.nodes_after[proc.name] = galera_nodes_used_by(proc.pid)
    fault.nodes_after["client"] = {await client_galera_node(client)}
    fault.restarted = time.time()
    await asyncio.to_thread(galera.start_node, fault.victim)
    fault.rejoin_s = time.time() - fault.restarted


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest gap (s) between consecutive times within [start, end], and when it
    began."""
    inside = sorted(t for t in times if start <= t <= end)
    gaps = [(b - a, a) for a, b in itertools.pairwise(inside)]
    return max(gaps, default=(0.0, start))


def lateness(records: list[dict[str, Any]], producer: Producer, shard: int) -> str:
    late = sorted(
        float(r["received_ms"]) - float(r["due_ms"])
        for r in records
        if producer.shard(str(r["job_id"])) == shard
    )
    if not late:
        return "-"
    at = [late[min(len(late) - 1, int(q * len(late)))] / 1000 for q in (0.5, 0.99)]
    return f"p50 {at[0]:.2f} / p99 {at[1]:.2f} / max {late[-1] / 1000:.2f} s"


async def test_the_galera_node_in_use_killed_and_restarted(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    name = "galera-node-killed"
    assert client.mysql.homes == {0: 0, 1: GALERA}
    procs = [NodeProcess(settings, tmp_path, f"{name}-{i}") for i in range(2)]
    ledger, calls, fault = Ledger(), Calls(), Fault()
    producer = Producer(client, topic, ledger, calls)
    try:
        for proc in procs:
            await proc.wait_ready()
        async with reading(collector):
            await producer.schedule_spread()
            load = [
                asyncio.create_task(producer.batches(0, LOAD_S)),
                asyncio.create_task(producer.batches(1, LOAD_S)),
                asyncio.create_task(producer.singles(LOAD_S)),
                asyncio.create_task(producer.changes(LOAD_S - 3)),
            ]
            await asyncio.sleep(KILL_AT_S)
            await kill_the_nodes_galera_node(procs, client, fault)
            await asyncio.gather(*load)
        result = await settle(name, ledger, collector, client, redis, timeout_s=180)
    finally:
        for proc in procs:
            proc.kill()
    records = cast(list[dict[str, Any]], collector.records)
    fired = Counter(str(r["job_id"]) for r in records)
    window = (fault.killed - 2, fault.killed + 15)
    gap, gap_at = longest_gap([t for t, shard in calls.ok if shard == 1], *window)
    fire_gap, fire_at = longest_gap([float(r["received_ms"]) / 1000 for r in records], *window)
    # Shard 1's jobs beyond the horizon that came due while the node was down: loaded
    # from MySQL (from the surviving nodes) during the fault.
    loaded = [
        float(r["received_ms"]) - float(r["due_ms"])
        for r in records
        if producer.shard(str(r["job_id"])) == 1
        and fault.killed * 1000 + HORIZON_MS < float(r["due_ms"]) < fault.restarted * 1000
    ]
    print(
        f"[{name}] killed galera-{fault.victim}; connections before {fault.nodes_before}, "
        f"after {fault.nodes_after}; rejoined in {fault.rejoin_s:.1f} s. Scheduled "
        f"{len(ledger.scheduled)} ({calls.retried_ok} calls ok after retrying, gave up "
        f"{len(calls.gave_up)}), cancelled {len(ledger.cancelled)} (too late "
        f"{len(ledger.not_cancelled)}, unknown {len(ledger.cancel_unknown)}), rescheduled "
        f"{len(ledger.rescheduled)}, fired {len(fired)}, duplicates {result.duplicates}; "
        f"errors {dict(calls.errors)}; longest gap between ok schedules on the Galera "
        f"shard {gap:.2f} s (from {gap_at - fault.killed:+.2f} s after the kill); longest "
        f"gap between records {fire_gap:.2f} s (from {fire_at - fault.killed:+.2f} s); "
        f"{len(loaded)} jobs loaded from MySQL during the fault, max lateness "
        f"{max(loaded, default=0) / 1000:.2f} s; lateness shard 0 "
        f"{lateness(records, producer, 0)}, shard 1 (Galera) "
        f"{lateness(records, producer, 1)}"
    )
    with (tmp_path / "records.jsonl").open("wb") as out:  # for a closer look
        out.write(orjson.dumps(fault.__dict__, default=sorted) + b"\n")
        for r in records:
            out.write(orjson.dumps({**r, "shard": producer.shard(str(r["job_id"]))}) + b"\n")
    for (call, error), message in calls.said.items():
        print(f"  {call} raised {error}: {message}")
    print(f"[{name}] records: {tmp_path / 'records.jsonl'}")
    assert_safe(result, ledger)
    assert result.unfinished == 0
    assert result.duplicates == 0
    assert calls.gave_up == set()
    assert ledger.scheduled - ledger.cancelled - ledger.cancel_unknown <= set(fired)
    assert loaded, "no job of the Galera shard was loaded from MySQL during the fault"
    # Every process left the killed node, and it has every row again after rejoining.
    assert all(fault.victim not in used for used in fault.nodes_after.values())
    survivors = [i for i in (1, 2, 3) if i != fault.victim]
    expected = await rows_on_node(settings, client, survivors[0])
    assert expected[0] == len({j for j in ledger.scheduled if producer.shard(j) == 1})
    for node in (fault.victim, survivors[1]):
        assert await rows_on_node(settings, client, node) == expected


# ----- a certification conflict at delayq's level -------------------------------------------


Change = Callable[[str, float], Awaitable[Any]]  # a call on one job (id, due s)


def rotated_url(url: str, first: int) -> str:
    """The Galera URL with its addresses listed from node `first` on: a client with it
    connects to that node first."""
    hosts = [f"{host}:{port}" for host, port in galera.addresses()]
    order = ",".join(hosts[first - 1 :] + hosts[: first - 1])
    return url.replace(",".join(hosts), order)


def answer_of(outcome: object, said: dict[str, str]) -> str:
    """A call's answer: its result's status, or the exception's class (and MySQL code),
    whose first message is kept in `said`."""
    if isinstance(outcome, BaseException):
        code = f" {outcome.args[0]}" if isinstance(outcome, pymysql.err.Error) else ""
        answer = f"{type(outcome).__module__}.{type(outcome).__name__}{code}"
        said.setdefault(answer, str(outcome))
        return answer
    status = getattr(outcome, "status", None)
    return str(status.value) if status is not None else "ok"


async def test_two_clients_on_two_galera_nodes_change_the_same_jobs(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Client A on one Galera node, client B on another, at once on the same jobs:
    cancel against reschedule, reschedule against reschedule, cancel against cancel, and
    the same job ids scheduled by both. Their UPDATEs and INSERTs of one row on two nodes
    are certification conflicts; each call must answer (a result, or a delayq error that
    says what is known), and nothing may be lost or fire early, nor a job fire after a
    cancel that answered true."""
    name = "galera-conflicts"
    a_node = await client_galera_node(client)
    b_url = rotated_url(settings.mysql_servers, a_node % 3 + 1)
    node = NodeProcess(settings, tmp_path, name)
    ledger = Ledger()
    answers: dict[str, Counter[tuple[str, str]]] = {}
    said: dict[str, str] = {}  # an exception's first message
    rng = random.Random(13)
    producer = Producer(client, topic, ledger, Calls())
    try:
        await node.wait_ready()
        async with DelayClient(settings.replace(mysql_servers=b_url)) as other:
            b_node = await client_galera_node(other)
            assert a_node != b_node
            races: dict[str, tuple[Change, Change]] = {
                "A cancel / B reschedule": (
                    lambda j, due: client.cancel(j),
                    lambda j, due: other.reschedule(j, at=due + 2),
                ),
                "A reschedule / B reschedule": (
                    lambda j, due: client.reschedule(j, at=due + 2),
                    lambda j, due: other.reschedule(j, at=due + 4),
                ),
                "A cancel / B cancel": (
                    lambda j, due: client.cancel(j),
                    lambda j, due: other.cancel(j),
                ),
            }
            async with reading(collector):
                for race, (first, second) in races.items():
                    # Due 3-8 s ahead: in Redis (lean) or beyond the horizon in MySQL alone.
                    jobs = producer.jobs(producer.ids_on(1, 200), rng, 3.0, 8.0)
                    ledger.scheduled.update(await client.schedule_many(jobs))
                    outcomes = await asyncio.gather(
                        *(
                            call(str(job["job_id"]), float(job["at"]))
                            for job in jobs
                            for call in (first, second)
                        ),
                        return_exceptions=True,
                    )
                    answers[race] = Counter()
                    for k, job in enumerate(jobs):
                        job_id = str(job["job_id"])
                        pair = (
                            answer_of(outcomes[2 * k], said),
                            answer_of(outcomes[2 * k + 1], said),
                        )
                        answers[race][pair] += 1
                        for side, outcome in zip("AB", outcomes[2 * k : 2 * k + 2], strict=True):
                            is_cancel = "cancel" in race.split("/")[0 if side == "A" else 1]
                            if isinstance(outcome, BaseException):
                                if is_cancel:
                                    ledger.cancel_unknown.add(job_id)
                            elif is_cancel and outcome:
                                ledger.cancelled.add(job_id)
                # The same ids from both clients at once, 20 jobs a batch over several
                # tables (one transaction per call).
                answers["A schedule / B schedule"] = Counter()
                for _ in range(10):
                    jobs = producer.jobs(producer.ids_on(1, 20), rng, 1.0, 3.0)
                    both = await asyncio.gather(
                        client.schedule_many(jobs), other.schedule_many(jobs),
                        return_exceptions=True,
                    )  # fmt: skip
                    pair = (answer_of(both[0], said), answer_of(both[1], said))
                    answers["A schedule / B schedule"][pair] += 1
                    if not all(isinstance(o, BaseException) for o in both):
                        ledger.scheduled.update(str(job["job_id"]) for job in jobs)
        result = await settle(name, ledger, collector, client, redis)
    finally:
        node.kill()
    print(f"[{name}] A on galera-{a_node}, B on galera-{b_node}; answers (A, B):")
    for race, counts in answers.items():
        print(f"  {race}: {dict(counts)}")
    for answer, message in said.items():
        print(f"  {answer}: {message}")
    assert_safe(result, ledger)
    assert result.duplicates == 0
    raw = [p for c in answers.values() for pair in c for p in pair if p.startswith("pymysql")]
    assert raw == []
    # The same job_id from both at once is one job, and both calls say it is scheduled
    # (the loser of the conflict runs its transaction again: cluster/store/inserts.py).
    assert set(answers["A schedule / B schedule"]) == {("ok", "ok")}
