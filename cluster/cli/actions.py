"""`delayq schedule` and `delayq reschedule`, through a DelayClient.

A job is validated before any store is opened: bad input prints the reason and exits 2
with nothing scheduled."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from typing import Any

import orjson

from cluster.cli.loop import run
from cluster.cli.output import shown, shown_json
from cluster.cli.times import iso_ms
from cluster.errors import InvalidJob
from cluster.settings.config import Settings

# What `delayq reschedule` prints when the job was not moved.
_NOT_MOVED = {
    "not_found": "no such job",
    "cancelled": "it was cancelled",
    "in_flight": "it is being published right now (it fires at its old time)",
    "dead": "it is dead (in the dead letters)",
    "expired": "it expired (never published)",
}


def schedule(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.model.job_fields import OPTIONS
    from cluster.model.jobs import validate

    try:
        payload = _payload(args, settings.payload_max_bytes)
        job = validate(
            topic=args.topic,
            payload=payload,
            delay=args.delay,
            at=args.at,
            job_id=args.job_id,
            settings=settings,
            **{option.name: getattr(args, option.name) for option in OPTIONS},
        )
    except InvalidJob as exc:
        print(f"delayq schedule: {shown(exc)}; nothing scheduled", file=sys.stderr)
        return 2
    return run(_schedule(settings, job, args.job_id is not None, args.json))


async def _schedule(settings: Settings, job: Any, keyed: bool, as_json: bool) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        [done] = await client.schedule_validated([job], {job.job_id} if keyed else set())
    if as_json:
        due = {"due_ms": job.due_ms, "due": iso_ms(job.due_ms)}
        print(shown_json({"job_id": done.job_id, "created": done.created, **due}))
    elif done.created:
        print(f"scheduled {shown(done.job_id)} due {iso_ms(job.due_ms)}")
    else:
        print(f"{shown(done.job_id)} was already scheduled: it stands unchanged")
    return 0


def read_regular_file(path: str, most: int) -> bytes:
    """Up to `most` bytes of the regular file at path. Opened without blocking and
    checked before reading: a FIFO or a device would make the command wait forever
    (OSError, as for a file that cannot be read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read(most)
    finally:
        os.close(fd)


def _payload(args: argparse.Namespace, max_bytes: int) -> Any:
    """The payload's JSON from --payload, --payload-file PATH or stdin, parsed. The text
    read is bounded: four times payload_max_bytes leaves room for whitespace."""
    limit = max_bytes * 4
    if args.payload is not None:
        text = args.payload.encode()
        where = "--payload"
    else:
        where = "stdin" if args.payload_file == "-" else shown(args.payload_file)
        try:
            if args.payload_file == "-":
                text = sys.stdin.buffer.read(limit + 1)
            else:
                text = read_regular_file(args.payload_file, limit + 1)
        except OSError as exc:
            raise InvalidJob(f"cannot read the payload from {where}: {exc.strerror}") from None
    if len(text) > limit:
        raise InvalidJob(f"the payload in {where} is longer than {limit} bytes")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidJob(f"the payload in {where} is not JSON: {exc}") from None


def reschedule(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.model.jobs import check_job_id, due_ms_of

    try:
        job_id = check_job_id(args.job_id)
        due_ms_of(args.delay, args.at, settings)  # a bad time before opening anything
    except InvalidJob as exc:
        print(f"delayq reschedule: {shown(exc)}; nothing changed", file=sys.stderr)
        return 2
    return run(_reschedule(settings, job_id, args))


async def _reschedule(settings: Settings, job_id: str, args: argparse.Namespace) -> int:
    from cluster.client.delay_client import DelayClient

    async with DelayClient(settings) as client:
        result = await client.reschedule(job_id, delay=args.delay, at=args.at)
    if result:
        print(f"rescheduled {shown(job_id)} due {iso_ms(result.due_ms or 0)}")
        return 0
    if result.status == "already_fired":
        when = "" if result.fired_ms is None else f" at {iso_ms(result.fired_ms)}"
        print(f"not rescheduled: it has fired{when}")
    else:
        print(f"not rescheduled: {_NOT_MOVED[result.status]}")
    return 1
