"""Cancels under faults: real node processes, a steady load of schedules and cancels, and
a store that goes away in the middle of the cancels (MariaDB killed -9; a Redis Cluster
master failing over, gracefully or killed).

A cancel whose Redis step ran and whose MySQL step failed leaves its job out of Redis;
the node owning its slot puts it back seconds after MySQL answers again
(actors/tombstones.py), so it fires then instead of at the reconciler's full pass
(reconcile_interval_ms, 300 s here, longer than settling waits). Each scenario checks
what the fault suite checks (tests/faults/verdict.py: nothing lost or early, no job whose
cancel returned true fired, the stores agree afterwards) and also: every cancel that
raised raised StoreUnavailable or OutcomeUnknown, never a driver's error; a job whose
cancel raised StoreUnavailable (nothing was changed) fires. It prints the worst
lateness, over all jobs and over the jobs of the cancels that failed half-way.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import traceback
from collections import Counter
from dataclasses import replace

import pytest

from cluster import DelayClient, OutcomeUnknown, StoreUnavailable
from cluster.devstack import stack
from tests.conftest import Collector
from tests.faults.redis_cluster import (
    cluster_ports,
    ensure_master,
    healthy_cluster,
    is_master,
    needs_replicas,
    pairs,
    pid_of,
    restart_node,
    wait_until,
)
from tests.faults.scenario import Fault, Run, Stage, scenario, stage
from tests.faults.shared import shared_pid
from tests.faults.verdict import Ledger, Verdict, assert_safe
from tests.processes import NodeProcess

pytestmark = [pytest.mark.slow]
__all__ = ["healthy_cluster", "stage"]  # fixtures of tests/faults/

TICK_S = 0.1
PER_TICK = 30  # jobs due soon: the steady load
KEYED_PER_TICK = 20  # jobs due 3-10 s ahead, which the cancels pick from
CANCELS_PER_TICK = 10


class CancelLoad:
    """Schedules and cancels, and what each cancel answered."""

    def __init__(self, client: DelayClient, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.ledger = Ledger()
        self.raised: Counter[type[BaseException]] = Counter()  # exception → how many
        self.nothing_changed: set[str] = set()  # cancels that raised StoreUnavailable
        self.strange: list[str] = []  # the first few other errors, with where they came from
        self._waiting: list[tuple[float, str]] = []  # (due, job id) not cancelled yet

    async def run(self, seconds: float) -> None:
        """Schedules every tick and, beside it, starts cancels every tick without waiting
        for the earlier ones, so cancels keep coming while a store hangs."""
        end = time.monotonic() + seconds
        cancels: set[asyncio.Task[None]] = set()
        scheduling = asyncio.create_task(self._schedule_until(end))
        rng = random.Random(9)
        while time.monotonic() < end:
            # Cancel some of the jobs not due within the next second.
            soon = time.time() + 1
            self._waiting = [(due, job_id) for due, job_id in self._waiting if due > soon]
            rng.shuffle(self._waiting)
            for _, job_id in self._waiting[:CANCELS_PER_TICK]:
                cancels.add(asyncio.create_task(self._cancel(job_id)))
            del self._waiting[:CANCELS_PER_TICK]
            await asyncio.sleep(TICK_S)
        await scheduling
        await asyncio.gather(*cancels)

    async def _schedule_until(self, end: float) -> None:
        rng = random.Random(8)
        tick = 0
        while time.monotonic() < end:
            jobs = [
                {"topic": self.topic, "payload": {"t": tick, "n": n}, "delay": rng.uniform(0.3, 2)}
                for n in range(PER_TICK)
            ]
            keyed = [
                {
                    "topic": self.topic,
                    "payload": {"t": tick, "k": n},
                    "delay": rng.uniform(3, 10),
                    "job_id": f"c-{tick}-{n}",
                }
                for n in range(KEYED_PER_TICK)
            ]
            before = set(self.ledger.scheduled)
            await self.ledger.schedule_many(self.client, jobs + keyed)
            now = time.time()
            self._waiting += [
                (now + job["delay"], job["job_id"])
                for job in keyed
                if job["job_id"] in self.ledger.scheduled - before
            ]
            tick += 1
            await asyncio.sleep(TICK_S)

    async def _cancel(self, job_id: str) -> None:
        ledger = self.ledger
        try:
            cancelled = await self.client.cancel(job_id)
        except StoreUnavailable:
            self.raised[StoreUnavailable] += 1
            self.nothing_changed.add(job_id)  # not cancelled: it fires
            return
        except Exception as exc:
            self.raised[type(exc)] += 1
            if not isinstance(exc, OutcomeUnknown) and len(self.strange) < 5:
                self.strange.append("".join(traceback.format_exception(exc)[-6:]))
            ledger.change_failed += 1
            ledger.cancel_unknown.add(job_id)
            return
        (ledger.cancelled if cancelled else ledger.not_cancelled).add(job_id)


def assert_cancels_answered(load: CancelLoad, collector: Collector, result: Verdict) -> None:
    """Beyond assert_safe: every cancel that raised said what is known, and a job whose
    cancel changed nothing, or answered it was too late, fired."""
    assert_safe(result, load.ledger)
    assert result.unfinished == 0
    assert all(issubclass(kind, OutcomeUnknown | StoreUnavailable) for kind in load.raised), (
        load.raised,
        load.strange,
    )
    fired = {str(r["job_id"]) for r in collector.records}
    assert load.nothing_changed - fired == set()
    assert load.ledger.not_cancelled - fired == set()


def report(name: str, load: CancelLoad, collector: Collector, procs: list[NodeProcess]) -> int:
    """Prints what the cancels answered and how late their jobs fired; returns how many
    jobs the nodes put back."""
    half_done = {
        str(r["job_id"]): r["received_ms"] - r["due_ms"]
        for r in collector.records
        if r["job_id"] in load.ledger.cancel_unknown
    }
    put_back = sum(
        int(line.split("put back ")[1].split()[0])
        for proc in procs
        for line in proc.log_path.read_text(errors="replace").splitlines()
        if "tombstones: put back" in line
    )
    worst = max(half_done.values(), default=0.0)
    raised = {kind.__name__: n for kind, n in load.raised.items()}
    print(
        f"[{name}] cancels: true {len(load.ledger.cancelled)}, false "
        f"{len(load.ledger.not_cancelled)}, raised {raised}; jobs of cancels of unknown "
        f"outcome that fired {len(half_done)} (worst {worst:.0f} ms late); put back by "
        f"the nodes {put_back}"
    )
    for error in load.strange:
        print(f"[{name}] a cancel raised:\n{error}")
    return put_back


async def cancel_scenario(
    stage: Stage, name: str, fault: Fault, seconds: float, node_env: dict[str, str] | None = None
) -> tuple[Verdict, CancelLoad, int]:
    """Two nodes and a client of their own, the load for `seconds`, fault() 2.5 s in;
    settled and judged as `name`, both nodes alive throughout. Returns the verdict, the
    load and how many jobs the nodes put back."""
    assert stage.settings.reconcile_interval_ms == 300_000  # the full pass is no help here
    async with DelayClient(stage.settings) as client:
        load = CancelLoad(client, stage.topic)
        result, _, run = await scenario(
            replace(stage, client=client),
            name,
            fault,
            node_env=node_env,
            load=lambda *_: load.run(seconds),
            ledger=load.ledger,
            load_timeout_s=seconds + 60,
            fault_at_s=2.5,
            all_running=True,
        )
    put_back = report(name, load, stage.collector, run.procs)
    return result, load, put_back


async def mariadb_fault(kind: str) -> None:
    """killed: kill -9, started again 8 s later. hung-killed: stopped (SIGSTOP) for 2 s
    while cancels' UPDATEs arrive, then killed and started again 6 s later, so those
    UPDATEs are lost in flight. frozen: stopped for 8 s, then continued: the UPDATEs
    waiting meanwhile and the nodes' restores of their jobs land in either order."""
    pid = shared_pid("mysql")
    if kind == "frozen":
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(8)
        finally:
            os.kill(pid, signal.SIGCONT)
        return
    if kind == "hung-killed":
        os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(2)
    os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(8 if kind == "killed" else 6)
    await asyncio.to_thread(stack.up)


