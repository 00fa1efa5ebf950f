"""A delayq node: its connections, its actors, and its lifecycle.

    node = Node(settings)
    await node.start()      # connects, checks the schema, starts the actors
    ...
    await node.stop()       # stops actors in order; nothing in flight is lost

`delayq node` runs one until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from actors.dispatcher import Dispatcher
from actors.membership import Membership
from actors.mover import Mover
from actors.ownership import HeldSlots
from actors.preflight import check_redis
from actors.queues import SlotQueue
from actors.reaper import RetryReaper
from actors.reconciler import Reconciler
from actors.recorder import Recorder
from actors.scanner import SlotScanner
from actors.supervisor import Supervisor
from actors.wake_listener import WakeListener
from cluster.config import Settings
from cluster.keys import KeySpace
from cluster.mysql_store import MySQLStore
from cluster.redis_conn import RedisClient, open_redis
from cluster.scripts import Scripts

log = logging.getLogger(__name__)


def make_producer(settings: Settings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap.split(","),
        client_id=f"delayq-{settings.node_id}",
        acks="all",
        enable_idempotence=settings.kafka_idempotence,
        linger_ms=settings.kafka_linger_ms,
        request_timeout_ms=settings.kafka_request_timeout_ms,
        max_batch_size=256 * 1024,
        max_request_size=settings.kafka_max_batch_bytes,
    )


@dataclass
class NodeParts:
    """Everything a running node holds, created in start()."""

    redis: RedisClient
    producer: AIOKafkaProducer
    held: HeldSlots
    membership: Membership
    scanner: SlotScanner
    mover: Mover
    dispatcher: Dispatcher
    reaper: RetryReaper
    recorder: Recorder
    reconciler: Reconciler
    supervisor: Supervisor


class Node:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = KeySpace(settings.key_prefix)
        self.mysql = MySQLStore(settings, settings.node_id)
        self.parts: NodeParts | None = None
        self._resources: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        """Connect, check the stores, join the cluster and start the actors. Whatever
        was opened is closed again if a step fails; stop() closes it all in reverse."""
        s = self.settings
        async with contextlib.AsyncExitStack() as resources:
            await self.mysql.open()
            resources.push_async_callback(self.mysql.close)
            redis = await open_redis(s.redis_url)
            resources.push_async_callback(redis.aclose)
            for warning in await check_redis(redis):
                log.warning("%s", warning)
            scripts = Scripts(redis, self.keys)
            producer = make_producer(s)
            resources.push_async_callback(producer.stop)
            await producer.start()
            parts = self._assemble(redis, scripts, producer)
            await parts.membership.join()  # ClusterConfigError if the slot count disagrees
            resources.push_async_callback(parts.membership.leave)
            parts.supervisor.start()
            resources.push_async_callback(parts.supervisor.stop)
            self.parts = parts
            self._resources = resources.pop_all()
        log.info("node %s started: %d slots, kafka %s", s.node_id, s.slots, s.kafka_bootstrap)

    def _assemble(
        self, redis: RedisClient, scripts: Scripts, producer: AIOKafkaProducer
    ) -> NodeParts:
        """The actors and the queues between them, wired through their constructors."""
        s = self.settings
        held = HeldSlots()
        mover_queue, dispatch_queue = SlotQueue(s.queue_size), SlotQueue(s.queue_size)
        reconcile_queue = SlotQueue(s.queue_size)
        scanner = SlotScanner(held, mover_queue, s.safety_wake_ms, s.clock_offset_ms)
        mover = Mover(scripts, held, scanner, mover_queue, dispatch_queue, s.move_batch)
        dispatcher = Dispatcher(s, scripts, producer, held, scanner, dispatch_queue)
        reaper = RetryReaper(s, scripts, held, scanner)
        recorder = Recorder(
            scripts, self.mysql, held, s.record_batch, s.record_interval_ms, s.marker_retention_ms
        )
        listener = WakeListener(s.redis_url, self.keys.wake_channel, held, scanner)
        reconciler = Reconciler(s, self.mysql, scripts, held, reconcile_queue)

        def acquired(slot: int) -> None:
            scanner.wake(slot, 0)
            reconcile_queue.put_nowait(slot)

        membership = Membership(
            s, scripts, held, on_acquired=acquired, quiesce=dispatcher.wait_idle
        )
        # Stop order: sources of work first, finishers last; membership releases the
        # slots once everything else is done with them.
        supervisor = Supervisor(
            [listener, reconciler, scanner, mover, dispatcher, reaper, recorder, membership]
        )
        return NodeParts(
            redis,
            producer,
            held,
            membership,
            scanner,
            mover,
            dispatcher,
            reaper,
            recorder,
            reconciler,
            supervisor,
        )

    async def wait(self) -> None:
        """Until the actors stop (after stop()) or the supervisor gives up."""
        if self.parts is not None:
            await self.parts.supervisor.wait()

    async def stop(self) -> None:
        """Stop actors in order, leave the cluster, flush the producer, close
        connections. Idempotent."""
        resources, self._resources = self._resources, None
        if resources is None:
            return
        await resources.aclose()
        log.info("node %s stopped", self.settings.node_id)

    def stats(self) -> dict[str, int]:
        if self.parts is None:
            return {}
        p = self.parts
        return {
            "moved": p.mover.moved_total,
            "fired": p.dispatcher.fired_total,
            "publish_failures": p.dispatcher.failed_total,
            "retried": p.reaper.retried_total,
            "dead": p.reaper.dead_total,
            "recorded": p.recorder.recorded_total,
            "slots_owned": len(p.held.owned()),
            "readded": p.reconciler.readded_total,
            "loaded": p.reconciler.loaded_total,
        }


def write_ready_file(path: Path, node: Node) -> None:
    """Say "started" in a file, atomically (a reader never sees half of it)."""
    member = node.parts.membership.member if node.parts is not None else None
    data = orjson.dumps({"node_id": node.settings.node_id, "member": member, "pid": os.getpid()})
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    temporary.replace(path)


def clear_ready_file(path: Path) -> None:
    path.unlink(missing_ok=True)


async def run_node(settings: Settings, *, ready_file: Path | None = None) -> int:
    """Run a node until SIGTERM/SIGINT; the exit code for the process. With ready_file,
    the node writes that file once started and deletes it when it stops."""
    node = Node(settings)
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    if ready_file is not None:
        clear_ready_file(ready_file)  # a stale one from an earlier run
    await node.start()
    if ready_file is not None:
        write_ready_file(ready_file, node)
    waiter = asyncio.create_task(node.wait())
    stopper = asyncio.create_task(stop_requested.wait())
    await asyncio.wait((waiter, stopper), return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if waiter.done() and waiter.exception() is not None:
        log.error("node failed: %s", waiter.exception())
        code = 1
    log.info("stopping node %s", settings.node_id)
    if ready_file is not None:
        clear_ready_file(ready_file)
    await node.stop()
    stopper.cancel()
    if not waiter.done():
        await waiter
    log.info("final counters: %s", node.stats())
    return code
