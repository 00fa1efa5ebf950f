"""The one fault scenario runner: node processes under the steady load while a fault
strikes, settled and judged; with its options, each node's /metrics sampled (Run), the
nodes serving every slot before the load, and all of them running throughout. Also
the faults and runs the modules share: down_for (a service of the shared stack stopped
for a while) and crash_at (a node dying at a failpoint, a second one taking over)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from actors.failpoints import EXIT_CODE
from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.devstack.nodes import free_port
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.load import LOAD_S, reading, steady_load
from tests.faults.settle import settle
from tests.faults.verdict import Ledger, Verdict
from tests.processes import NodeProcess, wait_served

SAMPLE_S = 0.1


def read_metrics(port: int) -> dict[str, float]:
    """A node's unlabelled series (delayq_slots_owned, delayq_jobs_moved_total, …)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


@dataclass
class Round:
    """Every node's metrics at about the same moment."""

    at: float  # time.time()
    nodes: dict[str, dict[str, float]]

    def owned(self, node: str) -> float | None:
        return self.nodes[node].get("delayq_slots_owned")

    def none_owned(self) -> bool:
        return all(self.owned(node) == 0 for node in self.nodes)


@dataclass
class Run:
    """One scenario: its nodes, what they said, and when the fault struck and healed
    (marks "load", "load_end" and "settled" are the runner's; faults add their own)."""

    name: str
    procs: list[NodeProcess]
    ports: dict[str, int]  # node → metrics port (none unless sampled)
    rounds: list[Round] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # event → time.time()

    def mark(self, event: str) -> None:
        self.marks[event] = time.time()

    async def sample(self, done: asyncio.Event) -> None:
        while not done.is_set():
            at = time.time()
            nodes = {
                proc.name: await asyncio.to_thread(read_metrics, self.ports[proc.name])
                for proc in self.procs
            }
            self.rounds.append(Round(at, nodes))
            await asyncio.sleep(SAMPLE_S)

    def between(self, start: str, end: str) -> list[Round]:
        return [r for r in self.rounds if self.marks[start] <= r.at < self.marks[end]]

    def dropped_s(self, node: str, start: str, end: str) -> float:
        """How long the node held no slot between two marks (sampled)."""
        rounds = self.between(start, end)
        zero = [r.at for r in rounds if r.owned(node) == 0]
        return (zero[-1] - zero[0] + SAMPLE_S) if zero else 0.0


NodeEnv = dict[str, str] | Callable[[int], dict[str, str]] | None


async def scenario(
    name: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
    fault: Callable[[Run], Awaitable[None]],
    *,
    nodes: int = 2,
    node_env: NodeEnv = None,
    extra: Callable[[int], list[dict[str, Any]]] | None = None,
    load_s: float = LOAD_S,
    fault_at_s: float = 2.0,
    settle_timeout_s: float = 120,
    sampled: bool = False,
    served_first: bool = False,
    all_running: bool = False,
) -> tuple[Verdict, Ledger, Run]:
    """`nodes` node processes (node_env: the same variables for each, or each one's by
    its index) under the steady load (tests/faults/load.py, with extra's jobs) for
    load_s, `fault` struck fault_at_s into it; settled and judged as `name`.

    sampled: each node gets a metrics port, sampled every SAMPLE_S into run.rounds.
    served_first: the load begins once the nodes serve every slot between them.
    all_running: assert that no node exited before the end (the fault kills none)."""
    names = [f"{name}-{i}" for i in range(nodes)]
    ports = {node: free_port() for node in names} if sampled else {}

    def env_of(i: int, node: str) -> dict[str, str]:
        own = node_env(i) if callable(node_env) else (node_env or {})
        return {"DELAYQ_METRICS_PORT": str(ports[node]), **own} if sampled else own

    procs = [NodeProcess(settings, tmp_path, node, env_of(i, node)) for i, node in enumerate(names)]
    run = Run(name, procs, ports)
    ledger = Ledger()
    done = asyncio.Event()
    sampler: asyncio.Task[None] | None = None
    try:
        for proc in procs:
            await proc.wait_ready()
        if served_first:
            await wait_served(settings, set(names))
        if sampled:
            sampler = asyncio.create_task(run.sample(done))
        async with reading(collector):
            run.mark("load")
            load = asyncio.create_task(
                steady_load(ledger, client, topic, seconds=load_s, extra=extra)
            )
            await asyncio.sleep(fault_at_s)
            await fault(run)
            await load
            run.mark("load_end")
        result = await settle(name, ledger, collector, client, redis, timeout_s=settle_timeout_s)
        run.mark("settled")
        if all_running:
            assert [proc.returncode for proc in procs] == [None] * nodes  # ran throughout
    finally:
        done.set()
        if sampler is not None:
            await sampler
        for proc in procs:
            proc.kill()
    return result, ledger, run


async def down_for(service: str, seconds: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop a service of the local stack (with `sig`: SIGTERM, or SIGKILL for a crash),
    wait, and start what does not run again."""
    pid = stack.service_pid(service)
    assert pid is not None
    os.kill(pid, sig)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(stack.up)


async def crash_at(
    failpoint: str,
    name: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
    node_env: dict[str, str] | None = None,
) -> tuple[Verdict, Ledger]:
    """A node (with node_env) dies at `failpoint` under load; a second node (node_env,
    started when the first died) takes over. Settled and judged as `name`."""
    env = node_env or {}
    crashing = NodeProcess(settings, tmp_path, "crashing", {**env, "DELAYQ_FAILPOINT": failpoint})
    ledger = Ledger()
    survivor: NodeProcess | None = None
    try:
        await crashing.wait_ready()
        async with reading(collector):
            load = asyncio.create_task(steady_load(ledger, client, topic, seconds=4.0))
            assert await crashing.wait_exit() == EXIT_CODE
            survivor = NodeProcess(settings, tmp_path, "survivor", env)
            await survivor.wait_ready()
            await load
        result = await settle(name, ledger, collector, client, redis)
    finally:
        crashing.kill()
        if survivor is not None:
            survivor.kill()
    return result, ledger
