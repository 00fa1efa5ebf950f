"""`delayq recurring pause|resume|run|ticks NAME` (cluster/client/recurring_actions.py);
cluster/cli/jobs.py hands these actions here."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from cluster.cli.output import shown, shown_json
from cluster.cli.times import iso_ms

if TYPE_CHECKING:
    from cluster.client.delay_client import DelayClient

ACTIONS = ("pause", "resume", "run", "ticks")
TICKS_DEFAULT = 20


async def recurring_action(client: DelayClient, args: argparse.Namespace) -> int:
    name: str = args.name
    if args.action == "ticks":
        return await _ticks(client, name, args.limit or TICKS_DEFAULT, args.cursor, args.json)
    if args.action == "run":
        job_id = await client.run_recurring_now(name)
        if job_id is None:
            return _unknown(name)
        print(f"ran {shown(name)} now: job {shown(job_id)}")
        return 0
    change = client.pause_recurring if args.action == "pause" else client.resume_recurring
    schedule = await change(name)
    if schedule is None:
        return _unknown(name)
    if schedule.paused_ms is not None:
        print(f"{shown(name)} paused since {iso_ms(schedule.paused_ms)}")
    else:
        upcoming = schedule.next_fire_ms(schedule.modified_ms)
        print(
            f"{shown(name)} running, "
            + ("no more ticks" if upcoming is None else f"next tick {iso_ms(upcoming)}")
        )
    return 0


async def _ticks(
    client: DelayClient, name: str, limit: int, cursor: str | None, as_json: bool
) -> int:
    from cluster.client.job_json import record_json

    page = await client.recurring_ticks(name, limit, cursor)
    if page is None:
        return _unknown(name)
    jobs, after = page
    if as_json:
        print(shown_json({"ticks": [record_json(job) for job in jobs], "cursor": after}))
        return 0
    for job in jobs:
        kind = "run now" if job.job_id.endswith("r") else "tick"
        print(f"{iso_ms(job.due_ms)}  {job.status.name.lower():9}  {kind:7}  {shown(job.job_id)}")
    if after is not None:
        print(f"more: --cursor {shown(after)}", file=sys.stderr)
    return 0


def _unknown(name: str) -> int:
    print(f"no recurring schedule {shown(name)}", file=sys.stderr)
    return 1
