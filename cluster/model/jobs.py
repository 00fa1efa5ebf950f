"""The job a producer schedules, its validation, and the record delayq fires.

Validation happens before anything is written, so bad input changes nothing.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cluster.errors import InvalidJob
from cluster.model.contract import PRIORITY_MAX
from cluster.model.envelope import make_tail
from cluster.model.tick_ids import RECURRING_PREFIX
from cluster.settings.config import Settings

# Kafka's own rule for topic names (used with fullmatch: "$" would accept a final "\n").
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Characters a terminal, log viewer or editor interprets rather than shows: C0 and C1
# controls and DEL, and the bidirectional controls that reorder displayed text (LRM,
# RLM, ALM, the embeddings and overrides U+202A-U+202E, the isolates U+2066-U+2069).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
JOB_ID_MAX_CHARS = 200
BIZ_ID_MAX_CHARS = 200
BIZ_TYPE_MAX_CHARS = 64
MAX_ATTEMPTS_LIMIT = 1000


@dataclass(frozen=True)
class Job:
    """One job for schedule_many(); the same fields as schedule()'s arguments."""

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


@dataclass(frozen=True)
class ValidJob:
    """A job that passed validation, with its due time fixed and its JSON made."""

    job_id: str
    topic: str
    biz_id: str | None
    biz_type: str | None
    due_ms: int
    max_attempts: int
    payload_json: bytes
    expires_after_ms: int | None = None  # not published after due_ms + this
    priority: int = 0  # among jobs due at the same ms, higher fires first

    @property
    def tail(self) -> bytes:
        """What Redis keeps beside the job (cluster/model/envelope.py). Made on demand: a job
        due beyond the horizon goes to MySQL only, and the node makes it from the row."""
        return make_tail(
            self.job_id, self.topic, self.biz_id, self.biz_type, self.payload_json, self.priority
        )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Random hex for new ids, read from the OS a few thousand ids at a time: one
# os.urandom() call per id cost more than the rest of scheduling a job. A forked child
# starts with an empty buffer, so parent and child never hand out the same digits.
_RANDOM_HEX_IDS = 4096
_random_hex = ""
_random_at = 0


def _forget_random_hex() -> None:
    global _random_hex, _random_at
    _random_hex, _random_at = "", 0


os.register_at_fork(after_in_child=_forget_random_hex)


def new_job_id() -> str:
    """A time-ordered id: 12 hex digits of ms then 20 random hex digits."""
    global _random_hex, _random_at
    if _random_at >= len(_random_hex):
        _random_hex, _random_at = os.urandom(10 * _RANDOM_HEX_IDS).hex(), 0
    at = _random_at
    _random_at = at + 20
    return f"{now_ms():012x}{_random_hex[at : at + 20]}"


def _check_chars(name: str, value: str) -> None:
    if _CONTROL.search(value):
        raise InvalidJob(f"{name} must not contain control characters")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidJob(f"{name} is not valid Unicode (a lone surrogate)") from None


def check_job_id(job_id: object) -> str:
    if not isinstance(job_id, str):
        raise InvalidJob(f"job_id must be a str, got {type(job_id).__name__}")
    if not job_id or len(job_id) > JOB_ID_MAX_CHARS:
        raise InvalidJob(f"job_id must be 1..{JOB_ID_MAX_CHARS} characters")
    if job_id[-1] == " ":
        # The job table's collation pads with spaces (PAD SPACE, MariaDB and MySQL), so
        # MySQL would take 'X ' for the row of 'X' while Redis, slots and Kafka do not.
        raise InvalidJob(
            "job_id must not end with a space (MySQL would take it for the id without "
            f"its trailing spaces): {job_id!r}"
        )
    _check_chars("job_id", job_id)
    return job_id


def check_own_job_id(job_id: object) -> str:
    """A job id a producer gives a job it schedules: check_job_id's rules, and not in
    the prefix of recurring schedules' ticks, whose ids delayq derives itself
    (cluster/model/tick_ids.py). Such ids can be read, cancelled and rescheduled like any."""
    checked = check_job_id(job_id)
    if checked.startswith(RECURRING_PREFIX):
        raise InvalidJob(
            f"job_id must not start with {RECURRING_PREFIX!r}: that prefix is kept for the "
            "ticks of recurring schedules (schedule_recurring)"
        )
    return checked


# Topic names already found valid: a batch names a few topics many times over.
_VALID_TOPICS: set[str] = set()
_VALID_TOPICS_MAX = 4096


