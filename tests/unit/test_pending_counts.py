"""The pure parts of the pending counts: ranking and the JSON shape (cluster/store/counts.py),
the statements' parts, the terminal section (cluster/observe/pending_view.py), the node's
gauge with its "(other)" topic (actors/pending_metric.py) and the HTTP limit."""

from __future__ import annotations

import pytest

from actors.pending_metric import pending_gauge
from cluster.errors import InvalidJob
from cluster.observe.pending_view import render_pending, tiers
from cluster.store.counts import PendingCounts, TierCounts, _Range, _union
from cluster.web.counts_api import topics_limit


def sample() -> PendingCounts:
    total = TierCounts(30, 1_000_000, beyond_estimated=True)
    topics = {
        "a": TierCounts(10, 400_000, beyond_estimated=True),
        "b": TierCounts(20, 5),
        "c": TierCounts(0, 599_995, beyond_estimated=True),
    }
    return PendingCounts(total, topics, horizon_ms=300_000, as_of_ms=1)


def test_topics_rank_by_pending_then_name_and_the_answer_says_what_is_left_out() -> None:
    counts = sample()
    assert [topic for topic, _ in counts.top()] == ["c", "a", "b"]
    answer = counts.as_dict(limit=2)
    assert [t["topic"] for t in answer["topics"]] == ["c", "a"] and answer["more_topics"]
    assert answer["total"] == {"in_redis": 30, "beyond_horizon": 1_000_000, "approximate": True}
    assert answer["topics"][0] == {
        "topic": "c",
        "in_redis": 0,
        "beyond_horizon": 599_995,
        "approximate": True,
    }
    assert not counts.as_dict(limit=3)["more_topics"]


def test_adding_keeps_each_tiers_estimate_flag() -> None:
    total = TierCounts(1, 2)
    total.add(TierCounts(3, 4, in_redis_estimated=True))
    assert (total.in_redis, total.beyond_horizon, total.pending) == (4, 6, 10)
    assert total.in_redis_estimated and not total.beyond_estimated and total.approximate


def test_only_estimates_carry_a_tilde() -> None:
    assert tiers(TierCounts(10, 400_000, beyond_estimated=True)) == ("10", "~400,000", "~400,010")
    text = render_pending(sample(), in_redis_now=25, topics=2)
    assert "pending (MySQL, ~: estimate): ~1,000,030" in text
    assert "beyond it (MySQL only) ~1,000,000; Redis holds 25 now" in text
    assert "... 1 more topic(s)" in text and " b " not in text


def test_the_gauge_folds_the_smaller_topics_into_other_and_keeps_the_total() -> None:
    (gauge,) = pending_gauge(sample(), max_topics=2)
    values = {(s.labels["topic"], s.labels["tier"]): s.value for s in gauge.samples}
    assert values == {
        ("c", "redis"): 0,
        ("c", "beyond_horizon"): 599_995,
        ("a", "redis"): 10,
        ("a", "beyond_horizon"): 400_000,
        ("(other)", "redis"): 20,
        ("(other)", "beyond_horizon"): 5,
    }
    assert list(pending_gauge(None, 2)) == []


def test_each_part_of_a_count_is_tagged_with_its_place_and_index() -> None:
    parts = [_Range("t.a", "in_redis"), _Range(None, "beyond_horizon")]
    statement, params = _union("db.jobs_0", parts, "EDGE")
    first, second = statement.split(" UNION ALL ")
    assert first.startswith("SELECT 0, COUNT(*)") and "idx_status_topic_due" in first
    assert "topic = %s AND action_time <= %s" in first
    assert second.startswith("SELECT 1, COUNT(*)") and "idx_status_action_time" in second
    assert "topic" not in second and "action_time > %s" in second
    assert params == ["t.a", "EDGE", "EDGE"]


@pytest.mark.parametrize("text", ["0", "1001", "-1", "x", "1.5", "²", ""])
def test_the_topics_limit_is_bounded(text: str) -> None:
    with pytest.raises(InvalidJob, match="limit"):
        topics_limit(text)


def test_the_topics_limit_defaults_to_100() -> None:
    assert topics_limit(None) == 100 and topics_limit("1000") == 1000
