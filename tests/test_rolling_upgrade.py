"""A rolling upgrade from the last release that wrote version 1 of the envelope header,
with jobs in flight: nodes of that release (its own code, from git) fire jobs its
producers scheduled, lean and full, with priorities and expiry; the nodes are replaced
one at a time by this release's, first writing version 1 (envelope_version=1, while an
old node still runs) and then, restarted one at a time again, version 2. Every job fires
once, none is lost, and MySQL records each as fired (docs/operations.md, Upgrades)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from cluster import DelayClient, Job
from cluster.devstack.nodes import settings_env
from cluster.model.contract import JobStatus
from cluster.model.envelope import read_fields
from cluster.model.keys import KeySpace
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.processes import NodeProcess, wait_served

pytestmark = pytest.mark.slow

# The last tree whose processes write (and read) envelope header version 1 only.
OLD_TREE = "229c905a290aad4f93d9993aa90d87ce5aa930a1"
ROOT = Path(__file__).resolve().parent.parent

# Run by the old release's Python, in its tree: schedule the jobs read from stdin.
OLD_PRODUCER = """
import asyncio, sys, orjson
from cluster import DelayClient, Job
from cluster.settings.config import Settings

async def main():
    jobs = [Job(**job) for job in orjson.loads(sys.stdin.buffer.read())]
    async with DelayClient(Settings.from_env()) as client:
        await client.schedule_many(jobs)

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old release's code (cluster, actors, lua, schema), out of git."""
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_TREE}^{{commit}}"], check=False
    )
    if known.returncode != 0:
        pytest.skip(f"this checkout has no git history with {OLD_TREE[:12]}")
    dest = tmp_path_factory.mktemp("old-release")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", OLD_TREE, "cluster", "actors", "lua", "schema"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def jobs_of(prefix: str, topic: str, count: int, start_s: float, spread_s: float) -> list[Job]:
    """count jobs due from start_s to start_s + spread_s from now: every third with a
    priority, every fifth with an expiry long enough never to end it."""
    return [
        Job(
            topic,
            {"n": i},
            delay=start_s + spread_s * i / count,
            job_id=f"{prefix}-{i}",
            priority=(i % 3) * 5 or None,
            expires_after=3600 if i % 5 == 0 else None,
        )
        for i in range(count)
    ]


def schedule_as_old_release(old_tree: Path, settings: Settings, jobs: list[Job]) -> None:
    spec = [
        {k: v for k, v in vars(job).items() if k not in ("at",) and v is not None} for job in jobs
    ]
    subprocess.run(
        [sys.executable, "-c", OLD_PRODUCER],
        cwd=old_tree,
        env={**os.environ, **settings_env(settings)},
        input=orjson.dumps(spec),
        check=True,
        timeout=120,
    )


async def header_versions(client: DelayClient) -> Counter[int]:
    """How many envelopes in Redis carry each header version."""
    keys = KeySpace(client.settings.key_prefix)
    found: Counter[int] = Counter()
    for slot in range(client.settings.slots):
        for envelope in (await client.scripts.redis.hgetall(keys.slot(slot).jobs)).values():
            fields = bytes(envelope).split(b"|")[1]
            read_fields(fields)  # every one readable
            found[2 if fields.startswith(b"v=") else 1] += 1
    return found


async def replace(
    old: NodeProcess, settings: Settings, log_dir: Path, name: str, version: int, others: set[str]
) -> NodeProcess:
    """SIGTERM a node (it hands its slots over), start this release's in its place."""
    assert await old.stop() == 0, old.log_tail()
    new = NodeProcess(settings, log_dir, name, {"DELAYQ_ENVELOPE_VERSION": str(version)})
    await new.wait_ready()
    await wait_served(settings, others | {name})
    return new


async def test_a_rolling_upgrade_with_jobs_in_flight_fires_each_once(
    settings: Settings, topic: str, collector: Collector, tmp_path: Path, old_tree: Path
) -> None:
    # Jobs due more than 5 s ahead are stored lean (the header alone) and filled later.
    settings = settings.replace(payload_lead_ms=5000)
    old_jobs = jobs_of("old", topic, 600, 3.0, 40.0)
    schedule_as_old_release(old_tree, settings, old_jobs)
    nodes = [NodeProcess(settings, tmp_path, name, cwd=old_tree) for name in ("node-a", "node-b")]
    try:
        for node in nodes:
            await node.wait_ready()
        await wait_served(settings, {"node-a", "node-b"})
        async with DelayClient(settings.replace(envelope_version=1)) as client:
            assert (await header_versions(client))[1] == 600
            await collector.until(30, timeout_s=30)  # firing has begun
            nodes[0] = await replace(nodes[0], settings, tmp_path, "node-a", 1, {"node-b"})
            # Beside a node of the old release, this one's producers write version 1.
            mixed_jobs = jobs_of("mixed", topic, 200, 1.0, 10.0)
            await client.schedule_many(mixed_jobs)
            nodes[1] = await replace(nodes[1], settings, tmp_path, "node-b", 1, {"node-a"})
            for i, name in enumerate(("node-a", "node-b")):
                other = {"node-b", "node-a"} - {name}
                nodes[i] = await replace(nodes[i], settings, tmp_path, name, 2, other)
            still = await header_versions(client)
        assert still[1] > 0, "no old envelope was left to read after the upgrade"
        async with DelayClient(settings) as client:
            new_jobs = jobs_of("new", topic, 200, 1.0, 5.0)
            await client.schedule_many(new_jobs)
            everything = old_jobs + mixed_jobs + new_jobs
            wanted = {str(job.job_id) for job in everything}
            deadline = time.monotonic() + 90
            while not wanted <= {str(r["job_id"]) for r in collector.records}:
                assert time.monotonic() < deadline, "jobs left unfired"
                await collector.poll()
            await collector.quiet_for(1.0)
            rows = await client.mysql.get_many(sorted(wanted))
    finally:
        for node in nodes:
            node.kill()
    fired = Counter(str(r["job_id"]) for r in collector.records)
    assert set(fired) == wanted
    assert [job_id for job_id, n in fired.items() if n > 1] == []
    assert {job_id: row.status for job_id, row in rows.items()} == dict.fromkeys(
        wanted, JobStatus.FIRED
    )
    by_id = {r["job_id"]: r for r in collector.records}
    for job in everything:
        record = by_id[job.job_id]
        # Tails the old release made (its producers, its filler) lack it; the rest
        # carry it, and every job scheduled after the upgrade does.
        expected = job.priority or 0
        assert record.get("priority", expected) == expected
        if str(job.job_id).startswith("new-"):
            assert record["priority"] == expected
