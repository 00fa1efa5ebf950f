"""What an operator watches, against real node processes: a real Prometheus scrapes a
node's /metrics during an end-to-end run; /healthz turns unhealthy while an actor is
stuck and healthy again after; /readyz turns not-ready while Redis is down;
`delayq node --check` says the same with its exit code; json logs are JSON."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from cluster import DelayClient, Job
from cluster.devstack import stack
from cluster.devstack.nodes import settings_env
from cluster.devstack.prometheus import PrometheusServer
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.shared import shared_pid
from tests.forwarder import free_port
from tests.processes import NodeProcess, wait_served

# Prometheus scraping a node does not change with the Redis and MySQL shape.
pytestmark = [pytest.mark.slow, pytest.mark.once]

ROOT = Path(__file__).resolve().parent.parent
ALERT_RULES = ROOT / "ops" / "prometheus" / "alerts.yml"
JOBS = 400


def metrics_env(port: int, **more: str) -> dict[str, str]:
    return {"DELAYQ_METRICS_PORT": str(port), "DELAYQ_METRICS_HOST": "127.0.0.1", **more}


async def fetch(port: int, path: str) -> tuple[int, Any]:
    """(status, body: JSON decoded when it is JSON) of GET http://127.0.0.1:port/path."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}{path}") as answer,
    ):
        raw = await answer.read()
        if answer.content_type == "application/json":
            return answer.status, orjson.loads(raw)
        return answer.status, raw.decode()


async def wait_status(port: int, path: str, status: int, timeout_s: float = 60) -> Any:
    """Wait until the endpoint answers `status`; its body then."""
    seen: list[Any] = []

    async def answers() -> bool:
        got, body = await fetch(port, path)
        seen[:] = [got, body]
        return got == status

    assert await wait_for(answers, timeout_s, 0.1), f"{path} never answered {status}: {seen}"
    return seen[1]