def check_topic(topic: object) -> str:
    if type(topic) is str and topic in _VALID_TOPICS:
        return topic
    if not isinstance(topic, str):
        raise InvalidJob(f"topic must be a str, got {type(topic).__name__}")
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidJob(
            f"topic {topic!r} is not a valid Kafka topic name "
            "(1..249 of the characters A-Z a-z 0-9 . _ -, not '.' or '..')"
        )
    if type(topic) is str and len(_VALID_TOPICS) < _VALID_TOPICS_MAX:
        _VALID_TOPICS.add(topic)  # not a str subclass, whose hash or equality may differ
    return topic


# Kafka's convention for its own and its tools' topics (__consumer_offsets,
# __transaction_state, __cluster_metadata, ...): never a delayq topic.
KAFKA_INTERNAL_PREFIX = "__"


@functools.lru_cache(maxsize=64)
def _topic_patterns(allowed: str) -> tuple[re.Pattern[str], ...]:
    """The compiled fnmatch patterns of an allowed_topics setting (parsed once)."""
    return tuple(
        re.compile(fnmatch.translate(part.strip())) for part in allowed.split(",") if part.strip()
    )


def topic_allowed(allowed: str, topic: str) -> bool:
    """Whether topic matches a pattern of the allowed_topics setting (empty: any)."""
    return not allowed or any(pattern.match(topic) for pattern in _topic_patterns(allowed))


def own_topics(settings: Settings) -> dict[str, str]:
    """delayq's own topics by the setting that names them: the exactly-once journal, and
    the ingress topic and its error topic when set."""
    return _own_topics(
        settings.kafka_journal_topic, settings.ingress_topic, settings.ingress_error_topic
    )


def _own_topics(journal: str, ingress: str, ingress_errors: str) -> dict[str, str]:
    own = {"kafka_journal_topic": journal, "ingress_topic": ingress}
    if ingress or ingress_errors:
        # The ingress's default error topic (cluster/ingress/startup.py).
        own["ingress_error_topic"] = ingress_errors or f"{ingress}.errors"
    return {name: topic for name, topic in own.items() if topic}


def topic_refusal(topic: str, settings: Settings) -> str | None:
    """Why producers must not schedule to topic (nor nodes publish to it), or None.
    Always refused: Kafka's internal topics (``__*``) and delayq's own (own_topics);
    and, when allowed_topics is set, a topic that matches none of its patterns."""
    return _refusal(
        topic,
        settings.allowed_topics,
        settings.kafka_journal_topic,
        settings.ingress_topic,
        settings.ingress_error_topic,
    )


@functools.lru_cache(maxsize=4096)
def _refusal(
    topic: str, allowed: str, journal: str, ingress: str, ingress_errors: str
) -> str | None:
    if topic.startswith(KAFKA_INTERNAL_PREFIX):
        return (
            f"topic {topic!r} is refused: names starting with {KAFKA_INTERNAL_PREFIX!r} are "
            "Kafka's internal topics"
        )
    for name, own in _own_topics(journal, ingress, ingress_errors).items():
        if topic == own:
            return f"topic {topic!r} is refused: it is delayq's own {name}"
    if not topic_allowed(allowed, topic):
        return f"topic {topic!r} matches none of allowed_topics={allowed!r}"
    return None


def check_allowed_topic(topic: str, settings: Settings) -> str:
    """topic, if producers may schedule to it (topic_refusal)."""
    refusal = topic_refusal(topic, settings)
    if refusal is not None:
        raise InvalidJob(refusal)
    return topic


def _check_text(name: str, value: object, max_chars: int) -> str | None:
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
    _check_chars(name, value)
    return value


def _finite_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise InvalidJob(f"{name} is out of range") from None
    if not math.isfinite(number):
        raise InvalidJob(f"{name} must be finite, got {value!r}")
    return number


def _too_far(settings: Settings) -> InvalidJob:
    return InvalidJob(f"due time is more than max_delay_s={settings.max_delay_s:g} seconds ahead")


