"""What a node logs while Kafka or ZooKeeper is away: one clear WARNING when the outage
starts, one line when it ends, and no run of ERROR lines and tracebacks from the client
libraries (aiokafka, aiozk) in between (cluster/settings/logs.py).

A real `delayq node` process fires a light load while the local stack's broker is
killed and started again 10 s later, or its ZooKeeper is stopped for 10 s and started
again. The test counts the node's log lines of the outage and prints them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster import DelayClient
from cluster.settings.config import Settings
from tests.faults.scenario import down_for
from tests.processes import NodeProcess

# They stop the shared broker and ZooKeeper.
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.alone]

OUTAGE_S = 10.0
# After the restart: time for the node to reconnect and fire what came due meanwhile.
AFTER_S = 15.0
_LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$")


@dataclass(frozen=True)
class OutageLog:
    """The node's log lines written from the start of the outage on."""

    lines: list[str]

    def at(self, level: str) -> list[str]:
        return [line for line in self.lines if (m := _LEVEL.match(line)) and m[1] == level]

    def saying(self, text: str) -> list[str]:
        return [line for line in self.lines if _LEVEL.match(line) and text in line]

    @property
    def tracebacks(self) -> int:
        return sum(line.startswith("Traceback") for line in self.lines)

    def report(self, name: str) -> str:
        return (
            f"{name}: {len(self.at('ERROR'))} ERROR, {len(self.at('WARNING'))} WARNING, "
            f"{self.tracebacks} tracebacks in {len(self.lines)} lines"
        )


async def light_load(client: DelayClient, topic: str, stop: asyncio.Event) -> int:
    """A few jobs due shortly, every 100 ms, so the node publishes throughout."""
    count = 0
    while not stop.is_set():
        await client.schedule(topic, {"n": count}, delay=0.2)
        count += 1
        await asyncio.sleep(0.1)
    return count


@contextlib.asynccontextmanager
async def loaded_node(
    settings: Settings, client: DelayClient, topic: str, tmp_path: Path, name: str
) -> AsyncIterator[NodeProcess]:
    node = NodeProcess(settings, tmp_path, name)
    stop = asyncio.Event()
    load: asyncio.Task[int] | None = None
    try:
        await node.wait_ready()
        load = asyncio.create_task(light_load(client, topic, stop))
        await asyncio.sleep(2.0)
        yield node
    finally:
        stop.set()
        if load is not None:
            await load
        node.kill()


async def outage_log(node: NodeProcess, outage: Callable[[], Awaitable[None]]) -> OutageLog:
    """Run the outage and wait AFTER_S; the node's log lines written meanwhile."""
    start = node.log_path.stat().st_size
    await outage()
    await asyncio.sleep(AFTER_S)
    assert node.returncode is None, node.log_tail()
    with node.log_path.open("rb") as log:
        log.seek(start)
        return OutageLog(log.read().decode(errors="replace").splitlines())


async def test_broker_outage_is_one_warning_and_one_recovery(
    settings: Settings, client: DelayClient, topic: str, tmp_path: Path
) -> None:
    async with loaded_node(settings, client, topic, tmp_path, "kafka-outage") as node:
        log = await outage_log(node, lambda: down_for("kafka", OUTAGE_S, signal.SIGKILL))
    print("\n" + log.report("broker killed for 10 s"))
    assert log.at("ERROR") == []
    assert log.tracebacks == 0
    assert len(log.saying("unreachable")) == 1, log.saying("unreachable")
    assert len(log.saying("reachable again")) == 1, log.saying("reachable again")


async def test_zookeeper_outage_is_one_warning_and_one_recovery(
    settings: Settings, client: DelayClient, topic: str, tmp_path: Path
) -> None:
    async with loaded_node(settings, client, topic, tmp_path, "zk-outage") as node:
        log = await outage_log(node, lambda: down_for("zookeeper", OUTAGE_S, signal.SIGTERM))
    print("\n" + log.report("ZooKeeper stopped for 10 s"))
    assert log.at("ERROR") == []
    assert log.tracebacks == 0
    assert len(log.saying("ZooKeeper unreachable")) == 1, log.saying("ZooKeeper unreachable")
    assert len(log.saying("ZooKeeper reachable again")) == 1, log.saying("reachable again")
