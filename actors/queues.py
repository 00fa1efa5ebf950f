"""The bounded slot queue actors pass work through."""

from __future__ import annotations

import asyncio


class SlotQueue:
    """A bounded FIFO of slot numbers in which a slot waits at most once.

    "Slot 7 has work" said twice before anyone looks is the same news, so put() of a
    slot already waiting does nothing. At most `maxsize` slots wait; put() of a new one
    blocks when full (backpressure).
    """

    def __init__(self, maxsize: int) -> None:
        self._queue: asyncio.Queue[int] = asyncio.Queue(maxsize)
        self._waiting: set[int] = set()

    async def put(self, slot: int) -> None:
        if slot in self._waiting:
            return
        self._waiting.add(slot)
        try:
            await self._queue.put(slot)
        except BaseException:
            self._waiting.discard(slot)
            raise

    async def get(self) -> int:
        slot = await self._queue.get()
        self._waiting.discard(slot)
        return slot

    def put_nowait(self, slot: int) -> None:
        """put() for callers that cannot wait; a full queue drops the news (the
        periodic sweeps of the actors catch up)."""
        if slot in self._waiting or self._queue.full():
            return
        self._waiting.add(slot)
        self._queue.put_nowait(slot)

    def get_waiting(self) -> list[int]:
        """Every slot waiting right now, without blocking (maybe none)."""
        slots = []
        while not self._queue.empty():
            slot = self._queue.get_nowait()
            self._waiting.discard(slot)
            slots.append(slot)
        return slots

    def qsize(self) -> int:
        return self._queue.qsize()


async def batch_or_stop(queue: SlotQueue, stopping: asyncio.Event) -> list[int] | None:
    """Every slot waiting in queue (waiting for the first one), or None once `stopping`
    is set. Work that piled up while the caller was busy is taken in one go, so the
    caller can serve many slots with one round trip: batches grow with load."""
    first = await next_or_stop(queue, stopping)
    if first is None:
        return None
    # Once each: the first may have been put again between its get and this drain.
    return list(dict.fromkeys([first, *queue.get_waiting()]))


async def next_or_stop(queue: SlotQueue, stopping: asyncio.Event) -> int | None:
    """The next slot from queue, or None once `stopping` is set."""
    if stopping.is_set():
        return None
    get = asyncio.ensure_future(queue.get())
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((get, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if get.done():
        return get.result()
    get.cancel()
    return None