def due_ms_of(delay: object, at: object, settings: Settings, now: int | None = None) -> int:
    """Exactly one of delay (seconds from now) or at (aware datetime or epoch seconds)."""
    if (delay is None) == (at is None):
        raise InvalidJob("give exactly one of delay= (seconds) or at= (time)")
    current = now_ms() if now is None else now
    if delay is not None:
        seconds = _finite_number("delay", delay)
        if seconds < 0:
            raise InvalidJob(f"delay must be >= 0 seconds, got {delay!r}")
        if seconds > settings.max_delay_s:
            raise _too_far(settings)  # before multiplying: a huge float would overflow
        due = current + round(seconds * 1000)
    elif isinstance(at, dt.datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidJob("at must be a timezone-aware datetime")
        due = round(at.timestamp() * 1000)
    else:
        seconds = _finite_number("at", at)
        if seconds < 0:
            raise InvalidJob(f"at must be epoch seconds >= 0, got {at!r}")
        if seconds > current / 1000 + settings.max_delay_s:
            raise _too_far(settings)
        due = round(seconds * 1000)
    if due - current > settings.max_delay_s * 1000:
        raise _too_far(settings)
    return max(due, 0)


def check_expires_after(value: object, settings: Settings) -> int | None:
    """expires_after (seconds after the due time, more than 0 and at most max_delay_s)
    in ms, at least 1; None when not given."""
    if value is None:
        return None
    seconds = _finite_number("expires_after", value)
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


def validate(
    *,
    topic: object,
    payload: object,
    delay: object,
    at: object,
    job_id: object,
    biz_id: object,
    biz_type: object,
    max_attempts: object,
    settings: Settings,
    now: int | None = None,
    expires_after: object = None,
    priority: object = None,
) -> ValidJob:
    """Check every argument of one job; raise InvalidJob naming the first bad one."""
    topic = check_allowed_topic(check_topic(topic), settings)
    job_id = new_job_id() if job_id is None else check_own_job_id(job_id)
    biz_id = _check_text("biz_id", biz_id, BIZ_ID_MAX_CHARS)
    biz_type = _check_text("biz_type", biz_type, BIZ_TYPE_MAX_CHARS)
    if max_attempts is None:
        max_attempts = settings.default_max_attempts
    max_attempts = check_max_attempts(max_attempts)
    due = due_ms_of(delay, at, settings, now)
    expires_after_ms = check_expires_after(expires_after, settings)
    checked_priority = 0 if priority is None else check_priority(priority)
    try:
        payload_json = orjson.dumps(payload)
    except TypeError as exc:
        raise InvalidJob(f"payload is not JSON-serialisable: {exc}") from None
    # orjson writes NaN and ±Infinity as null, which would not fire the payload
    # verbatim; JSON has no such numbers, so they are refused (looked for only when
    # the JSON has a null at all, which keeps the common case free).
    if b"null" in payload_json and _has_non_finite(payload):
        raise InvalidJob("payload contains NaN or Infinity, which JSON cannot represent")
    if type(payload) not in _PLAIN_TYPES:
        # An orjson.Fragment anywhere inside is written out unchecked, and could end the
        # payload early and add fields to the fired record. Parsing the JSON once proves
        # it is exactly one JSON value; a str, number, bool or None holds no Fragment.
        try:
            orjson.loads(payload_json)
        except orjson.JSONDecodeError as exc:
            raise InvalidJob(
                f"payload is not exactly one JSON value (an orjson.Fragment in it?): {exc}"
            ) from None
    if len(payload_json) > settings.payload_max_bytes:
        raise InvalidJob(
            f"payload is {len(payload_json)} bytes as JSON, over payload_max_bytes="
            f"{settings.payload_max_bytes}"
        )
    return ValidJob(
        job_id=job_id,
        topic=topic,
        biz_id=biz_id,
        biz_type=biz_type,
        due_ms=due,
        max_attempts=max_attempts,
        payload_json=payload_json,
        expires_after_ms=expires_after_ms,
        priority=checked_priority,
    )


_PLAIN_TYPES = frozenset((str, int, float, bool, type(None)))


def _has_non_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(item) for item in value)
    return False


def validate_job(job: Job | Mapping[str, Any], settings: Settings, now: int) -> ValidJob:
    """Validate one schedule_many() entry: a Job or a mapping with schedule()'s keys."""
    if isinstance(job, Job):
        fields = {
            "topic": job.topic,
            "payload": job.payload,
            "delay": job.delay,
            "at": job.at,
            "job_id": job.job_id,
            "biz_id": job.biz_id,
            "biz_type": job.biz_type,
            "max_attempts": job.max_attempts,
            "expires_after": job.expires_after,
            "priority": job.priority,
        }
    elif isinstance(job, Mapping):
        unknown = set(job) - JOB_KEYS
        if unknown:
            raise InvalidJob(f"unknown job keys: {sorted(unknown)}")
        if "topic" not in job or "payload" not in job:
            raise InvalidJob("each job needs 'topic' and 'payload'")
        fields = {key: job.get(key) for key in JOB_KEYS}
    else:
        raise InvalidJob(f"each job must be a Job or a mapping, got {type(job).__name__}")
    return validate(settings=settings, now=now, **fields)


JOB_KEYS = frozenset(
    (
        "topic",
        "payload",
        "delay",
        "at",
        "job_id",
        "biz_id",
        "biz_type",
        "max_attempts",
        "expires_after",
        "priority",
    )
)
