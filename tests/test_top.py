"""`delayq top` (cluster/cli/top.py): the rates and quantiles it computes from two scrapes
of real prometheus-client output, the snapshot of several members, and the command
against a real node (`--once`, `--once --json`, and the live view ended by Ctrl-C)."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from rich.console import Console

from actors.histogram import LATENESS_BUCKETS_S
from cluster import DelayClient, Job
from cluster.cli.top import busiest_slots, render
from cluster.devstack.nodes import settings_env
from cluster.observe.snapshot import (
    Scrape,
    bucket_increase,
    build_snapshot,
    increase,
    parse_scrape,
    quantile,
)
from cluster.observe.status import ClusterStatus, SlotStatus
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.forwarder import free_port
from tests.processes import NodeProcess
from tests.test_operations import fetch, metrics_env

# The screen over the cluster's numbers: their Redis side is tested in both passes.
pytestmark = pytest.mark.once


def scrape_text(
    lateness_s: list[float], fired: int, healthy: int = 1, topic: str = "orders"
) -> str:
    """A node's /metrics as prometheus-client writes it."""
    registry = CollectorRegistry()
    counter = Counter("delayq_jobs_fired", "fired", ["topic"], registry=registry)
    histogram = Histogram(
        "delayq_fire_lateness_seconds",
        "lateness",
        ["topic"],
        buckets=LATENESS_BUCKETS_S,
        registry=registry,
    )
    Gauge("delayq_healthy", "healthy", registry=registry).set(healthy)
    counter.labels(topic).inc(fired)
    for value in lateness_s:
        histogram.labels(topic).observe(value)
    return generate_latest(registry).decode()


def test_rates_and_quantiles_over_the_window() -> None:
    before = parse_scrape(scrape_text([0.02] * 10, fired=10), at=100.0)
    # Then 100 more jobs: 50 within (5, 10] ms and 50 within (25, 50] ms.
    now = parse_scrape(scrape_text([0.02] * 10 + [0.008] * 50 + [0.03] * 50, fired=110), at=102.0)
    assert now.healthy and not now.ready
    assert increase(now.fired["orders"], before.fired["orders"]) / (now.at - before.at) == 50.0
    window = bucket_increase(now.lateness["orders"], before.lateness["orders"])
    assert window[-1] == (float("inf"), 100.0)
    # Rank 50 is the last of the (5, 10] ms bucket; rank 99 is 49/50 into (25, 50] ms.
    assert quantile(0.5, window) == pytest.approx(0.010)
    assert quantile(0.99, window) == pytest.approx(0.025 + 0.025 * 49 / 50)


def test_a_restarted_node_counts_from_zero_and_empty_windows_have_no_quantile() -> None:
    before = parse_scrape(scrape_text([0.02] * 10, fired=500), at=1.0)
    now = parse_scrape(scrape_text([0.3] * 4, fired=4), at=2.0)  # restarted meanwhile
    assert increase(now.fired["orders"], before.fired["orders"]) == 4
    window = bucket_increase(now.lateness["orders"], before.lateness["orders"])
    assert window[-1][1] == 4 and quantile(0.5, window) == pytest.approx(0.25 + 0.25 * 2 / 4)
    idle = bucket_increase(now.lateness["orders"], now.lateness["orders"])
    assert quantile(0.5, idle) is None
    over = parse_scrape(scrape_text([100.0] * 3, fired=3), at=3.0)
    assert quantile(0.99, over.lateness["orders"]) == 60.0  # the highest finite bound


def test_a_restart_that_fired_more_than_before_still_shows_in_the_buckets() -> None:
    before = parse_scrape(scrape_text([0.003] * 10, fired=10), at=1.0)
    now = parse_scrape(scrape_text([0.3] * 40, fired=40), at=2.0)  # more than before
    # The (0.0025, 0.005] bucket went from 10 to 0: a restart, so all 40 are new.
    window = bucket_increase(now.lateness["orders"], before.lateness["orders"])
    assert window[-1][1] == 40
    assert quantile(0.5, window) == pytest.approx(0.25 + 0.25 * 20 / 40)


def slot(number: int, owner: str | None, delay: int = 0, overdue_ms: int = 0) -> SlotStatus:
    return SlotStatus(number, owner, None, 1, 1, delay, 0, 0, 0, overdue_ms)


