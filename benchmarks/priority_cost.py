"""What priority and the envelope header cost jobs without a priority, on the steps of
the firing path that read them.

    python benchmarks/priority_cost.py move --base /tmp/before   # lua/move.lua, two trees
    python benchmarks/priority_cost.py claim --base /tmp/before  # lua/claim.lua, two trees
    python benchmarks/priority_cost.py sort                      # sort_claimed, this tree

`move`: each round fills a slot's delay zset with --jobs overdue priority-0 members (not
timed), then times one EVALSHA of move.lua (limit = --jobs) of --base's tree and of this
one, alternating; prints the median and p90 round trip of each. --base is a tree of the
release before (`git archive <commit> | tar -x -C /tmp/before`). Runs on the Redis of
DELAYQ_REDIS_URL (the local stack's by default) under keys of its own, deleted after.

`claim`: the same for lua/claim.lua: each round fills a slot's jobs hash and ready list
with --jobs envelopes of priority-0 jobs, without expiry, in the header version each
tree writes (version 1 for a tree before named fields), and times one claim of them all.

`sort`: times actors/dispatch_round.py's sort_claimed, the dispatcher's per-job step,
on 16 slots' claims of 500 priority-0 jobs each; prints µs per job. Run it with
PYTHONPATH=<the other tree> from that tree as well to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis

HERE = Path(__file__).resolve().parents[1]
_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)


def lua_source(tree: Path, name: str) -> str:
    """lua/<name>.lua of a tree with its includes expanded (cluster/scripts/runner.py)."""
    seen: set[str] = set()

    def include(match: re.Match[str]) -> str:
        included = match.group(1)
        if included in seen:
            return ""
        seen.add(included)
        text = (tree / "lua" / "includes" / f"{included}.lua").read_text()
        return _INCLUDE.sub(include, text)

    return _INCLUDE.sub(include, (tree / "lua" / f"{name}.lua").read_text())


async def move_cost(base: Path, jobs: int, rounds: int, url: str) -> None:
    r = aioredis.from_url(url)
    trees = {"base": base, "this": HERE}
    shas = {label: await r.script_load(lua_source(tree, "move")) for label, tree in trees.items()}
    prefix = f"{{prioritycost:{uuid.uuid4().hex[:8]}}}"
    owner, delay, ready = f"{prefix}:owner", f"{prefix}:delay", f"{prefix}:ready"
    due = int(time.time() * 1000) - 60_000
    members = {f"{i:012x}job-{i}": due + i % 50 for i in range(jobs)}
    took: dict[str, list[float]] = {label: [] for label in shas}
    try:
        for n in range(rounds):
            for label in list(shas) if n % 2 == 0 else list(reversed(shas)):
                await r.delete(delay, ready)
                await r.zadd(delay, members)
                start = time.perf_counter()
                moved = await r.evalsha(shas[label], 3, owner, delay, ready, 0, jobs, 0)
                took[label].append((time.perf_counter() - start) * 1e6)
                assert moved[0] == jobs, moved
    finally:
        await r.delete(owner, delay, ready)
        await r.aclose()
    for label, values in took.items():
        values.sort()
        print(
            f"{label}: move.lua of {jobs} priority-0 jobs: median "
            f"{statistics.median(values):.0f} µs, p90 {values[int(len(values) * 0.9)]:.0f} µs"
        )


def header_of(tree: Path) -> bytes:
    """The <fields> a tree writes for a priority-0 job with 16 attempts, no expiry."""
    named = "def fields_text(" in (tree / "cluster/model/envelope.py").read_text()
    return b"v=2;a=16" if named else b"16"


async def claim_cost(base: Path, jobs: int, rounds: int, url: str) -> None:
    r = aioredis.from_url(url)
    trees = {"base": base, "this": HERE}
    shas = {label: await r.script_load(lua_source(tree, "claim")) for label, tree in trees.items()}
    prefix = f"{{prioritycost:{uuid.uuid4().hex[:8]}}}"
    keys = [f"{prefix}:{name}" for name in ("owner", "ready", "inflight", "jobs", "attempts")]
    keys += [f"{prefix}:{name}" for name in ("expired", "done", "watermark")]
    due = int(time.time() * 1000) - 60_000
    tail = b'bench.topic|1|4|key1{"job_id":"j","payload":{"order":42}}'
    took: dict[str, list[float]] = {label: [] for label in shas}
    try:
        for n in range(rounds):
            for label in list(shas) if n % 2 == 0 else list(reversed(shas)):
                fields = header_of(trees[label])
                await r.delete(*keys)
                await r.hset(
                    keys[3],
                    mapping={
                        f"job-{i}": b"%012x|%s|%d|%s" % (i, fields, due, tail) for i in range(jobs)
                    },
                )
                await r.rpush(keys[1], *(f"{i:012x}job-{i}" for i in range(jobs)))
                start = time.perf_counter()
                claimed = await r.evalsha(shas[label], len(keys), *keys, 0, jobs, 60_000)
                took[label].append((time.perf_counter() - start) * 1e6)
                assert (len(claimed) - 3) // 3 == jobs, claimed[:3]
    finally:
        await r.delete(*keys)
        await r.aclose()
    for label, values in took.items():
        values.sort()
        print(
            f"{label}: claim.lua of {jobs} priority-0 jobs: median "
            f"{statistics.median(values):.0f} µs, p90 {values[int(len(values) * 0.9)]:.0f} µs"
        )


def sort_cost(repeats: int) -> None:
    from actors.dispatch_round import SlotClaim, Tails, sort_claimed
    from cluster.model.envelope import make_tail
    from cluster.scripts.codec import Claimed
    from cluster.settings.config import Settings

    # The tree this process imports, whichever PYTHONPATH named.
    tree = Path(sys.modules["actors.dispatch_round"].__file__ or "").resolve().parents[1]
    named = header_of(tree) != b"16"
    now = 1_795_000_000_000
    payload = b'{"order":42,"text":"' + b"x" * 80 + b'"}'
    claims = []
    for slot in range(16):
        claimed = []
        for i in range(500):
            job_id = f"{slot:04x}{i:028x}"
            if named:  # make_tail(job_id, topic, payload_json, **options)
                tail = make_tail(job_id, "bench.topic", payload)
            else:  # make_tail(job_id, topic, biz_id, biz_type, payload_json)
                tail = make_tail(job_id, "bench.topic", None, None, payload)  # type: ignore[arg-type,call-arg]
            header = b"%012x|%s|%d|" % (i, header_of(tree), now - 5)
            claimed.append(Claimed(job_id.encode(), header + tail, 1))
        claims.append(SlotClaim(slot, 1, now, claimed))
    count = sum(len(claim.jobs) for claim in claims)
    settings = Settings()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        sort_claimed(claims, Tails({}, set()), settings, 500, 0.0)
        runs.append((time.perf_counter() - start) * 1e6 / count)
    print(
        f"sort_claimed of {count} priority-0 jobs: median {statistics.median(runs):.3f} µs "
        f"per job, min {min(runs):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    move = sub.add_parser("move", help="lua/move.lua of --base's tree and of this one")
    move.add_argument("--base", type=Path, required=True, help="a tree of the release before")
    move.add_argument("--jobs", type=int, default=1000)
    move.add_argument("--rounds", type=int, default=300)
    claim = sub.add_parser("claim", help="lua/claim.lua of --base's tree and of this one")
    claim.add_argument("--base", type=Path, required=True, help="a tree of the release before")
    claim.add_argument("--jobs", type=int, default=500)
    claim.add_argument("--rounds", type=int, default=300)
    sort = sub.add_parser("sort", help="the dispatcher's sort_claimed, per job")
    sort.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    url = os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:16379")
    if args.what == "move":
        asyncio.run(move_cost(args.base, args.jobs, args.rounds, url))
    elif args.what == "claim":
        asyncio.run(claim_cost(args.base, args.jobs, args.rounds, url))
    else:
        sort_cost(args.repeats)


if __name__ == "__main__":
    main()
