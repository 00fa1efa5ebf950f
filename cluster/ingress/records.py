"""Kafka records of the ingress topic as jobs: pure functions, no I/O.

    outcome = parse_record(record, settings, now_ms())
    if isinstance(outcome, Accepted):
        ...  # outcome.job is a schedule_many() entry with its job_id set
    else:
        value = error_record(outcome, refused_ms=now_ms())  # for the error topic

A record's value is a JSON object with the fields of a job request (cluster/client/job_json.py):
topic, payload, delay or at, and optionally job_id and the job's options (the fields
cluster/model/job_fields.py declares, JOB_KEYS; any other field is refused). A
record without a job_id (or with "job_id": null) gets one derived from where the record
sits in Kafka (derived_job_id), so the same record read twice, after a crash or a
rebalance, is the same job. docs/ingress.md describes both formats.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from cluster.client.job_json import job_from_json
from cluster.errors import InvalidJob
from cluster.model.jobs import validate_job
from cluster.settings.config import Settings

# Derived ids: this prefix and the first DERIVED_ID_HEX hex digits (128 bits) of the
# SHA-256 of "<topic>:<partition>:<offset>:<timestamp>".
DERIVED_ID_PREFIX = "kafka-"
DERIVED_ID_HEX = 32


class KafkaRecord(Protocol):
    """What the ingress reads of a consumed record (aiokafka's ConsumerRecord has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True)
class Accepted:
    """A record that is a valid job: `job` is its schedule_many() entry, job_id set."""

    record: KafkaRecord
    job: dict[str, Any]

    @property
    def job_id(self) -> str:
        job_id: str = self.job["job_id"]
        return job_id


@dataclass(frozen=True)
class Refused:
    """A record that is not a valid job, and why (an InvalidJob's message, or the
    reason its value could not be read as JSON)."""

    record: KafkaRecord
    reason: str


def derived_job_id(topic: str, partition: int, offset: int, timestamp: int) -> str:
    """The job id of a record that carries none: a function of where it sits in Kafka
    and of its timestamp, which tells apart the records of a topic deleted and made
    again (its offsets start over). A topic name holds no ':', so the text hashed
    names one record only. 38 characters: a valid job_id (cluster.model.jobs.check_job_id)."""
    text = f"{topic}:{partition}:{offset}:{timestamp}".encode()
    return DERIVED_ID_PREFIX + hashlib.sha256(text).hexdigest()[:DERIVED_ID_HEX]


def parse_record(record: KafkaRecord, settings: Settings, now: int) -> Accepted | Refused:
    """The record as a job, validated as schedule_many() validates it (at `now`, epoch
    ms), or the reason it is refused."""
    value = record.value
    if value is None:
        return Refused(record, "the record has no value (a tombstone)")
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return Refused(record, _unreadable(value, exc))
    try:
        job = job_from_json(decoded)
        if job.get("job_id") is None:
            job["job_id"] = derived_job_id(
                record.topic, record.partition, record.offset, record.timestamp
            )
        validate_job(job, settings, now)
    except InvalidJob as exc:
        return Refused(record, str(exc))
    return Accepted(record, job)


def _unreadable(value: bytes, error: orjson.JSONDecodeError) -> str:
    try:
        value.decode()
    except UnicodeDecodeError as exc:
        return f"the value is not UTF-8 text (byte {exc.start}): a job is a JSON object"
    return f"the value is not JSON: {error}"


def _text_or_base64(name: str, data: bytes | None, max_bytes: int) -> dict[str, Any]:
    """{name: text} when data is UTF-8, else {name_base64: ...}; {name: None} for None.
    Data longer than max_bytes is cut to it, and <name>_bytes gives its full length."""
    if data is None:
        return {name: None}
    fields: dict[str, Any] = {}
    cut = data[:max_bytes]
    try:
        data.decode()
    except UnicodeDecodeError:
        fields[f"{name}_base64"] = base64.b64encode(cut).decode()
    else:
        # Cut on a byte boundary: the last character may lose its tail, and goes.
        fields[name] = cut.decode(errors="ignore")
    if len(cut) < len(data):
        fields[f"{name}_truncated"] = True
        fields[f"{name}_bytes"] = len(data)
    return fields


def error_record(refused: Refused, *, refused_ms: int, max_value_bytes: int) -> bytes:
    """The error topic's record for a refused record: the reason, where the record
    came from, its key and value (as text when they are UTF-8, else base64; a value
    over max_value_bytes is cut to it and says so)."""
    record = refused.record
    document: dict[str, Any] = {
        "error": refused.reason,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        **_text_or_base64("key", record.key, max_value_bytes),
        **_text_or_base64("value", record.value, max_value_bytes),
        "refused_ms": refused_ms,
    }
    return orjson.dumps(document)


def max_error_value_bytes(settings: Settings) -> int:
    """How much of a refused record's key and of its value its error record keeps: a
    sixteenth of kafka_max_batch_bytes each, so that both, even written by JSON at six
    bytes a byte (control characters as \\u001f), fit in one produce request."""
    return max(1024, settings.kafka_max_batch_bytes // 16)
