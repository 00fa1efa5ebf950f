"""Dead letters: jobs that used up their attempts without being published. Listed,
replayed and purged through DelayClient (dead_letters, dead_job, replay_dead,
purge_dead) or `delayq dead list|show|replay|purge`.

The dead-letter set of a slot lives in Redis (lua/dead_replay.lua, lua/dead_purge.lua);
MySQL keeps a dead job's row (status dead) after Redis forgot it, so a job named by id
can be replayed from MySQL too. A dead job whose envelope is lean (it was due beyond
payload_lead_ms when added, and never filled) is shown with the record built from its
MySQL row, as the dispatcher builds it; a replay keeps it lean, and the dispatcher
loads its payload when it claims it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus, ReplayCode
from cluster.model.envelope import is_lean, record_of, with_tail
from cluster.model.jobs import check_allowed_topic, check_job_id, check_topic
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

# Dead jobs read per Redis page, and job ids per script run.
DEAD_PAGE = 500


@dataclass(frozen=True)
class DeadJob:
    """A job in the dead-letter set: it used up its attempts without being published."""

    job_id: str
    slot: int
    topic: str
    died_ms: int
    attempts: int | None  # from MySQL, once recorded
    last_error: str | None  # from MySQL, once recorded
    record: dict[str, Any]  # the record it would have fired (without fired_ms, attempt)


class DeadLetters:
    """The dead-letter operations of one open DelayClient (its settings and stores)."""

    def __init__(self, settings: Settings, scripts: Scripts, mysql: MySQLStore) -> None:
        self.settings = settings
        self.scripts = scripts
        self.mysql = mysql

    async def _dead(self, topic: str | None) -> AsyncIterator[tuple[int, list[DeadJob]]]:
        """Dead jobs slot by slot, a page at a time, optionally of one topic."""
        for slot in range(self.settings.slots):
            start = 0
            while page := await self.scripts.dead_page(slot, start, DEAD_PAGE):
                start += len(page)
                found = [
                    (job_id.decode(), died_ms, envelope)
                    for job_id, died_ms, envelope in page
                    if envelope is not None
                ]
                records = await self._records([(job_id, env) for job_id, _, env in found])
                jobs = [
                    DeadJob(job_id, slot, _topic(record), died_ms, None, None, record)
                    for (job_id, died_ms, _), record in zip(found, records, strict=True)
                ]
                yield slot, [job for job in jobs if topic is None or job.topic == topic]

    async def _records(self, envelopes: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
        """The record of each (job id, envelope); a lean envelope's from the job's MySQL
        row (one read for all), or only its id and due time if the row is gone."""
        lean = [job_id for job_id, envelope in envelopes if is_lean(envelope)]
        rows = await self.mysql.get_many(lean) if lean else {}
        records: list[dict[str, Any]] = []
        for job_id, envelope in envelopes:
            if is_lean(envelope):
                row = rows.get(job_id)
                if row is None:
                    due_ms = int(envelope.split(b"|")[2])
                    records.append({"job_id": job_id, "topic": None, "due_ms": due_ms})
                    continue
                envelope = with_tail(envelope, row.tail)
            records.append(record_of(envelope))
        return records

    async def dead_letters(self, *, topic: str | None = None, limit: int = 100) -> list[DeadJob]:
        """Dead jobs, oldest death first (per slot), with attempts and last error."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidJob(f"limit must be an int >= 1, got {limit!r}")
        found: list[DeadJob] = []
        async for _, jobs in self._dead(topic):
            found += jobs
            if len(found) >= limit:
                break
        found = sorted(found, key=lambda job: job.died_ms)[:limit]
        rows = await self.mysql.get_many([job.job_id for job in found])
        return [
            DeadJob(
                job.job_id,
                job.slot,
                job.topic,
                job.died_ms,
                rows[job.job_id].attempts if job.job_id in rows else None,
                rows[job.job_id].last_error if job.job_id in rows else None,
                job.record,
            )
            for job in found
        ]

    async def dead_job(self, job_id: str) -> DeadJob | None:
        """One job of the dead-letter set, or None if it is not there."""
        slot = slot_of(check_job_id(job_id), self.settings.slots)
        found = await self.scripts.dead_one(slot, job_id)
        if found is None:
            return None
        died_ms, envelope = found
        [record] = await self._records([(job_id, envelope)])
        row = await self.mysql.get(job_id)
        return DeadJob(
            job_id,
            slot,
            _topic(record),
            died_ms,
            row.attempts if row else None,
            row.last_error if row else None,
            record,
        )

    async def count_dead(self, topic: str | None = None) -> int:
        """How many jobs the dead-letter sets hold (of one topic)."""
        if topic is not None:
            check_topic(topic)
        count = 0
        async for _, jobs in self._dead(topic):
            count += len(jobs)
        return count

    async def replay_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Give dead jobs a new set of attempts, due now: those named, those of a topic,
        or (neither given) all. Returns how many were replayed.

        A named job that is dead in MySQL but no longer in the dead-letter set (it was
        purged, or Redis lost it) is replayed from its MySQL row."""
        if job_ids is not None:
            return await self._each_named(job_ids, self._replay_named)
        if topic is not None:
            # Jobs of a topic nodes may not publish to would only go dead again.
            check_allowed_topic(check_topic(topic), self.settings)
        return await self._each_listed(topic, self._replay)

    async def purge_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Forget dead jobs in Redis (MySQL keeps them as dead): those named, those of
        a topic, or (neither given) all. Returns how many were purged."""
        if job_ids is not None:
            return await self._each_named(job_ids, self._purge)
        return await self._each_listed(topic, self._purge)

    async def _each_named(
        self, job_ids: Sequence[str], act: Callable[[int, list[str]], Awaitable[int]]
    ) -> int:
        """act(slot, ids) for the named jobs, by slot, at most DEAD_PAGE ids a call."""
        if isinstance(job_ids, str) or not isinstance(job_ids, Sequence):
            raise InvalidJob("job_ids must be a list of job ids")
        by_slot: dict[int, list[str]] = defaultdict(list)
        for job_id in job_ids:  # every id is checked before anything changes
            by_slot[slot_of(check_job_id(job_id), self.settings.slots)].append(job_id)
        done = 0
        for slot, ids in by_slot.items():
            for start in range(0, len(ids), DEAD_PAGE):
                done += await act(slot, ids[start : start + DEAD_PAGE])
        return done

    async def _each_listed(
        self, topic: str | None, act: Callable[[int, list[str]], Awaitable[int]]
    ) -> int:
        """act(slot, ids) for every page of the dead-letter sets (of one topic)."""
        if topic is not None:
            check_topic(topic)
        pages: list[tuple[int, list[str]]] = []
        async for slot, jobs in self._dead(topic):
            pages.append((slot, [job.job_id for job in jobs]))
        return sum([await act(slot, ids) for slot, ids in pages if ids])

    async def _replay(self, slot: int, job_ids: list[str]) -> int:
        # The script journals each replay, so the recorder sets the MySQL row back to
        # pending in order, after the job's death, even if that is not recorded yet.
        return (await self.scripts.dead_replay(slot, job_ids)).count(ReplayCode.REPLAYED)

    async def _replay_named(self, slot: int, job_ids: list[str]) -> int:
        codes = await self.scripts.dead_replay(slot, job_ids)
        rest = [
            job_id
            for job_id, code in zip(job_ids, codes, strict=True)
            if code == ReplayCode.NOT_DEAD
        ]
        revived: list[NewJob] = []
        for row in (await self.mysql.get_many(rest)).values() if rest else ():
            # MySQL first, as for a new job: pending there before Redis can fire it.
            if row.status == JobStatus.DEAD and await self.mysql.set_status(
                row.job_id,
                JobStatus.PENDING,
                slot,
                from_statuses=(int(JobStatus.DEAD),),
                note="replayed from MySQL (not in the dead-letter set)",
                reset_attempts=True,
            ):
                revived.append(NewJob.from_record(row))
        if revived:
            await self.scripts.add(slot, revived)
        return codes.count(ReplayCode.REPLAYED) + len(revived)

    async def _purge(self, slot: int, job_ids: list[str]) -> int:
        return await self.scripts.dead_purge(slot, job_ids)


def _topic(record: dict[str, Any]) -> str:
    """A dead job's topic ("" when unknown: a lean job whose MySQL row is gone)."""
    topic = record.get("topic")
    return "" if topic is None else str(topic)
