"""The `delayq` command line.

    delayq services up|down|status|env   the local development stack
    delayq db migrate                    create or update the MySQL schema
    delayq node [--ready-file PATH]      run a node until SIGTERM/SIGINT (start more
                                         processes, here or elsewhere, to scale)
    delayq ingress [--ready-file PATH]   schedule the jobs produced to ingress_topic
    delayq cluster status                members, slot map, per-slot depth
    delayq recover                       re-add to Redis the pending jobs it lost
    delayq dead list|show|replay|purge   the dead-letter set
    delayq recurring list|show|remove    recurring schedules
    delayq expired [--topic T]           jobs that expired (not published in time)
    delayq get JOB_ID                    show a job's durable record
    delayq cancel JOB_ID                 cancel a job

Settings come from DELAYQ_* environment variables and the TOML file named by
DELAYQ_CONFIG or --config; see docs/configuration.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import orjson

from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.settings.logs import TEXT_FORMAT, configure_logging


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def shown(text: object) -> str:
    """Untrusted text (ids, topics, errors) made safe to print: every character a
    terminal would interpret rather than show (controls, bidi controls, other
    non-printables) is escaped the way repr() does, e.g. \\x9b or \\u202e."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_json(value: object) -> str:
    """value as indented JSON with every non-printable character inside its strings
    written as a \\u escape: the same JSON, safe for a terminal."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="delayq",
        description="delayq: a distributed delay queue that fires jobs to Kafka at their time.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="TOML settings file (same as DELAYQ_CONFIG); DELAYQ_* variables override it",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    services = commands.add_parser(
        "services",
        help="start/stop the local development stack (Redis, MariaDB, "
        "ZooKeeper, Tansu) on non-default ports",
        description="The local development and test stack. State lives in "
        '$DELAYQ_STATE_DIR (default ./.delayq). `eval "$(delayq services env)"` points '
        "delayq at it.",
    )
    services.add_argument("action", choices=["up", "down", "status", "env"])
    services.add_argument(
        "--purge", action="store_true", help="with down: also delete the state folder"
    )
    services.add_argument(
        "--redis-cluster",
        action="store_true",
        help="also run a three-master Redis Cluster (ports 17001-17003; with --secure "
        "17011-17013); with env: point DELAYQ_REDIS_URL at every node of it",
    )
    services.add_argument(
        "--replicas",
        type=int,
        choices=[0, 1],
        default=0,
        help="with up: give each cluster master a replica (ports 17004-17006; with "
        "--secure 17014-17016), so masters can fail over; implies --redis-cluster. "
        "Remembered: later commands include the replicas without it",
    )
    services.add_argument(
        "--secure",
        action="store_true",
        help="act on the secure stack instead (TLS and passwords, state in "
        "$DELAYQ_STATE_DIR/secure, ports 16380, 13307, 12182, 19093; docs/security.md)",
    )

    db = commands.add_parser(
        "db",
        help="database schema and retention",
        description="migrate: apply to every shard, in order, the schema/NNN_*.sql "
        "migrations the database has not recorded yet (idempotent). prune: delete the "
        "fired, cancelled and expired jobs last changed more than --older-than AGE ago (on the "
        "MySQL server's clock), with their history, in every shard and slot, in batches "
        "of retention_batch, one short transaction each (what nodes do every "
        "retention_interval_s for retention_days), and print how many rows went "
        "(--dry-run: how many would); pending, retrying and dead jobs stay.",
    )
    db.add_argument("action", choices=["migrate", "prune"], help="migrate or prune")
    db.add_argument(
        "--older-than",
        metavar="AGE",
        type=_age_s,
        help="prune (required): the age, a number more than 0 with a unit s, m, h or d "
        "(e.g. 7d, 12h, 30m, 90s)",
    )
    db.add_argument(
        "--dry-run",
        action="store_true",
        help="prune: count what would be deleted, delete nothing",
    )

    node = commands.add_parser(
        "node",
        help="run a node until SIGTERM or SIGINT",
        description="Run a node: join the cluster in ZooKeeper, take its share of the "
        "slots, and scan, move, dispatch, reap and record them. Start more nodes (on this "
        "machine or others, with the same settings) to scale; SIGTERM hands its slots "
        "over cleanly.",
    )
    node.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write this file (JSON: node_id, member, pid) once the node has started, and "
        "delete it when the node stops: a readiness signal for supervisors and scripts",
    )
    node.add_argument(
        "--check",
        nargs="?",
        const="all",
        choices=["live", "ready", "all"],
        help="do not run a node: ask the node running with these settings on this machine "
        "(its metrics_port) whether it is healthy (live: /healthz), ready (ready: /readyz) "
        "or both (all, the default), print the answer and exit 0 if yes, 1 if not or if it "
        "does not answer, 2 if metrics_port is 0: for liveness and readiness probes",
    )

    ingress = commands.add_parser(
        "ingress",
        help="schedule the jobs produced to ingress_topic, until SIGTERM or SIGINT",
        description="Run a Kafka ingress: read the records of ingress_topic in the consumer "
        "group ingress_group, schedule each one as a job (a JSON object with the fields of a "
        "job request: topic, payload, delay or at, and job_id, biz_id, biz_type, "
        "max_attempts), send the records that are not valid jobs to the error topic with "
        "the reason, and commit a round's offsets only once its jobs are stored and its "
        "error records acknowledged. A record "
        "without a job_id is given one derived from its topic, partition, offset and "
        "timestamp, so a record read twice is one job. Start more processes with the same "
        "settings to share the topic's partitions (docs/ingress.md).",
    )
    ingress.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write this file (JSON: node_id, pid, topic, group) once the ingress has "
        "started, and delete it when it stops: a readiness signal for supervisors and scripts",
    )

    cluster = commands.add_parser(
        "cluster",
        help="cluster state",
        description="status: the live members (ZooKeeper), which member owns which slot "
        "with its epoch, and each slot's depth in Redis (delay, ready, in flight, dead) "
        "and how late its most overdue job already is.",
    )
    cluster.add_argument("action", choices=["status"])
    cluster.add_argument("--json", action="store_true", help="print JSON instead of a table")

    top = commands.add_parser(
        "top",
        help="a live view of the cluster, refreshed every second",
        description="Members and their slots, health and readiness, fire rate and "
        "lateness p50/p99 per topic over the last interval, the busiest slots' depth "
        "(delay, ready, in flight, dead) and overdue jobs, and dead letters. Rates and "
        "lateness come from each node's /metrics (nodes with metrics_port set; the others "
        "show 'metrics off', and one that does not answer 'metrics unreachable'); members "
        "and slot owners from ZooKeeper and depths from Redis, as `cluster status` reads "
        "them. Ctrl-C ends it.",
    )
    top.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between refreshes, the window of rates and lateness (default 1.0)",
    )
    top.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot (two scrapes --interval apart, so rates exist) and exit",
    )
    top.add_argument("--json", action="store_true", help="with --once: print JSON")

    web = commands.add_parser(
        "web",
        help="serve the HTTP API (v1) and the web console",
        description="Serve the JSON API v1 (schedule, get, cancel, reschedule, dead "
        "letters, the cluster), its OpenAPI document at /openapi.json and the web "
        "console at /, until Ctrl-C or SIGTERM. Stateless: run several behind a load "
        "balancer. Bearer tokens and roles come from web_tokens "
        "(DELAYQ_WEB_TOKENS=TOKEN=ROLE,...; roles producer, operator, viewer); without "
        "them it serves a loopback address only. HTTPS with web_tls_certfile and "
        "web_tls_keyfile. docs/http.md describes every route.",
    )
    web.add_argument("--host", help="address to listen on (default: web_host, 127.0.0.1)")
    web.add_argument(
        "--port", type=int, help="port to listen on (default: web_port, 8470; 0: any free port)"
    )

    recover = commands.add_parser(
        "recover",
        help="re-add to Redis the pending jobs it lost, from MySQL",
        description="Walk the pending and retrying jobs in MySQL and re-add those Redis "
        "does not hold (after a Redis restart without persistence, FLUSHALL or a lossy "
        "failover). Safe while nodes run: jobs Redis holds are left alone, and jobs "
        "cancelled or fired meanwhile are not brought back. Nodes also do this by "
        "themselves for every slot they take, and periodically.",
    )
    recover.add_argument(
        "--slot", type=int, action="append", help="only this slot (repeatable); default every slot"
    )

    dead = commands.add_parser(
        "dead",
        help="jobs that used up their attempts: list, show, replay, purge",
        description="list: dead jobs with their last error (--topic, --limit). show JOB_ID: "
        "one dead job with its history. replay: give dead jobs a new set of attempts, due "
        "now (a job named by --job-id that is dead in MySQL but no longer in the set, purged "
        "or lost by Redis, is replayed from MySQL). purge: forget dead jobs in Redis (MySQL "
        "keeps them, status dead). replay and purge take --job-id (repeatable), --topic or "
        "--all; with --topic or --all they first print how many jobs they would act on and "
        "need --yes, or a y answer when run in a terminal. --dry-run prints that count and "
        "changes nothing.",
    )
    dead.add_argument("action", choices=["list", "show", "replay", "purge"])
    dead.add_argument("job", nargs="?", help="with show: the job id")
    dead.add_argument(
        "--job-id",
        action="append",
        dest="job_ids",
        metavar="JOB_ID",
        help="with replay/purge: this job (repeatable)",
    )
    dead.add_argument("--topic", help="only jobs of this topic")
    dead.add_argument("--all", action="store_true", help="with replay/purge: every dead job")
    dead.add_argument(
        "--yes",
        action="store_true",
        help="with replay/purge --topic/--all: act without asking for confirmation",
    )
    dead.add_argument(
        "--dry-run",
        action="store_true",
        help="with replay/purge: print how many dead jobs they would act on, change nothing",
    )
    dead.add_argument(
        "--limit", type=_positive_int, default=100, help="with list: at most this many (>= 1)"
    )

    recurring = commands.add_parser(
        "recurring",
        help="recurring schedules: list, show, remove",
        description="list: every recurring schedule with its cadence and next tick "
        "(--removed: removed ones too; --json: as JSON). show NAME: one schedule as JSON. "
        "remove NAME: stop a schedule; its ticks already made into jobs and due from now on "
        "are cancelled (one being published at that moment fires). Schedules are created "
        "with DelayClient.schedule_recurring().",
    )
    recurring.add_argument("action", choices=["list", "show", "remove"])
    recurring.add_argument("name", nargs="?", help="with show and remove: the schedule's name")
    recurring.add_argument("--json", action="store_true", help="with list: print JSON")
    recurring.add_argument(
        "--removed", action="store_true", help="with list: also the removed schedules"
    )

    expired = commands.add_parser(
        "expired",
        help="jobs that expired: not published by their due time + expires_after",
        description="List the jobs that expired, the most recent first, with their due "
        "time, expires_after and why (MySQL's records, status expired; retention deletes "
        "them like fired and cancelled jobs). An expired job is not replayed: schedule it "
        "again if it is still wanted.",
    )
    expired.add_argument("--topic", help="only jobs of this topic")
    expired.add_argument(
        "--limit", type=_positive_int, default=100, help="at most this many (>= 1)"
    )
    get = commands.add_parser("get", help="print a job's durable record as JSON")
    get.add_argument("job_id")
    cancel = commands.add_parser(
        "cancel",
        help="cancel a job; exit 0 if it will never fire, 1 and the reason if it was not cancelled",
    )
    cancel.add_argument("job_id")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format=TEXT_FORMAT)
    if args.command == "services":
        try:
            from cluster.devstack import stack
        except ImportError as exc:  # psutil comes with the local extra only
            print(
                f"delayq services: {exc.name} is not installed: pip install 'delayq[local]'",
                file=sys.stderr,
            )
            return 1
        return stack.run(
            args.action,
            purge=args.purge,
            redis_cluster=args.redis_cluster,
            replicas=args.replicas,
            secure=args.secure,
        )
    if args.config:
        os.environ["DELAYQ_CONFIG"] = args.config
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"delayq: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, settings.log_format, settings.node_id)
    try:
        if args.command == "db":
            if args.action == "prune":
                if args.older_than is None:
                    print(
                        "delayq db prune: --older-than AGE is required (e.g. 7d)",
                        file=sys.stderr,
                    )
                    return 2
                return _run(_prune(settings, args.older_than, args.dry_run))
            if args.older_than is not None or args.dry_run:
                print(
                    "delayq db migrate: --older-than and --dry-run belong to prune; "
                    "nothing was migrated",
                    file=sys.stderr,
                )
                return 2
            return _run(_migrate(settings))
        if args.command == "node":
            if args.check:
                from cluster.observe.node_check import check_node

                return check_node(settings, args.check)
            from actors.node import run_node

            ready_file = Path(args.ready_file) if args.ready_file else None
            return _run(run_node(settings, ready_file=ready_file))
        if args.command == "ingress":
            from cluster.ingress.process import run_ingress

            ready_file = Path(args.ready_file) if args.ready_file else None
            return _run(run_ingress(settings, ready_file=ready_file))
        if args.command == "cluster":
            return _run(_cluster_status(settings, args.json))
        if args.command == "top":
            if not args.interval > 0:
                print("delayq top: --interval must be > 0", file=sys.stderr)
                return 2
            if args.json and not args.once:
                print("delayq top: --json needs --once", file=sys.stderr)
                return 2
            from cluster.cli.top import run_top

            try:
                return _run(run_top(settings, args.interval, args.once, args.json))
            except KeyboardInterrupt:
                return 0
        if args.command == "web":
            from cluster.web.server import serve

            host = settings.web_host if args.host is None else args.host
            port = settings.web_port if args.port is None else args.port
            if not 0 <= port <= 65535:
                print("delayq web: --port must be 0..65535", file=sys.stderr)
                return 2
            return _run(serve(settings, host, port))
        if args.command == "recover":
            return _run(_recover(settings, args.slot))
        if args.command == "dead":
            return _run(_dead(settings, args))
        if args.command == "recurring":
            return _run(_recurring(settings, args))
        if args.command == "expired":
            return _run(_expired(settings, args.topic, args.limit))
        if args.command == "get":
            return _run(_get(settings, args.job_id))
        if args.command == "cancel":
            return _run(_cancel(settings, args.job_id))
    except (ConfigError, ValueError, RuntimeError) as exc:
        print(f"delayq: {shown(exc)}", file=sys.stderr)
        return 1
    return 2


def _run(coro: Coroutine[Any, Any, int]) -> int:
    import uvloop

    return uvloop.run(coro)


def _age_s(text: str) -> float:
    """`7d` → seconds; an argparse type, so a bad age is a usage error (exit 2)."""
    import math

    from cluster.store.retention import AGE_UNITS_S

    number, unit = text[:-1], text[-1:]
    try:
        seconds = float(number) * AGE_UNITS_S[unit]
    except (KeyError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(
            f"'{shown(text)}' is not an age: a number and a unit s, m, h or d (e.g. 7d)"
        )
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"'{shown(text)}': the age must be more than 0")
    return seconds


async def _prune(settings: Settings, older_than_s: float, dry_run: bool) -> int:
    import contextlib

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
    state = "schema ready" if report.applied else "schema up to date"
    print(
        f"{state}: {report.versions} migration(s) applied, {report.shards} job table(s) "
        f"in {settings.mysql_databases} database(s)"
    )
    return 0


async def _cluster_status(settings: Settings, as_json: bool) -> int:
    from cluster.observe.status import read_status, render

    status = await read_status(settings)
    if as_json:
        print(orjson.dumps(status.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(status))
    return 0


async def _recover(settings: Settings, slots: list[int] | None) -> int:
    from actors.reconciler import load_bound_ms, reconcile
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


async def _dead(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    chosen = [args.job_ids is not None, args.topic is not None, args.all]
    if args.action in ("replay", "purge") and sum(chosen) != 1:
        print(
            f"delayq dead {args.action}: give exactly one of --job-id, --topic or --all",
            file=sys.stderr,
        )
        return 2
    if args.action == "show" and not args.job:
        print("delayq dead show: give a JOB_ID", file=sys.stderr)
        return 2
    async with DelayClient(settings) as client:
        if args.action == "list":
            for listed in await client.dead_letters(topic=args.topic, limit=args.limit):
                print(
                    f"{shown(listed.job_id)}  topic {shown(listed.topic)}  slot {listed.slot}  "
                    f"died {listed.died_ms}  attempts {listed.attempts}  "
                    f"error {shown(listed.last_error)}"
                )
            return 0
        if args.action == "show":
            job = await client.dead_job(args.job)
            if job is None:
                print(f"no dead job {args.job!r}", file=sys.stderr)
                return 1
            print(shown_json({**job.__dict__, "history": await client.mysql.history(args.job)}))
            return 0
        verb = args.action
        if args.job_ids is not None:
            if args.dry_run:
                found = [await client.dead_job(job_id) for job_id in args.job_ids]
                count = sum(job is not None for job in found)
                print(f"would {verb} {count} dead job(s) in the dead-letter set (dry run)")
                return 0
        else:
            count = await client.count_dead(topic=args.topic)
            scope = "every" if args.all else f"topic {shown(args.topic)}:"
            print(f"{count} dead job(s) to {verb} ({scope} dead job(s))")
            if args.dry_run:
                print("dry run: nothing changed")
                return 0
            if count == 0:
                return 0
            if not args.yes and not _confirmed(f"{verb} {count} dead job(s)? [y/N] "):
                return 2
        act = client.replay_dead if verb == "replay" else client.purge_dead
        count = await act(args.job_ids, topic=args.topic)
        print(f"{'replayed' if verb == 'replay' else 'purged'} {count} dead job(s)")
    return 0


async def _recurring(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient
    from cluster.client.recurring import describe

    if args.action in ("show", "remove") and not args.name:
        print(f"delayq recurring {args.action}: give a NAME", file=sys.stderr)
        return 2
    if args.action != "list" and (args.json or args.removed):
        print("delayq recurring: --json and --removed belong to list", file=sys.stderr)
        return 2
    async with DelayClient(settings) as client:
        if args.action == "list":
            schedules = [describe(s) for s in await client.recurring(removed=args.removed)]
            if args.json:
                print(shown_json(schedules))
                return 0
            for schedule in schedules:
                print(_recurring_line(schedule))
            return 0
        if args.action == "show":
            found = await client.get_recurring(args.name)
            if found is None:
                print(f"no recurring schedule {shown(args.name)}", file=sys.stderr)
                return 1
            print(shown_json(describe(found)))
            return 0
        if not await client.remove_recurring(args.name):
            print(f"no recurring schedule {shown(args.name)}", file=sys.stderr)
            return 1
    print(f"removed {shown(args.name)}")
    return 0


def _recurring_line(schedule: dict[str, Any]) -> str:
    """One schedule of `delayq recurring list` on a line."""
    import datetime as dt

    if schedule["cron"] is not None:
        cadence = f"cron '{schedule['cron']}' {schedule['tz']}"
    else:
        cadence = f"every {schedule['every_s']:g}s"
    next_ms = schedule["next_ms"]
    if schedule["removed"]:
        upcoming = "removed"
    elif next_ms is None:
        upcoming = "ended"
    else:
        moment = dt.datetime.fromtimestamp(next_ms / 1000, dt.UTC)
        upcoming = "next " + moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return (
        f"{shown(schedule['name'])}  topic {shown(schedule['topic'])}  {cadence}  {upcoming}  "
        f"missed {schedule['missed']}  generation {schedule['generation']}"
    )


def _confirmed(question: str) -> bool:
    """A y answer from the terminal; without one (no terminal) say why and refuse."""
    if not sys.stdin.isatty():
        print(
            "delayq: refusing without --yes (stdin is not a terminal to confirm on)",
            file=sys.stderr,
        )
        return False
    try:
        answer = input(question)
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        print("delayq: not confirmed, nothing changed", file=sys.stderr)
        return False
    return True


async def _get(settings: Settings, job_id: str) -> int:
    from cluster.client.delay_client import DelayClient
    from cluster.client.job_json import record_json

    async with DelayClient(settings) as client:
        record = await client.get(job_id)
    if record is None:
        print(f"no job {job_id!r}", file=sys.stderr)
        return 1
    print(shown_json(record_json(record)))
    return 0


async def _expired(settings: Settings, topic: str | None, limit: int) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        listed = await client.expired_jobs(topic=topic, limit=limit)
        count = await client.count_expired(topic=topic)
    for job in listed:
        print(
            f"{shown(job.job_id)}  topic {shown(job.topic)}  due {_iso(job.due_ms)}  "
            f"expires_after {(job.expires_after_ms or 0) / 1000:g}s  "
            f"expired {_iso(job.modified_ms)}  attempts {job.attempts}  "
            f"why {shown(job.last_error)}"
        )
    print(f"{count} expired job(s){'' if topic is None else f' of topic {shown(topic)}'}")
    return 0


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


# What `delayq cancel` prints when the job was not cancelled.
_NOT_CANCELLED = {
    "not_found": "no such job",
    "in_flight": "it is being published right now (it will fire)",
    "dead": "it is dead (in the dead letters)",
    "expired": "it expired (never published)",
}


async def _cancel(settings: Settings, job_id: str) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        result = await client.cancel(job_id)
    if result:
        print("cancelled")
        return 0
    if result.status == "already_fired":
        when = "" if result.fired_ms is None else f" at {_iso(result.fired_ms)}"
        attempt = "" if result.attempt is None else f" (attempt {result.attempt})"
        print(f"not cancelled: it has fired{when}{attempt}")
    else:
        print(f"not cancelled: {_NOT_CANCELLED[result.status]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
