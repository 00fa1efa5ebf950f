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
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pymysql
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiozk import exc as zk_exc
from redis import exceptions as redis_exc
from redis.exceptions import RedisClusterException

from actors.dispatcher import Dispatcher
from actors.filler import Filler
from actors.membership import Membership
from actors.mover import Mover
from actors.outbox import Outbox
from actors.ownership import HeldSlots
from actors.preflight import check_redis
from actors.publisher import make_producer
from actors.queues import SlotQueue
from actors.reaper import RetryReaper
from actors.reconciler import Reconciler
from actors.recorder import Recorder
from actors.recurring import RecurringTicks
from actors.retention import Retention
from actors.sampler import Sampler
from actors.scanner import SlotScanner
from actors.store_watch import StoreWatch
from actors.supervisor import Supervisor
from actors.tombstones import Tombstones
from actors.transactions import SlotTransactions
from actors.wake_listener import WakeListener
from actors.withdrawal import Withdrawal
from cluster.connections.kafka_conn import broker_answers, start_client
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.errors import ClusterConfigError, ConfigError, SchemaError, StartupFailed, UnsafeConfig
from cluster.model.keys import KeySpace
from cluster.process.runner import one_line, run_process
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings, redact_url
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)


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
    filler: Filler
    outbox: Outbox
    recurring: RecurringTicks
    sampler: Sampler
    retention: Retention
    supervisor: Supervisor
    transactions: SlotTransactions | None  # delivery = exactly_once


