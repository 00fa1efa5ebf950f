"""The ids of run-now jobs of recurring schedules: told from the regular ticks, parsed
back to their schedule, in their schedule's database, and sorted among its ticks by time."""

from __future__ import annotations

from cluster.model.keys import shard_of
from cluster.model.tick_ids import is_run_now, parse_tick_id, run_now_job_id, tick_job_id


def test_run_now_ids_parse_and_are_told_from_ticks() -> None:
    job_id = run_now_job_id("reports:daily.eu", 3, 1_795_000_000_123)
    assert job_id == "@recurring:reports:daily.eu:3:1795000000123r"
    assert parse_tick_id(job_id) == ("reports:daily.eu", 3, 1_795_000_000_123)
    assert is_run_now(job_id)
    assert not is_run_now(tick_job_id("reports:daily.eu", 3, 1_795_000_000_000))
    for other in ("order-1r", "@recurring:a:1:r", "@recurring:a:1:5rr", "@recurring:a:x:5r"):
        assert parse_tick_id(other) is None and not is_run_now(other)


def test_run_now_ids_sort_among_ticks_by_time_and_share_their_database() -> None:
    ticks = [tick_job_id("beat", 2, t) for t in (1_795_000_000_000, 1_795_000_001_000)]
    run = run_now_job_id("beat", 2, 1_795_000_000_500)
    assert sorted([*ticks, run]) == [ticks[0], run, ticks[1]]
    for databases in (1, 2, 3, 8):
        assert shard_of(run, databases, 4)[0] == shard_of(ticks[0], databases, 4)[0]
