"""A slot's journal and in-flight deadlines as async methods (JournalScripts, a part of
Scripts): read by the recorder and the reaper, trimmed once recorded
(lua/trim_journal.lua).
"""

from __future__ import annotations

from cluster.errors import Fenced
from cluster.model.contract import JOURNAL_CHANGED
from cluster.model.keys import KeySpace
from cluster.scripts.runner import Call, ScriptRunner, every_reply, only_reply


class JournalScripts(ScriptRunner):
    """read_journal(s), timed_out_many, trim_journal(s)."""

    keys: KeySpace

    async def read_journal(self, slot: int, count: int) -> list[bytes]:
        """The oldest count journal entries of a slot (left in place until trimmed)."""
        return (await self.read_journals([slot], count))[0]

    async def read_journals(self, slots: list[int], count: int) -> list[list[bytes]]:
        """The oldest count journal entries of each slot, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for slot in slots:
            pipe.lrange(self.keys.slot(slot).done, 0, count - 1)
        return [list(entries) for entries in await pipe.execute()]

    async def timed_out_many(
        self, slots: list[int], upto_ms: int, count: int
    ) -> list[list[tuple[bytes, float]]]:
        """Each slot's oldest count in-flight jobs whose deadline is at most upto_ms,
        with their deadlines, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for slot in slots:
            pipe.zrangebyscore(
                self.keys.slot(slot).inflight, "-inf", upto_ms, start=0, num=count, withscores=True
            )
        return [list(entries) for entries in await pipe.execute()]

    def _trim_calls(
        self, trims: dict[int, tuple[int, list[bytes], list[str]]], retention_ms: int
    ) -> list[Call]:
        calls: list[Call] = []
        for slot, (epoch, entries, done_ids) in trims.items():
            k = self.keys.slot(slot)
            last = entries[-1] if entries else b""
            calls.append(
                (
                    slot,
                    [k.owner, k.done, k.acked, k.expired],
                    [epoch, len(entries), retention_ms, last, *done_ids],
                )
            )
        return calls

    async def trim_journal(
        self, slot: int, epoch: int, entries: list[bytes], done_ids: list[str], retention_ms: int
    ) -> bool:
        """trim_journals for one slot; False when its journal was not the one read."""
        calls = self._trim_calls({slot: (epoch, entries, done_ids)}, retention_ms)
        return only_reply(await self._call_many("trim_journal", calls), int) != JOURNAL_CHANGED

    async def trim_journals(
        self, trims: dict[int, tuple[int, list[bytes], list[str]]], retention_ms: int
    ) -> tuple[set[int], set[int]]:
        """Drop recorded entries: slot → (epoch, the entries as read, ids of the jobs they
        recorded as fired or expired). Returns the fenced slots, and those whose journal
        was not the one read (nothing trimmed: lua/trim_journal.lua)."""
        calls = self._trim_calls(trims, retention_ms)
        replies = every_reply(await self._call_many("trim_journal", calls), calls)
        answers = dict(zip(trims, replies, strict=True))
        fenced = {slot for slot, reply in answers.items() if isinstance(reply, Fenced)}
        changed = {s for s, r in answers.items() if s not in fenced and r == JOURNAL_CHANGED}
        return fenced, changed
