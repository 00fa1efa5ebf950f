"""The faults of benchmarks/soak.py: every part of the production shape
(cluster/devstack/production.py) killed -9 and started again, one after another, and a
rolling upgrade of the nodes.

A step names its target by role, and the target is picked when the step runs: "the
Redis master not yet killed" (a killed master's replica takes over, so the masters at
step time are not the ones at the start), "the ZooKeeper leader" (whoever leads then).
Every step waits until what it restarted answers again (the stack's own readiness
checks, a Redis Cluster serving every hash slot, a node's ready file) before the load
goes on alone until the next step.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

from redis.asyncio import Redis

from cluster.devstack import processes, production, stack
from cluster.devstack.service import CLUSTER_PORTS, HOST, REPLICA_PORTS, Service, tcp_exchange

DOWN_S = 10.0  # how long a killed part stays down before it is started again


@dataclass(frozen=True)
class Step:
    kind: str  # "node", "redis", "mysql", "zookeeper", "kafka", "upgrade"
    target: str  # a service or part name; for redis and zookeeper a role, chosen late

    @property
    def label(self) -> str:
        if self.kind == "upgrade":
            return "rolling upgrade of the nodes"
        return f"kill -9 {self.target}"


def plan() -> list[Step]:
    """Every part once, in an order that spreads the kinds out, then the upgrade."""
    return [
        Step("node", "node-1"),
        Step("redis", "a master"),
        Step("mysql", "mysql"),
        Step("zookeeper", "the leader"),
        Step("kafka", "kafka"),
        Step("node", "node-2"),
        Step("redis", "a master"),
        Step("mysql", "mysql-1"),
        Step("zookeeper", "the next server"),
        Step("kafka", "kafka-2"),
        Step("node", "node-3"),
        Step("redis", "a master"),
        Step("mysql", "mysql-2"),
        Step("zookeeper", "the next server"),
        Step("kafka", "kafka-3"),
        Step("upgrade", "node-1,node-2,node-3"),
    ]


class Faults:
    """Runs the steps; remembers what it killed so each original part dies once."""

    def __init__(self) -> None:
        self.killed: set[str] = set()
        self.log: list[dict[str, object]] = []

    async def run(self, step: Step) -> dict[str, object]:
        """Run one step; what it did and how long each part took to answer again."""
        began = time.time()
        try:
            if step.kind == "upgrade":
                done = await self._upgrade(step.target.split(","))
            elif step.kind == "node":
                done = await self._kill_part(step.target)
            else:
                name = await asyncio.to_thread(self._pick, step)
                done = await self._kill_service(name)
        except Exception as exc:  # reported with the results; the soak goes on
            done = {"error": f"{type(exc).__name__}: {exc}"}
        entry = {"step": step.label, "at": began, **done}
        self.log.append(entry)
        return entry

    def _pick(self, step: Step) -> str:
        if step.kind == "redis":
            return self._redis_master()
        if step.kind == "zookeeper":
            return self._zookeeper(leader=step.target == "the leader")
        return step.target

    def _redis_master(self) -> str:
        for name in [*CLUSTER_PORTS, *REPLICA_PORTS]:
            if name not in self.killed and _redis_role(_service(name).port) == "master":
                return name
        raise RuntimeError("no Redis master left that was not killed before")

    def _zookeeper(self, *, leader: bool) -> str:
        """The leader; or a server not killed before, a follower if one is left (after
        the leader's restart another server leads, maybe the last one not yet killed)."""
        left = [
            svc
            for svc in stack.services()
            if svc.marker == "QuorumPeerMain" and svc.name not in self.killed
        ]
        modes = {svc.name: _zk_mode(svc.port) for svc in left}
        for name, mode in modes.items():
            if (mode == "leader") == leader:
                return name
        if not leader and modes:
            return next(iter(modes))
        raise RuntimeError(f"no ZooKeeper {'leader' if leader else 'server'} left to kill")

    async def _kill_service(self, name: str) -> dict[str, object]:
        svc = _service(name)
        pid = processes.running_pid(svc)
        if pid is None:
            raise RuntimeError(f"{name} does not run")
        os.kill(pid, signal.SIGKILL)
        self.killed.add(name)
        await _gone(pid)
        await asyncio.sleep(DOWN_S)
        began = time.monotonic()
        # `up` starts what is down and waits for it (for Redis, until the cluster is whole).
        await asyncio.to_thread(stack.up)
        return {"target": name, "pid": pid, "back_after_s": round(time.monotonic() - began, 1)}

    async def _kill_part(self, name: str) -> dict[str, object]:
        svc = production.part(name)
        pid = processes.running_pid(svc)
        if pid is None:
            raise RuntimeError(f"{name} does not run")
        os.kill(pid, signal.SIGKILL)
        self.killed.add(name)
        await _gone(pid)
        await asyncio.sleep(DOWN_S)
        began = time.monotonic()
        new = await asyncio.to_thread(production.start, svc)
        return {
            "target": name,
            "pid": pid,
            "new_pid": new,
            "back_after_s": round(time.monotonic() - began, 1),
        }

    async def _upgrade(self, names: list[str]) -> dict[str, object]:
        """Stop each node (SIGTERM: it hands its slots over) and start it again, one at
        a time: how a new release is rolled out."""
        took: dict[str, float] = {}
        for name in names:
            svc = production.part(name)
            began = time.monotonic()
            await asyncio.to_thread(production.stop, svc)
            await asyncio.to_thread(production.start, svc)
            took[name] = round(time.monotonic() - began, 1)
        return {"target": ",".join(names), "restart_s": took}


def _service(name: str) -> Service:
    for svc in stack.services():
        if svc.name == name:
            return svc
    raise RuntimeError(f"no service {name!r} in the stack")


def _redis_role(port: int) -> str:
    async def ask() -> str:
        redis = Redis(host=HOST, port=port, socket_timeout=2)
        try:
            role = await redis.execute_command("ROLE")
            return str(role[0].decode() if isinstance(role[0], bytes) else role[0])
        except Exception:
            return "down"
        finally:
            await redis.aclose()

    return asyncio.run(ask())


def _zk_mode(port: int) -> str:
    """A ZooKeeper server's Mode from `srvr` (leader, follower, standalone), or down."""
    try:
        reply = tcp_exchange(port, b"srvr").decode(errors="replace")
    except OSError:
        return "down"
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "not serving"


async def _gone(pid: int) -> None:
    """Until the killed process is gone (reaped, or a zombie of another parent)."""
    for _ in range(600):  # 30 s at most: SIGKILL is not refused
        if not processes.alive(pid):
            return
        await asyncio.sleep(0.05)
