"""The one declaration of a job's fields: what each is, how it is checked, where it is
stored and how it is shown. The client's keyword arguments, validate() and JOB_KEYS
(cluster/model/jobs.py), the bounds re-checked before storing (job_bounds.py), the HTTP
schemas and OpenAPI document (cluster/web/), the ingress (its records are job requests),
`delayq schedule`'s options, the MySQL row mapping (cluster/store/rows.py, job_writes.py,
recurring_store.py) and a job's JSON (cluster/client/job_json.py) all derive from FIELDS.

Fields with a `check` are the job's options: optional keywords of schedule(), checked
one by one in the order declared, kept on ValidJob, JobRecord and a recurring
Definition under `attr`, and stored in `column`. The others (topic, payload, delay, at,
job_id) are the job's core: validate() checks them in its own steps, because their rules
tie them together (exactly one of delay or at; a job_id made when absent; the payload's
JSON and size; the settings' allowed topics).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from cluster.errors import InvalidJob
from cluster.model.contract import PRIORITY_MAX
from cluster.settings.config import Settings

# Characters a terminal, log viewer or editor interprets rather than shows: C0 and C1
# controls and DEL, and the bidirectional controls that reorder displayed text (LRM,
# RLM, ALM, the embeddings and overrides U+202A-U+202E, the isolates U+2066-U+2069).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
JOB_ID_MAX_CHARS = 200
BIZ_ID_MAX_CHARS = 200
BIZ_TYPE_MAX_CHARS = 64
MAX_ATTEMPTS_LIMIT = 1000

# How `delayq schedule` reads an option's value (cluster/cli/parser_actions.py).
CliKind = Literal["text", "int", "duration"]


@dataclass(frozen=True)
class JobField:
    """One field of a job."""

    name: str  # the keyword of schedule(), the key of a JSON job request
    annotation: str  # its Python type, as schedule() and Job declare it
    doc: str  # one sentence: OpenAPI description, --help, docstrings
    # The option's check, given the value (None when absent) and the settings: returns
    # the value ValidJob keeps, or raises InvalidJob. None: a core field (see above).
    check: Callable[[object, Settings], Any] | None = None
    # An option's kept value checked again before it is stored (cluster/model/job_bounds.py):
    # a ValidJob made outside validate() must not be stored out of bounds.
    recheck: Callable[[object], Any] | None = None
    default: object = None  # what schedule() and Job default to
    attr: str = ""  # its name on ValidJob, JobRecord and Definition ("": name)
    kept_always: bool = False  # a kept value is never None (absent: a default fills in)
    column: str | None = None  # its MySQL column in the job and recurring tables
    column_type: type = str  # what a value read from that column is made into
    per_mille: bool = False  # given in seconds, kept in ms (attr and column)
    envelope: bool = False  # carried in the job's Redis envelope
    in_record: bool = False  # a field of the record fired to Kafka
    required: bool = False  # a job request without it is refused
    # JSON Schema of a value given over HTTP (null is added for an optional field);
    # "text" adds the pattern refusing control characters (cluster/web/openapi_fields.py).
    json_schema: dict[str, Any] = field(default_factory=dict)
    maximum_setting: str | None = None  # the setting that is its JSON Schema maximum
    text: bool = False
    cli_kind: CliKind = "text"  # how --name's value is read
    cli_metavar: str | None = None

    @property
    def kept_as(self) -> str:
        """Its name on ValidJob, JobRecord and Definition."""
        return self.attr or self.name

    @property
    def is_option(self) -> bool:
        return self.check is not None

    def stored(self, value: Any) -> Any:
        """A value read from its column, as ValidJob keeps it (None stays None)."""
        return None if value is None else self.column_type(value)

    def shown(self, kept: Any) -> Any:
        """A value as ValidJob or JobRecord keeps it, as a JSON job shows it."""
        return kept / 1000 if self.per_mille and kept is not None else kept


def check_chars(name: str, value: str) -> None:
    """Refuse control characters and lone surrogates in text."""
    if _CONTROL.search(value):
        raise InvalidJob(f"{name} must not contain control characters")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidJob(f"{name} is not valid Unicode (a lone surrogate)") from None


def check_text(name: str, value: object, max_chars: int) -> str | None:
    """An optional text field (biz_id, biz_type, and filters on them): None, or 1..max_chars
    characters, no control characters, not starting or ending with whitespace."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidJob(f"{name} must be a str or None, got {type(value).__name__}")
    if not value or len(value) > max_chars:
        raise InvalidJob(f"{name} must be 1..{max_chars} characters")
    if value[0].isspace() or value[-1].isspace():
        # MySQL's PAD SPACE collation takes 'X ' for 'X': a search or bulk cancel of
        # one would match the other. Refused for jobs and filters alike.
        raise InvalidJob(f"{name} must not start or end with whitespace: {value!r}")
    check_chars(name, value)
    return value


