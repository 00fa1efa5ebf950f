"""A relay (tests/zk_relay.py) in front of a single Kafka broker, which a test can cut.

A Kafka client asks the bootstrap address for the brokers' addresses and then connects
to those, so a plain relay would carry the first connection only. This one also
rewrites the broker's own address in the Metadata and FindCoordinator answers it
carries into the relay's, so that a client bootstrapped through it reaches the broker
through it alone, and is cut off from it with it. It reads the Kafka frames (a 4-byte
size, then the request header or the correlation id of an answer) of both directions;
what it rewrites keeps its length (the port is a fixed 4-byte field), so nothing else
changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from tests.zk_relay import Relay

METADATA, FIND_COORDINATOR = 3, 10


async def _frame(source: asyncio.StreamReader) -> bytes | None:
    """One size-prefixed Kafka frame, size included; None at the end of the stream."""
    try:
        head = await source.readexactly(4)
        return head + await source.readexactly(int.from_bytes(head, "big", signed=True))
    except asyncio.IncompleteReadError:
        return None


class KafkaRelay(Relay):
    """Relays to the broker at host:target_port, which advertises that address."""

    def __init__(self, host: str, target_port: int) -> None:
        super().__init__(target_port)
        self.host = host

    def _address(self, port: int) -> bytes:
        """A broker's host and port as an answer encodes them (a STRING, an INT32)."""
        host = self.host.encode()
        return struct.pack(">h", len(host)) + host + struct.pack(">i", port)

    def pumps(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> list[Coroutine[Any, Any, None]]:
        asked: set[int] = set()  # correlation ids of requests whose answers to rewrite
        return [self._requests(reader, up_writer, asked), self._answers(up_reader, writer, asked)]

    async def _requests(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, asked: set[int]
    ) -> None:
        def note(frame: bytes) -> bytes:
            api_key, _version, correlation = struct.unpack_from(">hhi", frame, 4)
            if api_key in (METADATA, FIND_COORDINATOR):
                asked.add(correlation)
            return frame

        await self._frames(source, sink, note)

    async def _answers(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, asked: set[int]
    ) -> None:
        def rewrite(frame: bytes) -> bytes:
            (correlation,) = struct.unpack_from(">i", frame, 4)
            if correlation not in asked:
                return frame
            asked.discard(correlation)
            return frame.replace(self._address(self.target_port), self._address(self.port))

        await self._frames(source, sink, rewrite)

    async def _frames(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        edit: Callable[[bytes], bytes],
    ) -> None:
        """Like Relay._pump, a frame at a time, each passed through edit()."""
        try:
            while True:
                await self._open.wait()
                frame = await _frame(source)
                await self._open.wait()  # read just before a cut: held until healed
                if frame is None:
                    break
                sink.write(edit(frame))
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()
