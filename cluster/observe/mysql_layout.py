"""Where the logical shards live: each MySQL server of the cluster, whether it answers, and
the shards it serves or is copying, for `delayq cluster status` (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pymysql

from cluster.settings.config import Settings
from cluster.store.sharded import ShardedStore

# A server slower than this to answer is shown as not answering.
ASK_TIMEOUT_S = 5.0


@dataclass
class ServerLayout:
    index: int
    name: str  # host:port
    answering: bool
    error: str  # why not, when it does not answer
    shards: dict[int, str]  # logical shard -> home, copying or moved

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "server": self.name,
            "answering": self.answering,
            "error": self.error,
            "shards": {str(d): state for d, state in sorted(self.shards.items())},
        }


async def read_layout(settings: Settings) -> list[ServerLayout]:
    """Every server's delayq_shards rows (no schema check: status works mid-upgrade)."""
    store = ShardedStore(settings, "status")
    try:
        return list(await asyncio.gather(*(_read(store, s.index) for s in store.servers)))
    finally:
        await store.close()


async def _read(store: ShardedStore, index: int) -> ServerLayout:
    spec = store.servers[index]
    try:
        shards = await store.router.shards_of(spec, ASK_TIMEOUT_S)
    except (pymysql.err.Error, OSError) as exc:
        return ServerLayout(index, spec.name, False, f"{type(exc).__name__}: {exc}", {})
    return ServerLayout(index, spec.name, True, "", shards)


def render_layout(layout: list[ServerLayout], databases: int) -> str:
    """The servers, one line each, then any logical shard no server answering serves."""
    lines = [f"MySQL: {databases} logical shard(s) on {len(layout)} server(s)"]
    served: set[int] = set()
    for server in layout:
        if not server.answering:
            lines.append(f"  server {server.index} {server.name}: NOT ANSWERING ({server.error})")
            continue
        homes = sorted(d for d, state in server.shards.items() if state == "home")
        served |= set(homes)
        others = ", ".join(
            f"{d} {state}" for d, state in sorted(server.shards.items()) if state != "home"
        )
        lines.append(
            f"  server {server.index} {server.name}: shards {_ranges(homes) or 'none'}"
            + (f" ({others})" if others else "")
        )
    missing = sorted(set(range(databases)) - served)
    if missing:
        lines.append(f"  not served by a server answering: {_ranges(missing)}")
    return "\n".join(lines)


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    parts: list[str] = []
    for value in values:
        if parts and value == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{value}"
        else:
            parts.append(str(value))
    return ", ".join(parts)
