"""A private three-broker Apache Kafka cluster for the Kafka fault scenarios
(tests/test_kafka_faults.py), beside the shared local stack and never touching it.

It runs the stack's own Kafka (cluster/devstack/kafka.py: the jars Maven fetched into
the state folder, the same properties, format step and command): three KRaft nodes that
are each broker and controller, so replication factor 3 and min.insync.replicas 2 for
every topic by default, the offsets and transaction state topics included. It has its
own state folder, ``$DELAYQ_STATE_DIR/kafka-faults`` (data, logs, pid files), and its
own ports: 19400, 19500 and 19600 (controllers on port + 3), or from
DELAYQ_TEST_KAFKA_FAULTS_PORT on (first port; the others 100 and 200 above it).
DELAYQ_TEST_KAFKA_FAULTS_KEEP=1 keeps the folder after the run.

``kafka_cluster`` (a module-scoped fixture; import it into the test module) starts it
and, at the end, kills its processes and deletes its folder. ``KafkaCluster`` has what
the scenarios do to it: find a partition's leader from the brokers' metadata, kill -9,
SIGSTOP / SIGCONT, stop gracefully and start again a broker by name (its log stays on
disk), and wait until the cluster is healthy again (every broker up and every partition
of every topic led, with its full ISR).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import NewTopic
from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from cluster.connections.kafka_conn import make_admin, start_client
from cluster.devstack import kafka, processes
from cluster.devstack.service import HOST, Service, ServicesError, file_tail, state_dir
from cluster.settings.config import Settings

FIRST_PORT = 19400
PORT_STEP = 100
PORT_VARIABLE = "DELAYQ_TEST_KAFKA_FAULTS_PORT"
FOLDER = "kafka-faults"
NAMES = kafka.node_names(3)  # kafka, kafka-2, kafka-3: node ids 1, 2, 3
PARTITIONS = 3  # tests/conftest.py's Collector reads partitions 0..2
REPLICATION = 3
MIN_INSYNC = 2
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
METADATA_TIMEOUT_S = 5.0
_BECAME_ACTIVE = re.compile(
    r"\[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)"
)


def keep_folder() -> bool:
    """DELAYQ_TEST_KAFKA_FAULTS_KEEP=1 keeps the folder (logs, data) after the run, for
    a look; its processes are stopped all the same."""
    return os.environ.get("DELAYQ_TEST_KAFKA_FAULTS_KEEP", "") == "1"


def cluster_ports() -> dict[str, int]:
    raw = os.environ.get(PORT_VARIABLE, "").strip()
    first = int(raw) if raw else FIRST_PORT
    return {name: first + index * PORT_STEP for index, name in enumerate(NAMES)}


class KafkaCluster:
    """Three Apache Kafka nodes under `root`, on `ports` (node name → client port)."""

    def __init__(self, root: Path, ports: dict[str, int]) -> None:
        self.root = root
        self.ports = ports
        prepare = kafka.prepare_with(ports)
        self.services = {
            name: Service(name, port, root, kafka.MAIN_CLASS, prepare, kafka.command, kafka.probe)
            for name, port in ports.items()
        }
        self.ids = {name: kafka.node_id(name) for name in ports}

    # -- addresses -------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in self.ports.values())

    def name_of(self, node_id: int) -> str:
        return next(name for name, nid in self.ids.items() if nid == node_id)

    def settings(self, settings: Settings) -> Settings:
        """`settings` pointed at this cluster (its Kafka only; the rest unchanged)."""
        return settings.replace(kafka_bootstrap=self.bootstrap)

    # -- processes -------------------------------------------------------------------

    def pid(self, name: str) -> int | None:
        """The pid of a running broker (frozen ones too), or None."""
        return processes.running_pid(self.services[name])

    def start(self, *names: str) -> float:
        """Start the named brokers (all by default) that do not run, at once, with the
        data they have (formatted the first time), and wait until each is registered
        (it lists itself in its metadata). Returns the seconds that took."""
        began = time.monotonic()
        starting: list[tuple[Service, int]] = []
        for name in names or tuple(self.ports):
            svc = self.services[name]
            svc.dir.mkdir(parents=True, exist_ok=True)
            pid = self.pid(name)
            if pid is None:
                for port in (svc.port, kafka.controller_port(svc.port)):
                    if processes.port_open(port):
                        raise ServicesError(
                            f"{name}: port {port} is held by {processes.describe_owner(port)};"
                            f" set {PORT_VARIABLE} to move the fault tests' Kafka cluster"
                        )
                pid = processes.spawn(svc)
            starting.append((svc, pid))
        for svc, pid in starting:
            self._wait_registered(svc, pid, began + START_TIMEOUT_S)
        return time.monotonic() - began

    def _wait_registered(self, svc: Service, pid: int, deadline: float) -> None:
        last_error = "no answer yet"
        while True:
            if not processes.alive(pid):
                processes.forget(pid)
                svc.pid_file.unlink(missing_ok=True)
                raise ServicesError(f"{svc.name} (pid {pid}) exited while starting{self.tail(svc)}")
            try:
                svc.probe(svc)
                return
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ServicesError(
                    f"{svc.name} (pid {pid}) not registered on {svc.address} "
                    f"({last_error}){self.tail(svc)}"
                )
            time.sleep(0.25)

    async def restart(self, *names: str) -> float:
        """start() from async code: the named brokers again, with their logs."""
        return await asyncio.to_thread(self.start, *names)

    def send(self, name: str, sig: signal.Signals) -> None:
        pid = self.pid(name)
        assert pid is not None, f"{name} does not run"
        os.kill(pid, sig)

    def freeze(self, name: str) -> None:
        """SIGSTOP: the process stays, answers nothing; its sockets stay open."""
        self.send(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self.send(name, signal.SIGCONT)

    async def kill(self, name: str) -> None:
        """kill -9, and wait until it is gone; its data stays."""
        await self.stop(name, sig=signal.SIGKILL)

    async def stop(
        self, *names: str, sig: signal.Signals = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S
    ) -> dict[str, float]:
        """Send `sig` to the named brokers at once (SIGTERM: a controlled shutdown) and
        wait until they exited; one still running after timeout_s is killed -9 (the
        value is then negative). Returns the seconds each took."""
        pids = {name: self.pid(name) for name in names}
        for pid in pids.values():
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)  # a frozen process acts on nothing else
                    os.kill(pid, sig)
        began = time.monotonic()
        took: dict[str, float] = {}
        for name, pid in pids.items():
            if pid is None:
                took[name] = 0.0
                continue
            killed = False
            while processes.alive(pid):
                if not killed and time.monotonic() - began > timeout_s:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    killed = True
                await asyncio.sleep(0.05)
            took[name] = (time.monotonic() - began) * (-1 if killed else 1)
            processes.forget(pid)
            self.services[name].pid_file.unlink(missing_ok=True)
        return took

    def destroy(self, keep: bool = False) -> None:
        """Kill every broker of the cluster and delete its folder (unless `keep`)."""
        for name in self.ports:
            pid = processes.read_pid(self.services[name])
            if pid is None or not processes.alive(pid):
                continue
            line = processes.cmdline(pid) or ""
            if str(self.root) not in line:  # a reused pid, not ours
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while processes.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            processes.forget(pid)
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def tail(self, svc: Service, lines: int = 15) -> str:
        shown = file_tail(svc.log_file, lines)
        return "; last lines of its log:\n" + "\n".join(f"    {line}" for line in shown)

    def log_lines(self, name: str, level: str = "ERROR") -> list[str]:
        """The lines of a broker's log at a level (" ERROR ", " WARN ")."""
        try:
            text = self.services[name].log_file.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if f"] {level} " in line]

    def active_controller(self) -> str | None:
        """The node that became the active controller last (the highest epoch its log
        announces), or None before any did."""
        latest: tuple[int, int] | None = None
        for svc in self.services.values():
            try:
                text = svc.log_file.read_text(errors="replace")
            except OSError:
                continue
            for found in _BECAME_ACTIVE.finditer(text):
                epoch, node = int(found.group(2)), int(found.group(1))
                if latest is None or epoch > latest[0]:
                    latest = (epoch, node)
        return None if latest is None else self.name_of(latest[1])

    # -- metadata --------------------------------------------------------------------

    async def metadata(self, name: str) -> dict[str, Any] | None:
        """The metadata (every topic) one broker gives, or None when it does not answer."""
        conn = None
        try:
            async with asyncio.timeout(METADATA_TIMEOUT_S):
                conn = await create_conn(
                    HOST, self.ports[name], request_timeout_ms=int(METADATA_TIMEOUT_S * 1000)
                )
                response = await conn.send(MetadataRequest(None))
        except Exception:
            return None
        finally:
            if conn is not None:
                conn.close()
        answer: dict[str, Any] = response.to_object()
        return answer

    async def leaders(self, topic: str) -> dict[int, int]:
        """partition → its leader's node id (-1: none), as the first broker that
        answers and knows the topic says."""
        for name in self.ports:
            meta = await self.metadata(name)
            for described in (meta or {}).get("topics", []):
                if described["topic"] == topic and described["partitions"]:
                    return {p["partition"]: p["leader"] for p in described["partitions"]}
        raise AssertionError(f"no broker describes {topic}")

    async def busiest_leader(self, topic: str) -> str:
        """The broker leading the most of the topic's partitions (on a tie, the one
        leading the lowest partition)."""
        leaders = await self.leaders(topic)
        counts = Counter(leaders.values())
        best = max(counts.values())
        leader = min((p for p, nid in leaders.items() if counts[nid] == best), key=int)
        return self.name_of(leaders[leader])

    async def problems(self) -> list[str]:
        """What keeps the cluster from being healthy: a broker that does not answer or
        does not list all three, a topic or partition with an error, no leader, or an
        ISR short of its replicas. Asked of every broker: each has its own copy of the
        metadata. Empty when healthy."""
        found: list[str] = []
        wanted = set(self.ids.values())
        for name in self.ports:
            meta = await self.metadata(name)
            if meta is None:
                found.append(f"{name} does not answer")
                continue
            listed = {broker["node_id"] for broker in meta["brokers"]}
            if listed != wanted:
                found.append(f"{name} lists brokers {sorted(listed)}")
            for topic in meta["topics"]:
                if topic["error_code"]:
                    found.append(f"{name}: {topic['topic']} error {topic['error_code']}")
                for p in topic["partitions"]:
                    if (
                        p["error_code"]
                        or p["leader"] not in wanted
                        or sorted(p["isr"]) != sorted(p["replicas"])
                        or p.get("offline_replicas")
                    ):
                        found.append(
                            f"{name}: {topic['topic']}[{p['partition']}] leader {p['leader']} "
                            f"replicas {p['replicas']} isr {p['isr']} error {p['error_code']}"
                        )
        return found

    async def wait_healthy(self, timeout_s: float = 90.0) -> float:
        """Wait until problems() is empty; returns the seconds that took."""
        began = time.monotonic()
        while True:
            found = await self.problems()
            if not found:
                return time.monotonic() - began
            if time.monotonic() - began > timeout_s:
                raise AssertionError(
                    f"the Kafka fault cluster is not healthy after {timeout_s:.0f} s: "
                    + "; ".join(found[:10])
                )
            await asyncio.sleep(0.5)

    async def create_topic(self, settings: Settings, prefix: str = "faults") -> str:
        """A new topic of PARTITIONS partitions, replication factor 3 and
        min.insync.replicas 2, once every broker sees it with its full ISR."""
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        ours = self.settings(settings)
        admin = make_admin(ours)
        try:
            await start_client(admin, ours)
            response = await admin.create_topics(
                [
                    NewTopic(
                        name,
                        PARTITIONS,
                        REPLICATION,
                        topic_configs={"min.insync.replicas": str(MIN_INSYNC)},
                    )
                ]
            )
        finally:
            await admin.close()
        errors = [error for error in response.to_object()["topic_errors"] if error["error_code"]]
        assert not errors, f"creating {name}: {errors}"
        await self.wait_healthy(30)
        return name


@pytest.fixture(scope="module", name="kafka_cluster")
def kafka_cluster_fixture(stack_env: dict[str, str]) -> Iterator[KafkaCluster]:
    """The private three-broker cluster, started for the module (a few leftovers of an
    interrupted run under its folder are killed and deleted first) and deleted after."""
    kafka.fetch()  # the jars: once, shared with the local stack
    cluster = KafkaCluster(state_dir() / FOLDER, cluster_ports())
    cluster.destroy()
    try:
        took = cluster.start()
        print(f"\nKafka fault cluster {cluster.bootstrap} started in {took:.1f} s")
        yield cluster
    finally:
        cluster.destroy(keep=keep_folder())
