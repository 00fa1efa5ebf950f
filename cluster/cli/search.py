"""`delayq jobs list|cancel` (cluster/cli/parser_search.py): DelayClient.search_jobs and
cancel_matching (cluster/client/job_search.py) from the command line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from cluster.cli.jobs import _confirmed as confirmed
from cluster.cli.loop import run
from cluster.cli.output import shown, shown_json
from cluster.cli.times import iso_ms
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from cluster.client.delay_client import DelayClient
    from cluster.store.rows import JobRecord

_HEADINGS = ("JOB ID", "TOPIC", "STATUS", "DUE", "ATTEMPTS", "BIZ ID", "BIZ TYPE")


def jobs(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "cancel" and (args.cursor is not None or args.json):
        print("delayq jobs cancel: --cursor and --json are for list", file=sys.stderr)
        return 2
    return run(_jobs(settings, args))


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "topic": args.topic,
        "status": args.status,
        "biz_id": args.biz_id,
        "biz_type": args.biz_type,
        "due_from": args.due_from,
        "due_to": args.due_to,
    }


async def _jobs(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        if args.action == "list":
            return await _list(client, args)
        return await _cancel(client, args)


async def _list(client: DelayClient, args: argparse.Namespace) -> int:
    page = await client.search_jobs(
        **_filters(args), order=args.order, limit=args.limit, cursor=args.cursor
    )
    if args.json:
        from cluster.client.job_json import record_json

        jobs = [record_json(job) for job in page.jobs]
        print(shown_json({"jobs": jobs, "next_cursor": page.next_cursor}))
        return 0
    print(table([row(job) for job in page.jobs]) if page.jobs else "no jobs match")
    if page.next_cursor is not None:
        print(f"next page: --cursor {page.next_cursor}")
        print(f"  {_next_command(page.next_cursor)}")
    return 0


def row(job: JobRecord) -> tuple[str, ...]:
    """A job as the table shows it: untrusted text escaped, times in UTC."""
    status = "retrying" if job.status.name == "FIRING" else str(job.status)
    attempts = f"{job.attempts}/{job.max_attempts}"
    return (
        shown(job.job_id),
        shown(job.topic),
        status,
        iso_ms(job.due_ms),
        attempts,
        shown(job.biz_id or "-"),
        shown(job.biz_type or "-"),
    )


def table(rows: list[tuple[str, ...]]) -> str:
    """Rows under _HEADINGS, each column as wide as its widest cell."""
    widths = [max(len(cell) for cell in column) for column in zip(_HEADINGS, *rows, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in (_HEADINGS, *rows)
    ]
    return "\n".join(line.rstrip() for line in lines)


def _next_command(cursor: str) -> str:
    """The command line of the next page: this one's arguments with its --cursor."""
    argv = sys.argv[1:]
    if "--cursor" in argv:
        at = argv.index("--cursor")
        argv = argv[:at] + argv[at + 2 :]
    argv = [arg for arg in argv if not arg.startswith("--cursor=")]
    return shown(shlex.join(["delayq", *argv, "--cursor", cursor]))


async def _cancel(client: DelayClient, args: argparse.Namespace) -> int:
    filters = _filters(args)
    counted = await client.cancel_matching(**filters)
    print(f"{counted.matched} pending or retrying job(s) match")
    if counted.matched == 0:
        return 0
    if not args.yes and not confirmed(f"cancel {counted.matched} job(s)? [y/N] "):
        return 2
    result = await client.cancel_matching(
        **filters, expected=counted.matched, selection=counted.selection
    )
    if not result.done:
        print(
            f"delayq: the matching jobs changed since they were counted ({result.matched} "
            f"now, {counted.matched} then): nothing was cancelled; run it again",
            file=sys.stderr,
        )
        return 1
    print(
        f"cancelled {result.cancelled}, already final {result.already_final} (fired, being "
        f"published, dead or expired meanwhile), outcome unknown {result.unknown}"
    )
    for job_id in result.unknown_ids:
        print(f"  outcome unknown (cancel it again): {shown(job_id)}")
    return 1 if result.unknown else 0
