"""The numbers Python, SQL and Lua share: job statuses, script result codes, and the
delay-member format. Each is defined here once.

The Lua scripts see the same names through lua/includes/contract.lua, which is
generated from this module (`python -m cluster.contract > lua/includes/contract.lua`);
tests/test_contract.py fails when the two differ. SQL statements build their status
literals from JobStatus, and the schema's column comment is checked against it too.
"""

from __future__ import annotations

import sys
from enum import IntEnum


class JobStatus(IntEnum):
    """A job's durable status: the `status` column of its MySQL row, and the status of a
    journal entry the scripts write for the recorder."""

    PENDING = 0
    FIRING = 1  # at least one attempt failed; a retry is scheduled
    FIRED = 2
    CANCELLED = 3
    DEAD = 4


# Statuses of a job that has not fired yet and may still fire.
WAITING_STATUSES = (JobStatus.PENDING, JobStatus.FIRING)


class AddCode(IntEnum):
    """Per job, what lua/add.lua did."""

    ADDED = 1
    PRESENT = 0  # already in Redis: nothing changed
    REFUSED = -1  # cancelled (its tombstone has not expired) or fired a moment ago


class ChangeCode(IntEnum):
    """What lua/cancel.lua and lua/reschedule.lua did to a job."""

    CHANGED = 1  # cancelled / given its new due time
    ABSENT = 0  # not in Redis (its add may be on its way, or Redis lost it)
    IN_FLIGHT = -2  # being published right now: too late
    DEAD = -3  # in the dead-letter set
    FIRED = -4  # fired (its MySQL status may not be recorded yet)


class TakeCode(IntEnum):
    """What lua/take.lua did with a new ownership epoch."""

    TAKEN = 1
    STALE = 0  # the slot already carries a newer epoch


class ReplayCode(IntEnum):
    """Per job, what lua/dead_replay.lua did."""

    REPLAYED = 1
    NOT_DEAD = 0  # not in the dead-letter set: skipped


# A due time the scripts report when there is none (an empty slot, nothing retried).
NO_TIME = -1

# The error reply of a script that refused a caller's stale ownership epoch
# (lua/includes/fence.lua) starts with this word.
FENCED = "FENCED"

# A delay zset member is the job's sequence number as this many hex digits, then its
# id: equal due times sort by schedule order.
SEQ_DIGITS = 12


def seq_hex(seq: int) -> str:
    return f"{seq:0{SEQ_DIGITS}x}"


def member_of(seq: str, job_id: str) -> str:
    """The delay zset member of a job with this sequence (hex) and id."""
    return seq + job_id


def split_member(member: bytes) -> tuple[bytes, bytes]:
    """(sequence hex, job id) of a delay zset or ready list member."""
    return member[:SEQ_DIGITS], member[SEQ_DIGITS:]


_LUA_ENUMS: tuple[tuple[str, type[IntEnum]], ...] = (
    ("STATUS", JobStatus), ("ADD", AddCode), ("CHANGE", ChangeCode), ("TAKE", TakeCode),
    ("REPLAY", ReplayCode),
)


def lua_include() -> str:
    """The text of lua/includes/contract.lua."""
    lines = [
        "-- The numbers the scripts share with Python and SQL, pulled into a script by the",
        '-- line "--@include contract". Generated from cluster/contract.py by',
        "--   python -m cluster.contract > lua/includes/contract.lua",
        "-- do not edit by hand (tests/test_contract.py compares the two).",
        "",
    ]
    for prefix, enum in _LUA_ENUMS:
        lines += [f"local {prefix}_{member.name} = {int(member)}" for member in enum]
    lines += [
        f"local NO_TIME = {NO_TIME}",
        f"local SEQ_DIGITS = {SEQ_DIGITS}",
        "",
        "-- A delay member is the seq (SEQ_DIGITS hex digits) followed by the job id.",
        "local function member_of(seq, id) return seq .. id end",
        "local function member_seq(member) return string.sub(member, 1, SEQ_DIGITS) end",
        "local function member_id(member) return string.sub(member, SEQ_DIGITS + 1) end",
        "local function seq_hex(n) return string.format('%0' .. SEQ_DIGITS .. 'x', n) end",
    ]
    return "\n".join(lines) + "\n"


def sql_status_comment() -> str:
    """The status column's comment in schema/001_jobs.sql."""
    return ", ".join(f"{int(s)} {s.name.lower()}" for s in JobStatus)


if __name__ == "__main__":
    sys.stdout.write(lua_include())
