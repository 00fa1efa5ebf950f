"""The dead-letter set of a slot as async methods (DeadLetterScripts, a part of Scripts):
list, read one, replay (lua/dead_replay.lua) and purge (lua/dead_purge.lua).
"""

from __future__ import annotations

from typing import Any

from cluster.model.contract import ReplayCode
from cluster.model.keys import KeySpace
from cluster.scripts.runner import ScriptRunner


class DeadLetterScripts(ScriptRunner):
    """dead_page, dead_one, dead_replay, dead_purge."""

    keys: KeySpace

    async def dead_page(
        self, slot: int, start: int, count: int
    ) -> list[tuple[bytes, int, bytes | None]]:
        """Dead jobs of a slot by time of death: (job id, died ms, envelope)."""
        k = self.keys.slot(slot)
        entries: list[Any] = await self.redis.zrange(
            k.dead, start, start + count - 1, withscores=True
        )
        if not entries:
            return []
        envelopes: list[Any] = await self.redis.hmget(k.jobs, [job_id for job_id, _ in entries])
        return [
            (job_id, int(score), envelope)
            for (job_id, score), envelope in zip(entries, envelopes, strict=True)
        ]

    async def dead_one(self, slot: int, job_id: str) -> tuple[int, bytes] | None:
        """(died ms, envelope) of a dead job, or None if it is not dead."""
        k = self.keys.slot(slot)
        died = await self.redis.zscore(k.dead, job_id)
        envelope: Any = await self.redis.hget(k.jobs, job_id)
        if died is None or envelope is None:
            return None
        return int(died), envelope

    async def dead_replay(self, slot: int, job_ids: list[str]) -> list[ReplayCode]:
        """Replay dead jobs of a slot (they are due now); a ReplayCode per job id."""
        k = self.keys.slot(slot)
        replies = await self._call(
            "dead_replay",
            [k.dead, k.delay, k.jobs, k.attempts, k.seq, k.done],
            [self.keys.wake_channel, slot, *job_ids],
        )
        return [ReplayCode(reply) for reply in replies]  # an operator's few hundred

    async def dead_purge(self, slot: int, job_ids: list[str]) -> int:
        k = self.keys.slot(slot)
        return int(await self._call("dead_purge", [k.dead, k.jobs, k.attempts], job_ids))
