"""Faults of a ZooKeeper ensemble of three: real node processes fire jobs scheduled at a
steady rate while the ensemble's leader is killed -9 and started again, while two of
the three servers are down for 30 s (no quorum), and while one node is cut off from
ZooKeeper alone (it still reaches Redis, MySQL and Kafka).

These scenarios kill ZooKeeper servers, so they run on a private stack of their own
(`delayq services up --zk-ensemble 3` with its own state folder and ports: Redis 27379,
MariaDB 27306, ZooKeeper 27181/27281/27381 (quorum and election ports + 10 and + 20),
Kafka 27092; DELAYQ_TEST_PRIVATE_ZK_STACK_DIR moves the folder), started by this module
and stopped at its end; the shared local stack is never touched. Each scenario checks
what the fault suite checks (tests/faults/verdict.py: nothing lost, none early, MySQL and
Redis agree afterwards), samples every node's /metrics (slots owned, jobs moved, fenced
script runs) and prints its counts, the lateness and the longest pause in publishing
(docs/guarantees.md has the results).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from cluster.devstack import zk_ensemble
from cluster.model.keys import KeySpace
from cluster.observe.status import read_status
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.private import (
    PrivateStack,
    env_fixture,
    gone,
    redis_fixture,
    settings_fixture,
)
from tests.faults.scenario import Run, Stage, scenario, stage
from tests.faults.timing import lateness, longest_pause_s
from tests.faults.verdict import Verdict, assert_safe
from tests.processes import slots_served_by, wait_served
from tests.zk_relay import Relay

pytestmark = [pytest.mark.slow, pytest.mark.faults]
__all__ = ["stage"]  # a fixture of tests/faults/scenario.py

STATE_DIR = Path(
    os.environ.get("DELAYQ_TEST_PRIVATE_ZK_STACK_DIR", "/tmp/delayq-fault-zk-ensemble")
)
PORTS = {
    "REDIS": "27379",
    "MYSQL": "27306",
    "ZOOKEEPER": "27181",
    "ZOOKEEPER_2": "27281",
    "ZOOKEEPER_3": "27381",
    "KAFKA": "27092",
}
SERVERS = {"zookeeper": 27181, "zookeeper-2": 27281, "zookeeper-3": 27381}
FAULT_AT_S = 4.0  # after the load began
LEADER_DOWN_S = 5.0
NO_QUORUM_S = 30.0
# A move round sent before a node dropped its slots still finishes (fenced by epoch).
IN_FLIGHT_S = 2.0
PARTITION_S = 10.0  # past the nodes' 3 s session timeout (tests/processes.py)


# ----- the private stack --------------------------------------------------------------


STACK = PrivateStack(STATE_DIR, PORTS, ("--zk-ensemble", "3"))


private_env = env_fixture(STACK)


def modes() -> dict[str, str | None]:
    """Each server's srvr Mode: leader, follower, or None (down or without a quorum)."""
    return {name: zk_ensemble.mode_of(port) for name, port in SERVERS.items()}


def leader() -> str | None:
    return next((name for name, mode in modes().items() if mode == "leader"), None)


async def kill(name: str) -> None:
    pid = STACK.pid(name)
    os.kill(pid, signal.SIGKILL)
    await gone(pid)


# ----- per-test fixtures on the private stack (they replace conftest's) -------------------


async def serving(_: Settings) -> bool:
    """Whether every server of the ensemble is up with a quorum."""
    return None not in modes().values()


settings = settings_fixture(STACK, healthy=serving)
redis = redis_fixture()


# client, topic and collector are conftest's, made with this module's settings.


def report(run: Run, result: Verdict, collector: Collector, extra: str) -> None:
    records = collector.records
    fenced = {
        node: max((r.nodes[node].get("delayq_fenced_total", 0.0) for r in run.rounds), default=0)
        for node in run.ports
    }
    print(
        f"[{run.name}] scheduled {result.scheduled}, fired {result.fired}, duplicates "
        f"{result.duplicates}, lost {len(result.lost)}, early {result.early}; lateness "
        f"all {lateness(records)}, due after the healing "
        f"{lateness(records, run.marks['healed'])}; longest pause in publishing "
        f"{longest_pause_s(records, run.marks['load'], run.marks['load_end']):.2f} s; "
        f"fenced script runs per node {fenced}; {extra}"
    )


# ----- the scenarios --------------------------------------------------------------------


async def test_the_zookeeper_leader_killed_and_restarted(stage: Stage) -> None:
    """kill -9 of the ensemble's leader: the two others elect a new one; the nodes keep
    their slots or take them again, and it comes back as a follower 5 s later."""
    killed: list[str] = []

    async def fault(run: Run) -> None:
        old = leader()
        assert old is not None
        killed.append(old)
        await kill(old)
        run.mark("struck")

        async def elected() -> bool:
            return leader() not in (None, old)

        assert await wait_for(elected, timeout_s=60, interval_s=0.05)
        run.mark("elected")
        await asyncio.sleep(LEADER_DOWN_S)
        await STACK.restart_servers()
        run.mark("healed")

    result, ledger, run = await scenario(
        stage,
        "zk-leader-killed",
        fault,
        load_s=FAULT_AT_S + LEADER_DOWN_S + 8,
        fault_at_s=FAULT_AT_S,
        settle_timeout_s=180,
        sampled=True,
        served_first=True,
        all_running=True,
    )
    drops = {node: round(run.dropped_s(node, "struck", "settled"), 1) for node in run.ports}
    report(
        run,
        result,
        stage.collector,
        f"leader {killed[0]} killed, new leader after "
        f"{run.marks['elected'] - run.marks['struck']:.2f} s, back after "
        f"{run.marks['healed'] - run.marks['struck']:.1f} s; modes now {modes()}; "
        f"longest time a node held no slot {drops} s",
    )
    assert_safe(result, ledger)
    assert result.unfinished == 0
    assert result.duplicates == 0
    assert sorted(str(mode) for mode in modes().values()) == ["follower", "follower", "leader"]