class Node:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = KeySpace(settings.key_prefix)
        self.mysql = MySQLStore(settings, settings.node_id)
        self.parts: NodeParts | None = None
        self._resources: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        """Connect, check the stores, join the cluster and start the actors. Whatever
        was opened is closed again if a step fails; stop() closes it all in reverse.

        A store that cannot be reached yet (connection refused, timed out, loading) is
        waited for, with capped backoff and a log line per attempt, until
        startup_timeout_s has passed; then StartupFailed names it. Errors that waiting
        cannot cure (settings, schema, credentials) raise at once."""
        s = self.settings
        deadline = time.monotonic() + s.startup_timeout_s
        async with contextlib.AsyncExitStack() as resources:
            mysql_at = f"{self.mysql.conn_args['host']}:{self.mysql.conn_args['port']}"
            await _wait_for("MySQL", mysql_at, self._open_mysql, deadline, s.startup_timeout_s)
            resources.push_async_callback(self.mysql.close)
            redis = await _wait_for(
                "Redis", redact_url(s.redis_url), self._open_redis, deadline, s.startup_timeout_s
            )
            resources.push_async_callback(redis.aclose)
            scripts = Scripts(
                redis,
                self.keys,
                wait_replicas=self.settings.redis_wait_replicas,
                wait_timeout_ms=self.settings.redis_wait_timeout_ms,
                payload_lead_ms=self.settings.payload_lead_ms,
                envelope_version=self.settings.envelope_version,
            )
            producer = await _wait_for(
                "Kafka", s.kafka_bootstrap, self._start_producer, deadline, s.startup_timeout_s
            )
            resources.push_async_callback(producer.stop)
            parts = self._assemble(redis, scripts, producer)
            if parts.transactions is not None:
                # Closed after the actors have stopped (the stack unwinds in reverse).
                resources.push_async_callback(parts.transactions.close)
                await parts.transactions.start()

            async def join() -> None:
                # ClusterConfigError if the slot count disagrees.
                await _closing_zk_on_failure(parts.membership)

            await _wait_for("ZooKeeper", s.zk_hosts, join, deadline, s.startup_timeout_s)
            resources.push_async_callback(parts.membership.leave)
            parts.supervisor.start()
            resources.push_async_callback(parts.supervisor.stop)
            self.parts = parts
            if s.metrics_port:
                from actors.metrics import MetricsServer  # aiohttp: only when serving

                server = MetricsServer(s, self)
                await server.start()
                resources.push_async_callback(server.stop)
            self._resources = resources.pop_all()
        log.info("node %s started: %d slots, kafka %s", s.node_id, s.slots, s.kafka_bootstrap)

    async def _open_mysql(self) -> None:
        await self.mysql.open()  # closes its pool again if the schema check fails

    async def _open_redis(self) -> RedisClient:
        redis = await open_redis(self.settings)
        try:
            for warning in await check_redis(redis):
                log.warning("%s", warning)
        except BaseException:
            await redis.aclose()
            raise
        return redis

    async def _start_producer(self) -> AIOKafkaProducer:
        producer = make_producer(self.settings)
        try:
            # A refusal (SASL credentials, TLS, CA) raises KafkaAccessError, which start-up
            # does not retry; a broker that is not up yet raises what aiokafka raised.
            await start_client(producer, self.settings)
        except BaseException:
            await producer.stop()
            raise
        return producer

    def _assemble(
        self, redis: RedisClient, scripts: Scripts, producer: AIOKafkaProducer
    ) -> NodeParts:
        """The actors and the queues between them, wired through their constructors."""
        s = self.settings
        held = HeldSlots()
        mover_queue, dispatch_queue = SlotQueue(s.queue_size), SlotQueue(s.queue_size)
        reconcile_queue = SlotQueue(s.queue_size)
        scanner = SlotScanner(
            held,
            mover_queue,
            s.safety_wake_ms,
            s.clock_offset_ms,
            s.fire_advance_ms,
            s.round_interval_ms,
        )
        mover = Mover(scripts, held, scanner, mover_queue, dispatch_queue, s.move_batch)
        transactions = SlotTransactions(s, scripts, held) if s.delivery == "exactly_once" else None
        dispatcher = Dispatcher(
            s, scripts, self.mysql, producer, held, scanner, dispatch_queue, transactions
        )
        reaper = RetryReaper(s, scripts, held, scanner, transactions)
        recorder = Recorder(
            scripts, self.mysql, held, s.record_batch, s.record_interval_ms, s.marker_retention_ms
        )
        listener = WakeListener(s, redis, self.keys.wake_channel, held, scanner)
        reconciler = Reconciler(s, self.mysql, scripts, held, reconcile_queue)
        filler = Filler(s, scripts, self.mysql, held)
        outbox = Outbox(s, scripts, self.mysql, held)
        recurring = RecurringTicks(s, scripts, self.mysql, held)
        sampler = Sampler(s, redis, self.keys, self.mysql, producer, held)
        retention = Retention(s, self.mysql, held)
        tombstones = Tombstones(s, scripts, self.mysql, held, scanner.redis_now_ms)

        def acquired(slot: int) -> None:
            scanner.wake(slot, 0)
            reconcile_queue.put_nowait(slot)
            filler.acquired(slot)

        async def redis_answers() -> bool:
            return bool(await redis.ping())

        async def kafka_answers() -> bool:
            return await broker_answers(producer.client)

        # Off (0): nothing to check for.
        bound_s = s.store_unreachable_release_ms / 1000
        asks = {"redis": redis_answers, "kafka": kafka_answers}
        store_watch = StoreWatch(bound_s, asks) if bound_s > 0 else None
        membership = Membership(
            s,
            scripts,
            held,
            on_acquired=acquired,
            quiesce=dispatcher.wait_idle,
            adopt=reaper.adopt,
            withdrawal=Withdrawal(s, store_watch),
        )
        # Stop order: sources of work first, finishers last; membership releases the
        # slots once everything else is done with them.
        supervisor = Supervisor(
            [
                sampler,
                retention,
                listener,
                recurring,
                reconciler,
                tombstones,
                filler,
                outbox,
                scanner,
                mover,
                dispatcher,
                reaper,
                recorder,
                membership,
                # After the membership, which reads it until it has left.
                *([store_watch] if store_watch is not None else []),
            ]
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
            filler,
            outbox,
            recurring,
            sampler,
            retention,
            supervisor,
            transactions,
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
            "filled": p.filler.filled_total,
            "tails_loaded_at_claim": p.dispatcher.tails_loaded_total,
            "released": p.dispatcher.released_total,
            "ticks_made": p.recurring.made_total,
            "ticks_missed": p.recurring.missed_total,
        }


# What run_node reports as one line: failures of the set-up, not bugs.
START_FAILURES = (StartupFailed, ConfigError, SchemaError, ClusterConfigError, UnsafeConfig)


