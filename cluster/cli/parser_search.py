"""`delayq jobs list|cancel`: search jobs, and cancel the jobs a filter matches (handled by
cluster/cli/search.py)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TypeAlias

from cluster.cli.parser_actions import moment

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

LIMIT_MAX = 1000  # cluster/store/search.py's
STATUSES = ["pending", "retrying", "fired", "cancelled", "dead", "expired"]


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be 1..{LIMIT_MAX}, got {value}")
    return value


def due_bound(text: str) -> dt.datetime | int:
    """--from/--to: an ISO-8601 time with its zone, or epoch seconds (as --at takes),
    as an aware datetime or epoch ms."""
    when = moment(text)
    return when if isinstance(when, dt.datetime) else round(when * 1000)


def add_search(commands: Commands) -> None:
    jobs = commands.add_parser(
        "jobs",
        help="search jobs by topic, status, business key or type and due time; cancel them",
        description="list: the jobs matching every filter given, by due time (soonest "
        "first, or --order latest), a page at a time: a table (--json: JSON), then the "
        "command for the next page (its --cursor). cancel: count the pending and retrying "
        "jobs the filters match, ask, then cancel exactly that many (if the number changed "
        "meanwhile, nothing is cancelled; run it again); at most 10,000 a run (narrow the "
        "filters). No --status means any status. Times: ISO-8601 with a zone "
        "(2026-12-01T08:00:00Z) or epoch seconds; --from inclusive, --to exclusive.",
    )
    jobs.add_argument("action", choices=["list", "cancel"])
    jobs.add_argument("--topic", help="jobs of this topic")
    jobs.add_argument(
        "--status",
        action="append",
        choices=STATUSES,
        help="jobs in this status (repeatable: any of them)",
    )
    jobs.add_argument("--biz-id", help="jobs with this business key")
    jobs.add_argument("--biz-type", help="jobs of this business type")
    jobs.add_argument(
        "--from", dest="due_from", type=due_bound, metavar="TIME", help="due at or after TIME"
    )
    jobs.add_argument("--to", dest="due_to", type=due_bound, metavar="TIME", help="due before TIME")
    jobs.add_argument(
        "--order",
        choices=["soonest", "latest"],
        default="soonest",
        help="with list: soonest due first (default) or latest",
    )
    jobs.add_argument(
        "--limit",
        type=_limit,
        default=50,
        help=f"with list: jobs a page shows (1..{LIMIT_MAX}, default 50)",
    )
    jobs.add_argument(
        "--cursor", help="with list: the next page of the list that printed this cursor"
    )
    jobs.add_argument("--json", action="store_true", help="with list: print JSON")
    jobs.add_argument(
        "--yes", action="store_true", help="with cancel: cancel without asking for confirmation"
    )
