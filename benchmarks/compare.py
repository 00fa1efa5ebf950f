"""delayq side by side with BullMQ and arq: the steady scenario.

    python benchmarks/compare.py --rate 5000 --seconds 10

R jobs/s come due for T seconds, evenly spaced, with a 100-byte payload, on the same
Redis (the local stack's) for all three systems, one after another:

* delayq: `schedule_many`, one node, fired to Kafka; lateness at a Kafka consumer
  (benchmarks/fire_bench.py --pattern steady);
* BullMQ 5.81 (Node): `addBulk` of delayed jobs, one Worker with concurrency 200
  (benchmarks/peers/bullmq/steady.mjs);
* arq: `enqueue_job(..., _defer_until=...)`, one worker with max_jobs 200, arq's other
  settings left at their defaults (benchmarks/peers/arq_steady.py).

Lateness is receive time − due time where each system hands the job to user code. The
peers are installed on first use (npm, pip), not vendored. Prints a table with
delayq/peer ratios and writes benchmarks/results/compare-<time>.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BULLMQ = HERE / "peers" / "bullmq"
# arq pins an older redis-py than delayq's, so it lives in a virtualenv of its own.
ARQ_VENV = HERE / "peers" / ".venv-arq"
ARQ_PYTHON = ARQ_VENV / "bin" / "python"


def ensure_peers() -> None:
    if not (BULLMQ / "node_modules" / "bullmq").exists():
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund"], cwd=BULLMQ,
                       check=True)
    if not ARQ_PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ARQ_VENV)], check=True)
        subprocess.run([str(ARQ_PYTHON), "-m", "pip", "install", "--quiet", "arq", "orjson"],
                       check=True)


def last_json(output: str) -> dict[str, Any]:
    """The last line of a run's output that is a JSON object."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = orjson.loads(line)
            return result
    raise RuntimeError(f"no result in output:\n{output[-2000:]}")


def run_delayq(jobs: int, seconds: float, lead: float, payload: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE / "fire_bench.py"), "--jobs", str(jobs), "--window",
         str(seconds), "--pattern", "steady", "--lead", str(lead),
         "--payload-bytes", str(payload)],
        capture_output=True, text=True, timeout=1800,
    )
    text = out.stdout
    result: dict[str, Any] = orjson.loads(text[text.index("{"): text.rindex("}") + 1])
    return {"system": "delayq", "jobs": jobs, "add_rate_per_s": result["schedule_rate_per_s"],
            "scheduling_finished_before_first_due":
                result["scheduling_finished_before_first_due"],
            "lateness_ms": result["lateness_ms"], "received": result["received"],
            "unique": result["unique"], "early": result["early"]}


def run_peer(command: list[str]) -> dict[str, Any]:
    out = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    return last_json(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="jobs due per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long they come due")
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from start to the first due time (default 3 + jobs/15000)")
    parser.add_argument("--only", choices=["delayq", "bullmq", "arq"], action="append",
                        help="run only these systems (repeatable)")
    args = parser.parse_args()
    ensure_peers()
    redis = urlparse(os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:16379/0"))
    host, port = redis.hostname or "127.0.0.1", str(redis.port or 6379)
    jobs = int(args.rate * args.seconds)
    lead = args.lead if args.lead is not None else 3 + jobs / 15000
    systems = args.only or ["delayq", "bullmq", "arq"]
    peer_args = [host, port, str(jobs), str(args.rate), str(lead), str(args.payload_bytes)]
    results: dict[str, dict[str, Any]] = {}
    for system in systems:
        print(f"running {system} ...", file=sys.stderr, flush=True)
        if system == "delayq":
            results[system] = run_delayq(jobs, args.seconds, lead, args.payload_bytes)
        elif system == "bullmq":
            results[system] = run_peer(["node", str(BULLMQ / "steady.mjs"), *peer_args])
        else:
            results[system] = run_peer(
                [str(ARQ_PYTHON), str(HERE / "peers" / "arq_steady.py"), *peer_args])
    report = {
        "scenario": "steady", "rate_per_s": args.rate, "seconds": args.seconds,
        "jobs": jobs, "payload_bytes": args.payload_bytes, "results": results,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "command": " ".join(["python", "benchmarks/compare.py", *sys.argv[1:]]),
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"{'system':<8} {'add rate':>10} {'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9}")
    for system, r in results.items():
        lat = {k: round(float(v), 1) for k, v in r["lateness_ms"].items()}
        print(f"{system:<8} {r['add_rate_per_s']:>8}/s {lat['p50']:>8}ms {lat['p99']:>8}ms "
              f"{lat['p999']:>8}ms {lat['max']:>8}ms")
    if "delayq" in results:
        for peer in ("bullmq", "arq"):
            if peer in results:
                d, p = results["delayq"], results[peer]
                print(f"delayq/{peer}: add rate x{d['add_rate_per_s'] / p['add_rate_per_s']:.2f},"
                      f" p99 lateness x{d['lateness_ms']['p99'] / p['lateness_ms']['p99']:.2f}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