class _NodeService:
    """A Node as cluster.process.runner runs it."""

    start_failures: tuple[type[BaseException], ...] = START_FAILURES

    def __init__(self, settings: Settings) -> None:
        self.node = Node(settings)
        self.name = f"node {settings.node_id}"
        self.settings = settings

    async def start(self) -> None:
        await self.node.start()

    async def abandon(self) -> None:
        pass  # a cancelled start() has closed what it opened

    def ready_info(self) -> dict[str, Any]:
        parts = self.node.parts
        member = parts.membership.member if parts is not None else None
        return {"node_id": self.settings.node_id, "member": member}

    def run(self) -> Coroutine[Any, Any, None]:
        return self.node.wait()

    async def stop(self, running: asyncio.Task[None]) -> None:
        await self.node.stop()
        await asyncio.wait((running,))

    def failed(self, error: BaseException) -> None:
        log.error("node failed: %s", error)

    async def close(self) -> None:
        log.info("final counters: %s", self.node.stats())


async def run_node(settings: Settings, *, ready_file: Path | None = None) -> int:
    """Run a node until SIGTERM/SIGINT; the exit code for the process. With ready_file,
    the node writes that file once started and deletes it when it stops. A node that
    cannot start logs one line saying why and returns 1."""
    return await run_process(_NodeService(settings), ready_file=ready_file)


# ----- waiting for the stores at start-up ---------------------------------------------

FIRST_RETRY_S = 0.5
MAX_RETRY_S = 10.0
MIN_ATTEMPT_S = 5.0  # even past the deadline, one attempt gets this long
# PyMySQL/aiomysql error codes worth waiting out: cannot connect (2002, 2003), server
# gone or lost (2006, 2013), too many connections (1040), shutting down (1053).
_MYSQL_TRANSIENT = frozenset({1040, 1053, 2002, 2003, 2006, 2013})
_ZK_TRANSIENT = (
    zk_exc.ConnectError,
    zk_exc.NoServersError,
    zk_exc.SessionLost,
    zk_exc.TimeoutError,
    zk_exc.ConnectionLoss,
    zk_exc.OperationTimeout,
    zk_exc.SessionExpired,
)


T = TypeVar("T")


def _transient(error: BaseException) -> bool:
    """Whether waiting may cure this start-up error: the service is not (yet) there."""
    if isinstance(error, pymysql.err.OperationalError):
        return bool(error.args) and error.args[0] in _MYSQL_TRANSIENT
    if isinstance(error, redis_exc.AuthenticationError | redis_exc.AuthorizationError):
        return False
    if isinstance(error, redis_exc.ConnectionError | redis_exc.TimeoutError):
        return True  # BusyLoadingError included: Redis is replaying its AOF
    if isinstance(error, RedisClusterException):
        return "cannot be connected" in str(error)
    return isinstance(error, (KafkaConnectionError, OSError, TimeoutError, *_ZK_TRANSIENT))


def _store_error(error: BaseException) -> bool:
    """An error a store answered with (credentials, permissions, …): not a bug."""
    return isinstance(error, pymysql.err.Error | redis_exc.RedisError | KafkaError | zk_exc.ZKError)


async def _wait_for(
    service: str, where: str, attempt: Callable[[], Awaitable[T]], deadline: float, timeout_s: float
) -> T:
    """attempt() until it succeeds, waiting out transient errors with capped backoff
    until `deadline` (time.monotonic()); then StartupFailed naming the service."""
    pause = FIRST_RETRY_S
    while True:
        left = deadline - time.monotonic()
        try:
            # No single attempt outlives the deadline (a ZooKeeper connect waits long).
            async with asyncio.timeout(max(left, MIN_ATTEMPT_S)):
                return await attempt()
        except Exception as error:
            if not _transient(error):
                if _store_error(error):
                    raise StartupFailed(
                        f"{service} at {where} refused: {one_line(error)}"
                    ) from error
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise StartupFailed(
                    f"{service} at {where} did not answer within startup_timeout_s "
                    f"({timeout_s:g} s): {one_line(error)}"
                ) from error
            pause = min(pause, left)
            log.warning(
                "waiting for %s at %s: %s; retrying in %.1f s",
                service,
                where,
                one_line(error),
                pause,
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)


async def _closing_zk_on_failure(membership: Membership) -> None:
    """membership.join(), closing the ZooKeeper client it made if the join fails (a
    connect that timed out leaves it reconnecting in the background)."""
    try:
        await membership.join()
    except BaseException:
        zk, membership.zk = membership.zk, None
        if zk is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await zk.close()
        raise
