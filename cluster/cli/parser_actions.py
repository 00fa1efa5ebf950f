"""The subparsers of `delayq schedule` and `delayq reschedule`, and the argument types
they share (a duration, a moment): bad input is a usage error (exit 2) before any store
is opened."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable
from typing import TypeAlias

from cluster.cli.output import shown
from cluster.model.job_fields import OPTIONS, CliKind, JobField

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

# A duration: a number and an optional unit (none: seconds).
_DURATION = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m|h|d)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_WHEN = (
    "--delay D (e.g. 30s, 5m, 2h, 1d, 1500ms; a bare number is seconds) or --at TIME "
    "(ISO-8601 with its zone, e.g. 2026-12-01T08:00:00Z, or epoch seconds)"
)


def add_actions(commands: Commands) -> None:
    """`delayq schedule` and `delayq reschedule`."""
    _add_schedule(commands)
    _add_reschedule(commands)


def _add_schedule(commands: Commands) -> None:
    schedule = commands.add_parser(
        "schedule",
        help="schedule a job; prints its id",
        description="Schedule one job to be published to TOPIC at its time, as "
        "DelayClient.schedule() does (docs/client.md). The payload is JSON from --payload, "
        "a file (--payload-file PATH) or stdin (--payload-file -). Give " + _WHEN + "; "
        "a time in the past fires at once. Prints the job's id and due time (--json: as "
        "JSON); the same --job-id twice is one job (the second says it already existed "
        "and changes nothing). Bad input: the reason, exit 2, nothing scheduled.",
    )
    schedule.add_argument("--topic", required=True, help="the Kafka topic to publish to")
    payload = schedule.add_mutually_exclusive_group(required=True)
    payload.add_argument("--payload", metavar="JSON", help="the payload as JSON, e.g. '{\"a\": 1}'")
    payload.add_argument(
        "--payload-file",
        metavar="PATH",
        help="read the JSON payload from PATH, a regular file (- for stdin)",
    )
    _add_when(schedule)
    schedule.add_argument("--job-id", help="the job's id (default: a new one)")
    for option in OPTIONS:
        _add_option(schedule, option)
    schedule.add_argument("--json", action="store_true", help="print JSON")


def _add_reschedule(commands: Commands) -> None:
    reschedule = commands.add_parser(
        "reschedule",
        help="give a job that has not fired a new due time",
        description="Move a job that has not fired to a new due time (its expiry moves with "
        "it), as DelayClient.reschedule() does. Give " + _WHEN + ". Exit 0 and the new time "
        "when done; 1 and the reason (not found, fired, cancelled, being published, dead, "
        "expired) when not.",
    )
    reschedule.add_argument("job_id")
    _add_when(reschedule)


def _add_when(parser: argparse.ArgumentParser) -> None:
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", type=duration_s, metavar="D", help="due this long from now")
    when.add_argument("--at", type=moment, metavar="TIME", help="due at this moment")


# ----- argument types ------------------------------------------------------------------------


def duration_s(text: str) -> float:
    """`30s`, `5m`, `1500ms`, `2` (seconds) → seconds; an argparse type."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"'{shown(text)}' is not a duration: a number >= 0 and a unit ms, s, m, h or d "
            "(e.g. 30s); a bare number is seconds"
        )
    seconds = float(found["number"]) * _UNIT_S[found["unit"]]
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"'{shown(text)}' is too long a duration")
    return seconds


def moment(text: str) -> dt.datetime | float:
    """An ISO-8601 time with its zone (an aware datetime) or epoch seconds; an argparse
    type. A time without a zone is refused: it would mean the machine's own."""
    try:
        return float(text) if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text) else _aware(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{shown(text)}': {exc}") from None


def _aware(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("not a time: ISO-8601 (2026-12-01T08:00:00Z) or epoch seconds") from None
    if when.tzinfo is None:
        raise ValueError("give the time's zone, e.g. 2026-12-01T08:00:00Z or +02:00")
    return when


# How `delayq schedule` reads each kind of option (cluster/model/job_fields.py), and
# what its help adds.
_READERS: dict[CliKind, tuple[Callable[[str], object], str]] = {
    "text": (str, ""),
    "int": (int, ""),
    "duration": (duration_s, " (a duration: 30s, 5m, 2h, 1d, 1500ms; a bare number is seconds)"),
}


def _add_option(schedule: argparse.ArgumentParser, option: JobField) -> None:
    """--name for a job option, read and described as its declaration says."""
    read, more = _READERS[option.cli_kind]
    schedule.add_argument(
        "--" + option.name.replace("_", "-"),
        type=read,
        metavar=option.cli_metavar,
        help=option.doc + more,
    )