def check(settings: Settings, port: int, which: str) -> subprocess.CompletedProcess[str]:
    """`delayq node --check WHICH` with the node's settings, as a probe would run it."""
    env = {**os.environ, **settings_env(settings), **metrics_env(port)}
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "node", "--check", which],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_prometheus_scrapes_a_node_during_an_end_to_end_run(
    settings: Settings, client: DelayClient, collector: Collector, topic: str, tmp_path: Path
) -> None:
    port = free_port()
    node = NodeProcess(settings, tmp_path, "node-m", metrics_env(port))
    prometheus = PrometheusServer(
        tmp_path / "prometheus", [f"127.0.0.1:{port}"], rule_files=[ALERT_RULES]
    )
    try:
        await node.wait_ready()
        await prometheus.start()
        await client.schedule_many(
            [Job(topic, {"i": i}, delay=0.5 + i / 1000) for i in range(JOBS)]
        )
        assert len(await collector.until(JOBS, timeout_s=60)) == JOBS
        fired = f'sum(delayq_jobs_fired_total{{topic="{topic}"}})'

        async def scraped_all() -> bool:
            return await prometheus.query(fired) == JOBS

        assert await wait_for(scraped_all, 60, 0.5), await prometheus.query(fired)
        lateness = f'sum(delayq_fire_lateness_seconds_count{{topic="{topic}"}})'
        assert await prometheus.query(lateness) == JOBS
        assert await prometheus.query('sum(delayq_stage_seconds_count{stage="publish"})') == JOBS
        assert await prometheus.query('sum(delayq_stage_seconds_count{stage="move"})') == JOBS
        p99 = await prometheus.query(
            "histogram_quantile(0.99, sum by (le) "
            f'(delayq_fire_lateness_seconds_bucket{{topic="{topic}"}}))'
        )
        assert p99 is not None and p99 == p99  # a number, not NaN
        assert await prometheus.query("delayq_slots_owned") == settings.slots
        assert await prometheus.query("delayq_cluster_slots") == settings.slots
        assert await prometheus.query("delayq_zk_connected") == 1
        assert await prometheus.query("delayq_healthy") == 1

        async def ready() -> bool:
            return await prometheus.query("delayq_ready") == 1

        assert await wait_for(ready, 30, 0.5)
        # The shipped alert rules load into a real server and none fires on a healthy run.
        groups = (await prometheus.api("rules"))["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert rules and all(rule["health"] == "ok" for rule in rules), rules
        firing = [r["name"] for r in rules if r.get("state") == "firing"]
        assert firing == []
    finally:
        prometheus.stop()
        await node.stop()


async def test_healthz_is_unhealthy_while_an_actor_is_stuck(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    stall = tmp_path / "stall"
    node = NodeProcess(
        settings,
        tmp_path,
        "node-h",
        metrics_env(port, DELAYQ_STALL_FILE=str(stall), DELAYQ_STALL_TIMEOUT_S="1"),
    )
    try:
        await node.wait_ready()
        await wait_status(port, "/healthz", 200)
        await wait_status(port, "/readyz", 200)
        assert check(settings, port, "all").returncode == 0

        stall.write_text("mover")  # the mover blocks at its next step (the safety wake)
        body = await wait_status(port, "/healthz", 503)
        assert body["status"] == "unhealthy"
        assert any(problem.startswith("mover has been busy") for problem in body["problems"]), body
        assert body["busy_s"]["mover"] > 1
        probe = check(settings, port, "live")
        assert probe.returncode == 1 and "mover" in probe.stdout
        status, metrics = await fetch(port, "/metrics")
        assert status == 200 and "delayq_healthy 0.0" in metrics
        # Readiness is about the cluster and the stores, not this actor.
        assert (await fetch(port, "/readyz"))[0] == 200

        stall.unlink()
        await wait_status(port, "/healthz", 200)
        assert check(settings, port, "live").returncode == 0
    finally:
        await node.stop()


def test_node_check_without_a_metrics_port_says_so(settings: Settings) -> None:
    probe = check(settings, 0, "all")
    assert probe.returncode == 2
    assert "metrics_port is 0" in probe.stderr


def test_node_check_of_a_node_that_is_not_there(settings: Settings) -> None:
    probe = check(settings, free_port(), "ready")
    assert probe.returncode == 1
    assert "no answer" in probe.stdout


@pytest.mark.faults
@pytest.mark.alone
async def test_readyz_is_not_ready_while_redis_is_down(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    node = NodeProcess(
        settings,
        tmp_path,
        "node-r",
        metrics_env(port, DELAYQ_READY_TIMEOUT_S="2", DELAYQ_STATS_INTERVAL_MS="500"),
    )
    try:
        await node.wait_ready()
        await wait_status(port, "/readyz", 200)
        pid = shared_pid("redis")
        os.kill(pid, signal.SIGTERM)
        try:
            body = await wait_status(port, "/readyz", 503)
            assert any(problem.startswith("redis last answered") for problem in body["problems"])
            # Not a reason to restart the node: it is alive and will recover.
            assert (await fetch(port, "/healthz"))[0] == 200
            assert check(settings, port, "ready").returncode == 1
        finally:
            await asyncio.to_thread(stack.up)
        await wait_status(port, "/readyz", 200)
    finally:
        await node.stop()


async def test_json_logs_carry_the_node_id_and_the_slot(settings: Settings, tmp_path: Path) -> None:
    node = NodeProcess(settings, tmp_path, "node-j", {"DELAYQ_LOG_FORMAT": "json"})
    try:
        await node.wait_ready()
        # Ready means joined; its slots are taken after that, each with its log line.
        await wait_served(settings, {"node-j"})
    finally:
        assert await node.stop() == 0
    lines = [
        line
        for line in node.log_path.read_text().splitlines()
        if line and not line.startswith("===")  # the helper's own header line
    ]
    records = [orjson.loads(line) for line in lines]
    assert records and all(r["node_id"] == "node-j" for r in records)
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    took = [r for r in records if r["msg"].startswith("took slot")]
    assert len(took) == settings.slots
    assert sorted(r["slot"] for r in took) == list(range(settings.slots))