def test_a_snapshot_sums_members_and_says_which_have_no_metrics() -> None:
    status = ClusterStatus(
        "/delayq",
        4,
        {
            "m-1": {"node_id": "a", "host": "h", "pid": 1, "metrics_url": "http://h:1/metrics"},
            "m-2": {"node_id": "b", "host": "h", "pid": 2, "metrics_url": "http://h:2/metrics"},
            # A node id that rich would take for markup and a terminal for a command.
            "m-3": {"node_id": "c[/]\x1b[2J", "host": "h", "pid": 3, "metrics_url": None},
        },
        [slot(0, "m-1", delay=5), slot(1, "m-1", overdue_ms=1500), slot(2, "m-2"), slot(3, None)],
    )
    # Over 2 s, a fires 20 jobs at 8 ms, b fires 80 at 30 ms: 50 jobs/s in all.
    previous: dict[str, Scrape | str] = {
        "m-1": parse_scrape(scrape_text([], fired=0), at=10.0),
        "m-2": parse_scrape(scrape_text([], fired=0), at=10.0),
        "m-3": "off",
    }
    latest: dict[str, Scrape | str] = {
        "m-1": parse_scrape(scrape_text([0.008] * 20, fired=20), at=12.0),
        "m-2": parse_scrape(scrape_text([0.03] * 80, fired=80), at=12.0),
        "m-3": "off",
    }
    snapshot = build_snapshot(status, latest, previous)
    assert [(m.member, m.slots, m.fire_rate, m.metrics) for m in snapshot.members] == [
        ("m-1", 2, 10.0, "ok"),
        ("m-2", 1, 40.0, "ok"),
        ("m-3", 0, None, "off"),
    ]
    assert snapshot.window_s == 2.0 and snapshot.fire_rate == 50.0
    assert (snapshot.delay, snapshot.oldest_overdue_ms) == (5, 1500)
    (orders,) = snapshot.topics
    assert orders.fired_total == 100 and orders.fire_rate == 50.0
    # Rank 50 of 100: 30 into the 80 jobs of (25, 50] ms; rank 99: 79 into them.
    assert orders.p50_ms == pytest.approx(25 + 25 * 30 / 80)
    assert orders.p99_ms == pytest.approx(25 + 25 * 79 / 80)

    console = Console(record=True, width=160)
    console.print(render(snapshot, height=40))
    screen = console.export_text()
    assert "metrics off" in screen and "over the last 2.0 s" in screen
    assert "c[/]\\x1b[2J" in screen and "\x1b" not in screen
    # The most overdue slot comes first, then the deepest.
    assert [s.slot for s in busiest_slots(snapshot.slot_status)] == [1, 0, 2, 3]


def top_env(settings: Settings) -> dict[str, str]:
    return {**os.environ, **settings_env(settings), "COLUMNS": "160", "LINES": "60"}


def top(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = top_env(settings)
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "top", "--once", "--interval", "1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
async def test_top_shows_a_running_node(
    settings: Settings, client: DelayClient, collector: Collector, topic: str, tmp_path: Path
) -> None:
    port = free_port()
    node = NodeProcess(settings, tmp_path, "node-top", metrics_env(port))
    try:
        await node.wait_ready()
        jobs = 300
        await client.schedule_many([Job(topic, {"i": i}, delay=0.2) for i in range(jobs)])
        await client.schedule_many([Job(topic, {"i": i}, delay=120) for i in range(7)])
        assert len(await collector.until(jobs, timeout_s=60)) == jobs

        async def counted_and_ready() -> bool:
            # The node counts a job once its ack ran, which can be after a consumer saw it.
            _, text = await fetch(port, "/metrics")
            scrape = parse_scrape(text, time.monotonic())
            return scrape.ready and scrape.fired.get(topic) == jobs

        assert await wait_for(counted_and_ready, 60, 0.1)
        shown = await asyncio.to_thread(top, settings, "--json")
        assert shown.returncode == 0, shown.stderr
        snapshot = orjson.loads(shown.stdout)
        (member,) = snapshot["members"]
        assert member["node_id"] == "node-top" and member["slots"] == settings.slots
        assert member["metrics"] == "ok" and member["healthy"] and member["ready"]
        (seen,) = [t for t in snapshot["topics"] if t["topic"] == topic]
        assert seen["fired_total"] == jobs
        assert sum(s["delay"] for s in snapshot["slot_status"]) == 7
        text = await asyncio.to_thread(top, settings)
        assert text.returncode == 0, text.stderr
        assert "node-top" in text.stdout and topic in text.stdout
        assert f"{jobs:,}" in text.stdout  # the topic's fired total
        live = await asyncio.to_thread(live_top_until_ctrl_c, settings, "node-top")
        assert "node-top" in live and "Traceback" not in live
    finally:
        await node.stop()


def live_top_until_ctrl_c(settings: Settings, expected: str) -> str:
    """Run `delayq top` on a terminal (a pty, as rich draws live only on one) until the
    screen shows `expected`, then press Ctrl-C; what it printed. It must exit 0."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli.main", "top", "--interval", "0.5"],
        env=top_env(settings),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    screen = b""

    def read(timeout_s: float) -> bool:
        """Add what the terminal shows within timeout_s; False at its end (EIO on Linux)."""
        nonlocal screen
        if not select.select([controller], [], [], timeout_s)[0]:
            return True
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            return False
        screen += chunk
        return bool(chunk)

    try:
        give_up = time.monotonic() + 120  # only so a broken view cannot hang the suite
        while expected.encode() not in screen and time.monotonic() < give_up:
            if not read(1.0):
                break
        assert expected.encode() in screen, screen.decode(errors="replace")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, screen.decode(errors="replace")
        while read(1.0):  # the rest of what it printed
            pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    return screen.decode(errors="replace")


def test_top_refuses_bad_arguments(settings: Settings) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "top", "--json"],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "--json needs --once" in bad.stderr
