"""delayq_pending_jobs{topic, tier}: the pending jobs in MySQL per topic, due within the
Redis horizon (tier="redis") and beyond it (tier="beyond_horizon"), as the node holding
slot 0 last counted them (actors/sampler.py, every PENDING_EVERY_S). Other nodes serve no
series, so sum() over the cluster counts each job once. The biggest metrics_max_topics
topics keep their own series; the rest are summed under topic="(other)".
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from cluster.store.counts import PendingCounts

OTHER_TOPICS = "(other)"  # as actors/metrics.py's


def pending_gauge(pending: PendingCounts | None, max_topics: int) -> Iterator[GaugeMetricFamily]:
    if pending is None:
        return
    gauge = GaugeMetricFamily(
        "delayq_pending_jobs",
        "Pending jobs in MySQL by topic, due within redis_horizon_ms (tier redis) or "
        "beyond it (tier beyond_horizon); counted by the node holding slot 0, big "
        "ranges estimated.",
        labels=["topic", "tier"],
    )
    listed = pending.top(max_topics)
    near = pending.total.in_redis
    far = pending.total.beyond_horizon
    for topic, counts in listed:
        gauge.add_metric([topic, "redis"], counts.in_redis)
        gauge.add_metric([topic, "beyond_horizon"], counts.beyond_horizon)
        near -= counts.in_redis
        far -= counts.beyond_horizon
    if len(pending.topics) > len(listed) or pending.more_topics:
        gauge.add_metric([OTHER_TOPICS, "redis"], max(near, 0))
        gauge.add_metric([OTHER_TOPICS, "beyond_horizon"], max(far, 0))
    yield gauge
