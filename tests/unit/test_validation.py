"""Input validation: pure logic, no services."""

from __future__ import annotations

import datetime as dt
import math
from types import MappingProxyType

import orjson
import pytest

from cluster.errors import InvalidJob
from cluster.model.jobs import Job, validate, validate_job
from cluster.settings.config import Settings

SETTINGS = Settings(payload_max_bytes=1000, max_delay_s=3600.0)
NOW = 1_800_000_000_000


def ok(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "topic": "orders.close",
        "payload": {"order": 1},
        "delay": 10.0,
        "at": None,
        "job_id": None,
        "biz_id": None,
        "biz_type": None,
        "max_attempts": None,
    }
    fields.update(overrides)
    return fields


def check(**overrides: object) -> object:
    return validate(settings=SETTINGS, now=NOW, **ok(**overrides))


def test_valid_job_gets_due_time_and_defaults() -> None:
    job = check(delay=1.5, biz_id="o-1")
    assert job.due_ms == NOW + 1500  # type: ignore[attr-defined]
    assert job.max_attempts == 16  # type: ignore[attr-defined]
    assert len(job.job_id) == 32  # type: ignore[attr-defined]
    assert job.payload_json == b'{"order":1}'  # type: ignore[attr-defined]


@pytest.mark.parametrize("topic", ["", "a b", "ä", "x" * 250, ".", "..", "a/b", None, 5, b"bytes"])
def test_bad_topics(topic: object) -> None:
    with pytest.raises(InvalidJob, match="topic"):
        check(topic=topic)


@pytest.mark.parametrize("topic", ["a", "A.b-c_d", "x" * 249, "..."])
def test_good_topics(topic: str) -> None:
    check(topic=topic)


