"""Settling after a fault: wait until every job that should fire did and the stores
agree, judge (tests/faults/verdict.py), and record the scenario's row in RESULTS."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from tests.conftest import Collector
from tests.faults.stores import redis_places
from tests.faults.verdict import Ledger, Verdict, verdict

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "faults.jsonl"


async def settle(
    name: str | None,
    ledger: Ledger,
    collector: Collector,
    client: DelayClient,
    redis: RedisClient,
    timeout_s: float = 120,
    *,
    reader_polls: bool = False,
    final_tries: int = 1,
) -> Verdict:
    """Wait until every job that should fire did, none is still pending or firing (a
    job published but not acked before a fault is retried later), and the stores agree
    (or timeout_s); then 1 s more for records that should not come; then judge.

    reader_polls: a reader (tests/faults/load.py's reading, or another) polls the
    collector meanwhile, so settle does not (a verdict takes a second or two, which
    would otherwise count as the last records' lateness); else settle polls it itself.
    final_tries: how many times the last verdict is asked, 1 s apart, when it raises
    (a pooled connection may be stale once after a store came back).
    name: the scenario's name; when given, its row is printed and appended to RESULTS
    with what the stores say about the first lost jobs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not reader_polls:
            await collector.poll()
        try:
            result = await verdict(ledger, collector.records, client, redis)
        except Exception:  # e.g. MySQL just came back and a pooled connection is stale
            await asyncio.sleep(0.5)
            continue
        if not result.lost and not result.violations and not result.unfinished:
            break
        await asyncio.sleep(0.5)
    if reader_polls:
        await asyncio.sleep(1.0)
    else:
        await collector.quiet_for(1.0)
    for _ in range(final_tries - 1):
        try:
            result = await verdict(ledger, collector.records, client, redis)
            break
        except Exception:
            await asyncio.sleep(1.0)
    else:
        result = await verdict(ledger, collector.records, client, redis)
    if name is not None:
        await record(name, ledger, result, client, redis)
    return result


async def record(
    name: str, ledger: Ledger, result: Verdict, client: DelayClient, redis: RedisClient
) -> None:
    """Print the scenario's row (and where the first lost jobs are) and append it."""
    row = {
        "scenario": name,
        **result.row(),
        "schedule_failed": ledger.schedule_failed,
        "schedule_unknown": ledger.schedule_unknown,
        "cancelled": len(ledger.cancelled),
    }
    print(f"\n[{name}] {row}")
    for job_id in result.lost[:5]:  # what the stores say about a lost job, for the log
        places = await redis_places(redis, client.settings, job_id)
        print(f"  lost {job_id}: {await client.get(job_id)} redis {places}")
    write_row(row)


def write_row(row: dict[str, object]) -> None:
    """Append one scenario's row to RESULTS."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("ab") as out:
        out.write(orjson.dumps(row) + b"\n")
