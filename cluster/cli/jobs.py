"""The commands that act on jobs: `delayq get`, `cancel`, `expired`, `dead` (the
dead-letter set) and `recurring` (recurring schedules), each through a DelayClient.

Each command takes the settings and the parsed arguments and returns the exit code; the
client is imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from cluster.cli.loop import run
from cluster.cli.output import shown, shown_json
from cluster.cli.recurring_actions import ACTIONS, recurring_action
from cluster.cli.times import iso_ms
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


# Dead jobs replayed or purged per call with --topic or --all: a progress step.
_PAGE = 1000


# ----- get, cancel, expired ----------------------------------------------------------------


def get(settings: Settings, args: argparse.Namespace) -> int:
    return run(_get(settings, args.job_id, args.history))


async def _get(settings: Settings, job_id: str, with_history: bool) -> int:
    from cluster.client.delay_client import DelayClient
    from cluster.client.job_history import history_of
    from cluster.client.job_json import history_json, record_json

    async with DelayClient(settings) as client:
        record = await client.get(job_id)
        if record is None:
            print(f"no job {shown(job_id)!r}", file=sys.stderr)
            return 1
        answer = record_json(record)
        if with_history:
            answer["history"] = history_json(await history_of(client.mysql, record))
    print(shown_json(answer))
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
        when = "" if result.fired_ms is None else f" at {iso_ms(result.fired_ms)}"
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
            f"{shown(job.job_id)}  topic {shown(job.topic)}  due {iso_ms(job.due_ms)}  "
            f"expires_after {(job.expires_after_ms or 0) / 1000:g}s  "
            f"expired {iso_ms(job.modified_ms)}  attempts {job.attempts}  "
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
            f"died {iso_ms(listed.died_ms)}  attempts {listed.attempts}  "
            f"error {shown(listed.last_error)}"
        )
    return 0


async def _dead_show(client: DelayClient, job_id: str) -> int:
    job = await client.dead_job(job_id)
    if job is None:
        print(f"no dead job {job_id!r}", file=sys.stderr)
        return 1
    from cluster.client.job_json import dead_json, history_json

    history = history_json(await client.mysql.history(job_id))
    print(shown_json({**dead_json(job), "history": history}))
    return 0


async def _replay_or_purge(client: DelayClient, args: argparse.Namespace) -> int:
    verb = args.action
    if args.job_ids is not None and args.dry_run:
        found = [await client.dead_job(job_id) for job_id in args.job_ids]
        count = sum(job is not None for job in found)
        print(f"would {verb} {count} dead job(s) in the dead-letter set (dry run)")
        return 0
    act = client.replay_dead if verb == "replay" else client.purge_dead
    if args.job_ids is None:
        stopped, expected = await _count_and_confirm(client, args)
        if stopped is not None:
            return stopped
        count = await _in_pages(client, act, args.topic, expected, verb)
    else:
        count = await act(args.job_ids, topic=args.topic)
    print(f"{'replayed' if verb == 'replay' else 'purged'} {count} dead job(s)")
    return 0


async def _in_pages(
    client: DelayClient, act: Any, topic: str | None, expected: int, verb: str
) -> int:
    """Replay or purge the dead jobs (of a topic) a page at a time, with a progress bar
    on a terminal, up to the `expected` jobs counted and confirmed."""
    from cluster.cli.progress import counting

    done = 0
    with counting(f"{verb} dead jobs", expected) as advance:
        while done < expected:
            page = await client.dead_letters(topic=topic, limit=min(_PAGE, expected - done))
            acted = await act([job.job_id for job in page]) if page else 0
            if acted == 0:
                break  # none left (another process got them first)
            done += acted
            advance(acted)
    return done


async def _count_and_confirm(
    client: DelayClient, args: argparse.Namespace
) -> tuple[int | None, int]:
    """With --topic or --all: print how many dead jobs the replay or purge would act on,
    then ask. (The exit code if it goes no further, None to go on; the count.)"""
    verb = args.action
    count = await client.count_dead(topic=args.topic)
    scope = "every" if args.all else f"topic {shown(args.topic)}:"
    print(f"{count} dead job(s) to {verb} ({scope} dead job(s))")
    if args.dry_run:
        print("dry run: nothing changed")
        return 0, count
    if count == 0:
        return 0, count
    if not args.yes and not _confirmed(f"{verb} {count} dead job(s)? [y/N] "):
        return 2, count
    return None, count


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
    if args.action != "list" and not args.name:
        print(f"delayq recurring {args.action}: give a NAME", file=sys.stderr)
        return 2
    if (args.removed and args.action != "list") or (
        args.json and args.action not in ("list", "ticks")
    ):
        print("delayq recurring: --json is for list and ticks, --removed for list", file=sys.stderr)
        return 2
    if (args.limit or args.cursor) and args.action != "ticks":
        print("delayq recurring: --limit and --cursor belong to ticks", file=sys.stderr)
        return 2
    return run(_recurring(settings, args))


async def _recurring(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        if args.action == "list":
            return await _recurring_list(client, args.removed, args.json)
        if args.action == "show":
            return await _recurring_show(client, args.name)
        if args.action in ACTIONS:
            return await recurring_action(client, args)
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
    elif schedule["paused"]:
        upcoming = f"paused since {iso_ms(schedule['paused_ms'])}"
    elif next_ms is None:
        upcoming = "ended"
    else:
        upcoming = f"next {iso_ms(next_ms)}"
    return (
        f"{shown(schedule['name'])}  topic {shown(schedule['topic'])}  {cadence}  {upcoming}  "
        f"missed {schedule['missed']}  generation {schedule['generation']}"
    )
