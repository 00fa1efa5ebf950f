"""When a recurring schedule ticks, and which of its ticks become jobs: a 5-field cron
expression in an IANA time zone, or a fixed interval; a start and an end; the policy
for ticks that nobody made into jobs in time. Pure computation, no I/O.

Cron expressions are evaluated by croniter on the wall clock of the schedule's zone
(zoneinfo). Where the clocks change, the rules are Debian cron's:

* When the clocks go forward, a wall time that does not exist that day (02:30 in
  Europe/Berlin on the last Sunday of March) fires once, at the moment the clocks jump
  (03:00 local), if the schedule names that hour and minute; a schedule whose minute or
  hour field starts with ``*`` (``*/15 * * * *``, ``30 * * * *``) simply has no tick in
  the hour that does not exist.
* When the clocks go back, a wall time that occurs twice (02:30 on the last Sunday of
  October) fires once, at its first occurrence, if the schedule names that hour and
  minute; a schedule whose minute or hour field starts with ``*`` ticks through both
  passes of the repeated hour, as its interval says.

An interval (`every`) counts in real time: ticks at start + k × every (the Unix epoch
when no start is given, so `every=300` ticks at :00, :05, … UTC), whatever the clocks
of any zone do.

Ticks are epoch milliseconds. A tick is at or after `start_ms` and before `end_ms`.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from cluster.errors import InvalidJob

MIN_EVERY_MS = 1000
CRON_MAX_CHARS = 200
TZ_MAX_CHARS = 64
# Ticks one plan makes at most; the rest come in the next round.
PLAN_LIMIT = 1000
# How many missed ticks plan() counts, at most (for the log and the metric): counting a
# cron schedule's ticks takes about 65 us each, on the node's event loop.
MISSED_COUNT_LIMIT = 1000
# croniter steps one tick at a time; a filter that drops ticks (the second pass of a
# repeated hour) never drops more than a few in a row.
_FILTERED_IN_A_ROW = 100


class Missed(enum.StrEnum):
    """What a node does with the ticks that no node made into jobs before their time
    (every node was down, or the schedule's slot had no owner, for longer than the
    lookahead)."""

    FIRE_ONCE = "fire_once"  # the last of them fires once, at once; the others never
    SKIP = "skip"  # none of them fires; the schedule goes on with its next tick


@functools.lru_cache(maxsize=256)
def zone_of(tz: object) -> ZoneInfo:
    """The IANA time zone named `tz`; InvalidJob if there is none."""
    if not isinstance(tz, str):
        raise InvalidJob(f"tz must be an IANA time zone name (a str), got {type(tz).__name__}")
    if not tz or len(tz) > TZ_MAX_CHARS or not tz.isascii() or not tz.isprintable():
        raise InvalidJob(f"tz {tz!r} is not an IANA time zone name (e.g. 'Europe/Berlin')")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidJob(
            f"tz {tz!r} is not an IANA time zone name (e.g. 'Europe/Berlin', 'UTC')"
        ) from None


def check_cron(expression: object) -> str:
    """A 5-field cron expression (minute hour day-of-month month day-of-week), with
    its fields separated by single spaces; InvalidJob otherwise."""
    if not isinstance(expression, str):
        raise InvalidJob(f"cron must be a str, got {type(expression).__name__}")
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidJob(
            f"cron {expression!r} must have 5 fields (minute hour day-of-month month "
            "day-of-week), e.g. '0 9 * * 1-5'"
        )
    normal = " ".join(fields)
    if len(normal) > CRON_MAX_CHARS or not normal.isascii() or not normal.isprintable():
        raise InvalidJob(f"cron {expression!r} is not a cron expression")
    try:
        valid = croniter.is_valid(normal)
    except (CroniterError, ValueError, TypeError):
        valid = False
    if not valid:
        raise InvalidJob(f"cron {expression!r} is not a valid cron expression")
    return normal


def _both_passes(expression: str) -> bool:
    """Whether a schedule ticks through both passes of a repeated hour (Debian cron's
    "wildcard" jobs: the minute or the hour field starts with *)."""
    minute, hour = expression.split()[:2]
    return minute.startswith("*") or hour.startswith("*")


def _ms(moment: dt.datetime) -> int:
    return round(moment.timestamp() * 1000)


@dataclass(frozen=True)
class Cadence:
    """The ticks of one schedule: exactly one of `cron` (with `tz`) or `every_ms`."""

    cron: str | None
    every_ms: int | None
    tz: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise InvalidJob("give exactly one of cron= or every=")

    def first_at_or_after(self, t_ms: int) -> int | None:
        """The first tick at or after t_ms; None when there is none (past the end)."""
        low = t_ms if self.start_ms is None else max(t_ms, self.start_ms)
        if self.end_ms is not None and low >= self.end_ms:
            return None
        if self.every_ms is not None:
            anchor = self.start_ms or 0
            steps = -(-(low - anchor) // self.every_ms)  # ceiling division
            tick: int | None = anchor + max(steps, 0) * self.every_ms
        else:
            tick = self._cron_next(low)
        if tick is None or (self.end_ms is not None and tick >= self.end_ms):
            return None
        return tick

    def next_after(self, tick_ms: int) -> int | None:
        return self.first_at_or_after(tick_ms + 1)

    def last_before(self, t_ms: int) -> int | None:
        """The last tick before t_ms; None when there is none (before the start)."""
        high = t_ms if self.end_ms is None else min(t_ms, self.end_ms)
        if self.every_ms is not None:
            anchor = self.start_ms or 0
            if high <= anchor:
                return None
            return anchor + (high - 1 - anchor) // self.every_ms * self.every_ms
        tick = self._cron_prev(high)
        if tick is None or (self.start_ms is not None and tick < self.start_ms):
            return None
        return tick

    def count_between(self, low_ms: int, high_ms: int, limit: int) -> int:
        """How many ticks lie in [low_ms, high_ms), counting at most `limit`."""
        if high_ms <= low_ms:
            return 0
        if self.every_ms is not None:
            first = self.first_at_or_after(low_ms)
            last = self.last_before(high_ms)
            if first is None or last is None or last < first:
                return 0
            return min((last - first) // self.every_ms + 1, limit)
        count = 0
        for tick in self._cron_ticks(max(low_ms, self.start_ms or low_ms)):
            if tick >= high_ms or (self.end_ms is not None and tick >= self.end_ms):
                break
            count += 1
            if count == limit:
                break
        return count

    # ----- cron ------------------------------------------------------------------------

    def _keeps(self, moment: dt.datetime, zone: ZoneInfo) -> bool:
        """False for the second pass of a wall time that occurs twice, unless the
        schedule ticks through both passes."""
        assert self.cron is not None
        if _both_passes(self.cron):
            return True
        first_pass = moment.replace(tzinfo=None).replace(tzinfo=zone, fold=0)
        return _ms(first_pass) == _ms(moment)

    def _cron_ticks(self, low_ms: int) -> Iterator[int]:
        """The cron ticks at or after low_ms, ascending (start and end not applied)."""
        assert self.cron is not None
        zone = zone_of(self.tz)
        # croniter answers the first match strictly after its start.
        start = dt.datetime.fromtimestamp((low_ms - 1) / 1000, zone)
        matches = croniter(self.cron, start)
        dropped = 0
        last = low_ms - 1
        while dropped < _FILTERED_IN_A_ROW:
            try:
                moment = matches.get_next(dt.datetime)
            except (CroniterBadDateError, OverflowError, ValueError):
                return  # no match in croniter's search range (e.g. 30 February)
            tick = _ms(moment)
            if tick > last and self._keeps(moment, zone):
                dropped, last = 0, tick
                yield tick
            else:
                dropped += 1

    def _cron_next(self, low_ms: int) -> int | None:
        return next(self._cron_ticks(low_ms), None)

    def _cron_prev(self, high_ms: int) -> int | None:
        assert self.cron is not None
        zone = zone_of(self.tz)
        matches = croniter(self.cron, dt.datetime.fromtimestamp(high_ms / 1000, zone))
        for _ in range(_FILTERED_IN_A_ROW):
            try:
                moment = matches.get_prev(dt.datetime)
            except (CroniterBadDateError, OverflowError, ValueError):
                return None
            tick = _ms(moment)
            if tick < high_ms and self._keeps(moment, zone):
                return tick
        return None


@dataclass(frozen=True)
class Plan:
    """What one round makes of a schedule: the ticks to make into jobs (ascending), the
    first tick left for later (None: the schedule has no more), and the ticks found
    missed (made too late to count as on time) in [missed_from, missed_until)."""

    ticks: list[int]
    cursor: int | None
    missed: int = 0  # how many missed ticks will never fire (counted up to the limit)
    missed_from: int | None = None
    missed_until: int | None = None
    missed_all_counted: bool = True  # False: there were MISSED_COUNT_LIMIT or more


def plan(
    cadence: Cadence,
    cursor: int,
    now_ms: int,
    until_ms: int,
    missed: Missed,
    limit: int = PLAN_LIMIT,
) -> Plan:
    """The ticks from `cursor` (the first tick not made into a job yet) that are due
    before until_ms. Ticks before now_ms were not made in time: of those, the policy
    `missed` keeps the last one (FIRE_ONCE: it is due already, so it fires at once) or
    none (SKIP), never all of them."""
    ticks: list[int] = []
    found = dropped = 0
    missed_from: int | None = None
    missed_until: int | None = None
    next_tick: int | None = cursor
    if cursor < now_ms:
        missed_from, missed_until = cursor, now_ms
        found = dropped = cadence.count_between(cursor, now_ms, MISSED_COUNT_LIMIT)
        last = cadence.last_before(now_ms)
        if missed is Missed.FIRE_ONCE and last is not None and last >= cursor:
            ticks.append(last)
            dropped -= 1  # that one fires
        next_tick = cadence.first_at_or_after(now_ms)
    while next_tick is not None and next_tick < until_ms and len(ticks) < limit:
        ticks.append(next_tick)
        next_tick = cadence.next_after(next_tick)
    return Plan(
        ticks,
        next_tick,
        max(dropped, 0),
        missed_from,
        missed_until,
        missed_all_counted=found < MISSED_COUNT_LIMIT,
    )
