"""`delayq recurring list|show|remove|pause|resume|run|ticks` (handled by
cluster/cli/jobs.py and cluster/cli/recurring_actions.py)."""

from __future__ import annotations

import argparse
from typing import TypeAlias

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

TICKS_MAX = 1000


def _ticks_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= TICKS_MAX:
        raise argparse.ArgumentTypeError(f"must be 1..{TICKS_MAX}, got {value}")
    return value


def add_recurring(commands: Commands) -> None:
    recurring = commands.add_parser(
        "recurring",
        help="recurring schedules: list, show, remove, pause, resume, run, ticks",
        description="list: every recurring schedule with its cadence and next tick "
        "(--removed: removed ones too; --json: as JSON). show NAME: one schedule as JSON. "
        "remove NAME: stop a schedule; its ticks already made into jobs and due from now on "
        "are cancelled (one being published at that moment fires). pause NAME: no ticks "
        "until resumed (its waiting ticks are cancelled the same way). resume NAME: tick "
        "again from the next tick after now; the ticks of the pause never fire. run NAME: "
        "fire once now, besides the regular ticks (prints the extra job's id). ticks NAME: "
        "the jobs the schedule made with their status, newest first (--limit, --cursor; "
        "--json). Schedules are created with DelayClient.schedule_recurring() or PUT "
        "/v1/recurring/NAME.",
    )
    recurring.add_argument(
        "action", choices=["list", "show", "remove", "pause", "resume", "run", "ticks"]
    )
    recurring.add_argument("name", nargs="?", help="all but list: the schedule's name")
    recurring.add_argument("--json", action="store_true", help="with list and ticks: print JSON")
    recurring.add_argument(
        "--removed", action="store_true", help="with list: also the removed schedules"
    )
    recurring.add_argument(
        "--limit",
        type=_ticks_limit,
        default=None,
        help=f"with ticks: at most this many (1..{TICKS_MAX}, default 20)",
    )
    recurring.add_argument(
        "--cursor", help="with ticks: go on after the page that printed this cursor"
    )
