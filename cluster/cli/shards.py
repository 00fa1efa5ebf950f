"""`delayq db move-shard SHARD --to SERVER`: move a logical shard to another MySQL server
while the cluster runs (cluster/store/shard_move.py); `delayq db homes [--resolve SHARD
--server N]`: which servers say home for each shard, and leaving one home where several
do (cluster/store/shard_homes.py). docs/cluster.md."""

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
    if args.older_than is not None or args.dry_run or args.resolve is not None or args.server:
        print(
            "delayq db move-shard: --older-than and --dry-run belong to prune, --resolve and "
            "--server to homes; nothing was done",
            file=sys.stderr,
        )
        return 2
    return run(_move(settings, args.shard, args.to))


def homes(settings: Settings, args: argparse.Namespace) -> int:
    if args.shard is not None or args.to is not None or args.older_than is not None:
        print(
            "delayq db homes: takes only --resolve SHARD --server N; nothing was done",
            file=sys.stderr,
        )
        return 2
    if (args.resolve is None) != (args.server is None) or args.dry_run:
        print(
            "delayq db homes: --resolve SHARD and --server N go together, e.g. "
            "`delayq db homes --resolve 3 --server 1`; nothing was done",
            file=sys.stderr,
        )
        return 2
    if args.resolve is None:
        return run(_show_homes(settings))
    return run(_resolve(settings, args.resolve, args.server))


async def _show_homes(settings: Settings) -> int:
    from cluster.store.mysql_store import MySQLStore
    from cluster.store.shard_homes import describe, held_rows, read_claims

    store = MySQLStore(settings, "cli")
    await store.open(check_schema=False)
    try:
        claims = await read_claims(store)
        conflicts = claims.conflicts()
        held = {
            (d, s): describe(await held_rows(store, s, store.database_name(d)))
            for d, servers in conflicts.items()
            for s in servers
        }
    finally:
        await store.close()
    heads = ["logical shard", *(str(spec) for spec in store.servers)]
    print("  ".join(heads))
    for d in range(settings.mysql_databases):
        states = claims.states.get(d, {})
        cells = [str(d)] + [
            "(not answering)" if s.index in claims.down else states.get(s.index, "-")
            for s in store.servers
        ]
        line = "  ".join(cell.ljust(len(head)) for cell, head in zip(cells, heads, strict=True))
        print(line.rstrip())
    for index, why in sorted(claims.down.items()):
        print(f"not answering: {store.servers[index]}: {shown(why)}")
    for d, servers in conflicts.items():
        print(
            f"logical shard {d} has several homes: "
            + "; ".join(f"{store.servers[s]} ({held[d, s]})" for s in servers)
            + f". Calls on it are refused until `delayq db homes --resolve {d} --server N` "
            "leaves one"
        )
    return 1 if conflicts or claims.down else 0


async def _resolve(settings: Settings, shard: int, server: str) -> int:
    import pymysql

    from cluster.store.mysql_store import MySQLStore
    from cluster.store.shard_homes import resolve_homes
    from cluster.store.shard_move import ShardMoveError

    store = MySQLStore(settings, "cli")
    keep = _server_index(store, server)
    if keep is None:
        names = ", ".join(f"{spec.index} ({spec.name})" for spec in store.servers)
        print(
            f"delayq db homes: no server {shown(server)}; the servers are {names}", file=sys.stderr
        )
        return 2
    try:
        await store.open(check_schema=False)
        try:
            lines = await resolve_homes(store, shard, keep, progress=_say)
        finally:
            await store.close()
    except ShardMoveError as exc:
        print(f"delayq db homes: {shown(exc)}", file=sys.stderr)
        return 1
    except (pymysql.err.Error, OSError) as exc:
        print(
            f"delayq db homes: MySQL failed: {shown(exc)}; run `delayq db homes` to see "
            "where things stand, then the same command again",
            file=sys.stderr,
        )
        return 1
    for line in lines:
        print(line)
    return 0


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