@pytest.mark.parametrize(
    ("delay", "at", "message"),
    [
        (None, None, "exactly one"),
        (1.0, 1.0, "exactly one"),
        (math.nan, None, "finite"),
        (math.inf, None, "finite"),
        (-1.0, None, ">= 0"),
        ("10", None, "number"),
        (True, None, "number"),
        (3601.0, None, "max_delay_s"),
        (None, dt.datetime(2030, 1, 1), "timezone-aware"),
        (None, -5, "epoch seconds"),
        (None, math.nan, "finite"),
        (None, "tomorrow", "number"),
        (None, NOW / 1000 + 7200, "max_delay_s"),
        (1e306, None, "max_delay_s"),
        (None, 1e306, "max_delay_s"),
        (10**400, None, "out of range"),
        (None, 10**400, "out of range"),
        (None, -(10**400), "out of range"),
    ],
)
def test_bad_times(delay: object, at: object, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        check(delay=delay, at=at)


def test_at_forms_agree() -> None:
    aware = dt.datetime.fromtimestamp(NOW / 1000 + 60, dt.UTC)
    by_datetime = check(delay=None, at=aware)
    by_epoch = check(delay=None, at=NOW / 1000 + 60)
    assert by_datetime.due_ms == by_epoch.due_ms == NOW + 60_000  # type: ignore[attr-defined]


def test_past_due_time_is_accepted() -> None:
    assert check(delay=None, at=(NOW - 5000) / 1000).due_ms == NOW - 5000  # type: ignore


def test_payload_limits() -> None:
    with pytest.raises(InvalidJob, match="payload_max_bytes"):
        check(payload="x" * 1000)
    with pytest.raises(InvalidJob, match="JSON-serialisable"):
        check(payload={"when": object()})
    with pytest.raises(InvalidJob, match="JSON-serialisable"):
        check(payload={1: "non-string key"})


@pytest.mark.parametrize(
    "payload", [math.nan, {"x": math.inf}, [1, {"y": [-math.inf]}], (None, math.nan)]
)
def test_payload_with_nan_or_infinity_is_refused(payload: object) -> None:
    with pytest.raises(InvalidJob, match="NaN or Infinity"):
        check(payload=payload)


def test_payload_with_null_is_kept() -> None:
    assert check(payload={"a": None, "b": [None, 1.5]}).payload_json == (  # type: ignore
        b'{"a":null,"b":[null,1.5]}'
    )


def test_payload_is_kept_verbatim() -> None:
    payload = {
        "s": "'; DROP TABLE job_0000; --",
        "lua": "redis.call('FLUSHALL')",
        "u": "日本語 ✓",
        "n": [1, 2.5, None, True],
    }
    job = check(payload=payload)
    assert orjson.loads(job.payload_json) == payload  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("job_id", "", "job_id"),
        ("job_id", "x" * 201, "job_id"),
        ("job_id", "a\nb", "control"),
        ("job_id", 42, "job_id must be a str"),
        ("job_id", "a\ud800b", "lone surrogate"),
        ("biz_id", "\udfff", "lone surrogate"),
        ("biz_type", "t\ud83d", "lone surrogate"),
        ("biz_id", 42, "biz_id must be a str"),
        ("biz_id", "", "biz_id"),
        ("biz_type", "t" * 65, "biz_type"),
        ("max_attempts", 0, "max_attempts"),
        ("max_attempts", 1001, "max_attempts"),
        ("max_attempts", 2.0, "max_attempts"),
        ("max_attempts", True, "max_attempts"),
    ],
)
def test_bad_fields(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        check(**{field: value})


def test_unicode_and_long_ids_are_accepted() -> None:
    job = check(job_id="订单-" + "x" * 197, biz_id="'; SELECT 1; --")
    assert len(job.job_id) == 200  # type: ignore[attr-defined]


def test_schedule_many_entries() -> None:
    validate_job(Job("t", 1, delay=1), SETTINGS, NOW)
    validate_job({"topic": "t", "payload": 1, "delay": 1}, SETTINGS, NOW)
    validate_job(MappingProxyType({"topic": "t", "payload": 1, "delay": 1}), SETTINGS, NOW)
    with pytest.raises(InvalidJob, match="unknown job keys"):
        validate_job({"topic": "t", "payload": 1, "delay": 1, "color": "red"}, SETTINGS, NOW)
    with pytest.raises(InvalidJob, match="needs 'topic' and 'payload'"):
        validate_job({"topic": "t", "delay": 1}, SETTINGS, NOW)
    with pytest.raises(InvalidJob, match="Job or a mapping"):
        validate_job(["t", 1], SETTINGS, NOW)  # type: ignore[arg-type]


# ----- the hardening issue's input defects ----------------------------------------------


@pytest.mark.parametrize("job_id", ["X ", "X   ", " ", "订单 "])
def test_job_id_ending_with_a_space_is_refused(job_id: str) -> None:
    # MySQL's PAD SPACE collation would make 'X ' the same row as 'X' (docs/client.md).
    with pytest.raises(InvalidJob, match="job_id must not end with a space"):
        check(job_id=job_id)


def test_inner_and_leading_spaces_are_accepted() -> None:
    assert check(job_id=" a b").job_id == " a b"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "payload",
    [
        orjson.Fragment(b'1,"job_id":"spoof"'),  # would add a field to the fired record
        orjson.Fragment(b""),
        orjson.Fragment(b"{"),
        orjson.Fragment(b"1 2"),
        orjson.Fragment(b"nul"),
        {"a": orjson.Fragment(b'1},"job_id":"spoof","p":{"b":2')},  # breaks out of its dict
        {"a": orjson.Fragment(b"{")},
        [1, {"deep": [orjson.Fragment(b"1]]")]}],
    ],
)
def test_fragment_payloads_that_are_not_one_json_value_are_refused(payload: object) -> None:
    with pytest.raises(InvalidJob, match="payload is not exactly one JSON value"):
        check(payload=payload)


def test_fragment_payload_that_is_one_json_value_is_kept() -> None:
    job = check(payload={"a": orjson.Fragment(b'{"b":[1,2]}')})
    assert job.payload_json == b'{"a":{"b":[1,2]}}'  # type: ignore[attr-defined]


@pytest.mark.parametrize("topic", ["orders\n", "x" * 249 + "\n", "a\n"])
def test_topic_with_a_final_newline_is_refused(topic: str) -> None:
    with pytest.raises(InvalidJob, match="topic"):
        check(topic=topic)


CONTROLS = [
    "\x80",
    "\x85",
    "\x9b",
    "\x9f",
    "\x7f",
    "\u200e",
    "\u200f",
    "\u202a",
    "\u202e",
    "\u2066",
    "\u2069",
    "\u061c",
]


