"""Running each MySQL server's part of a call at once, without letting a frozen server
hold back the others: once some part has ended, a server that has answered nothing (on
any connection of this process) for mysql_stall_s is cut off, and its part ends in
ServerStalled (cluster/store/routing.py's ShardRouter.each_server; docs/cluster.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from cluster.errors import ServerStalled

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


async def gather_servers(
    parts: dict[K, Awaitable[T]],
    stall_s: float,
    silent_since: Callable[[K, float], float],
    name: Callable[[K], str],
    on_cut: Callable[[K, float], None] | None = None,
) -> list[T | BaseException]:
    """Each part (by server) at once, and each one's result or exception, in order.
    silent_since(server, start of the call): from when the server counts as silent
    (loop time). A part cut off is cancelled (a statement cut off closes its
    connection, never reused), and on_cut(server, silent since) is called."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = {server: asyncio.ensure_future(part) for server, part in parts.items()}
    cut: dict[K, float] = {}
    try:
        pending = set(tasks.values())
        while pending:
            some_ended = len(pending) < len(tasks)
            _, pending = await asyncio.wait(
                pending,
                timeout=stall_s / 4 if some_ended else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not pending or len(pending) == len(tasks):
                continue
            now = loop.time()
            for server, task in tasks.items():
                if task.done() or server in cut:
                    continue
                since = silent_since(server, started)
                if now - since >= stall_s:
                    cut[server] = now - since
                    task.cancel()
                    if on_cut is not None:
                        on_cut(server, since)
    except BaseException:
        for task in tasks.values():
            task.cancel()
        await asyncio.wait(tasks.values())
        raise
    results: list[T | BaseException] = []
    for server, task in tasks.items():
        if server in cut and task.cancelled():
            results.append(
                ServerStalled(
                    f"{name(server)} answered nothing for {cut[server]:.1f} s while the other "
                    f"MySQL servers had answered (mysql_stall_s {stall_s} s): its part was "
                    "cut off (a write there of unknown outcome)"
                )
            )
        elif task.cancelled():
            results.append(asyncio.CancelledError())
        else:
            error = task.exception()
            results.append(task.result() if error is None else error)
    return results
