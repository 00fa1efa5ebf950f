"""The commands that act on the cluster and its databases: `delayq db migrate`, `db
prune` (retention), `db move-shard` and `db homes` (cluster/cli/shards.py), `cluster
status` and `recover`.

Each command takes the settings and the parsed arguments and returns the exit code; the
store, the status reader, the client and the reconciler are imported when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from cluster.cli.loop import run
from cluster.cli.output import shown, shown_json
from cluster.settings.config import Settings

# ----- delayq db ---------------------------------------------------------------------------


def db(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in ("move-shard", "homes"):
        from cluster.cli.shards import homes, move_shard

        return (move_shard if args.action == "move-shard" else homes)(settings, args)
    if args.resolve is not None or args.server is not None:
        print(
            f"delayq db {args.action}: --resolve and --server belong to homes; nothing was done",
            file=sys.stderr,
        )
        return 2
    if args.shard is not None or args.to is not None:
        print(
            f"delayq db {args.action}: SHARD and --to belong to move-shard; nothing was done",
            file=sys.stderr,
        )
        return 2
    if args.action == "prune":
        if args.older_than is None:
            print("delayq db prune: --older-than AGE is required (e.g. 7d)", file=sys.stderr)
            return 2
        return run(_prune(settings, args.older_than, args.dry_run))
    if args.older_than is not None or args.dry_run:
        print(
            "delayq db migrate: --older-than and --dry-run belong to prune; nothing was migrated",
            file=sys.stderr,
        )
        return 2
    return run(_migrate(settings))


async def _migrate(settings: Settings) -> int:
    from cluster.store.mysql_store import MySQLStore

    store = MySQLStore(settings, "cli")
    await store.open(check_schema=False)
    try:
        report = await store.migrate()
    finally:
        await store.close()
    for warning in report.warnings:
        print(f"delayq: warning: {warning}", file=sys.stderr)
    if report.adopted:
        print(
            f"adopted a database migrated by an older delayq: recorded "
            f"{', '.join(report.adopted)} as applied"
        )
    for name in report.applied:
        print(f"applied {name} to {report.shards} job table(s)")
    if report.newer:
        # A newer delayq migrated this database; its migrations stay as they are.
        print(f"the database also has migration(s) {report.newer} this delayq does not know")
    for down in report.servers_down:
        print(f"delayq db migrate: not migrated, did not answer: {down}", file=sys.stderr)
    servers = len(store.servers)
    state = "schema ready" if report.applied else "schema up to date"
    print(
        f"{state}: {report.versions} migration(s) applied, {report.shards} job table(s) "
        f"in {settings.mysql_databases} database(s)"
        + (
            f" on {servers - len(report.servers_down)} of {servers} server(s)"
            if servers > 1
            else ""
        )
    )
    if report.servers_down:
        print("run `delayq db migrate` again once they answer: it goes on there", file=sys.stderr)
        return 1
    return 0


async def _prune(settings: Settings, older_than_s: float, dry_run: bool) -> int:
    import pymysql

    from cluster.store.mysql_store import MySQLStore
    from cluster.store.retention import Pruned, age_text, prune, prune_batches

    store = MySQLStore(settings, "cli")
    pruned = Pruned()
    try:
        await store.open()
        try:
            if dry_run:
                pruned = await prune(store, older_than_s, settings.retention_batch, dry_run=True)
            else:
                batches = prune_batches(store, older_than_s, settings.retention_batch)
                async with contextlib.aclosing(batches):
                    async for done in batches:
                        pruned += done
        finally:
            await store.close()
    except (pymysql.err.Error, OSError) as exc:
        done_so_far = (
            "nothing was deleted"
            if dry_run or not pruned.jobs
            else f"{pruned.jobs} job(s) and {pruned.history} history row(s) were deleted "
            "before it; run it again to go on"
        )
        print(f"delayq db prune: MySQL failed: {shown(exc)}; {done_so_far}", file=sys.stderr)
        return 1
    verb = "would delete" if dry_run else "deleted"
    print(
        f"{verb} {pruned.jobs} fired, cancelled or expired job(s) and {pruned.history} history "
        f"row(s) older than {age_text(older_than_s)}"
    )
    return 0


# ----- delayq cluster status, delayq recover ---------------------------------------------------


def cluster_status(settings: Settings, args: argparse.Namespace) -> int:
    return run(_print_status(settings, args.json))


async def _print_status(settings: Settings, as_json: bool) -> int:
    from cluster.observe.mysql_layout import read_layout, render_layout
    from cluster.observe.pending_view import read_pending_or_why, render_pending
    from cluster.observe.status import read_status, render

    status = await read_status(settings)
    layout = await read_layout(settings)
    pending = await read_pending_or_why(settings)
    # Members write their own fields in ZooKeeper: both forms escape what a terminal
    # would interpret.
    if as_json:
        mysql = [s.as_dict() for s in layout]
        counted = {"error": pending} if isinstance(pending, str) else pending.as_dict()
        print(shown_json({**status.as_dict(), "mysql": mysql, "pending": counted}))
    else:
        in_redis = sum(s.delay + s.ready + s.inflight for s in status.slot_status)
        print(render(status) + "\n" + render_layout(layout, settings.mysql_databases))
        if isinstance(pending, str):
            print(f"pending: not counted: {shown(pending)}")
        else:
            print(render_pending(pending, in_redis))
    return 0


def recover(settings: Settings, args: argparse.Namespace) -> int:
    return run(_recover(settings, args.slot))


async def _recover(settings: Settings, slots: list[int] | None) -> int:
    from actors.reconcile_passes import load_bound_ms, reconcile
    from cluster.client.delay_client import DelayClient

    wanted = slots if slots else list(range(settings.slots))
    if any(not 0 <= slot < settings.slots for slot in wanted):
        print(f"delayq: slots are 0..{settings.slots - 1}", file=sys.stderr)
        return 2
    async with DelayClient(settings) as client:
        # Beyond the bound, the owning nodes load jobs as their time nears.
        result = await reconcile(
            settings, client.mysql, client.scripts, wanted, until_ms=load_bound_ms(settings)
        )
    print(
        f"examined {result.examined} pending job(s); re-added {result.readded}; "
        f"refused {result.refused} (cancelled or fired meanwhile)"
    )
    return 0