@pytest.mark.parametrize("field", ["job_id", "biz_id", "biz_type"])
@pytest.mark.parametrize("char", CONTROLS)
def test_c1_and_bidi_controls_are_refused(field: str, char: str) -> None:
    with pytest.raises(InvalidJob, match=f"{field} must not contain control characters"):
        check(**{field: f"a{char}b"})


def test_printable_unicode_next_to_controls_is_accepted() -> None:
    check(job_id="é-ß-Ａ-\u00a0x", biz_id="日本語", biz_type="ø")


def test_allowed_topics_refuses_a_topic_matching_no_pattern() -> None:
    settings = SETTINGS.replace(allowed_topics="orders.*, reminders")
    for topic in ("orders.close", "reminders"):
        validate(settings=settings, now=NOW, **ok(topic=topic))
    for topic in ("payments", "orders", "reminders.x"):
        with pytest.raises(InvalidJob, match="allowed_topics"):
            validate(settings=settings, now=NOW, **ok(topic=topic))
    with pytest.raises(InvalidJob, match=r"topic 'payments' matches none of allowed_topics"):
        validate_job({"topic": "payments", "payload": 1, "delay": 1}, settings, NOW)


def test_allowed_topics_empty_allows_any_valid_topic() -> None:
    assert SETTINGS.allowed_topics == ""
    check(topic="anything.at-all")


def test_payload_max_bytes_must_fit_a_record_of_kafka_max_batch_bytes() -> None:
    from cluster.errors import ConfigError
    from cluster.settings.config import RECORD_OVERHEAD_BYTES

    Settings(kafka_max_batch_bytes=100_000, payload_max_bytes=100_000 - RECORD_OVERHEAD_BYTES)
    with pytest.raises(ConfigError, match=r"payload_max_bytes .* kafka_max_batch_bytes"):
        Settings(kafka_max_batch_bytes=100_000, payload_max_bytes=100_000)
    with pytest.raises(ConfigError, match="payload_max_bytes"):
        Settings(payload_max_bytes=2 << 20)  # over the default 1 MiB record


@pytest.mark.parametrize("allowed", [",", "orders.*,,x", " , "])
def test_allowed_topics_with_an_empty_pattern_is_refused(allowed: str) -> None:
    from cluster.errors import ConfigError

    with pytest.raises(ConfigError, match="allowed_topics"):
        Settings(allowed_topics=allowed)


@pytest.mark.parametrize("field", ["biz_id", "biz_type"])
@pytest.mark.parametrize("value", ["tenant-1 ", " tenant-1", "tenant-1\t", " ", "\u3000x"])
def test_biz_fields_with_surrounding_whitespace_are_refused(field: str, value: str) -> None:
    # PAD SPACE: 'tenant-1 ' would match 'tenant-1' in a search or a bulk cancel.
    with pytest.raises(InvalidJob, match=f"{field} must not start or end with whitespace"):
        check(**{field: value})


@pytest.mark.parametrize("field", ["biz_id", "biz_type"])
def test_biz_fields_with_inner_spaces_are_accepted(field: str) -> None:
    assert getattr(check(**{field: "a b"}), field) == "a b"


def test_a_search_filter_with_surrounding_whitespace_is_refused() -> None:
    from cluster.store.search import make_search

    with pytest.raises(InvalidJob, match="biz_id must not start or end with whitespace"):
        make_search(biz_id="tenant-1 ")
    assert make_search(biz_id="tenant-1").biz_id == "tenant-1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"priority": 60000}, "priority must be an int"),
        ({"priority": -1}, "priority must be an int"),
        ({"max_attempts": 0}, "max_attempts must be an int"),
        ({"max_attempts": 10**6}, "max_attempts must be an int"),
        ({"job_id": "X "}, "job_id must not end with a space"),
        ({"due_ms": -5}, "due_ms must be an int"),
        ({"expires_after_ms": 0}, "expires_after_ms must be an int"),
        ({"biz_id": " b"}, "biz_id must not start or end with whitespace"),
    ],
)
def test_a_valid_job_made_elsewhere_is_checked_again(
    change: dict[str, object], message: str
) -> None:
    import dataclasses

    from cluster.model.job_bounds import check_valid_job

    good = check()
    assert check_valid_job(good) is good  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match=message):
        check_valid_job(dataclasses.replace(good, **change))  # type: ignore[type-var]
