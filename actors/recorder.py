"""recorder: applies each slot's outcome journal (fired, retrying, dead, expired,
replayed) to MySQL.

The ack and retry scripts append outcomes to a journal list in Redis, atomically with
the state change, so nothing is lost when the node dies or MySQL is down: the
recorder reads the oldest entries, writes them to MySQL in batches, and only then
trims them. Writing an entry twice (after a crash) is harmless.

The trim drops only the entries read: a Redis failover between the read and the trim
may have put in place a replica that lacked the last of them and has new ones since,
which a trim by count alone would drop unrecorded, leaving their jobs pending in MySQL
for good (lua/trim_journal.lua). Such a journal is read and recorded again instead.
"""

from __future__ import annotations

import logging

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.model.contract import JobStatus
from cluster.scripts.facade import Scripts
from cluster.store.mysql_store import MySQLStore, Outcome

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 1.0


_STATUS_OF = {str(int(status)).encode(): status for status in JobStatus}
# Outcomes whose Redis marker (acked, expired) lasts until recorded, then
# marker_retention_ms (lua/trim_journal.lua).
_MARKED = (JobStatus.FIRED, JobStatus.EXPIRED)


def parse_entry(entry: bytes, slot: int) -> Outcome:
    """b"<status>|<attempt>|<ms>|<id length>|<id><note>" → Outcome."""
    status, attempt, at_ms, id_len, rest = entry.split(b"|", 4)
    n = int(id_len)
    return Outcome(
        job_id=rest[:n].decode(),
        status=_STATUS_OF[status],  # a dict, not JobStatus(int(...)): this runs per job
        attempt=int(attempt),
        at_ms=int(at_ms),
        note=rest[n:].decode(errors="replace") if len(rest) > n else "",
        slot=slot,
    )


class Recorder(Actor):
    name = "recorder"

    def __init__(
        self,
        scripts: Scripts,
        mysql: MySQLStore,
        ownership: Ownership,
        batch: int,
        interval_ms: int,
        marker_retention_ms: int,
    ) -> None:
        super().__init__()
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        self.batch = batch
        self.interval_ms = interval_ms
        self.marker_retention_ms = marker_retention_ms
        self.recorded_total = 0

    async def body(self) -> None:
        while not self.stopping:
            if not await self.record():
                await self.sleep(RETRY_AFTER_ERROR_S)
            await self.sleep(self.interval_ms / 1000)
        # Last pass on the way out, so a clean stop leaves MySQL up to date.
        await self.record()

    async def record(self) -> bool:
        """Write every owned slot's journal to MySQL; False if that failed (the entries
        stay in Redis for the next pass)."""
        epochs = {slot: self.ownership.epoch(slot) for slot in self.ownership.owned()}
        slots = sorted(epochs)
        while slots:
            try:
                journals = await self.scripts.read_journals(slots, self.batch)
                read = {
                    slot: entries for slot, entries in zip(slots, journals, strict=True) if entries
                }
                by_slot = {
                    slot: [parse_entry(entry, slot) for entry in entries]
                    for slot, entries in read.items()
                }
                if not by_slot:
                    return True
                await self.mysql.record_outcomes(
                    [outcome for outcomes in by_slot.values() for outcome in outcomes]
                )
                fenced, changed = await self.scripts.trim_journals(
                    {
                        slot: (
                            epochs[slot],
                            read[slot],
                            [o.job_id for o in outcomes if o.status in _MARKED],
                        )
                        for slot, outcomes in by_slot.items()
                    },
                    self.marker_retention_ms,
                )
            except Exception as exc:
                log.warning("recording outcomes failed (kept in Redis): %s", exc)
                return False
            for slot in fenced:
                self.ownership.lost(slot, epochs[slot])  # its new owner records them
            if changed:
                log.warning(
                    "the journal of %d slot(s) changed between its read and its trim (Redis "
                    "failed over): nothing trimmed there, its entries are recorded again",
                    len(changed),
                )
            kept = fenced | changed
            self.recorded_total += sum(
                len(outcomes) for slot, outcomes in by_slot.items() if slot not in kept
            )
            slots = [
                slot
                for slot, outcomes in by_slot.items()
                if len(outcomes) == self.batch and slot not in kept
            ]
        return True
