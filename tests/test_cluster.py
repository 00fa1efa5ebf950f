"""Cluster membership with nodes in this process, against real ZooKeeper and Redis."""

from __future__ import annotations

import time

import orjson
import pytest

from actors.membership import Membership
from actors.node import Node
from actors.ownership import HeldSlots
from actors.store_watch import StoreWatch
from actors.withdrawal import Withdrawal
from cluster import DelayClient, Job
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ClusterConfigError, SchemaError
from cluster.model.keys import KeySpace
from cluster.observe.status import read_status, render
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for


def joining_member(
    settings: Settings, redis: RedisClient, withdrawal: Withdrawal | None = None
) -> Membership:
    """A membership that is not part of a node (nothing to wake, nothing to wait for)."""

    async def nothing_in_flight(slot: int) -> None:
        return None

    return Membership(
        settings,
        Scripts(redis, KeySpace(settings.key_prefix)),
        HeldSlots(),
        on_acquired=lambda slot: None,
        quiesce=nothing_in_flight,
        withdrawal=withdrawal,
    )


def owned(node: Node) -> frozenset[int]:
    assert node.parts is not None
    return node.parts.held.owned()


async def test_a_node_with_another_slot_count_is_refused(
    settings: Settings, redis: RedisClient
) -> None:
    first = joining_member(settings, redis)
    await first.join()
    try:
        other = settings.replace(slots=settings.slots * 2)
        second = joining_member(other, redis)
        with pytest.raises(ClusterConfigError, match=f"has {settings.slots} slots"):
            await second.join()
        # MySQL records the slot count at migration: nodes and producers check it.
        with pytest.raises(SchemaError, match=f"cluster has {settings.slots} slots"):
            await Node(other).start()
        with pytest.raises(SchemaError, match=f"cluster has {settings.slots} slots"):
            await DelayClient(other).open()
    finally:
        await first.leave()


async def test_a_member_whose_marked_znode_is_gone_registers_again(
    settings: Settings, redis: RedisClient
) -> None:
    """A member marks Kafka unreachable in its znode; then the znode goes (as when its
    session expires while it is cut off) and Kafka answers again. Clearing the mark of
    a znode that is gone must not stop the pass: the member registers anew."""
    bound_s = 10.0
    settings = settings.replace(store_unreachable_release_ms=int(bound_s * 1000))

    async def kafka_answers() -> bool:
        return True

    watch = StoreWatch(bound_s, {"kafka": kafka_answers})  # not started: the test records
    member = joining_member(settings, redis, Withdrawal(settings, watch))
    await member.join()
    assert member.zk is not None
    members = f"{settings.zk_cluster_root}/members"
    try:
        watch.links["kafka"].last_ok = time.monotonic() - bound_s * 0.75
        assert not await member.withdrawal.step(member)
        marked = orjson.loads(await member.zk.get_data(f"{members}/{member.member}"))
        assert marked["unreachable"] == ["kafka"]
        gone = member.member
        await member.zk.delete(f"{members}/{gone}")
        watch.record("kafka", True, time.monotonic())

        assert not await member.withdrawal.step(member)  # raised NoNode before
        await member._reconcile()
        assert member.member not in (None, gone)
        assert member.member in await member.zk.get_children(members)
    finally:
        await member.leave()


async def test_two_nodes_split_the_slots_and_hand_them_over_on_stop(
    settings: Settings, redis: RedisClient
) -> None:
    a = Node(settings.replace(node_id="node-a"))
    await a.start()
    b: Node | None = None
    try:

        async def a_owns_all() -> bool:
            return len(owned(a)) == settings.slots

        assert await wait_for(a_owns_all, timeout_s=20)
        b = Node(settings.replace(node_id="node-b"))
        await b.start()

        async def split() -> bool:
            assert b is not None
            return len(owned(a)) == len(owned(b)) == settings.slots // 2

        assert await wait_for(split, timeout_s=30)
        assert owned(a) | owned(b) == frozenset(range(settings.slots))

        status = await read_status(settings)
        assert len(status.members) == 2
        nodes = {s.slot: s.owner_node for s in status.slot_status}
        assert {slot for slot, node in nodes.items() if node == "node-b"} == owned(b)
        # The epoch in Redis (fencing) is the one ZooKeeper issued.
        assert all(s.redis_epoch == s.epoch > 0 for s in status.slot_status)
        assert "2 member(s)" in render(status)

        await b.stop()  # releases its slots: a takes them without a session timeout
        assert await wait_for(a_owns_all, timeout_s=10)
    finally:
        await a.stop()
        if b is not None:
            await b.stop()


async def test_jobs_fire_once_across_two_nodes(
    settings: Settings, client: DelayClient, topic: str, collector: Collector
) -> None:
    nodes = [Node(settings.replace(node_id=f"n{i}")) for i in range(2)]
    for node in nodes:
        await node.start()
    try:
        # Started means joined: wait until each serves its half, so both fire some.
        async def split() -> bool:
            return all(len(owned(node)) == settings.slots // 2 for node in nodes)

        assert await wait_for(split, timeout_s=30)
        ids = await client.schedule_many([Job(topic, i, delay=1.0) for i in range(2000)])
        records = await collector.until(2000, timeout_s=120)
        await collector.quiet_for(1.0)
        if len(records) < len(ids):
            assert await collector.caught_up()
    finally:
        for node in nodes:
            await node.stop()
    # Whether the nodes fired what the collector lacks tells a node fault from a reading one.
    fired = sum(node.stats()["fired"] for node in nodes)
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids), f"nodes fired {fired}"
    assert {r["node"] for r in records} == {"n0", "n1"}
