"""The bytes a job carries through Redis, and the fired record built from them.

Stored envelope: b"<seq>|<fields>|<due_ms>|<tail>" (the Lua scripts read the header,
lua/includes/common.lua). <fields> names the job's own fields the scripts need, in header
version 2: b"v=2;a=<max_attempts>", then b";x=<expires_after_ms>" for a job that expires
and b";p=<priority>" for a job with a priority above 0 (contract.EnvelopeField names
them; a field at its default is left out). Version 1, which envelopes stored by earlier
releases carry, packed the same fields into one text: b"5", b"5:60000", b"5p10",
b"5:60000p10". Both are read, here by read_fields and in Lua by envelope_field; writers
make the version the envelope_version setting names (fields_text).

tail: b"<topic>|<key hash>|<key length>|<key><record json>". The record json
is the fired record without due_ms, fired_ms and attempt; the dispatcher appends those
by splicing bytes, so firing a job never parses or re-serialises its payload. The key
hash is Kafka's murmur2 of the key, computed once when the job is scheduled rather than
by the node at every fire: the node picks the partition from it the way Kafka's default
partitioner does, so a key lands where any Kafka producer would put it.

A lean envelope is the header alone, b"<seq>|<fields>|<due_ms>|" (lua/add.lua stores a
job due beyond payload_lead_ms so); its tail is made from the job's MySQL row by
make_tail, exactly as the producer made it, so the record fired is the same bytes.

The tick of a recurring schedule is a job whose id says which schedule and which tick
(cluster/model/tick_ids.py): make_tail reads them from the id into the record's "recurring"
and "tick_ms", so whoever makes the tail, from whichever copy of the job, makes them.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import orjson

from cluster.model.contract import ENVELOPE_VERSIONS, SEQ_DIGITS, EnvelopeField
from cluster.model.job_fields import RECORD_OPTIONS
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


def make_tail(job_id: str, topic: str, payload_json: bytes, **options: object) -> bytes:
    """The tail of a job's envelope; options: its record options (record_options of a
    ValidJob or JobRecord), by name, those absent at their default."""
    biz_id = options.get("biz_id")
    key = (biz_id if isinstance(biz_id, str) else job_id).encode()
    fields: dict[str, object] = {"job_id": job_id, "topic": topic}
    get = options.get
    for name, absent in RECORD_OPTIONS.items():
        fields[name] = get(name, absent)
    if job_id.startswith(RECURRING_PREFIX):
        tick = parse_tick_id(job_id)
        if tick is not None:
            fields["recurring"], _, fields["tick_ms"] = tick
    fields["payload"] = orjson.Fragment(payload_json)
    record = orjson.dumps(fields)
    return b"%s|%d|%d|%s%s" % (topic.encode(), murmur2(key), len(key), key, record)


@dataclass(frozen=True, slots=True)
class EnvelopeFields:
    """The job fields an envelope header carries (contract.EnvelopeField)."""

    max_attempts: int
    expires_after_ms: int | None = None  # None: the job never expires
    priority: int = 0  # higher fires first among jobs due at the same ms


LATEST_VERSION = ENVELOPE_VERSIONS[-1]
_V, _A, _X, _P = (f.value for f in EnvelopeField)  # v, a, x, p


def fields_text(fields: EnvelopeFields, version: int = LATEST_VERSION) -> str:
    """The header's <fields> for a job, in header `version` (envelope_version setting)."""
    if version == 2:
        text = f"{_V}=2;{_A}={fields.max_attempts}"
        if fields.expires_after_ms is not None:
            text += f";{_X}={fields.expires_after_ms}"
        return text + (f";{_P}={fields.priority}" if fields.priority else "")
    if version == 1:
        text = str(fields.max_attempts)
        if fields.expires_after_ms is not None:
            text += f":{fields.expires_after_ms}"
        return text + (f"p{fields.priority}" if fields.priority else "")
    raise ValueError(f"envelope version {version!r} is none of {ENVELOPE_VERSIONS}")


class EnvelopeError(ValueError):
    """An envelope header delayq did not write: refused, never guessed at."""


# Most jobs share a few field texts (b"v=2;a=5"): each is parsed once.
@functools.lru_cache(maxsize=4096)
def read_fields(text: bytes) -> EnvelopeFields:
    """The fields of a header's <fields>, in any version (the one parser of them in
    Python; lua/includes/common.lua's envelope_field is the Lua one)."""
    try:
        if text[:1] == _V.encode():
            named = dict(pair.split(b"=", 1) for pair in text.split(b";"))
            if named.pop(_V.encode()) != b"2" or not named.keys() <= _NAMES:
                raise ValueError(text)
            if not all(value.isdigit() for value in named.values()):
                raise ValueError(text)
            expiry = named.get(_X.encode())
            return EnvelopeFields(
                int(named[_A.encode()]),
                None if expiry is None else int(expiry),
                int(named.get(_P.encode(), 0)),
            )
        attempts, _, priority = text.partition(b"p")
        attempts, colon, expiry = attempts.partition(b":")
        if not all(part.isdigit() for part in (attempts, *([expiry] if colon else []))):
            raise ValueError(text)
        if priority and not priority.isdigit():
            raise ValueError(text)
        return EnvelopeFields(
            int(attempts), int(expiry) if colon else None, int(priority) if priority else 0
        )
    except (ValueError, KeyError):
        raise EnvelopeError(f"not an envelope header's fields: {text[:80]!r}") from None


_NAMES = frozenset(f.value.encode() for f in EnvelopeField) - {_V.encode()}

# Where an envelope's <fields> starts: after the seq and its "|".
_FIELDS_AT = SEQ_DIGITS + 1


def fields_of(envelope: bytes) -> EnvelopeFields:
    """The fields an envelope's header carries."""
    return read_fields(envelope[_FIELDS_AT : envelope.index(b"|", _FIELDS_AT)])


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
    _seq, _fields, due, topic, key_hash, key_len, rest = envelope.split(b"|", 6)
    n = int(key_len)
    value = b'%s,"due_ms":%s,"fired_ms":%d,"attempt":%d}' % (rest[n:-1], due, fired_ms, attempt)
    return Fire(topic.decode(), rest[:n], int(key_hash), value, int(due))


def due_topic_and_fields(envelope: bytes) -> tuple[int, str, EnvelopeFields]:
    """An envelope's due time, topic and fields, without building its record."""
    _seq, fields, due, topic, _rest = envelope.split(b"|", 4)
    return int(due), topic.decode(), read_fields(fields)


def record_of(envelope: bytes) -> dict[str, object]:
    """The record json of an envelope, decoded (for inspection, not the hot path)."""
    _seq, _fields, due, _topic, _hash, key_len, rest = envelope.split(b"|", 6)
    record: dict[str, object] = orjson.loads(rest[int(key_len) :])
    record["due_ms"] = int(due)
    return record
