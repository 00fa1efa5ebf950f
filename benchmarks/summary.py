"""The numbers of one fire run, computed the same way for every system.

A run is a list of (receive time, due time) pairs in epoch milliseconds, one per job
received, plus the run's first due time. From them:

* lateness = receive − due: p50, p99, p99.9, max (and ≤ 2,000 sorted quantiles for a CDF);
* series: jobs received per 100 ms bucket, bucket 0 starting at the first due time;
* mean fire rate: received / (last receive − first receive);
* drain: last receive − first due; burst fire rate: received / drain;
* peak fire rate: the most jobs received in any 1 s window (ten consecutive buckets).

Peers write their pairs as raw little-endian float64 [receive, due, receive, due, ...]
(read_pairs); delayq's fire_bench calls summarize() on its own lists. Standard library
only, so both virtualenvs can import it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BUCKET_MS = 100
PEAK_WINDOW_BUCKETS = 10  # 1 s
CDF_POINTS = 2000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The value at rank q·n (nearest rank below), NaN when empty."""
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def cdf_sample(sorted_values: Sequence[float], points: int = CDF_POINTS) -> list[float]:
    """At most `points` values at evenly spaced ranks, first and last included."""
    n = len(sorted_values)
    if n <= points:
        return [round(v, 2) for v in sorted_values]
    return [round(sorted_values[round(i * (n - 1) / (points - 1))], 2) for i in range(points)]


def fire_series(receive_ms: Sequence[float], first_due_ms: float) -> dict[str, Any]:
    """Jobs received per BUCKET_MS bucket from the first due time (or the first receive,
    if a job arrived before it)."""
    if not receive_ms:
        return {"bucket_ms": BUCKET_MS, "start_s": 0.0, "counts": []}
    start = min(0, math.floor((min(receive_ms) - first_due_ms) / BUCKET_MS))
    counts = [0] * (math.floor((max(receive_ms) - first_due_ms) / BUCKET_MS) - start + 1)
    for r in receive_ms:
        counts[math.floor((r - first_due_ms) / BUCKET_MS) - start] += 1
    return {"bucket_ms": BUCKET_MS, "start_s": start * BUCKET_MS / 1000, "counts": counts}


def peak_rate(counts: Sequence[int]) -> int:
    """Most jobs received in any window of PEAK_WINDOW_BUCKETS consecutive buckets, per s."""
    window = PEAK_WINDOW_BUCKETS
    if len(counts) <= window:
        return round(sum(counts) * 1000 / (BUCKET_MS * window))
    running = best = sum(counts[:window])
    for i in range(window, len(counts)):
        running += counts[i] - counts[i - window]
        best = max(best, running)
    return round(best * 1000 / (BUCKET_MS * window))


def summarize(
    receive_ms: Sequence[float], due_ms: Sequence[float], first_due_ms: float, expected: int
) -> dict[str, Any]:
    """Every number of a fire run (see the module docstring)."""
    late = sorted(r - d for r, d in zip(receive_ms, due_ms, strict=True))
    n = len(late)
    first, last = (min(receive_ms), max(receive_ms)) if n else (math.nan, math.nan)
    series = fire_series(receive_ms, first_due_ms)
    drain_s = (last - first_due_ms) / 1000
    span_s = (last - first) / 1000
    return {
        "expected": expected,
        "received": n,
        "missing": max(0, expected - n),
        "early": sum(1 for v in late if v < 0),
        "lateness_ms": {
            "p50": round(percentile(late, 0.5), 1),
            "p99": round(percentile(late, 0.99), 1),
            "p999": round(percentile(late, 0.999), 1),
            "max": round(late[-1], 1) if n else None,
        },
        "mean_fire_rate_per_s": round(n / span_s) if n > 1 and span_s > 0 else None,
        "drain_s": round(drain_s, 3) if n else None,
        "drain_fire_rate_per_s": round(n / drain_s) if n and drain_s > 0 else None,
        "peak_fire_rate_per_s": peak_rate(series["counts"]),
        "series": series,
        "lateness_cdf_ms": cdf_sample(late),
    }


def read_pairs(path: Path) -> tuple[array[float], array[float]]:
    """(receive_ms, due_ms) from a raw float64 file written by a peer."""
    values = array("d")
    values.frombytes(path.read_bytes())
    return values[0::2], values[1::2]
