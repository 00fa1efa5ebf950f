"""ZooKeeper digest authentication and ACLs (cluster/connections/zk_conn.py), against the real local
ZooKeeper: each test uses a zk_root of its own, so its protected znodes bother no other."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aiozk import ZKClient, exc, protocol
from aiozk.states import States

from actors.node import Node
from cluster.connections.redis_conn import RedisClient
from cluster.connections.zk_conn import digest_id, open_zk, znode_acl
from cluster.errors import ConfigError, ZooKeeperAccessError
from cluster.observe.status import read_status
from cluster.settings.config import Settings
from tests.conftest import wait_for
from tests.forwarder import Forwarder, free_port
from tests.test_cluster import joining_member

# ZooKeeper's side does not change with the Redis and MySQL shape.
pytestmark = pytest.mark.once

PASSWORD = "s3cret-zk-pass"


@pytest.fixture
def zk_root() -> str:
    return f"/dqsec-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def protected(settings: Settings, zk_root: str) -> AsyncIterator[Settings]:
    """settings with zk_auth and a zk_root of this test's own; the znodes are deleted
    afterwards."""
    protected = settings.replace(zk_root=zk_root, zk_auth=f"alice:{PASSWORD}")
    yield protected
    zk = await open_zk(protected)
    try:
        await _delete_tree(zk, zk_root)
    finally:
        await zk.close()


async def _delete_tree(zk: ZKClient, path: str) -> None:
    try:
        children = await zk.get_children(path)
    except exc.NoNode:
        return
    for child in children:
        await _delete_tree(zk, f"{path}/{child}")
    try:
        await zk.delete(path)
    except exc.NoNode:
        pass


def _all_paths(settings: Settings) -> list[str]:
    root = settings.zk_cluster_root
    return [settings.zk_root, root, f"{root}/config", f"{root}/members", f"{root}/slots/0"]


def test_digest_id_matches_zookeeper() -> None:
    # ZooKeeper's documented example (DigestAuthenticationProvider.generateDigest).
    assert digest_id("super:admin") == "super:xQJmxLMiHGwaqBvst5y6rkB6HQs="
    # The user ends at the first colon; the password may hold more.
    assert digest_id("bob:a:b").startswith("bob:")


def test_acl_is_open_without_auth_and_private_with_it(settings: Settings) -> None:
    assert znode_acl(settings.replace(zk_auth="")) == [protocol.UNRESTRICTED_ACCESS]
    (entry,) = znode_acl(settings.replace(zk_auth="alice:secret"))
    assert (entry.id.scheme, entry.id.id, entry.perms) == (
        "digest",
        digest_id("alice:secret"),
        0b11111,
    )


async def test_a_protected_cluster_works_for_its_user_and_refuses_everyone_else(
    protected: Settings,
) -> None:
    node = Node(protected)
    await node.start()
    try:

        async def owns_every_slot() -> bool:
            assert node.parts is not None
            return len(node.parts.held.owned()) == protected.slots

        assert await wait_for(owns_every_slot, 15)
        member = node.parts.membership.member if node.parts else None
        root = protected.zk_cluster_root
        paths = [*_all_paths(protected), f"{root}/members/{member}"]

        owner = await open_zk(protected)
        try:
            for path in paths:
                acl = await owner.get_acl(path)
                assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [
                    ("digest", digest_id(protected.zk_auth), 0b11111)
                ], path
        finally:
            await owner.close()

        strangers = {
            "anonymous": protected.replace(zk_auth=""),
            "another user": protected.replace(zk_auth=f"mallory:{PASSWORD}"),
            "wrong password": protected.replace(zk_auth="alice:guess"),
        }
        for who, other in strangers.items():
            zk = await open_zk(other)
            try:
                for path in paths:
                    with pytest.raises(exc.NoAuth):
                        await zk.get_data(path)
                    with pytest.raises(exc.NoAuth):
                        await zk.set_data(path, b'{"owner": "mallory"}', force=True)
                    with pytest.raises(exc.NoAuth):
                        await zk.set_acl(path, [protocol.UNRESTRICTED_ACCESS], force=True)
                with pytest.raises(exc.NoAuth):
                    await zk.create(f"{root}/slots/99", b"{}")
                with pytest.raises(exc.NoAuth):
                    await zk.delete(f"{root}/slots/0")
            finally:
                await zk.close()
            assert who  # all three refused

        status = await read_status(protected)
        assert list(status.members) == [member]
        assert {s.owner for s in status.slot_status} == {member}
    finally:
        await node.stop()


async def test_a_wrong_or_missing_zk_auth_fails_at_start_with_one_clear_message(
    protected: Settings, redis: RedisClient
) -> None:
    first = joining_member(protected, redis)
    await first.join()
    try:
        wrong = protected.replace(zk_auth="alice:not-the-password")
        with pytest.raises(ZooKeeperAccessError) as refused:
            await joining_member(wrong, redis).join()
        message = str(refused.value)
        assert "ZooKeeper at" in message and "NoAuth" in message
        assert f"{protected.zk_cluster_root}/config" in message
        assert "user 'alice'" in message
        assert "not-the-password" not in message and PASSWORD not in message

        # A node does not wait (no retries until startup_timeout_s): it fails at once.
        with pytest.raises(ZooKeeperAccessError, match="NoAuth"):
            await Node(wrong.replace(startup_timeout_s=60)).start()

        anonymous = protected.replace(zk_auth="")
        with pytest.raises(ZooKeeperAccessError, match="set zk_auth"):
            await joining_member(anonymous, redis).join()
        with pytest.raises(ConfigError, match="NoAuth"):
            await read_status(anonymous)
        with pytest.raises(ZooKeeperAccessError, match="NoAuth"):
            await read_status(wrong)
    finally:
        await first.leave()


async def test_the_client_authenticates_again_after_a_reconnect(protected: Settings) -> None:
    # ZooKeeper keeps authentication per connection: after a reconnect to the same
    # session, a client that did not send it again gets NoAuth (measured with aiozk's
    # plain session).
    zk_port = int(protected.zk_hosts.split(",")[0].rsplit(":", 1)[1])
    through = Forwarder(free_port(), zk_port)
    await through.open()
    settings = protected.replace(zk_hosts=f"127.0.0.1:{through.listen_port}")
    zk = await open_zk(settings)
    try:
        await zk.create(settings.zk_root, b"x")
        first = zk.session.conn
        await through.cut()  # like a network blip, shorter than the session timeout
        await asyncio.sleep(0.5)
        await through.open()

        async def reconnected() -> bool:
            return zk.session.conn is not first and zk.session.state == States.CONNECTED

        assert await wait_for(reconnected, 15)
        assert await zk.get_data(settings.zk_root) == b"x"
        await zk.set_data(settings.zk_root, b"y", force=True)
        assert await zk.get_data(settings.zk_root) == b"y"
    finally:
        await zk.close()
        await through.cut()


async def test_without_zk_auth_znodes_stay_open(
    settings: Settings, zk_root: str, redis: RedisClient
) -> None:
    open_settings = settings.replace(zk_root=zk_root, zk_auth="")
    member = joining_member(open_settings, redis)
    await member.join()
    zk = await open_zk(open_settings)
    try:
        for path in _all_paths(open_settings):
            acl = await zk.get_acl(path)
            assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [
                ("world", "anyone", 0b11111)
            ], path
    finally:
        await member.leave()
        await _delete_tree(zk, zk_root)
        await zk.close()


async def test_joining_an_open_cluster_with_zk_auth_is_refused(
    settings: Settings, zk_root: str, redis: RedisClient
) -> None:
    # A cluster created without zk_auth is writable by anyone: a node with zk_auth
    # refuses it (docs/security.md#migrating-an-existing-open-cluster) instead of
    # trusting slots and epochs anyone can rewrite.
    open_settings = settings.replace(zk_root=zk_root, zk_auth="")
    first = joining_member(open_settings, redis)
    await first.join()
    try:
        second = joining_member(open_settings.replace(zk_auth=f"alice:{PASSWORD}"), redis)
        with pytest.raises(ZooKeeperAccessError) as refused:
            await second.join()
        root = open_settings.zk_cluster_root
        assert f"znode {root} has an unsafe ACL" in str(refused.value)
        assert "world:anyone:cdrwa" in str(refused.value)
        assert PASSWORD not in str(refused.value)
    finally:
        await first.leave()
        zk = await open_zk(open_settings.replace(zk_auth=f"alice:{PASSWORD}"))
        try:
            await _delete_tree(zk, zk_root)
        finally:
            await zk.close()
