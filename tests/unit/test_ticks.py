"""When recurring schedules tick (cluster/model/ticks.py), how their definitions are checked
(cluster/client/recurring.py) and how a tick's job id and record look (cluster/model/tick_ids.py,
cluster/model/envelope.py): pure unit tests, no services."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest

from cluster.client.recurring import validate_recurring
from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.envelope import fire_of, make_tail
from cluster.model.jobs import Job, check_own_job_id, validate_job
from cluster.model.tick_ids import parse_tick_id, tick_job_id
from cluster.model.ticks import MISSED_COUNT_LIMIT, Cadence, Missed, plan
from cluster.settings.config import Settings
from cluster.store.rows import JobRecord

BERLIN = ZoneInfo("Europe/Berlin")
SETTINGS = Settings()


def berlin(*args: int) -> int:
    """Epoch ms of a wall time in Berlin (the first one, where it occurs twice)."""
    return round(dt.datetime(*args, tzinfo=BERLIN).timestamp() * 1000)


def utc(*args: int) -> int:
    return round(dt.datetime(*args, tzinfo=dt.UTC).timestamp() * 1000)


def walls(ticks: list[int], zone: ZoneInfo = BERLIN) -> list[str]:
    """Ticks as local ISO times with their offset: 2026-03-29T03:00:00+02:00."""
    return [dt.datetime.fromtimestamp(t / 1000, zone).isoformat() for t in ticks]


def ticks_from(cadence: Cadence, start_ms: int, count: int) -> list[int]:
    found: list[int] = []
    tick = cadence.first_at_or_after(start_ms)
    while tick is not None and len(found) < count:
        found.append(tick)
        tick = cadence.next_after(tick)
    return found


def ticks_back(cadence: Cadence, before_ms: int, count: int) -> list[int]:
    found: list[int] = []
    tick = cadence.last_before(before_ms)
    while tick is not None and len(found) < count:
        found.append(tick)
        tick = cadence.last_before(tick)
    return found[::-1]


DAILY_0230 = Cadence(cron="30 2 * * *", every_ms=None, tz="Europe/Berlin")

# 2026: clocks go forward on 29 March (02:00 → 03:00) and back on 25 October (03:00 → 02:00).
SPRING = [
    "2026-03-27T02:30:00+01:00",
    "2026-03-28T02:30:00+01:00",
    "2026-03-29T03:00:00+02:00",  # 02:30 does not exist: at the jump, once
    "2026-03-30T02:30:00+02:00",
    "2026-03-31T02:30:00+02:00",
]
AUTUMN = [
    "2026-10-23T02:30:00+02:00",
    "2026-10-24T02:30:00+02:00",
    "2026-10-25T02:30:00+02:00",  # 02:30 occurs twice: the first one only
    "2026-10-26T02:30:00+01:00",
    "2026-10-27T02:30:00+01:00",
]


def test_daily_0230_berlin_across_spring_forward() -> None:
    ticks = ticks_from(DAILY_0230, berlin(2026, 3, 26, 12), 5)
    assert walls(ticks) == SPRING
    # The same ticks walking backwards, and one day apart in real time but the short day.
    assert ticks_back(DAILY_0230, berlin(2026, 3, 31, 12), 5) == ticks
    gaps_h = [(b - a) / 3_600_000 for a, b in itertools.pairwise(ticks)]
    assert gaps_h == [24, 23.5, 23.5, 24]


def test_daily_0230_berlin_across_fall_back() -> None:
    ticks = ticks_from(DAILY_0230, berlin(2026, 10, 22, 12), 5)
    assert walls(ticks) == AUTUMN
    assert ticks_back(DAILY_0230, berlin(2026, 10, 27, 12), 5) == ticks
    gaps_h = [(b - a) / 3_600_000 for a, b in itertools.pairwise(ticks)]
    assert gaps_h == [24, 24, 25, 24]


def test_a_daily_tick_fires_once_however_often_it_is_asked_for() -> None:
    """Starting the search anywhere before the tick on the days of the changes finds
    the same tick (02:00 on 29 March is the instant of the jump, 03:00 CEST)."""
    for month, day, expected in ((3, 29, SPRING[2]), (10, 25, AUTUMN[2])):
        for hour, minute in ((0, 0), (1, 59), (2, 0)):
            tick = DAILY_0230.first_at_or_after(berlin(2026, month, day, hour, minute))
            assert tick is not None and walls([tick]) == [expected]
    assert DAILY_0230.first_at_or_after(berlin(2026, 10, 25, 2, 30)) == berlin(2026, 10, 25, 2, 30)
    # Right after the first 02:30 of 25 October: the next tick is the next day's.
    after = DAILY_0230.next_after(berlin(2026, 10, 25, 2, 30))
    assert after is not None and walls([after]) == [AUTUMN[3]]


def test_wildcard_schedules_tick_through_both_passes_of_the_repeated_hour() -> None:
    every_30 = Cadence(cron="*/30 * * * *", every_ms=None, tz="Europe/Berlin")
    ticks = ticks_from(every_30, berlin(2026, 10, 25, 1, 45), 5)
    assert walls(ticks) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    # ... and have no tick in the hour that does not exist.
    hourly = Cadence(cron="15 * * * *", every_ms=None, tz="Europe/Berlin")
    assert walls(ticks_from(hourly, berlin(2026, 3, 29, 0, 20), 3)) == [
        "2026-03-29T01:15:00+01:00",
        "2026-03-29T03:15:00+02:00",
        "2026-03-29T04:15:00+02:00",
    ]


def test_weekdays_at_nine_in_a_zone() -> None:
    cadence = Cadence(cron="0 9 * * 1-5", every_ms=None, tz="America/New_York")
    # Friday 2026-03-06 10:00 New York: next are Monday and Tuesday, 09:00 local, and
    # the US changes its clocks on Sunday 8 March.
    zone = ZoneInfo("America/New_York")
    start = round(dt.datetime(2026, 3, 6, 10, tzinfo=zone).timestamp() * 1000)
    assert walls(ticks_from(cadence, start, 2), zone) == [
        "2026-03-09T09:00:00-04:00",
        "2026-03-10T09:00:00-04:00",
    ]


def test_utc_is_the_default_zone() -> None:
    cadence = Cadence(cron="0 12 * * *", every_ms=None)
    assert cadence.first_at_or_after(utc(2026, 6, 1, 12, 0, 1)) == utc(2026, 6, 2, 12)
    assert cadence.first_at_or_after(utc(2026, 6, 1, 12)) == utc(2026, 6, 1, 12)
    assert cadence.last_before(utc(2026, 6, 1, 12)) == utc(2026, 5, 31, 12)


def test_every_is_aligned_to_the_epoch_or_to_start() -> None:
    five_min = Cadence(cron=None, every_ms=300_000)
    assert five_min.first_at_or_after(utc(2026, 1, 1, 10, 2, 3)) == utc(2026, 1, 1, 10, 5)
    assert five_min.first_at_or_after(utc(2026, 1, 1, 10, 5)) == utc(2026, 1, 1, 10, 5)
    assert five_min.last_before(utc(2026, 1, 1, 10, 5)) == utc(2026, 1, 1, 10, 0)
    start = utc(2026, 1, 1, 10, 1, 30)
    placed = Cadence(cron=None, every_ms=300_000, start_ms=start)
    assert placed.first_at_or_after(0) == start
    assert placed.first_at_or_after(start + 1) == start + 300_000
    assert placed.last_before(start) is None
    assert placed.last_before(start + 1) == start


def test_start_and_end_bound_the_ticks() -> None:
    cadence = Cadence(cron=None, every_ms=1000, start_ms=10_000, end_ms=13_000)
    assert ticks_from(cadence, 0, 10) == [10_000, 11_000, 12_000]
    assert cadence.first_at_or_after(12_001) is None
    assert cadence.last_before(100_000) == 12_000
    cron = Cadence(
        cron="0 * * * *", every_ms=None, start_ms=utc(2026, 1, 1, 1), end_ms=utc(2026, 1, 1, 3)
    )
    assert ticks_from(cron, 0, 10) == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)]
    assert cron.last_before(utc(2026, 1, 1, 1)) is None


def test_count_between() -> None:
    every = Cadence(cron=None, every_ms=1000)
    assert every.count_between(1000, 5000, 100) == 4
    assert every.count_between(1001, 5000, 100) == 3
    assert every.count_between(1000, 5000, 2) == 2
    hourly = Cadence(cron="0 * * * *", every_ms=None)
    assert hourly.count_between(utc(2026, 1, 1), utc(2026, 1, 2), 100) == 24


# ----- which ticks a round makes into jobs ------------------------------------------------

EVERY_S = Cadence(cron=None, every_ms=1000)


def test_a_round_makes_the_ticks_within_the_lookahead() -> None:
    made = plan(EVERY_S, 10_000, now_ms=9_000, until_ms=13_000, missed=Missed.FIRE_ONCE)
    assert (made.ticks, made.cursor, made.missed, made.missed_from) == (
        [10_000, 11_000, 12_000],
        13_000,
        0,
        None,
    )
    # Nothing due yet within it: nothing made, the cursor stays.
    later = plan(EVERY_S, 20_000, now_ms=9_000, until_ms=13_000, missed=Missed.SKIP)
    assert (later.ticks, later.cursor) == ([], 20_000)


def test_missed_ticks_fire_once() -> None:
    """An hour without any node: the last missed tick fires, once, then the schedule
    goes on; the 3,599 others never fire (counted up to MISSED_COUNT_LIMIT)."""
    hour = 3_600_000
    made = plan(EVERY_S, 1_000, now_ms=1_000 + hour + 500, until_ms=1_000 + hour + 3_000,
                missed=Missed.FIRE_ONCE)  # fmt: skip
    assert made.ticks == [hour + 1_000, hour + 2_000, hour + 3_000]
    assert made.cursor == hour + 4_000
    assert (made.missed, made.missed_all_counted) == (MISSED_COUNT_LIMIT - 1, False)
    assert (made.missed_from, made.missed_until) == (1_000, 1_000 + hour + 500)


def test_missed_ticks_skipped() -> None:
    hour = 3_600_000
    made = plan(EVERY_S, 1_000, now_ms=1_000 + hour + 500, until_ms=1_000 + hour + 3_000,
                missed=Missed.SKIP)  # fmt: skip
    assert made.ticks == [hour + 2_000, hour + 3_000]
    assert made.missed == MISSED_COUNT_LIMIT
    few = plan(EVERY_S, 1_000, now_ms=5_500, until_ms=8_000, missed=Missed.SKIP)
    assert (few.ticks, few.missed, few.missed_all_counted) == ([6_000, 7_000], 5, True)
    once = plan(EVERY_S, 1_000, now_ms=5_500, until_ms=8_000, missed=Missed.FIRE_ONCE)
    assert (once.ticks, once.missed, once.missed_all_counted) == ([5_000, 6_000, 7_000], 4, True)


def test_missed_daily_cron_fires_the_last_missed_day_only() -> None:
    made = plan(
        DAILY_0230,
        berlin(2026, 3, 27, 2, 30),  # not made since then
        now_ms=berlin(2026, 3, 31, 12),
        until_ms=berlin(2026, 3, 31, 12, 1),
        missed=Missed.FIRE_ONCE,
    )
    assert walls(made.ticks) == [SPRING[4]]
    assert made.missed == 4
    assert made.cursor == berlin(2026, 4, 1, 2, 30)


def test_a_round_is_bounded() -> None:
    made = plan(EVERY_S, 0, now_ms=0, until_ms=10**9, missed=Missed.SKIP, limit=5)
    assert made.ticks == [0, 1000, 2000, 3000, 4000] and made.cursor == 5000


def test_the_end_stops_a_schedule() -> None:
    ending = Cadence(cron=None, every_ms=1000, end_ms=3_000)
    made = plan(ending, 1_000, now_ms=0, until_ms=10_000, missed=Missed.SKIP)
    assert (made.ticks, made.cursor) == ([1_000, 2_000], None)


# ----- tick ids and records ---------------------------------------------------------------


def test_tick_ids_round_trip() -> None:
    job_id = tick_job_id("reports:daily.eu", 3, 1_795_000_000_000)
    assert job_id == "@recurring:reports:daily.eu:3:1795000000000"
    assert parse_tick_id(job_id) == ("reports:daily.eu", 3, 1_795_000_000_000)
    for other in (
        "order-42",
        "@recurring:x",
        "@recurring::1:2",
        "@recurring:a:b:c",
        "recurring:a:1:2",
    ):
        assert parse_tick_id(other) is None


def test_the_fired_record_of_a_tick_names_its_schedule_and_tick() -> None:
    job_id = tick_job_id("hourly", 1, 1_795_000_000_000)
    tail = make_tail(job_id, "reports", b'{"r":1}')
    fired = fire_of(b"000000000001|16|1795000000000|" + tail, 1, 1_795_000_000_004)
    assert orjson.loads(fired.value) == {
        "job_id": job_id,
        "topic": "reports",
        "biz_id": None,
        "biz_type": None,
        "priority": 0,
        "recurring": "hourly",
        "tick_ms": 1_795_000_000_000,
        "payload": {"r": 1},
        "due_ms": 1_795_000_000_000,
        "fired_ms": 1_795_000_000_004,
        "attempt": 1,
    }
    # A lean envelope's tail comes from the MySQL row: the same bytes, the same fields.
    row = JobRecord(
        job_id=job_id, topic="reports", biz_id=None, biz_type=None, status=JobStatus.PENDING,
        due_ms=1_795_000_000_000, attempts=0, max_attempts=16, payload_json='{"r":1}',
        slot=0, last_error=None, created_ms=0, modified_ms=0,
    )  # fmt: skip
    assert row.tail == tail
    assert (row.recurring, row.tick_ms) == ("hourly", 1_795_000_000_000)
    # Any other job's record is as before.
    plain = orjson.loads(
        fire_of(b"000000000001|16|5|" + make_tail("j", "t", b"1", biz_id="b"), 1, 6).value
    )
    assert set(plain) == {
        "job_id",
        "topic",
        "biz_id",
        "biz_type",
        "priority",
        "payload",
        "due_ms",
        "fired_ms",
        "attempt",
    }


def test_producers_cannot_take_the_ticks_prefix() -> None:
    with pytest.raises(InvalidJob, match="kept for the ticks of recurring schedules"):
        check_own_job_id("@recurring:mine:1:1")
    with pytest.raises(InvalidJob, match="kept for the ticks"):
        validate_job(Job("t", 1, delay=1, job_id="@recurring:x:1:2"), SETTINGS, 0)
    assert check_own_job_id("recurring:x") == "recurring:x"


# ----- checking definitions -------------------------------------------------------------

GOOD: dict[str, Any] = {
    "name": "report",
    "topic": "reports",
    "payload": {"r": 1},
    "cron": None,
    "every": 60,
    "tz": None,
    "start_at": None,
    "end_at": None,
    "biz_id": None,
    "biz_type": None,
    "max_attempts": None,
    "missed": "fire_once",
}
NOW = utc(2026, 6, 1)


def check(**changes: Any) -> Any:
    return validate_recurring(**{**GOOD, **changes}, settings=SETTINGS, now=NOW)


def test_a_good_definition() -> None:
    definition = check()
    assert definition.cadence == Cadence(cron=None, every_ms=60_000)
    assert definition.payload_json == b'{"r":1}' and definition.max_attempts == 16
    cron = check(every=None, cron="0  9 * * 1-5", tz="Europe/Berlin", missed="skip")
    assert cron.cadence.cron == "0 9 * * 1-5" and cron.missed is Missed.SKIP
    assert check(every=dt.timedelta(minutes=5)).cadence.every_ms == 300_000
    assert check(every=1.5).cadence.every_ms == 1500


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"every": None}, "exactly one of cron= .* or every="),
        ({"cron": "* * * * *"}, "exactly one of cron="),
        ({"every": None, "cron": "* * * *"}, "must have 5 fields"),
        ({"every": None, "cron": "0 0 * * * *"}, "must have 5 fields"),
        ({"every": None, "cron": "61 * * * *"}, "not a valid cron expression"),
        ({"every": None, "cron": "a b c d e"}, "not a valid cron expression"),
        ({"every": None, "cron": 5}, "cron must be a str"),
        ({"every": None, "cron": "0 0 30 2 *"}, "no tick from now on"),
        ({"every": None, "cron": "* * * * *", "tz": "Mars/Olympus"}, "not an IANA time zone"),
        ({"every": None, "cron": "* * * * *", "tz": "../../etc/passwd"}, "not an IANA"),
        ({"every": None, "cron": "* * * * *", "tz": ""}, "not an IANA"),
        ({"every": None, "cron": "* * * * *", "tz": 1}, "tz must be an IANA"),
        ({"tz": "Europe/Berlin"}, "tz applies to cron= only"),
        ({"every": 0}, "at least 1 s"),
        ({"every": -5}, "at least 1 s"),
        ({"every": 0.5}, "at least 1 s"),
        ({"every": dt.timedelta(milliseconds=999)}, "at least 1 s"),
        ({"every": float("nan")}, "finite"),
        ({"every": float("inf")}, "finite"),
        ({"every": True}, "every must be seconds"),
        ({"every": "60"}, "every must be seconds"),
        ({"every": 10**12}, "at most max_delay_s"),
        ({"start_at": NOW / 1000 + 100, "end_at": NOW / 1000 + 100}, "end_at must be after"),
        ({"start_at": NOW / 1000 + 100, "end_at": NOW / 1000 + 50}, "end_at must be after"),
        ({"end_at": NOW / 1000 - 1}, "no tick from now on"),
        ({"start_at": dt.datetime(2026, 7, 1)}, "timezone-aware"),
        ({"start_at": -1}, "between 1970 and 9999"),
        ({"end_at": float("nan")}, "between 1970 and 9999"),
        ({"start_at": "tomorrow"}, "datetime or epoch seconds"),
        ({"start_at": NOW / 1000 + 2 * 365 * 86400}, "more than max_delay_s"),
        ({"missed": "all"}, "missed must be one of 'fire_once', 'skip'"),
        ({"missed": None}, "missed must be one of"),
        ({"name": ""}, "name '' must be 1..120"),
        ({"name": "a b"}, "name 'a b' must be"),
        ({"name": "x" * 121}, "must be 1..120"),
        ({"name": "a/b"}, "must be 1..120"),
        ({"name": "caf\u00e9"}, "must be 1..120"),
        ({"name": None}, "name must be a str"),
        ({"topic": "a b"}, "not a valid Kafka topic"),
        ({"payload": float("nan")}, "NaN or Infinity"),
        ({"payload": {1, 2}}, "not JSON-serialisable"),
        ({"payload": "x" * 70_000}, "over payload_max_bytes"),
        ({"max_attempts": 0}, "max_attempts must be an int"),
        ({"biz_id": ""}, "biz_id must be 1..200"),
        ({"biz_type": "\x1b[31m"}, "control characters"),
    ],
)
def test_bad_definitions_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        check(**changes)
