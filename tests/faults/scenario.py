"""The one fault scenario runner, `scenario`: node processes under a load while a
fault strikes, settled and judged. A test gives it a Stage (the fixture `stage`: its
settings, client, Redis, topic, collector and tmp_path), a name and the fault; its
options choose the nodes (how many, their environment), the load (the steady load for
a time or until some seconds after the fault returned, or a load of one's own with its
ledger, something done before it, a watchdog on its end), how it settles (timeout,
who polls the collector meanwhile, whether the row is recorded), each node's /metrics
sampled (Run), the nodes serving every slot before the load, and all of them running
throughout. The runners of the modules (failover, cancels, Kafka, MySQL servers,
partial partitions) are thin wrappers of it.

Also the faults and runs the modules share: down_for (a service of the shared stack
stopped for a while) and crash_at (a node dying at a failpoint, a second one taking
over: a scenario too)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
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
from tests.faults.shared import shared_pid
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
    exited: dict[str, int] = field(default_factory=dict)  # node → exit code, once settled

    def mark(self, event: str) -> None:
        self.marks[event] = time.time()

    async def sample(self, done: asyncio.Event) -> None:
        while not done.is_set():
            at = time.time()
            nodes = {
                node: await asyncio.to_thread(read_metrics, port)
                for node, port in self.ports.items()
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
Fault = Callable[[Run], Awaitable[None]]
# A scenario's load: made from the ledger it logs its calls in, the client and the topic.
Load = Callable[[Ledger, DelayClient, str], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Stage:
    """What a fault scenario runs on: the test's settings (the nodes' too), client,
    Redis, topic, the collector reading that topic, and tmp_path (the nodes' logs)."""

    settings: Settings
    client: DelayClient
    redis: RedisClient
    topic: str
    collector: Collector
    tmp_path: Path

    def with_settings(self, **changes: Any) -> Stage:
        """The same stage with changes to its settings (client and Redis unchanged)."""
        return replace(self, settings=self.settings.replace(**changes))


@pytest.fixture
def stage(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> Stage:
    """The test's Stage, from conftest's fixtures (or a module's own settings and redis,
    which a private-stack module defines in their place). A module imports it."""
    return Stage(settings, client, redis, topic, collector, tmp_path)


async def scenario(
    stage: Stage,
    name: str,
    fault: Fault,
    *,
    nodes: int = 2,
    node_env: NodeEnv = None,
    load: Load | None = None,
    ledger: Ledger | None = None,
    extra: Callable[[int], list[dict[str, Any]]] | None = None,
    load_s: float = LOAD_S,
    load_after_fault_s: float | None = None,
    load_errors: list[str] | None = None,
    load_timeout_s: float | None = None,
    before_load: Callable[[], Awaitable[None]] | None = None,
    reader_errors: list[str] | None = None,
    fault_at_s: float = 2.0,
    settle_timeout_s: float = 120,
    reader_polls: bool = False,
    final_tries: int = 1,
    recorded: bool = True,
    sampled: bool = False,
    served_first: bool = False,
    all_running: bool = False,
) -> tuple[Verdict, Ledger, Run]:
    """`nodes` node processes named `name`-0, `name`-1, … (node_env: the same variables
    for each, or each one's by its index) under a load, `fault` struck fault_at_s into
    it; settled and judged as `name`; the nodes killed at the end, also on failure.

    The load: steady_load (tests/faults/load.py) for load_s, with extra's jobs each
    tick; or, given load_after_fault_s, until that long after the fault returned (then
    stopped by an event); load_errors keeps what its failed calls raised. Or `load`,
    a load of one's own (it runs for a time of its own; extra, load_s,
    load_after_fault_s and load_errors are the steady load's), logging in `ledger`
    (a load object's own ledger; a new one by default). before_load runs once the
    collector is read, before the load and its clock start. load_timeout_s: fail,
    printing where every task waits, when the load has not ended that long after the
    fault returned (by default it is awaited however long it takes).

    The collector is read throughout (reading; reader_errors keeps what its polls
    raised instead of raising it). Settling (settle): settle_timeout_s; reader_polls:
    the reader goes on polling while it settles (else settle polls itself); final_tries
    for the last verdict; recorded: the row is printed and appended to RESULTS (else
    the caller records its own).

    sampled: each node gets a metrics port, sampled every SAMPLE_S into run.rounds.
    served_first: the load begins once the nodes serve every slot between them.
    all_running: assert that no node exited before the end (the fault kills none);
    which ones did is in run.exited either way. A fault may start more nodes and add
    them to run.procs: they are killed at the end too (and not sampled)."""
    if load is not None and (extra or load_after_fault_s is not None or load_errors is not None):
        raise ValueError("extra, load_after_fault_s and load_errors are the steady load's")
    names = [f"{name}-{i}" for i in range(nodes)]
    ports = {node: free_port() for node in names} if sampled else {}

    def env_of(i: int, node: str) -> dict[str, str]:
        own = node_env(i) if callable(node_env) else (node_env or {})
        return {"DELAYQ_METRICS_PORT": str(ports[node]), **own} if sampled else own

    procs = [
        NodeProcess(stage.settings, stage.tmp_path, node, env_of(i, node))
        for i, node in enumerate(names)
    ]
    run = Run(name, procs, ports)
    ledger = Ledger() if ledger is None else ledger
    stop = asyncio.Event()  # the steady load's, given load_after_fault_s

    def make_load() -> Coroutine[Any, Any, None]:
        if load is not None:
            return load(ledger, stage.client, stage.topic)
        return steady_load(
            ledger,
            stage.client,
            stage.topic,
            seconds=load_s,
            extra=extra,
            stop=stop if load_after_fault_s is not None else None,
            errors=load_errors,
        )

    async def settled() -> Verdict:
        result = await settle(
            name if recorded else None,
            ledger,
            stage.collector,
            stage.client,
            stage.redis,
            settle_timeout_s,
            reader_polls=reader_polls,
            final_tries=final_tries,
        )
        run.mark("settled")
        return result

    done = asyncio.Event()
    sampler: asyncio.Task[None] | None = None
    running: asyncio.Task[None] | None = None
    try:
        for proc in procs:
            await proc.wait_ready()
        if served_first:
            await wait_served(stage.settings, set(names))
        if sampled:
            sampler = asyncio.create_task(run.sample(done))
        async with reading(stage.collector, reader_errors):
            if before_load is not None:
                await before_load()
            run.mark("load")
            running = asyncio.create_task(make_load())
            await asyncio.sleep(fault_at_s)
            await fault(run)
            if load_after_fault_s is not None:
                await asyncio.sleep(load_after_fault_s)
                stop.set()
            await finished(running, load_timeout_s)
            run.mark("load_end")
            if reader_polls:
                result = await settled()
        if not reader_polls:
            result = await settled()
        run.exited = {
            proc.name: code for proc in run.procs if (code := proc.returncode) is not None
        }
        if all_running:
            assert not run.exited, "; ".join(
                f"{proc.name} exited: {proc.log_tail()}"
                for proc in run.procs
                if proc.name in run.exited
            )
    finally:
        if running is not None and not running.done():  # the fault or the wait failed
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        done.set()
        if sampler is not None:
            await sampler
        for proc in run.procs:
            proc.kill()
    return result, ledger, run


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: its coroutines, outermost first, as file:line."""
    where = []
    step: Any = task.get_coro()
    while step is not None and hasattr(step, "cr_frame"):
        frame = step.cr_frame
        if frame is not None:
            where.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}")
        step = step.cr_await
    return where


async def finished(task: asyncio.Task[None], timeout_s: float | None) -> None:
    """Await the load; if it has not ended within timeout_s (None: no limit), print
    where every task waits, then fail."""
    if timeout_s is None:
        await task
        return
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        for other in asyncio.all_tasks():
            print(f"{other.get_name()}: {' <- '.join(awaiting(other))}")
        task.cancel()
        pytest.fail(f"the load did not finish within {timeout_s:g} s")
    task.result()


async def down_for(service: str, seconds: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop a service of the local stack (with `sig`: SIGTERM, or SIGKILL for a crash),
    wait, and start what does not run again."""
    os.kill(shared_pid(service), sig)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(stack.up)


async def crash_at(
    stage: Stage, failpoint: str, name: str, node_env: dict[str, str] | None = None
) -> tuple[Verdict, Ledger]:
    """A node (with node_env) dies at `failpoint` under the steady load (4 s); a second
    node, "survivor" (node_env, started when the first died), takes over. Settled and
    judged as `name`."""
    env = node_env or {}

    async def fault(run: Run) -> None:
        assert await run.procs[0].wait_exit() == EXIT_CODE
        survivor = NodeProcess(stage.settings, stage.tmp_path, "survivor", env)
        run.procs.append(survivor)
        await survivor.wait_ready()

    result, ledger, _ = await scenario(
        stage,
        name,
        fault,
        nodes=1,
        node_env={**env, "DELAYQ_FAILPOINT": failpoint},
        load_s=4.0,
        fault_at_s=0,
    )
    return result, ledger
