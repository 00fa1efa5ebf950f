"""Which topics producers and nodes refuse (cluster/model/jobs.py topic_refusal), and how a
node folds the topic label of its metrics beyond metrics_max_topics (actors/metrics.py
TopicLabels). No service needed."""

from __future__ import annotations

from collections import Counter

import pytest

from actors.histogram import LATENESS_BUCKETS_S, Histograms
from actors.metrics import OTHER_TOPICS, TopicLabels
from cluster.errors import ConfigError, InvalidJob
from cluster.model.jobs import check_topic, own_topics, topic_refusal, validate
from cluster.settings.config import Settings

SETTINGS = Settings()


def schedule(topic: str, settings: Settings = SETTINGS) -> None:
    validate(
        topic=topic,
        payload=1,
        delay=1,
        at=None,
        job_id=None,
        biz_id=None,
        biz_type=None,
        max_attempts=None,
        settings=settings,
    )


@pytest.mark.parametrize(
    "topic", ["__consumer_offsets", "__transaction_state", "__cluster_metadata", "__x"]
)
def test_kafka_internal_topics_are_refused_by_default(topic: str) -> None:
    with pytest.raises(InvalidJob, match=f"topic '{topic}' is refused: .*Kafka's internal"):
        schedule(topic)


def test_delayq_own_topics_are_refused_by_default() -> None:
    with pytest.raises(InvalidJob, match=r"'delayq-journal' is refused: .*kafka_journal_topic"):
        schedule("delayq-journal")
    ingress = SETTINGS.replace(ingress_topic="in.jobs")
    assert own_topics(ingress) == {
        "kafka_journal_topic": "delayq-journal",
        "ingress_topic": "in.jobs",
        "ingress_error_topic": "in.jobs.errors",
    }
    with pytest.raises(InvalidJob, match="delayq's own ingress_topic"):
        schedule("in.jobs", ingress)
    with pytest.raises(InvalidJob, match="delayq's own ingress_error_topic"):
        schedule("in.jobs.errors", ingress)
    named = ingress.replace(ingress_error_topic="refused.in", kafka_journal_topic="j")
    with pytest.raises(InvalidJob, match="delayq's own ingress_error_topic"):
        schedule("refused.in", named)
    with pytest.raises(InvalidJob, match="kafka_journal_topic"):
        schedule("j", named)
    schedule("in.jobs.errors", named)  # no longer the error topic
    schedule("delayq-journal", named)  # no longer the journal
    schedule("in.jobs.errors")  # no ingress configured: an ordinary topic


def test_allowed_topics_cannot_let_a_refused_topic_through() -> None:
    settings = SETTINGS.replace(allowed_topics="*", ingress_topic="in")
    for topic in ("__consumer_offsets", "delayq-journal", "in", "in.errors"):
        assert topic_refusal(topic, settings) is not None
    assert topic_refusal("orders", settings) is None


def test_allowed_topics_takes_exact_names_and_prefixes() -> None:
    settings = SETTINGS.replace(allowed_topics="orders.*, reminders")
    assert topic_refusal("orders.close", settings) is None
    assert topic_refusal("reminders", settings) is None
    refusal = topic_refusal("reminders.x", settings)
    assert refusal == "topic 'reminders.x' matches none of allowed_topics='orders.*, reminders'"
    assert topic_refusal("orders", settings) is not None


def test_any_other_valid_topic_is_allowed_by_default() -> None:
    for topic in ("orders.close", "_schemas", "a", "x" * 249, "delayq-journal.x", "_"):
        assert topic_refusal(check_topic(topic), SETTINGS) is None


@pytest.mark.parametrize("value", [0, -1])
def test_metrics_max_topics_must_be_at_least_one(value: int) -> None:
    with pytest.raises(ConfigError, match="metrics_max_topics must be >= 1"):
        Settings(metrics_max_topics=value)


def test_metrics_max_topics_reads_from_the_environment() -> None:
    assert Settings.from_env({"DELAYQ_METRICS_MAX_TOPICS": "7"}).metrics_max_topics == 7
    assert SETTINGS.metrics_max_topics == 100


# ----- the metrics' topic label ----------------------------------------------------------


def fired_to(topics: list[str]) -> tuple[Counter[str], Histograms]:
    """A dispatcher's figures after one job to each topic, in this order (as _observe
    fills them), each job 0.01 s late."""
    fired: Counter[str] = Counter()
    lateness = Histograms(LATENESS_BUCKETS_S)
    for topic in topics:
        fired[topic] += 1
        lateness.observe((topic,), 0.01)
    return fired, lateness


def test_the_first_topics_keep_their_series_and_the_rest_are_summed() -> None:
    topics = [f"t{i}" for i in range(300)]
    fired, lateness = fired_to(topics)
    labels = TopicLabels(fired, SETTINGS.replace(metrics_max_topics=100))
    assert labels.folded == 200
    counts = dict(labels.counts(fired))
    assert len(counts) == 101
    assert counts[OTHER_TOPICS] == 200 and counts["t0"] == 1 and counts["t99"] == 1
    assert "t100" not in counts
    series = list(labels.histograms(lateness))
    assert len(series) == 101
    by_label = {key[0]: (buckets, total) for key, buckets, total in series}
    buckets, total = by_label[OTHER_TOPICS]
    assert buckets[-1] == ("+Inf", 200) and total == pytest.approx(2.0)
    assert dict(buckets)["0.01"] == 200 and dict(buckets)["0.005"] == 0


def test_the_other_series_only_grows_as_a_counter_must() -> None:
    fired, _ = fired_to(["a", "b", "c"])
    settings = SETTINGS.replace(metrics_max_topics=2)
    before = dict(TopicLabels(fired, settings).counts(fired))
    assert before == {"a": 1, "b": 1, OTHER_TOPICS: 1}
    fired["d"] += 5  # a new topic: folded too
    fired["a"] += 1
    after = dict(TopicLabels(fired, settings).counts(fired))
    assert after == {"a": 2, "b": 1, OTHER_TOPICS: 6}


def test_below_the_cap_nothing_is_folded() -> None:
    fired, lateness = fired_to(["a", "b"])
    labels = TopicLabels(fired, SETTINGS)
    assert labels.folded == 0
    assert labels.counts(fired) == [("a", 1), ("b", 1)]
    assert [key for key, _, _ in labels.histograms(lateness)] == [("a",), ("b",)]


def test_other_is_no_valid_topic_name() -> None:
    with pytest.raises(InvalidJob):
        check_topic(OTHER_TOPICS)