def finite_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise InvalidJob(f"{name} is out of range") from None
    if not math.isfinite(number):
        raise InvalidJob(f"{name} must be finite, got {value!r}")
    return number


def check_expires_after(value: object, settings: Settings) -> int | None:
    """expires_after (seconds after the due time, more than 0 and at most max_delay_s)
    in ms, at least 1; None when not given."""
    if value is None:
        return None
    seconds = finite_number("expires_after", value)
    if not seconds > 0:
        raise InvalidJob(f"expires_after must be more than 0 seconds, got {value!r}")
    if seconds > settings.max_delay_s:
        raise InvalidJob(
            f"expires_after must be at most max_delay_s={settings.max_delay_s:g} seconds, "
            f"got {value!r}"
        )
    return max(round(seconds * 1000), 1)


def check_max_attempts(value: object) -> int:
    """A job's max_attempts: an int 1..MAX_ATTEMPTS_LIMIT (not a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJob(f"max_attempts must be an int in 1..{MAX_ATTEMPTS_LIMIT}")
    return value


def check_priority(value: object) -> int:
    """A job's priority: an int 0..PRIORITY_MAX, 0 when not given (None)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PRIORITY_MAX:
        raise InvalidJob(f"priority must be an int in 0..{PRIORITY_MAX}, got {value!r}")
    return int(value)


def check_expires_after_ms(value: object) -> int | None:
    """A kept expires_after_ms: None, or an int > 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise InvalidJob(f"expires_after_ms must be an int > 0, got {value!r}")
    return value


def _max_attempts_or_default(value: object, settings: Settings) -> int:
    return check_max_attempts(settings.default_max_attempts if value is None else value)


_ANY_TIME = "dt.datetime | float | None"

FIELDS: tuple[JobField, ...] = (
    JobField(
        "topic",
        "str",
        "the Kafka topic the job fires to",
        column="topic",
        envelope=True,
        in_record=True,
        required=True,
    ),
    JobField(
        "payload",
        "Any",
        "any JSON value, published verbatim",
        attr="payload_json",
        column="payload",
        envelope=True,
        in_record=True,
        required=True,
    ),
    JobField("delay", "float | None", "seconds from now"),
    JobField("at", _ANY_TIME, "an aware datetime or epoch seconds (JSON: or RFC 3339)"),
    JobField(
        "job_id",
        "str | None",
        "your key; generated when absent",
        column="job_id",
        envelope=True,
        in_record=True,
    ),
    JobField(
        "biz_id",
        "str | None",
        "a business key, for your own lookups",
        check=lambda value, _: check_text("biz_id", value, BIZ_ID_MAX_CHARS),
        recheck=lambda value: check_text("biz_id", value, BIZ_ID_MAX_CHARS),
        column="biz_id",
        envelope=True,
        in_record=True,
        json_schema={"type": "string", "minLength": 1, "maxLength": BIZ_ID_MAX_CHARS},
        text=True,
    ),
    JobField(
        "biz_type",
        "str | None",
        "a business type, for your own lookups",
        check=lambda value, _: check_text("biz_type", value, BIZ_TYPE_MAX_CHARS),
        recheck=lambda value: check_text("biz_type", value, BIZ_TYPE_MAX_CHARS),
        column="biz_type",
        envelope=True,
        in_record=True,
        json_schema={"type": "string", "minLength": 1, "maxLength": BIZ_TYPE_MAX_CHARS},
        text=True,
    ),
    JobField(
        "max_attempts",
        "int | None",
        "publish attempts before the job is dead (default: default_max_attempts)",
        check=_max_attempts_or_default,
        kept_always=True,
        recheck=check_max_attempts,
        column="max_attempts",
        column_type=int,
        envelope=True,
        json_schema={"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        cli_kind="int",
        cli_metavar="N",
    ),
    JobField(
        "expires_after",
        "float | None",
        "seconds after the due time: never published later than that "
        "(the job ends expired instead); at most max_delay_s",
        check=check_expires_after,
        recheck=check_expires_after_ms,
        attr="expires_after_ms",
        column="expires_after_ms",
        column_type=int,
        per_mille=True,
        envelope=True,
        json_schema={"type": "number", "exclusiveMinimum": 0},
        maximum_setting="max_delay_s",
        cli_kind="duration",
        cli_metavar="D",
    ),
    JobField(
        "priority",
        "int | None",
        f"among jobs due at the same millisecond, higher fires first; 0..{PRIORITY_MAX}, default 0",
        check=lambda value, _: check_priority(value),
        kept_always=True,
        recheck=check_priority,
        column="priority",
        column_type=int,
        envelope=True,
        in_record=True,
        json_schema={"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX},
        cli_kind="int",
        cli_metavar="P",
    ),
)

BY_NAME = {job_field.name: job_field for job_field in FIELDS}
OPTIONS: tuple[JobField, ...] = tuple(job_field for job_field in FIELDS if job_field.is_option)
OPTION_NAMES = frozenset(option.name for option in OPTIONS)
JOB_KEYS = frozenset(BY_NAME)
REQUIRED_KEYS = tuple(job_field.name for job_field in FIELDS if job_field.required)


@dataclass(frozen=True)
class Job:
    """One job for schedule_many(); the same fields as schedule()'s arguments (FIELDS)."""

    topic: str
    payload: Any
    delay: float | None = None
    at: dt.datetime | float | None = None
    job_id: str | None = None
    biz_id: str | None = None
    biz_type: str | None = None
    max_attempts: int | None = None
    expires_after: float | None = None
    priority: int | None = None


