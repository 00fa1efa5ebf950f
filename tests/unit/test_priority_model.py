"""priority in the model: its validation, the envelope field that carries it, the
reading of that field back and the fired record (the Lua side is tested against Redis
in tests/test_priority.py; the envelope's fields in general in test_envelope_fields.py)."""

from __future__ import annotations

import orjson
import pytest

from cluster.errors import InvalidJob
from cluster.model.contract import PRIORITY_MAX, PRIORITY_SCALE
from cluster.model.envelope import (
    EnvelopeFields,
    due_topic_and_fields,
    fields_of,
    fields_text,
    fire_of,
    make_tail,
)
from cluster.model.jobs import Job, check_priority, validate_job
from cluster.settings.config import Settings

TAIL = make_tail("j", "topic.p", b"{}")


def test_a_priority_below_one_ms_keeps_every_due_ms_apart() -> None:
    # The largest priority lowers a score by less than 1 ms, and the scores of adjacent
    # priorities stay exact for due times far beyond today's (doubles: 53 bits).
    assert PRIORITY_MAX / PRIORITY_SCALE < 1
    due = 4_000_000_000_000  # the year 2096
    scores = [due - p / PRIORITY_SCALE for p in range(PRIORITY_MAX + 1)]
    assert len(set(scores)) == PRIORITY_MAX + 1 and scores == sorted(scores, reverse=True)
    assert all(due - 1 < s <= due for s in scores)


@pytest.mark.parametrize(
    ("max_attempts", "expires", "priority", "v2", "v1"),
    [
        (16, None, 0, "v=2;a=16", "16"),
        (16, 500, 0, "v=2;a=16;x=500", "16:500"),
        (16, None, 7, "v=2;a=16;p=7", "16p7"),
        (3, 60_000, PRIORITY_MAX, f"v=2;a=3;x=60000;p={PRIORITY_MAX}", f"3:60000p{PRIORITY_MAX}"),
    ],
)
def test_the_envelope_carries_a_priority_only_when_above_zero(
    max_attempts: int, expires: int | None, priority: int, v2: str, v1: str
) -> None:
    fields = EnvelopeFields(max_attempts, expires, priority)
    assert fields_text(fields) == fields_text(fields, 2) == v2
    assert fields_text(fields, 1) == v1
    for text in (v2, v1):  # the envelopes of both versions read the same
        header = b"%012x|%s|1795000000000|" % (1, text.encode())
        envelope = header + TAIL
        assert fields_of(envelope) == fields
        assert due_topic_and_fields(envelope) == (1795000000000, "topic.p", fields)
        assert fields_of(header) == fields  # a lean envelope (the header alone) too


def test_the_fired_record_carries_the_priority() -> None:
    for priority in (0, 9):
        tail = make_tail("j", "topic.p", b"{}", priority=priority)
        envelope = b"%012x|v=2;a=3|1795000000000|" % 1 + tail
        record = orjson.loads(fire_of(envelope, 1, 1795000000001).value)
        assert record["priority"] == priority


@pytest.mark.parametrize("bad", [-1, PRIORITY_MAX + 1, 2.0, "1", True, None.__class__])
def test_a_bad_priority_is_refused_naming_the_bound(bad: object) -> None:
    with pytest.raises(InvalidJob, match=rf"priority must be an int in 0\.\.{PRIORITY_MAX}"):
        check_priority(bad)
    with pytest.raises(InvalidJob, match="priority"):
        validate_job(Job("t", 1, delay=1, priority=bad), Settings(), 0)  # type: ignore[arg-type]


def test_no_priority_is_zero() -> None:
    assert check_priority(None) == 0
    assert validate_job({"topic": "t", "payload": 1, "delay": 1}, Settings(), 0).priority == 0
    assert validate_job(Job("t", 1, delay=1, priority=PRIORITY_MAX), Settings(), 0).priority == (
        PRIORITY_MAX
    )
