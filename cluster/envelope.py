"""The bytes a job carries through Redis, and the fired record built from them.

Stored envelope: b"<seq>|<max_attempts>|<due_ms>|<tail>" (the Lua scripts read the
header); tail: b"<topic>|<key length>|<key><record json>". The record json is the
fired record without due_ms, fired_ms and attempt; the dispatcher appends those by
splicing bytes, so firing a job never parses or re-serialises its payload.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson


def make_tail(
    job_id: str, topic: str, biz_id: str | None, biz_type: str | None, payload_json: bytes
) -> bytes:
    key = (biz_id if biz_id is not None else job_id).encode()
    record = orjson.dumps(
        {
            "job_id": job_id,
            "topic": topic,
            "biz_id": biz_id,
            "biz_type": biz_type,
            "payload": orjson.Fragment(payload_json),
        }
    )
    return b"%s|%d|%s%s" % (topic.encode(), len(key), key, record)


@dataclass(frozen=True, slots=True)
class Fire:
    """One Kafka record to publish for a claimed job."""

    topic: str
    key: bytes
    value: bytes
    due_ms: int


def fire_of(envelope: bytes, attempt: int, fired_ms: int) -> Fire:
    _seq, _max_attempts, due, topic, key_len, rest = envelope.split(b"|", 5)
    n = int(key_len)
    value = b'%s,"due_ms":%s,"fired_ms":%d,"attempt":%d}' % (
        rest[n:-1], due, fired_ms, attempt
    )
    return Fire(topic.decode(), rest[:n], value, int(due))


def record_of(envelope: bytes) -> dict[str, object]:
    """The record json of an envelope, decoded (for inspection, not the hot path)."""
    _seq, _max_attempts, due, _topic, key_len, rest = envelope.split(b"|", 5)
    record: dict[str, object] = orjson.loads(rest[int(key_len):])
    record["due_ms"] = int(due)
    return record
