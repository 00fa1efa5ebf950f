"""The bytes a job carries through Redis, and the fired record built from them.

Stored envelope: b"<seq>|<max_attempts>|<due_ms>|<tail>" (the Lua scripts read the
header), where a job with expires_after carries b"<max_attempts>:<expires_after_ms>" in
the second field (attempts_field), so that the envelope of a job without it is the same
bytes as before expiry existed, and a job with a priority above 0 ends that field with
b"p<priority>"; tail: b"<topic>|<key hash>|<key length>|<key><record
json>". The record json
is the fired record without due_ms, fired_ms and attempt; the dispatcher appends those
by splicing bytes, so firing a job never parses or re-serialises its payload. The key
hash is Kafka's murmur2 of the key, computed once when the job is scheduled rather than
by the node at every fire: the node picks the partition from it the way Kafka's default
partitioner does, so a key lands where any Kafka producer would put it.

A lean envelope is the header alone, b"<seq>|<max_attempts>|<due_ms>|" (lua/add.lua
stores a job due beyond payload_lead_ms so); its tail is made from the job's MySQL row
by make_tail, exactly as the producer made it, so the record fired is the same bytes.

The tick of a recurring schedule is a job whose id says which schedule and which tick
(cluster/model/tick_ids.py): make_tail reads them from the id into the record's "recurring"
and "tick_ms", so whoever makes the tail, from whichever copy of the job, makes them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import orjson

from cluster.model.tick_ids import RECURRING_PREFIX, parse_tick_id

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS = [struct.Struct(f"<{n}I") for n in range(64)]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), unsigned."""
    length = len(data)
    h = 0x9747B28C ^ length
    n = length >> 2
    words = _WORDS[n].unpack_from(data) if n < 64 else struct.unpack_from(f"<{n}I", data)
    for k in words:
        k = (k * _M) & _MASK
        k = ((k ^ (k >> 24)) * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest:
        i = n << 2
        if rest == 3:
            h ^= data[i + 2] << 16
        if rest >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * _M) & _MASK
    h = ((h ^ (h >> 13)) * _M) & _MASK
    return h ^ (h >> 15)


def partition_of(key_hash: int, partitions: list[int]) -> int:
    """Kafka's default partitioner for a key with this murmur2 hash."""
    return partitions[(key_hash & 0x7FFFFFFF) % len(partitions)]


def make_tail(
    job_id: str, topic: str, biz_id: str | None, biz_type: str | None, payload_json: bytes
) -> bytes:
    key = (biz_id if biz_id is not None else job_id).encode()
    fields: dict[str, object] = {
        "job_id": job_id,
        "topic": topic,
        "biz_id": biz_id,
        "biz_type": biz_type,
    }
    if job_id.startswith(RECURRING_PREFIX):
        tick = parse_tick_id(job_id)
        if tick is not None:
            fields["recurring"], _, fields["tick_ms"] = tick
    fields["payload"] = orjson.Fragment(payload_json)
    record = orjson.dumps(fields)
    return b"%s|%d|%d|%s%s" % (topic.encode(), murmur2(key), len(key), key, record)


def attempts_field(max_attempts: int, expires_after_ms: int | None, priority: int = 0) -> int | str:
    """The envelope's second field: max_attempts, with ":<expires_after_ms>" appended
    for a job that expires and "p<priority>" for a job with a priority above 0
    (lua/includes/common.lua reads it; its delay score depends on the priority)."""
    if expires_after_ms is None:
        return max_attempts if not priority else f"{max_attempts}p{priority}"
    return f"{max_attempts}:{expires_after_ms}" + (f"p{priority}" if priority else "")


# Where an envelope's second field starts: after the seq (contract.SEQ_DIGITS) and "|".
_FIELD_AT = 13


def has_priority(envelope: bytes) -> bool:
    """Whether an envelope carries a priority above 0 (its second field has a "p")."""
    return envelope.find(b"p", _FIELD_AT, envelope.find(b"|", _FIELD_AT)) >= 0


def priority_of(envelope: bytes) -> int:
    """The priority an envelope carries (attempts_field), 0 when none."""
    end = envelope.find(b"|", _FIELD_AT)
    at = envelope.find(b"p", _FIELD_AT, end)
    return 0 if at < 0 else int(envelope[at + 1 : end])


def is_lean(envelope: bytes) -> bool:
    """Whether an envelope lacks its tail: a full one ends with its record json's "}"."""
    return envelope.endswith(b"|")


def with_tail(envelope: bytes, tail: bytes) -> bytes:
    """A lean envelope made full with the tail of its job (make_tail)."""
    return envelope + tail


@dataclass(frozen=True, slots=True)
class Fire:
    """One Kafka record to publish for a claimed job."""

    topic: str
    key: bytes
    key_hash: int
    value: bytes
    due_ms: int


def fire_of(envelope: bytes, attempt: int, fired_ms: int) -> Fire:
    _seq, _max_attempts, due, topic, key_hash, key_len, rest = envelope.split(b"|", 6)
    n = int(key_len)
    value = b'%s,"due_ms":%s,"fired_ms":%d,"attempt":%d}' % (rest[n:-1], due, fired_ms, attempt)
    return Fire(topic.decode(), rest[:n], int(key_hash), value, int(due))


def due_topic_and_field(envelope: bytes) -> tuple[int, str, bytes]:
    """An envelope's due time, topic and second field (attempts_field: b"p" in it says
    the job has a priority), without building its record."""
    _seq, field, due, topic, _rest = envelope.split(b"|", 4)
    return int(due), topic.decode(), field


def record_of(envelope: bytes) -> dict[str, object]:
    """The record json of an envelope, decoded (for inspection, not the hot path)."""
    _seq, _max_attempts, due, _topic, _hash, key_len, rest = envelope.split(b"|", 6)
    record: dict[str, object] = orjson.loads(rest[int(key_len) :])
    record["due_ms"] = int(due)
    return record
