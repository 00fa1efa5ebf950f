"""Squatting on a protected cluster's znodes, and epochs that must never repeat, against
the real local ZooKeeper with a second, anonymous aiozk client (docs/security.md,
docs/cluster.md#fencing). Each test has a zk_root and a key prefix of its own."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiozk import ZKClient, exc, protocol
from aiozk.protocol.acl import ACL

from actors.membership import Membership
from actors.node import Node
from cluster.connections.redis_conn import RedisClient
from cluster.connections.zk_conn import PERMS_ALL, digest_id, open_zk, znode_acl
from cluster.errors import Fenced, ZooKeeperAccessError
from cluster.model.keys import KeySpace
from cluster.settings.config import Settings
from tests.conftest import wait_for
from tests.test_cluster import joining_member

# ZooKeeper's side does not change with the Redis and MySQL shape.
pytestmark = pytest.mark.once

PASSWORD = "s3cret-zk-pass"
SLOT = 3


@pytest.fixture
async def protected(settings: Settings) -> AsyncIterator[Settings]:
    """settings with zk_auth and a zk_root of this test's own, deleted afterwards."""
    zk_root = f"/dqsquat-{uuid.uuid4().hex[:10]}"
    protected = settings.replace(zk_root=zk_root, zk_auth=f"alice:{PASSWORD}")
    yield protected
    zk = await open_zk(protected)
    try:
        await _delete_tree(zk, zk_root)
    finally:
        await zk.close()


@pytest.fixture
async def anonymous(protected: Settings) -> AsyncIterator[ZKClient]:
    """A second client that sends no credentials (every znode it makes is open)."""
    zk = await open_zk(protected.replace(zk_auth=""))
    yield zk
    await zk.close()


@pytest.fixture
async def operator(protected: Settings) -> AsyncIterator[ZKClient]:
    """A client with the cluster's own credentials: the worst case of someone who may."""
    zk = await open_zk(protected)
    yield zk
    await zk.close()


async def _delete_tree(zk: ZKClient, path: str) -> None:
    try:
        children = await zk.get_children(path)
    except exc.NoNode:
        return
    for child in children:
        await _delete_tree(zk, f"{path}/{child}")
    try:
        await zk.delete(path, force=True)
    except exc.NoNode:
        pass


async def _joined(settings: Settings, redis: RedisClient) -> Membership:
    """A member that joined and took its share (all slots, if it is alone)."""
    member = joining_member(settings, redis)
    await member.join()
    await member._reconcile()
    return member


def _everything(who: str) -> ACL:
    return ACL.make("digest", digest_id(who), **dict.fromkeys(PERMS_ALL, True))


async def test_a_cluster_squatted_with_an_open_acl_is_refused_until_its_acls_are_set(
    protected: Settings, anonymous: ZKClient, operator: ZKClient
) -> None:
    root = protected.zk_cluster_root
    # The squatter makes the cluster's znodes before the first node, open to anyone.
    for path in (protected.zk_root, root, f"{root}/members", f"{root}/slots"):
        await anonymous.create(path)

    with pytest.raises(ZooKeeperAccessError) as refused:
        await Node(protected.replace(startup_timeout_s=60)).start()
    message = str(refused.value)
    assert f"znode {root} has an unsafe ACL" in message
    assert "world:anyone:cdrwa" in message and "digest user 'alice'" in message
    assert f"setAcl -R {root} auth:alice:PASSWORD:cdrwa" in message
    assert PASSWORD not in message
    # Refused before it wrote anything under them.
    assert not await anonymous.exists(f"{root}/config")
    assert await anonymous.get_children(f"{root}/members") == []
    assert await anonymous.get_children(f"{root}/slots") == []

    # The fix the message gives (zk_root itself may stay open: nothing relies on it).
    for path in (root, f"{root}/members", f"{root}/slots"):
        await operator.set_acl(path, znode_acl(protected), force=True)
    node = Node(protected)
    await node.start()
    try:
        assert node.parts is not None
        parts = node.parts

        async def owns_every_slot() -> bool:
            return len(parts.held.owned()) == protected.slots

        assert await wait_for(owns_every_slot, 15)
        member = parts.membership.member
        epochs = {slot: parts.held.epoch(slot) for slot in range(protected.slots)}
        for path in (f"{root}/members/{member}", f"{root}/slots/{SLOT}", f"{root}/config"):
            with pytest.raises(exc.NoAuth):
                await anonymous.delete(path, force=True)
        for path in (f"{root}/members/m-9999999999", f"{root}/slots/{protected.slots}"):
            with pytest.raises(exc.NoAuth):
                await anonymous.create(path, b"{}")
        with pytest.raises(exc.NoAuth):
            await anonymous.set_acl(root, [protocol.UNRESTRICTED_ACCESS], force=True)
        # Nothing moved: same member, every slot still held with the same epoch.
        assert sorted(await operator.get_children(f"{root}/members")) == [member]
        assert {slot: parts.held.epoch(slot) for slot in parts.held.owned()} == epochs
    finally:
        await node.stop()


