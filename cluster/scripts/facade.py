"""Every Lua script of lua/ as an async method (Scripts), one object per Redis client.

Each script's contract (KEYS, ARGV, return value) is the header of its .lua file. The
methods are thin: they name the keys of a slot and convert the replies. They live by
role: the fire path (fire_path.py), the journal (journal_scripts.py), dead letters
(dead_letter_scripts.py) and a producer's changes (change_scripts.py); how the scripts
run (batches, errors per slot, waiting for replicas) is cluster/scripts/runner.py.
"""

from __future__ import annotations

from cluster.connections.redis_conn import RedisClient
from cluster.errors import Fenced, ReplicationUnconfirmed, SlotFailed, SlotsFailed
from cluster.model.envelope import LATEST_VERSION
from cluster.model.keys import KeySpace
from cluster.scripts.change_scripts import JobChangeScripts
from cluster.scripts.codec import (
    CancelStep,
    Claimed,
    ClaimResult,
    MoveResult,
    NewJob,
    RetryResult,
)
from cluster.scripts.dead_letter_scripts import DeadLetterScripts
from cluster.scripts.fire_path import ADD_CHUNK, FirePathScripts
from cluster.scripts.journal_scripts import JournalScripts
from cluster.scripts.runner import SCRIPT_NAMES, load_source, script_error

# Re-exported: callers import what the scripts take and return from here.
__all__ = [
    "ADD_CHUNK",
    "SCRIPT_NAMES",
    "CancelStep",
    "ClaimResult",
    "Claimed",
    "Fenced",
    "MoveResult",
    "NewJob",
    "ReplicationUnconfirmed",
    "RetryResult",
    "Scripts",
    "SlotFailed",
    "SlotsFailed",
    "load_source",
    "script_error",
]


class Scripts(FirePathScripts, JournalScripts, DeadLetterScripts, JobChangeScripts):
    """Every Lua step of delayq as an async method, one object per Redis client: the
    methods (one module per role, above) name the keys of a slot and convert the
    replies (cluster/scripts/codec.py); how scripts run, fail per slot and wait for
    replicas is ScriptRunner's.

    A method for one slot raises Fenced when the script refuses the caller's epoch; its
    `*_many` form answers None for that slot and goes on with the others, and
    SlotFailed where that slot's run failed (its Redis node down or failing over)."""

    def __init__(
        self,
        redis: RedisClient,
        keys: KeySpace,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 500,
        payload_lead_ms: int = 0,
        envelope_version: int = LATEST_VERSION,
    ) -> None:
        super().__init__(redis, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        self.keys = keys
        # Every add stores a job due further ahead than this lean (lua/add.lua); 0: never.
        self.payload_lead_ms = payload_lead_ms
        # The header version of the envelopes this process writes (add, restore).
        self.envelope_version = envelope_version
        # A node's claims refuse a slot its owner has not verified on this Redis server.
        self.check_verified = False
