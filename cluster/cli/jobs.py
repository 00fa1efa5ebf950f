"""The commands that act on jobs: `delayq get`, `cancel`, `expired`, `dead` (the
dead-letter set) and `recurring` (recurring schedules), each through a DelayClient.

Each command takes the settings and the parsed arguments and returns the exit code; the
client is imported when a command runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

from cluster.cli.loop import run
from cluster.cli.output import shown, shown_json
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from cluster.client.delay_client import DelayClient

# What `delayq cancel` prints when the job was not cancelled.
_NOT_CANCELLED = {
    "not_found": "no such job",
    "in_flight": "it is being published right now (it will fire)",
    "dead": "it is dead (in the dead letters)",
    "expired": "it expired (never published)",
}


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


# ----- get, cancel, expired ----------------------------------------------------------------


def get(settings: Settings, args: argparse.Namespace) -> int:
    return run(_get(settings, args.job_id))


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


def cancel(settings: Settings, args: argparse.Namespace) -> int:
    return run(_cancel(settings, args.job_id))


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


def expired(settings: Settings, args: argparse.Namespace) -> int:
    return run(_expired(settings, args.topic, args.limit))


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


# ----- dead letters ----------------------------------------------------------------------


def dead(settings: Settings, args: argparse.Namespace) -> int:
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
    return run(_dead(settings, args))


async def _dead(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        if args.action == "list":
            return await _dead_list(client, args.topic, args.limit)
        if args.action == "show":
            return await _dead_show(client, args.job)
        return await _replay_or_purge(client, args)


async def _dead_list(client: DelayClient, topic: str | None, limit: int) -> int:
    for listed in await client.dead_letters(topic=topic, limit=limit):
        print(
            f"{shown(listed.job_id)}  topic {shown(listed.topic)}  slot {listed.slot}  "
            f"died {listed.died_ms}  attempts {listed.attempts}  "
            f"error {shown(listed.last_error)}"
        )
    return 0


async def _dead_show(client: DelayClient, job_id: str) -> int:
    job = await client.dead_job(job_id)
    if job is None:
        print(f"no dead job {job_id!r}", file=sys.stderr)
        return 1
    print(shown_json({**job.__dict__, "history": await client.mysql.history(job_id)}))
    return 0


async def _replay_or_purge(client: DelayClient, args: argparse.Namespace) -> int:
    verb = args.action
    if args.job_ids is not None and args.dry_run:
        found = [await client.dead_job(job_id) for job_id in args.job_ids]
        count = sum(job is not None for job in found)
        print(f"would {verb} {count} dead job(s) in the dead-letter set (dry run)")
        return 0
    if args.job_ids is None:
        stopped = await _count_and_confirm(client, args)
        if stopped is not None:
            return stopped
    act = client.replay_dead if verb == "replay" else client.purge_dead
    count = await act(args.job_ids, topic=args.topic)
    print(f"{'replayed' if verb == 'replay' else 'purged'} {count} dead job(s)")
    return 0


async def _count_and_confirm(client: DelayClient, args: argparse.Namespace) -> int | None:
    """With --topic or --all: print how many dead jobs the replay or purge would act on,
    then ask. The exit code if it goes no further, None to go on."""
    verb = args.action
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
    return None


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


# ----- recurring schedules -----------------------------------------------------------------


def recurring(settings: Settings, args: argparse.Namespace) -> int:
    if args.action in ("show", "remove") and not args.name:
        print(f"delayq recurring {args.action}: give a NAME", file=sys.stderr)
        return 2
    if args.action != "list" and (args.json or args.removed):
        print("delayq recurring: --json and --removed belong to list", file=sys.stderr)
        return 2
    return run(_recurring(settings, args))


async def _recurring(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        if args.action == "list":
            return await _recurring_list(client, args.removed, args.json)
        if args.action == "show":
            return await _recurring_show(client, args.name)
        return await _recurring_remove(client, args.name)


async def _recurring_list(client: DelayClient, removed: bool, as_json: bool) -> int:
    from cluster.client.recurring import describe

    schedules = [describe(s) for s in await client.recurring(removed=removed)]
    if as_json:
        print(shown_json(schedules))
        return 0
    for schedule in schedules:
        print(_recurring_line(schedule))
    return 0


async def _recurring_show(client: DelayClient, name: str) -> int:
    from cluster.client.recurring import describe

    found = await client.get_recurring(name)
    if found is None:
        print(f"no recurring schedule {shown(name)}", file=sys.stderr)
        return 1
    print(shown_json(describe(found)))
    return 0


async def _recurring_remove(client: DelayClient, name: str) -> int:
    if not await client.remove_recurring(name):
        print(f"no recurring schedule {shown(name)}", file=sys.stderr)
        return 1
    print(f"removed {shown(name)}")
    return 0


def _recurring_line(schedule: dict[str, Any]) -> str:
    """One schedule of `delayq recurring list` on a line."""
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
