"""The znodes of a cluster in ZooKeeper, made or checked when a node joins
(actors/membership.py describes the layout).

With zk_auth, every znode the cluster relies on (the cluster root, config, members/,
slots/ and each slots/<n>) must let nobody but the zk_auth identity change it: one that
someone else created first, or opened, stops the node with a ZooKeeperAccessError that
names it (cluster/connections/zk_conn.py, docs/security.md). The path up to zk_root is
not relied on: a client allowed to create there can only make the cluster root before
the first node does (then it is refused), and cannot delete it while it has children.
"""

from __future__ import annotations

import orjson
from aiozk import ZKClient, exc

from cluster.connections.zk_conn import check_acls, no_auth_error
from cluster.errors import ClusterConfigError
from cluster.settings.config import Settings


async def ensure_layout(zk: ZKClient, s: Settings) -> None:
    """Check what exists, then create what is missing: config ({"slots": N}, refusing a
    node with another count), members/, slots/ and every slots/<n>."""
    root = s.zk_cluster_root
    config_path = f"{root}/config"
    base = [root, config_path, f"{root}/members", f"{root}/slots"]
    # Read first: on a protected cluster, wrong or missing credentials fail here with
    # NoAuth, before this node tries to create anything.
    try:
        existing = orjson.loads(await zk.get_data(config_path))
    except exc.NoNode:
        existing = None
    except exc.NoAuth:
        raise no_auth_error(s, config_path) from None
    # What exists must be this cluster's own before anything is written under it:
    # someone may have created it first, with an ACL that lets them in.
    await check_acls(zk, s, base)
    if existing is None:
        await zk.ensure_path(root)
        try:
            await zk.create(config_path, data=orjson.dumps({"slots": s.slots}))
        except exc.NodeExists:  # another node created it meanwhile
            existing = orjson.loads(await zk.get_data(config_path))
    if existing is not None and existing.get("slots") != s.slots:
        raise ClusterConfigError(
            f"cluster {root} has {existing.get('slots')} slots; this node is "
            f"configured with slots={s.slots}. The slot count is fixed "
            "when a cluster is created: start the node with the cluster's count."
        )
    # ensure_path makes container znodes, which ZooKeeper deletes once emptied (members/
    # after the last node left): make them again if so.
    await zk.ensure_path(f"{root}/members")
    await zk.ensure_path(f"{root}/slots")
    await check_acls(zk, s, base)  # ensure_path passes over one made meanwhile
    slot_paths = {slot: f"{root}/slots/{slot}" for slot in range(s.slots)}
    present = set(await zk.get_children(f"{root}/slots"))
    await check_acls(zk, s, [p for slot, p in slot_paths.items() if str(slot) in present])
    for slot, path in slot_paths.items():
        if str(slot) not in present:
            try:
                await zk.create(path, data=orjson.dumps({"owner": None}))
            except exc.NodeExists:
                await check_acls(zk, s, [path])
