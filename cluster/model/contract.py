"""The numbers Python, SQL and Lua share: job statuses, script result and error codes,
and the delay-member format. Each is defined here once.

The Lua scripts see the same names through lua/includes/contract.lua, which is
generated from this module by `make contract`; tests/unit/test_contract.py fails when the
two differ. SQL statements build their status
literals from JobStatus, and the schema's column comment is checked against it too.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum, unique
from typing import AnyStr

from cluster.settings import checks


@unique  # two names for one code would make the reply ambiguous
class JobStatus(IntEnum):
    """A job's durable status: the `status` column of its MySQL row, and the status of a
    journal entry the scripts write for the recorder."""

    PENDING = 0
    FIRING = 1  # at least one attempt failed; a retry is scheduled
    FIRED = 2
    CANCELLED = 3
    DEAD = 4
    EXPIRED = 5  # not published by its due time + expires_after: never will be

    def __str__(self) -> str:
        """The lower-case name (`pending`), as people read it: print(record.status) and
        f-strings show it. SQL and Lua take int(status), never its text."""
        return self.name.lower()


# Statuses of a job that has not fired yet and may still fire.
WAITING_STATUSES = (JobStatus.PENDING, JobStatus.FIRING)


@unique
class AddCode(IntEnum):
    """Per job, what lua/add.lua did."""

    ADDED = 1
    PRESENT = 0  # already in Redis: nothing changed
    REFUSED = -1  # cancelled (its tombstone has not expired), fired or expired a moment ago


@unique
class ChangeCode(IntEnum):
    """What lua/cancel.lua and lua/reschedule.lua did to a job."""

    CHANGED = 1  # cancelled / given its new due time
    ABSENT = 0  # not in Redis (its add may be on its way, or Redis lost it)
    IN_FLIGHT = -2  # being published right now: too late
    DEAD = -3  # in the dead-letter set
    FIRED = -4  # fired (its MySQL status may not be recorded yet)
    EXPIRED = -5  # expired (its MySQL status may not be recorded yet)


@unique
class TakeCode(IntEnum):
    """What lua/take.lua did with a new ownership epoch."""

    TAKEN = 1
    STALE = 0  # the slot already carries a newer epoch


@unique
class ReplayCode(IntEnum):
    """Per job, what lua/dead_replay.lua did."""

    REPLAYED = 1
    NOT_DEAD = 0  # not in the dead-letter set: skipped


# A due time the scripts report when there is none (an empty slot, nothing retried).
NO_TIME = -1
# lua/trim_journal.lua's answer when the journal is no longer the one the recorder read
# (a failover in between): nothing was trimmed.
JOURNAL_CHANGED = -1


@unique
class ErrorCode(StrEnum):
    """The first word of a script's error reply: a refusal, not a bug. cluster/scripts/facade.py
    turns each into its Python exception (script_error)."""

    FENCED = "FENCED"  # the caller's ownership epoch of the slot is stale (includes/fence.lua)
    # The Redis server is not one the caller trusts: it restarted or a replica took over
    # since, and may have come back without its last writes (includes/incarnation.lua).
    RESTARTED = "RESTARTED"


FENCED = ErrorCode.FENCED

# A delay zset member is the job's sequence number as this many hex digits, then its
# id: equal due times sort by schedule order. A stored envelope starts with the same
# digits, so the member can be rebuilt from it.
SEQ_DIGITS = 12

# A job's priority, 0..PRIORITY_MAX (higher fires first among jobs due at the same ms),
# lowers its delay score by priority / PRIORITY_SCALE: less than 1 ms, so a job never
# becomes due early, and a priority-0 job's score is its due ms exactly.
PRIORITY_MAX = 1000
PRIORITY_SCALE = 1024

# The versions of the envelope header (cluster/model/envelope.py), the latest last,
# defined with the check of the envelope_version setting that picks the one a process writes.
# Version 1 packed max attempts, expiry and priority into one text ("5:60000p10");
# version 2 names each field ("v=2;a=5;x=60000;p=10"). Readers read every version.
ENVELOPE_VERSIONS = checks.ENVELOPE_VERSIONS


@unique
class EnvelopeField(StrEnum):
    """The name of each field in a version-2 envelope header. One letter each: the header
    is kept for every waiting job, millions of them."""

    VERSION = "v"
    MAX_ATTEMPTS = "a"
    EXPIRES_AFTER_MS = "x"  # absent: the job never expires
    PRIORITY = "p"  # absent: 0


def seq_hex(seq: int) -> str:
    """The member prefix of sequence number seq."""
    return f"{seq:0{SEQ_DIGITS}x}"


def member_of(seq: AnyStr, job_id: AnyStr) -> AnyStr:
    """The delay zset member of a job with this sequence (hex) and id."""
    return seq + job_id


def member_seq(member: AnyStr) -> AnyStr:
    """The sequence (hex) of a delay zset or ready list member."""
    return member[:SEQ_DIGITS]


def member_id(member: AnyStr) -> AnyStr:
    """The job id of a delay zset or ready list member."""
    return member[SEQ_DIGITS:]


def split_member(member: AnyStr) -> tuple[AnyStr, AnyStr]:
    """(sequence hex, job id) of a delay zset or ready list member."""
    return member[:SEQ_DIGITS], member[SEQ_DIGITS:]


# Lua name prefix of each enum's members, e.g. STATUS_FIRED, ADD_REFUSED, ERROR_FENCED.
_LUA_ENUMS: tuple[tuple[str, type[IntEnum] | type[StrEnum]], ...] = (
    ("STATUS", JobStatus),
    ("ADD", AddCode),
    ("CHANGE", ChangeCode),
    ("TAKE", TakeCode),
    ("REPLAY", ReplayCode),
    ("ERROR", ErrorCode),
    ("FIELD", EnvelopeField),
)


def _lua_value(value: int | str) -> str:
    if isinstance(value, int):
        return str(int(value))
    if not value.isidentifier():  # keeps the Lua string literal free of quoting
        raise ValueError(f"error code {value!r} must be a plain word")
    return f"'{value}'"


def lua_include() -> str:
    """The text of lua/includes/contract.lua."""
    lines = [
        "-- The numbers the scripts share with Python and SQL, pulled into a script by the",
        '-- line "--@include contract". Generated from cluster/model/contract.py by',
        "--   make contract",
        "-- do not edit by hand (tests/unit/test_contract.py compares the two).",
    ]
    for prefix, enum in _LUA_ENUMS:
        lines += ["", f"-- {enum.__name__}"]
        lines += [f"local {prefix}_{member.name} = {_lua_value(member.value)}" for member in enum]
    lines += [
        "",
        "-- A due time reported when there is none.",
        f"local NO_TIME = {NO_TIME}",
        "",
        "-- trim_journal's answer when the journal is not the one read.",
        f"local JOURNAL_CHANGED = {JOURNAL_CHANGED}",
        "",
        "-- A delay member is the seq (SEQ_DIGITS hex digits) followed by the job id.",
        f"local SEQ_DIGITS = {SEQ_DIGITS}",
        "local function member_of(seq, id) return seq .. id end",
        "local function member_seq(member) return string.sub(member, 1, SEQ_DIGITS) end",
        "local function member_id(member) return string.sub(member, SEQ_DIGITS + 1) end",
        f"local function seq_hex(n) return string.format('%0{SEQ_DIGITS}x', n) end",
        "",
        "-- A job's priority (0..PRIORITY_MAX) lowers its delay score by",
        "-- priority / PRIORITY_SCALE (includes/common.lua: score_of).",
        f"local PRIORITY_MAX = {PRIORITY_MAX}",
        f"local PRIORITY_SCALE = {PRIORITY_SCALE}",
    ]
    return "\n".join(lines) + "\n"


def sql_status_comment() -> str:
    """The status column's comment in the schema (its latest definition, in
    schema/006_expiry.sql), without its asides."""
    return ", ".join(f"{int(s)} {s.name.lower()}" for s in JobStatus)