@dataclass(frozen=True, kw_only=True)
class KeptOptions:
    """A job's options as validated, under their `kept_as` names: the keyword fields of
    ValidJob, JobRecord and a recurring Definition, which inherit them."""

    biz_id: str | None = None
    biz_type: str | None = None
    max_attempts: int
    expires_after_ms: int | None = None  # not published after due_ms + this
    priority: int = 0  # among jobs due at the same ms, higher fires first


class JobOptions(TypedDict, total=False):
    """The optional keywords of schedule(), schedule_in() and schedule_recurring(): the
    declared OPTIONS (tests/unit/test_job_fields.py holds the two equal)."""

    biz_id: str | None
    biz_type: str | None
    max_attempts: int | None
    expires_after: float | None
    priority: int | None


# (name, kept_as, check, kept_always) of each option, in the order declared:
# validate()'s hot loop.
_CHECKS = tuple(
    (option.name, option.kept_as, option.check, option.kept_always) for option in OPTIONS
)


def checked_options(values: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The options among values (absent: None), checked in the order declared, by the
    names ValidJob keeps them under; InvalidJob names the first bad one. An absent
    option is kept as None without a call unless it is kept_always (its check fills in
    the default): most jobs give few options."""
    get = values.get
    checked: dict[str, Any] = {}
    for name, kept_as, check, always in _CHECKS:
        value = get(name)
        checked[kept_as] = check(value, settings) if value is not None or always else None  # type: ignore[misc]
    return checked


def refuse_unknown_options(options: dict[str, Any]) -> None:
    """A keyword no option has: the TypeError Python raises for a bad keyword."""
    if not options.keys() <= OPTION_NAMES:
        unknown = sorted(options.keys() - OPTION_NAMES)[0]
        raise TypeError(f"got an unexpected keyword argument {unknown!r}")


# The options a fired record carries (in_record), by name, with the value kept for a
# job that has none (cluster/model/envelope.py: make_tail).
RECORD_OPTIONS: dict[str, Any] = {
    option.name: option.check(None, Settings())  # type: ignore[misc]
    for option in OPTIONS
    if option.in_record
}
_RECORD_KEPT = tuple((option.name, option.kept_as) for option in OPTIONS if option.in_record)


def record_options(kept: object) -> dict[str, Any]:
    """The record options of a ValidJob or JobRecord, by name (make_tail's options)."""
    return {name: getattr(kept, kept_as) for name, kept_as in _RECORD_KEPT}


def kept_options(kept: object) -> dict[str, Any]:
    """The options of a ValidJob, JobRecord or Definition, by the names they keep them."""
    return {option.kept_as: getattr(kept, option.kept_as) for option in OPTIONS}
