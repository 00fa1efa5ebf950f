"""A TCP forwarder in the test process: a store that a node or client reaches through it
can be made unreachable (cut) and reachable again, like a network partition."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from cluster.devstack.nodes import free_port as free_port  # the tests' import of it


class Forwarder:
    """127.0.0.1:listen_port → 127.0.0.1:target_port while open."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        """Listen (again); nothing when listening already."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.listen_port)

    async def cut(self) -> None:
        """Stop listening and drop every connection through it."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            self._writers.discard(writer)


@contextlib.asynccontextmanager
async def forwarder(listen_port: int, target_port: int) -> AsyncIterator[Forwarder]:
    """A Forwarder, open for the block."""
    forward = Forwarder(listen_port, target_port)
    await forward.open()
    try:
        yield forward
    finally:
        await forward.cut()
