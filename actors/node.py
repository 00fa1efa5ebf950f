"""A delayq node: its connections, its actors, and its lifecycle.

    node = Node(settings)
    await node.start()      # connects, checks the schema, starts the actors
    ...
    await node.stop()       # stops actors in order; nothing in flight is lost

`delayq node` runs one until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
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
        self._stopped = False

    async def start(self) -> None:
        s = self.settings
        await self.mysql.open()
        redis = await open_redis(s.redis_url)
        try:
            for warning in await check_redis(redis):
                log.warning("%s", warning)
        except BaseException:
            await redis.aclose()
            await self.mysql.close()
            raise
        scripts = Scripts(redis, self.keys)
        producer = make_producer(s)
        membership = Membership(s, scripts)
        try:
            await producer.start()
            await membership.join()  # ClusterConfigError if the slot count disagrees
        except BaseException:
            await producer.stop()
            await redis.aclose()
            await self.mysql.close()
            raise
        mover_queue, dispatch_queue = SlotQueue(s.queue_size), SlotQueue(s.queue_size)
        scanner = SlotScanner(membership, mover_queue, s.safety_wake_ms, s.clock_offset_ms)
        mover = Mover(scripts, membership, scanner, mover_queue, dispatch_queue, s.move_batch)
        dispatcher = Dispatcher(s, scripts, producer, membership, scanner, dispatch_queue)
        reaper = RetryReaper(s, scripts, membership, scanner)
        recorder = Recorder(
            scripts, self.mysql, membership, s.record_batch, s.record_interval_ms,
            s.marker_retention_ms,
        )
        listener = WakeListener(s.redis_url, self.keys.wake_channel, membership, scanner)
        reconcile_queue = SlotQueue(s.queue_size)
        reconciler = Reconciler(s, self.mysql, scripts, membership, reconcile_queue)

        def acquired(slot: int) -> None:
            scanner.wake(slot, 0)
            reconcile_queue.put_nowait(slot)

        membership.on_acquired = acquired
        membership.quiesce = dispatcher.wait_idle
        # Stop order: sources of work first, finishers last; membership releases the
        # slots once everything else is done with them.
        supervisor = Supervisor(
            [listener, reconciler, scanner, mover, dispatcher, reaper, recorder, membership]
        )
        self.parts = NodeParts(
            redis, producer, membership, scanner, mover, dispatcher, reaper, recorder,
            reconciler, supervisor,
        )
        supervisor.start()
        log.info("node %s started: %d slots, kafka %s", s.node_id, s.slots, s.kafka_bootstrap)

    async def wait(self) -> None:
        """Until the actors stop (after stop()) or the supervisor gives up."""
        if self.parts is not None:
            await self.parts.supervisor.wait()

    async def stop(self) -> None:
        """Stop actors in order, flush the producer, close connections. Idempotent."""
        if self._stopped or self.parts is None:
            return
        self._stopped = True
        parts = self.parts
        try:
            await parts.supervisor.stop()
        finally:
            try:
                await parts.producer.stop()
            finally:
                await parts.redis.aclose()
                await self.mysql.close()
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
            "slots_owned": len(p.membership.owned()),
            "readded": p.reconciler.readded_total,
            "loaded": p.reconciler.loaded_total,
        }


def write_ready_file(path: Path, node: Node) -> None:
    """Say "started" in a file, atomically (a reader never sees half of it)."""
    member = node.parts.membership.member if node.parts is not None else None
    data = orjson.dumps({"node_id": node.settings.node_id, "member": member,
                         "pid": os.getpid()})
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