@pytest.mark.parametrize(
    ("where", "others"),
    [
        ("", "world:anyone:cdrwa"),
        ("/config", "world:anyone:cdrwa"),
        ("/members", "world:anyone:cdrwa"),
        ("/slots", "world:anyone:cdrwa"),
        (f"/slots/{SLOT}", "world:anyone:cdrwa"),
        ("/members", "world:anyone:cd"),  # create and delete are enough to squat
        ("", "digest:mallory:"),  # another user who also let us in
    ],
)
async def test_every_znode_the_cluster_relies_on_must_be_its_own(
    protected: Settings, redis: RedisClient, operator: ZKClient, where: str, others: str
) -> None:
    first = await _joined(protected, redis)  # keeps members/ from being emptied
    try:
        path = f"{protected.zk_cluster_root}{where}"
        scheme = others.split(":", 1)[0]
        if scheme == "world":
            letters = others.rsplit(":", 1)[1]  # c, d, r, w, a: the names' initials
            intruder = ACL.make("world", "anyone", **{p: p[0] in letters for p in PERMS_ALL})
        else:
            intruder = _everything("mallory:other")
        await operator.set_acl(path, [*znode_acl(protected), intruder], force=True)
        with pytest.raises(ZooKeeperAccessError) as refused:
            await joining_member(protected, redis).join()
        message = str(refused.value)
        assert f"znode {path} has an unsafe ACL: others may change it ({others}" in message
        assert PASSWORD not in message

        # Read-only for others is fine (monitoring): the node joins.
        reader = ACL.make("world", "anyone", read=True)
        await operator.set_acl(path, [*znode_acl(protected), reader], force=True)
        second = joining_member(protected, redis)
        await second.join()
        await second.leave()
    finally:
        await first.leave()


@pytest.mark.parametrize("redis_lost_it", [False, True], ids=["redis-kept", "redis-lost"])
async def test_a_slot_znode_deleted_and_recreated_never_repeats_an_epoch(
    protected: Settings, redis: RedisClient, operator: ZKClient, redis_lost_it: bool
) -> None:
    first = await _joined(protected, redis)
    old = first.held.epoch(SLOT)
    await first.leave()
    path = f"{protected.zk_cluster_root}/slots/{SLOT}"
    await operator.delete(path, force=True)
    await operator.create(path, orjson.dumps({"owner": None}))
    owner_key = KeySpace(protected.key_prefix).slot(SLOT).owner
    if redis_lost_it:
        await redis.delete(owner_key)

    second = await _joined(protected, redis)
    try:
        new = second.held.epoch(SLOT)
        assert new > old
        assert await redis.get(owner_key) == str(new).encode()
        # The old owner's token is no longer good for anything.
        with pytest.raises(Fenced):
            await first.scripts.move(SLOT, old, 10)
        # The znode records it too (what `delayq cluster status` shows).
        assert orjson.loads(await operator.get_data(path))["epoch"] == new
    finally:
        await second.leave()


async def test_an_epoch_stays_above_the_one_redis_holds(
    protected: Settings, redis: RedisClient
) -> None:
    # ZooKeeper lost its data (or the cluster moved to a new zk_root) while Redis kept
    # the slot's epoch from before: the next take goes above it, at once.
    owner_key = KeySpace(protected.key_prefix).slot(SLOT).owner
    await redis.set(owner_key, 10**12)
    member = await _joined(protected, redis)
    try:
        assert member.held.epoch(SLOT) == 10**12 + 1
        assert await redis.get(owner_key) == b"1000000000001"
    finally:
        await member.leave()


async def test_a_slot_znode_recreated_with_an_open_acl_is_not_taken(
    protected: Settings,
    redis: RedisClient,
    operator: ZKClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    member = await _joined(protected, redis)
    try:
        path = f"{protected.zk_cluster_root}/slots/{SLOT}"
        await operator.delete(path, force=True)
        await operator.create(
            path, orjson.dumps({"owner": None}), acl=[protocol.UNRESTRICTED_ACCESS]
        )
        old = member.held.epoch(SLOT)
        member.held.lost(SLOT, old)  # so that it takes the slot again
        with caplog.at_level(logging.ERROR, logger="actors.membership"):
            await member._reconcile()
            await member._reconcile()
        assert not member.held.owns(SLOT)
        assert len(member.held.owned()) == protected.slots - 1
        refusals = [r.getMessage() for r in caplog.records if "not taken" in r.getMessage()]
        assert len(refusals) == 1  # logged once, not on every pass
        assert f"slot {SLOT} not taken: ZooKeeper znode {path} has an unsafe ACL" in refusals[0]

        # Its ACL set right, the slot is taken again, above its old epoch.
        await operator.set_acl(path, znode_acl(protected), force=True)
        await member._reconcile()
        assert member.held.owns(SLOT) and member.held.epoch(SLOT) > old
    finally:
        await member.leave()


async def test_a_member_znode_deleted_by_another_client_is_logged_and_rejoined(
    protected: Settings,
    redis: RedisClient,
    operator: ZKClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    member = await _joined(protected, redis)
    try:
        gone = member.member
        before = {slot: member.held.epoch(slot) for slot in range(protected.slots)}
        await operator.delete(f"{protected.zk_cluster_root}/members/{gone}", force=True)
        with caplog.at_level(logging.WARNING):
            await member._reconcile()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(
            f"member znode {protected.zk_cluster_root}/members/{gone} was deleted by another "
            "ZooKeeper client while this node's session is alive" in e
            for e in errors
        ), errors
        assert member.member not in (None, gone)
        assert not member.held.owned()  # the others may take them now
        await member._reconcile()
        after = {slot: member.held.epoch(slot) for slot in member.held.owned()}
        assert set(after) == set(before)
        assert all(after[slot] > before[slot] for slot in before)
    finally:
        await member.leave()
