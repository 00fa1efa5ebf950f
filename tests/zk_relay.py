"""A TCP relay a test can cut: one node reaches ZooKeeper (or Redis, or MySQL; Kafka
through tests/kafka_relay.py) through it, so the test can partition that node from that
service alone.

Cut, it forwards nothing in either direction and answers nothing, but closes nothing:
bytes wait in the relay (and the kernel's buffers), new connections are accepted and
wait too, as over a network that drops packets. The client sees silence, not a closed
connection; its own timeouts must tell. Healed, everything waiting flows on, as TCP
retransmissions would deliver it after a short partition.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

HOST = "127.0.0.1"
CHUNK = 65536


class Relay:
    """Listens on a free local port and forwards each connection to `target_port`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def cut(self) -> None:
        """Blackhole: forward nothing from now on, close nothing."""
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def close(self) -> None:
        self._open.set()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._open.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        for pump in self.pumps(reader, writer, up_reader, up_writer):
            task = asyncio.create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def pumps(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> list[Coroutine[Any, Any, None]]:
        """What carries one connection's bytes: to the server, and back."""
        return [self._pump(reader, up_writer), self._pump(up_reader, writer)]

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._open.wait()
                data = await source.read(CHUNK)
                await self._open.wait()  # read just before a cut: held until healed
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()
