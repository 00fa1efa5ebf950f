"""Every Redis key name and the job → slot / MySQL shard mapping, in one place.

All keys of one slot share the hash tag ``{<prefix>:<slot>}`` (e.g. ``{dq:7}:delay``),
so each Lua script touches keys of one Redis Cluster hash slot only.

Per slot:
  delay     zset  member = seq (SEQ_DIGITS hex digits) + job_id, score = due time in ms
                  (cluster/model/contract.py: member_of, member_seq, member_id); equal scores
                  sort by member, so the seq keeps schedule order
  ready     list  delay members (seq + job_id) due now, in due order
  inflight  zset  job id → claim deadline in ms
  dead      zset  job id → time it died in ms
  jobs      hash  job id → stored envelope (format in lua/includes/common.lua)
  attempts  hash  job id → attempts made so far
  tomb      zset  cancelled job ids → tombstone expiry ms (refuses a late add until then)
  seq       string counter giving schedule order within one millisecond
  done      list  journal of outcomes (JobStatus) for the MySQL recorder (format in
                  lua/includes/common.lua)
  acked     zset  fired job ids → +inf until recorded in MySQL, then when the marker
                  expires; cancel, reschedule and add check it
  expired   zset  expired job ids (not published by due time + expires_after) → +inf
                  until recorded in MySQL, then when the marker expires; cancel,
                  reschedule and add check it
  owner     string the slot's current ownership epoch (fencing token; lua/take.lua):
                  a script called with another answers ErrorCode.FENCED
  watermark string "<run_id>|<ms>": the Redis server the slot is known complete on and
                  the Redis time up to which it held every write of the slot, refreshed
                  every second by the owner (lua/watermark.lua); claims refuse a slot
                  whose watermark names another server until MySQL's changes since
                  then are re-applied (actors/rollback.py)
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from cluster.model.tick_ids import RECURRING_PREFIX

WAKE_CHANNEL_SUFFIX = "wake"

SLOT_KEY_NAMES = (
    "delay",
    "ready",
    "inflight",
    "dead",
    "jobs",
    "attempts",
    "tomb",
    "seq",
    "done",
    "acked",
    "owner",
    "expired",
    "watermark",
)


def slot_of(job_id: str, slots: int) -> int:
    """The slot a job lives in: CRC32 of its id masked by the power-of-two slot count."""
    return zlib.crc32(job_id.encode()) & (slots - 1)


def shard_of(job_id: str, databases: int, tables: int) -> tuple[int, int]:
    """(database index, table index) of a job's MySQL row, from its id alone. A
    recurring schedule's tick (cluster/model/tick_ids.py) is in its schedule's database,
    so that the schedule's row and its ticks' jobs are written in one transaction on one
    server (cluster/store/recurring_store.py)."""
    h = zlib.crc32(job_id.encode()) >> 8  # independent of the low bits used for the slot
    database = h % databases
    if databases > 1 and job_id.startswith(RECURRING_PREFIX):
        name = job_id[len(RECURRING_PREFIX) :].rsplit(":", 2)[0]
        database = (zlib.crc32(name.encode()) >> 8) % databases
    return database, (h // databases) % tables


@dataclass(frozen=True)
class SlotKeys:
    """The key names of one slot."""

    delay: str
    ready: str
    inflight: str
    dead: str
    jobs: str
    attempts: str
    tomb: str
    seq: str
    done: str
    acked: str
    owner: str
    expired: str
    watermark: str  # "<run_id>|<ms>": the server the slot is known complete on, and when

    def for_claim(self) -> list[str]:
        """KEYS of lua/claim.lua."""
        claimed = (self.owner, self.ready, self.inflight, self.jobs, self.attempts)
        return [*claimed, self.expired, self.done, self.watermark]

    def for_reschedule(self) -> list[str]:
        """KEYS of lua/reschedule.lua."""
        return [self.delay, self.inflight, self.dead, self.jobs, self.seq, self.acked, self.expired]


class KeySpace:
    """Builds key names for a key prefix; cheap to create, caches per-slot names."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._cache: dict[int, SlotKeys] = {}
        self.wake_channel = f"{prefix}:{WAKE_CHANNEL_SUFFIX}"

    def slot(self, slot: int) -> SlotKeys:
        keys = self._cache.get(slot)
        if keys is None:
            tag = f"{{{self.prefix}:{slot}}}"
            keys = SlotKeys(*(f"{tag}:{name}" for name in SLOT_KEY_NAMES))
            self._cache[slot] = keys
        return keys
