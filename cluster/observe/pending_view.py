"""The "pending" section of `delayq cluster status` and `delayq top`: the pending jobs in
MySQL per topic and in total, due within the Redis horizon and beyond it
(cluster/store/counts.py), next to what Redis holds now (the slots' delay, ready and
in-flight sets).

The two "within the horizon" figures differ on purpose: MySQL counts every pending job
due within redis_horizon_ms, Redis holds those a producer wrote there plus those the
owning node already loaded (from half the horizon ahead), and nothing the nodes have
not loaded yet.
"""

from __future__ import annotations

from cluster.settings.config import Settings
from cluster.store.counts import PendingCounts, TierCounts, pending_counts
from cluster.store.sharded import ShardedStore

# Topics the terminal views list, most pending first.
TOPICS_SHOWN = 10


async def read_pending(settings: Settings) -> PendingCounts:
    """One count over every shard, on a store of its own (no schema check)."""
    store = ShardedStore(settings, "status")
    try:
        return await pending_counts(store, settings.redis_horizon_ms)
    finally:
        await store.close()


async def read_pending_or_why(settings: Settings) -> PendingCounts | str:
    """read_pending, or why it failed: a MySQL server down must not hide the rest of
    `delayq cluster status` (its MySQL section says which)."""
    try:
        return await read_pending(settings)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def figure(value: int, approximate: bool) -> str:
    """A count as shown: "~" before an estimate."""
    return f"{'~' if approximate else ''}{value:,}"


def tiers(counts: TierCounts) -> tuple[str, str, str]:
    """(within the horizon, beyond it, both) as shown."""
    return (
        figure(counts.in_redis, counts.in_redis_estimated),
        figure(counts.beyond_horizon, counts.beyond_estimated),
        figure(counts.pending, counts.approximate),
    )


def render_pending(
    counts: PendingCounts, in_redis_now: int | None, topics: int = TOPICS_SHOWN
) -> str:
    """The section as text; in_redis_now: the jobs Redis holds (delay + ready + in
    flight), None when unknown."""
    near, far, both = tiers(counts.total)
    horizon_s = counts.horizon_ms / 1000
    lines = [
        f"pending (MySQL, ~: estimate): {both}; due within the {horizon_s:g} s horizon {near},"
        f" beyond it (MySQL only) {far}"
        + ("" if in_redis_now is None else f"; Redis holds {in_redis_now:,} now"),
        f"  {'topic':<40} {'within horizon':>15} {'beyond horizon':>15} {'pending':>15}",
    ]
    for topic, part in counts.top(topics):
        near, far, both = tiers(part)
        lines.append(f"  {printable_topic(topic):<40} {near:>15} {far:>15} {both:>15}")
    left = len(counts.topics) - topics
    if left > 0 or counts.more_topics:
        lines.append(f"  ... {max(left, 0):,} more topic(s)" + (" and more" * counts.more_topics))
    return "\n".join(lines)


def printable_topic(topic: str) -> str:
    # Kafka topic names are [A-Za-z0-9._-], but the rows hold what was written.
    return topic if topic.isprintable() else repr(topic)
