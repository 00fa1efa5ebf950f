"""`delayq db move-shard SHARD --to SERVER`: move a logical shard to another MySQL server
while the cluster runs (cluster/store/shard_move.py; docs/cluster.md)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from cluster.cli.loop import run
from cluster.cli.output import shown
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from cluster.store.mysql_store import MySQLStore


def move_shard(settings: Settings, args: argparse.Namespace) -> int:
    if args.shard is None or args.to is None:
        print(
            "delayq db move-shard: give the shard and the server, e.g. "
            "`delayq db move-shard 3 --to 1`; nothing was done",
            file=sys.stderr,
        )
        return 2
    if args.older_than is not None or args.dry_run:
        print(
            "delayq db move-shard: --older-than and --dry-run belong to prune; nothing was done",
            file=sys.stderr,
        )
        return 2
    return run(_move(settings, args.shard, args.to))


async def _move(settings: Settings, shard: int, to: str) -> int:
    import pymysql

    from cluster.store.mysql_store import MySQLStore
    from cluster.store.shard_move import ShardMoveError
    from cluster.store.shard_move import move_shard as move

    store = MySQLStore(settings, "cli")
    target = _server_index(store, to)
    if target is None:
        names = ", ".join(f"{spec.index} ({spec.name})" for spec in store.servers)
        print(
            f"delayq db move-shard: no server {shown(to)}; the servers are {names}",
            file=sys.stderr,
        )
        return 2
    try:
        await store.open(check_schema=False)
        try:
            report = await move(store, shard, target, progress=_say)
        finally:
            await store.close()
    except ShardMoveError as exc:
        print(f"delayq db move-shard: {shown(exc)}", file=sys.stderr)
        return 1
    except (pymysql.err.Error, OSError) as exc:
        print(
            f"delayq db move-shard: MySQL failed: {shown(exc)}; run the same command again "
            "to go on where it stopped",
            file=sys.stderr,
        )
        return 1
    for line in report.lines():
        print(line)
    return 0


def _server_index(store: MySQLStore, text: str) -> int | None:
    """A server by index ("2") or by its host:port name."""
    if text.isdigit():
        return int(text) if int(text) < len(store.servers) else None
    for spec in store.servers:
        if spec.name == text:
            return spec.index
    return None


def _say(line: str) -> None:
    print(line, flush=True)
