"""What the fire path's scripts cost Redis: per call, and per job at a batch size.

    python benchmarks/redis_script_cost.py [--jobs 20000] [--batches 5,50,500]

Runs against the local stack's Redis (DELAYQ_REDIS_URL), on a key prefix of its own,
and reads the server's own accounting of script time (INFO commandstats: the usec of
EVALSHA, which includes the commands a script calls):

- per call: 3,000 runs each, pipelined, of a script that returns at once, of one that
  calls INFO server and matches its run_id (what claim does to check the server's
  incarnation, lua/includes/incarnation.lua), of claim's includes alone (everything
  before its body: the contract constants, the shared functions, the fence check),
  and of claim on an empty slot;
- per job: --jobs jobs through add, move, claim and ack, one slot, --batch jobs a
  call, for each batch size.

Prints µs per call and µs of script time per job. Script time is most of what Redis
spends on delayq's fire path (docs/benchmarks.md); the rest is reading requests and
writing replies.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

from cluster.connections.redis_conn import open_redis
from cluster.model.envelope import make_tail
from cluster.model.jobs import now_ms
from cluster.model.keys import KeySpace
from cluster.scripts.facade import NewJob, Scripts
from cluster.scripts.runner import load_source
from cluster.settings.config import Settings

CALLS = 3000
SLOT = 0


async def evalsha_usec(redis: Any) -> tuple[int, int]:
    stats = (await redis.info("commandstats")).get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


async def per_call(redis: Any, script: str, keys: list[str], args: list[int]) -> float:
    sha = await redis.script_load(script)
    calls, usec = await evalsha_usec(redis)
    pipe = redis.pipeline(transaction=False)
    for _ in range(CALLS):
        pipe.evalsha(sha, len(keys), *keys, *args)
    await pipe.execute(raise_on_error=False)
    calls_after, usec_after = await evalsha_usec(redis)
    return (usec_after - usec) / (calls_after - calls)


async def fixed_costs(redis: Any, keys: KeySpace) -> None:
    k = keys.slot(SLOT)
    claim_keys = [k.owner, k.ready, k.inflight, k.jobs, k.attempts, k.expired, k.done, k.watermark]
    claim = load_source("claim")
    includes = claim.split("if ARGV[4] == '1' then")[0] + "\nreturn 1"
    rows = [
        ("a script that returns at once", "return 1", [], []),
        (
            "INFO server and its run_id",
            "return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')",
            [],
            [],
        ),
        ("claim's includes alone", includes, [k.owner], [0]),
        ("claim of an empty slot", claim, claim_keys, [0, 100, 30000]),
    ]
    print("per call (EVALSHA, µs):")
    for title, script, script_keys, args in rows:
        print(f"  {title:<32} {await per_call(redis, script, script_keys, args):6.1f}")


def job(job_id: str) -> NewJob:
    payload = b'{"x":"' + b"a" * 100 + b'"}'
    return NewJob(job_id, now_ms() - 5, 16, make_tail(job_id, "bench.t", payload))


async def per_job(redis: Any, scripts: Scripts, jobs: int, batch: int) -> None:
    async def step() -> float:
        return float((await evalsha_usec(redis))[1])

    ids = [f"j{n}-{uuid.uuid4().hex[:6]}" for n in range(jobs)]
    used: dict[str, float] = {}
    at = await step()
    for start in range(0, jobs, batch):
        await scripts.add(SLOT, [job(i) for i in ids[start : start + batch]])
    used["add"], at = await step() - at, await step()
    for _ in range(0, jobs, batch):
        await scripts.move(SLOT, 0, batch)
    used["move"], at = await step() - at, await step()
    claimed: list[bytes] = []
    for _ in range(0, jobs, batch):
        claimed += [c.job_id for c in (await scripts.claim(SLOT, 0, batch, 30_000)).jobs]
    used["claim"], at = await step() - at, await step()
    for start in range(0, len(claimed), batch):
        await scripts.ack(SLOT, claimed[start : start + batch])
    used["ack"] = await step() - at
    cells = "  ".join(f"{name} {usec / jobs:5.2f}" for name, usec in used.items())
    print(f"  batch {batch:>4}: {cells}  total {sum(used.values()) / jobs:5.2f}")


async def measure(args: argparse.Namespace) -> None:
    settings = Settings.from_env().replace(key_prefix=f"cost{uuid.uuid4().hex[:6]}")
    redis = await open_redis(settings)
    keys = KeySpace(settings.key_prefix)
    scripts = Scripts(redis, keys)
    try:
        await fixed_costs(redis, keys)
        print(f"per job (script time, µs), {args.jobs:,} jobs through one slot:")
        for batch in args.batches:
            await per_job(redis, scripts, args.jobs, batch)
    finally:
        leftover = [key async for key in redis.scan_iter(match=f"*{settings.key_prefix}*")]
        if leftover:
            await redis.delete(*leftover)
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument(
        "--batches",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[5, 50, 500],
        help="jobs per call, comma-separated",
    )
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
