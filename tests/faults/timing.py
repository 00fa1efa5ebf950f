"""Lateness and pauses read from fired records, as the fault modules print them."""

from __future__ import annotations

import itertools
from typing import Any


def spread_s(values: list[float]) -> str:
    """p50 / p99 / max of lateness values in ms, in seconds."""
    if not values:
        return "-"
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return f"p50 {at(0.5):.2f} / p99 {at(0.99):.2f} / max {ordered[-1] / 1000:.2f} s"


def lateness(records: list[dict[str, Any]], start: float | None = None) -> str:
    """p50 / p99 / max lateness of each job's first record (of those due after `start`)."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(str(record["job_id"]), record)
    return spread_s(
        [
            r["received_ms"] - r["due_ms"]
            for r in first.values()
            if start is None or r["due_ms"] >= start * 1000
        ]
    )


def longest_pause_s(records: list[dict[str, Any]], start: float, end: float) -> float:
    """The longest time no record arrived at the consumer between two times (s)."""
    times = sorted(float(r["received_ms"]) / 1000 for r in records)
    edges = [start, *(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(edges))