async def test_two_of_three_zookeeper_servers_down_for_30_s(stage: Stage) -> None:
    """No quorum for 30 s: the nodes stop moving and claiming (no slot owned, no job
    moved), nothing fires early or twice, and they serve every slot again once the
    servers are back."""

    async def fault(run: Run) -> None:
        first = leader()
        assert first is not None
        second = next(name for name in SERVERS if name != first)
        await asyncio.gather(kill(first), kill(second))
        run.mark("struck")
        await asyncio.sleep(NO_QUORUM_S)
        run.mark("resumed")
        await STACK.restart_servers()
        run.mark("healed")
        await wait_served(stage.settings, set(run.ports), timeout_s=120)
        run.mark("served")

    result, ledger, run = await scenario(
        stage,
        "zk-no-quorum-30s",
        fault,
        load_s=FAULT_AT_S + NO_QUORUM_S + 10,
        fault_at_s=FAULT_AT_S,
        settle_timeout_s=180,
        sampled=True,
        served_first=True,
        all_running=True,
    )
    idle = [r for r in run.between("struck", "resumed") if r.none_owned()]
    assert idle, "the nodes kept slots without a quorum"
    stopped_after = idle[0].at - run.marks["struck"]
    # From the first moment no node owned a slot (and a round already in flight then
    # had time to finish) until the quorum came back, no job moved.
    settled = [r for r in idle if r.at >= idle[0].at + IN_FLIGHT_S]
    assert settled, f"no sample {IN_FLIGHT_S} s after the slots were dropped"
    moved = [
        {node: r.nodes[node].get("delayq_jobs_moved_total") for node in run.ports}
        for r in (settled[0], idle[-1])
    ]
    report(
        run,
        result,
        stage.collector,
        f"no node owned a slot from {stopped_after:.2f} s after the fault on (sampled "
        f"{len(idle)} times, moved counters {moved[0]} {IN_FLIGHT_S:g} s later, then "
        f"{moved[1]}); every slot "
        f"served again {run.marks['served'] - run.marks['healed']:.2f} s after the servers "
        f"were back ({run.marks['healed'] - run.marks['struck']:.1f} s after the fault)",
    )
    assert moved[0] == moved[1]
    assert_safe(result, ledger)
    assert result.unfinished == 0
    assert result.duplicates == 0


async def test_a_node_cut_off_from_zookeeper_alone(stage: Stage) -> None:
    """Three nodes; node 0 reaches the ensemble through relays the test cuts for 10 s
    (silence, no closed connection), Redis, MySQL and Kafka directly. It stops working
    on its slots on its own, the others take them after its session expires, with new
    epochs that fence any write of its old ones; it rejoins once healed."""
    relays = [Relay(port) for port in SERVERS.values()]
    for relay in relays:
        await relay.start()
    hosts = ",".join(relay.address for relay in relays)
    before: dict[int, int] = {}  # node 0's slots and their epochs at the cut
    fenced: dict[int, bool] = {}

    async def fault(run: Run) -> None:
        cut_off = run.procs[0].name
        status = await read_status(stage.settings)
        before.update({s.slot: s.epoch for s in status.slot_status if s.owner_node == cut_off})
        assert before
        for relay in relays:
            relay.cut()
        run.mark("struck")
        others = {proc.name for proc in run.procs[1:]}
        await wait_served(stage.settings, others, timeout_s=60)
        run.mark("taken")
        # Its late writes: a script run as the owner with its old epochs is refused.
        scripts = Scripts(stage.redis, KeySpace(stage.settings.key_prefix))
        replies = await scripts.move_many(sorted(before.items()), limit=10)
        fenced.update(
            {slot: reply is None for slot, reply in zip(sorted(before), replies, strict=True)}
        )
        await asyncio.sleep(max(0.0, PARTITION_S - (time.time() - run.marks["struck"])))
        for relay in relays:
            relay.heal()
        run.mark("healed")
        await wait_served(stage.settings, {proc.name for proc in run.procs}, timeout_s=120)
        run.mark("rejoined")

    try:
        result, ledger, run = await scenario(
            stage,
            "zk-node-partitioned",
            fault,
            nodes=3,
            load_s=FAULT_AT_S + PARTITION_S + 10,
            fault_at_s=FAULT_AT_S,
            settle_timeout_s=180,
            sampled=True,
            served_first=True,
            all_running=True,
            node_env=lambda i: {"DELAYQ_ZK_HOSTS": hosts} if i == 0 else {},
        )
    finally:
        for relay in relays:
            await relay.close()
    cut_off = run.procs[0].name
    gave_up = "dropping all" in run.procs[0].log_path.read_text()
    served = await slots_served_by(stage.settings)
    report(
        run,
        result,
        stage.collector,
        f"{cut_off} held {len(before)} slots; it held none after "
        f"{run.dropped_s(cut_off, 'struck', 'taken'):.1f} s of sampling before the others "
        f"took them, {run.marks['taken'] - run.marks['struck']:.2f} s after the cut; its "
        f"old epochs refused by Redis on {sum(fenced.values())} of {len(fenced)} slots; "
        f"dropped its slots on its own: {gave_up}; rejoined "
        f"{run.marks['rejoined'] - run.marks['healed']:.2f} s after the healing; slots now "
        f"by node {sorted(set(served.values()), key=str)}",
    )
    assert fenced and all(fenced.values())
    assert gave_up
    assert_safe(result, ledger)
    assert result.unfinished == 0
