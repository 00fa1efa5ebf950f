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
from cluster.model.envelope import make_tail
from cluster.model.job_fields import (
    BIZ_ID_MAX_CHARS as BIZ_ID_MAX_CHARS,
)
from cluster.model.job_fields import (
    BIZ_TYPE_MAX_CHARS as BIZ_TYPE_MAX_CHARS,
)
from cluster.model.job_fields import (
    JOB_ID_MAX_CHARS as JOB_ID_MAX_CHARS,
)
from cluster.model.job_fields import (
    JOB_KEYS as JOB_KEYS,
)
from cluster.model.job_fields import (
    MAX_ATTEMPTS_LIMIT as MAX_ATTEMPTS_LIMIT,
)
from cluster.model.job_fields import (
    REQUIRED_KEYS,
    KeptOptions,
    check_chars,
    checked_options,
    finite_number,
    record_options,
    refuse_unknown_options,
)
from cluster.model.job_fields import (
    Job as Job,
)
from cluster.model.job_fields import (
    JobOptions as JobOptions,
)
from cluster.model.job_fields import (
    check_expires_after as check_expires_after,
)
from cluster.model.job_fields import (
    check_max_attempts as check_max_attempts,
)
from cluster.model.job_fields import (
    check_priority as check_priority,
)
from cluster.model.tick_ids import RECURRING_PREFIX
from cluster.settings.config import Settings

# Kafka's own rule for topic names (used with fullmatch: "$" would accept a final "\n").
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class ValidJob(KeptOptions):
    """A job that passed validation, with its due time fixed and its JSON made; its
    options (biz_id, max_attempts, priority, ...) are keyword fields of KeptOptions."""

    job_id: str
    topic: str
    due_ms: int
    payload_json: bytes

    @property
    def tail(self) -> bytes:
        """What Redis keeps beside the job (cluster/model/envelope.py). Made on demand: a job
        due beyond the horizon goes to MySQL only, and the node makes it from the row."""
        return make_tail(self.job_id, self.topic, self.payload_json, **record_options(self))


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
    check_chars("job_id", job_id)
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


def _too_far(settings: Settings) -> InvalidJob:
    return InvalidJob(f"due time is more than max_delay_s={settings.max_delay_s:g} seconds ahead")


def due_ms_of(delay: object, at: object, settings: Settings, now: int | None = None) -> int:
    """Exactly one of delay (seconds from now) or at (aware datetime or epoch seconds)."""
    if (delay is None) == (at is None):
        raise InvalidJob("give exactly one of delay= (seconds) or at= (time)")
    current = now_ms() if now is None else now
    if delay is not None:
        seconds = finite_number("delay", delay)
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
        seconds = finite_number("at", at)
        if seconds < 0:
            raise InvalidJob(f"at must be epoch seconds >= 0, got {at!r}")
        if seconds > current / 1000 + settings.max_delay_s:
            raise _too_far(settings)
        due = round(seconds * 1000)
    if due - current > settings.max_delay_s * 1000:
        raise _too_far(settings)
    return max(due, 0)


def validate(
    *,
    topic: object,
    payload: object,
    delay: object = None,
    at: object = None,
    job_id: object = None,
    settings: Settings,
    now: int | None = None,
    **options: object,
) -> ValidJob:
    """Check every argument of one job; raise InvalidJob naming the first bad one.
    options: the job's optional fields (cluster/model/job_fields.py OPTIONS), each
    None or absent when not given."""
    refuse_unknown_options(options)
    topic = check_allowed_topic(check_topic(topic), settings)
    job_id = new_job_id() if job_id is None else check_own_job_id(job_id)
    checked = checked_options(options, settings)
    due = due_ms_of(delay, at, settings, now)
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
    return ValidJob(job_id=job_id, topic=topic, due_ms=due, payload_json=payload_json, **checked)


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
        fields = job.__dict__  # exactly JOB_KEYS (tests/unit/test_job_fields.py)
    elif isinstance(job, Mapping):
        unknown = set(job) - JOB_KEYS
        if unknown:
            raise InvalidJob(f"unknown job keys: {sorted(unknown)}")
        if any(key not in job for key in REQUIRED_KEYS):
            raise InvalidJob("each job needs 'topic' and 'payload'")
        fields = {key: job.get(key) for key in JOB_KEYS}
    else:
        raise InvalidJob(f"each job must be a Job or a mapping, got {type(job).__name__}")
    return validate(settings=settings, now=now, **fields)