@pytest.mark.faults
@pytest.mark.parametrize("kind", ["killed", "hung-killed", "frozen"])
@pytest.mark.alone
async def test_mariadb_fails_while_cancels_run(kind: str, stage: Stage) -> None:
    """MariaDB fails while cancels run: cancels meanwhile fail after their Redis step (or
    wait); the jobs of those that did not cancel fire once MySQL is back, none whose
    cancel returned true fires."""

    async def fault(run: Run) -> None:
        await mariadb_fault(kind)

    result, load, put_back = await cancel_scenario(stage, f"mariadb-{kind}-cancels", fault, 14.0)
    assert_cancels_answered(load, stage.collector, result)
    if kind == "killed":
        assert load.raised  # the fault did meet cancels
    if kind == "hung-killed":
        assert put_back > 0  # cancels lost in flight, whose jobs the nodes put back


# Redis Cluster failovers with cancels, on the cluster with a replica per master.
WAITING_FOR_A_REPLICA = {"DELAYQ_REDIS_WAIT_REPLICAS": "1"}


@pytest.mark.failover
@needs_replicas
@pytest.mark.alone
async def test_graceful_failover_while_cancels_run(stage: Stage, healthy_cluster: None) -> None:
    """CLUSTER FAILOVER of a master while cancels run: a cancel whose reply is lost in
    the topology change raises OutcomeUnknown, and its job, if MySQL does not call it
    cancelled, is back within seconds and fires."""

    async def fault(run: Run) -> None:
        _, replica = (await pairs())[0]
        await ensure_master(replica)

    result, load, _ = await cancel_scenario(
        stage.with_settings(redis_wait_replicas=1),
        "failover-graceful-cancels",
        fault,
        8.0,
        WAITING_FOR_A_REPLICA,
    )
    assert_cancels_answered(load, stage.collector, result)


@pytest.mark.failover
@needs_replicas
@pytest.mark.alone
async def test_seed_master_killed_while_cancels_run(stage: Stage, healthy_cluster: None) -> None:
    """kill -9 of the master named first in redis_url while cancels run; its replica
    takes over, and it comes back as a replica."""
    seed = cluster_ports()[0]
    await ensure_master(seed)

    async def fault(run: Run) -> None:
        replica = dict(await pairs())[seed]
        os.kill(pid_of(seed), signal.SIGKILL)
        await wait_until(lambda: is_master(replica), "the replica to be promoted")
        await restart_node(seed)

    result, load, _ = await cancel_scenario(
        stage.with_settings(redis_wait_replicas=1),
        "failover-kill-seed-cancels",
        fault,
        8.0,
        WAITING_FOR_A_REPLICA,
    )
    assert_cancels_answered(load, stage.collector, result)
