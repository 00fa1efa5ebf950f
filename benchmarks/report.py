"""Tables of a harness run (benchmarks/harness.py) and its section of docs/benchmarks.md."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BEGIN = "<!-- harness:begin -->"
END = "<!-- harness:end -->"
HEADING = "## Side by side with BullMQ and arq (harness)"
NAMES = {
    "delayq": "delayq",
    "delayq-eos": "delayq, exactly-once",
    "bullmq": "BullMQ",
    "arq": "arq",
    "delayq_node": "delayq, 1 node",
    "delayq_near": "delayq, due in 2–4 min",
    "floor": "Kafka floor",
    "floor-redis": "Redis + Kafka floor",
}
PEERS = ("bullmq", "arq")
STEADY_PEERS = (*PEERS, "floor")
EOS = "delayq-eos"
LATE_MARK = "†"

Result = dict[str, Any]


# ----- cells ---------------------------------------------------------------------------


def count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} /s"


def ms(value: float | None) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.0f} ms" if abs(value) >= 100 else f"{value:.1f} ms"


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} s"


def minus(a: float | None, b: float | None) -> str:
    """a − b in ms, signed; "—" unless both are known."""
    if a is None or b is None or a != a or b != b:
        return "—"
    d = a - b
    return f"{d:+,.0f} ms" if abs(d) >= 100 else f"{d:+.1f} ms"


def times(a: float | None, b: float | None) -> str:
    """a ÷ b as ×r (two significant digits below 0.1); "—" unless both are positive,
    since a ratio of a value that is zero within the noise means nothing."""
    if a is None or b is None or not a > 0 or not b > 0:
        return "—"
    r = a / b
    return f"×{r:.2g}" if r < 0.1 else f"×{r:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def add_rate(r: Result) -> str:
    """Add rate, marked when adding ran past the first due time."""
    late = r.get("scheduling_finished_before_first_due") is False
    return rate(r.get("add_rate_per_s")) + (f" {LATE_MARK}" if late else "")


def tally(r: Result) -> str:
    text = f"{count(r.get('received'))} / {count(r.get('missing'))} / {count(r.get('early'))}"
    if r.get("reread_found"):
        text += f" ({r['reread_found']:,} found on a re-read)"
    if r.get("duplicates"):
        text += f" ({r['duplicates']:,} delivered twice)"
    return text + (" (reused)" if r.get("reused") else "")


def lat(r: Result, q: str) -> float | None:
    value: float | None = (r.get("lateness_ms") or {}).get(q)
    return value


def error_row(name: str, r: Result, width: int) -> list[str]:
    return [
        NAMES.get(name, name),
        f"failed: {r['error'].splitlines()[0][:80]}",
        *[""] * (width - 2),
    ]


# ----- scenario tables -----------------------------------------------------------------


def steady_table(s: Result) -> str:
    headers = [
        "system",
        "jobs",
        "add rate",
        "lateness p50",
        "p99",
        "p99.9",
        "max",
        "peak fire rate",
        "received / missing / early",
    ]
    rows: list[list[str]] = []
    results: dict[str, Result] = s["results"]
    for name, r in results.items():
        if "error" in r:
            rows.append(error_row(name, r, len(headers)))
            continue
        rows.append(
            [
                NAMES[name],
                count(r["jobs"]),
                add_rate(r),
                ms(lat(r, "p50")),
                ms(lat(r, "p99")),
                ms(lat(r, "p999")),
                ms(lat(r, "max")),
                rate(r["peak_fire_rate_per_s"]),
                tally(r),
            ]
        )
    pairs = ratio_pairs(results, [EOS], ["delayq"]) + ratio_pairs(
        results, ["delayq", EOS], STEADY_PEERS
    )
    for d, p in pairs:
        rows.append(
            [
                f"{NAMES[d]} ÷ {NAMES[p]}",
                "",
                ratio(results, d, p, "add_rate_per_s"),
                *(
                    times(lat(results[d], q), lat(results[p], q))
                    for q in ("p50", "p99", "p999", "max")
                ),
                ratio(results, d, p, "peak_fire_rate_per_s"),
                "",
            ]
        )
    for d, p in ratio_pairs(results, ["delayq", EOS], ["floor"]):
        rows.append(
            [
                f"{NAMES[d]} − {NAMES[p]}",
                "",
                "",
                minus(lat(results[d], "p50"), lat(results[p], "p50")),
                minus(lat(results[d], "p99"), lat(results[p], "p99")),
                "",
                "",
                "",
                "",
            ]
        )
    return table(headers, rows)


def stages_table(s: Result) -> str:
    """Where delayq's lateness goes: its stage rows (fire_bench --stages), beside them
    the exactly-once run's when there is one, then the floor's broker acknowledgement
    and receive at the same rate, for scale."""
    delayq, floor = s["results"].get("delayq", {}), s["results"].get("floor", {})
    eos = s["results"].get(EOS, {})
    eos_stages = {r["stage"]: r for r in eos.get("stages", [])}
    if not eos_stages:
        headers = ["stage", "p50", "p99", "measured from"]
        rows = [
            [
                r["stage"],
                ms(r["p50_ms"]),
                ms(r["p99_ms"]),
                f"{r['source']}, {count(r['jobs'])} jobs",
            ]
            for r in delayq.get("stages", [])
        ]
        blank: list[str] = []
    else:
        headers = ["stage", "p50", "p99", "exactly-once: p50", "p99", "measured from"]
        ours = {r["stage"]: r for r in delayq.get("stages", [])}
        rows = []
        for stage in [*ours, *(name for name in eos_stages if name not in ours)]:
            a, b = ours.get(stage, {}), eos_stages.get(stage, {})
            either = a or b
            rows.append(
                [
                    stage,
                    ms(a.get("p50_ms")),
                    ms(a.get("p99_ms")),
                    ms(b.get("p50_ms")),
                    ms(b.get("p99_ms")),
                    f"{either['source']}, {count(either['jobs'])} jobs",
                ]
            )
        blank = ["", ""]
    if "error" not in floor and "broker_ack_lateness_ms" in floor:
        ack = floor["broker_ack_lateness_ms"]
        rows.append(
            [
                "Kafka floor: due → broker ack",
                ms(ack["p50"]),
                ms(ack["p99"]),
                *blank,
                "its producer",
            ]
        )
        rows.append(
            [
                "Kafka floor: due → received",
                ms(lat(floor, "p50")),
                ms(lat(floor, "p99")),
                *blank,
                "its consumer",
            ]
        )
    return table(headers, rows)


def burst_table(s: Result) -> str:
    headers = [
        "system",
        "jobs",
        "add rate",
        "drain",
        "mean fire rate",
        "peak fire rate",
        "lateness p50",
        "p99",
        "max",
        "received / missing / early",
    ]
    rows: list[list[str]] = []
    results: dict[str, Result] = s["results"]
    for name, r in results.items():
        if "error" in r:
            rows.append(error_row(name, r, len(headers)))
            continue
        rows.append(
            [
                NAMES[name],
                count(r["jobs"]),
                add_rate(r),
                seconds(r["drain_s"]),
                rate(r["drain_fire_rate_per_s"]),
                rate(r["peak_fire_rate_per_s"]),
                ms(lat(r, "p50")),
                ms(lat(r, "p99")),
                ms(lat(r, "max")),
                tally(r),
            ]
        )
    for d, p in ratio_pairs(results, [EOS], ["delayq"]) + ratio_pairs(results, ["delayq"]):
        rows.append(
            [
                f"{NAMES[d]} ÷ {NAMES[p]}",
                "",
                ratio(results, d, p, "add_rate_per_s"),
                ratio(results, d, p, "drain_s"),
                ratio(results, d, p, "drain_fire_rate_per_s"),
                ratio(results, d, p, "peak_fire_rate_per_s"),
                times(lat(results[d], "p50"), lat(results[p], "p50")),
                times(lat(results[d], "p99"), lat(results[p], "p99")),
                times(lat(results[d], "max"), lat(results[p], "max")),
                "",
            ]
        )
    return table(headers, rows)


def backlog_table(s: Result) -> str:
    headers = [
        "system",
        "jobs",
        "add rate",
        "Redis bytes / job (used_memory)",
        "own keys: MEMORY USAGE / job",
        "own keys",
        "used_memory after cleanup − before",
        "MySQL bytes / job (not in Redis)",
    ]
    rows: list[list[str]] = []
    results: dict[str, Result] = s["results"]
    for name, r in results.items():
        if "error" in r:
            rows.append(error_row(name, r, len(headers)))
            continue
        memory = r["redis"]
        returned = memory["used_memory_after_cleanup"] - memory["used_memory_before"]
        rows.append(
            [
                NAMES[name],
                count(r["jobs"]),
                rate(r["add_rate_per_s"]),
                f"{r['redis_bytes_per_job']:,.1f}",
                f"{r['own_keys_bytes_per_job']:,.1f}",
                count(memory["own_keys"]),
                f"{returned / 2**20:+.1f} MiB",
                f"≈ {r['mysql_bytes_per_job_approx']:,.0f}"
                if "mysql_bytes_per_job_approx" in r
                else "—",
            ]
        )
    for d, p in ratio_pairs(results, ["delayq_node", "delayq_near"], PEERS):
        rows.append(
            [
                f"{NAMES[d]} ÷ {NAMES[p]}",
                "",
                ratio(results, d, p, "add_rate_per_s"),
                ratio(results, d, p, "redis_bytes_per_job"),
                ratio(results, d, p, "own_keys_bytes_per_job"),
                "",
                "",
                "",
            ]
        )
    return table(headers, rows)


def ids_table(s: Result) -> str:
    """Add rates with generated and caller-given ids, and the ratios both ways."""
    results: dict[str, Result] = s["results"]
    systems = [name for name in ("delayq", "bullmq") if name in results]

    def add(name: str) -> float | None:
        r = results.get(name, {})
        value: float | None = r.get("add_rate_per_s")
        return value

    headers = ["ids", *(f"{NAMES[n]} add rate" for n in systems)]
    both = len(systems) == 2
    headers += ["delayq ÷ BullMQ"] if both else []
    rows = []
    for kind, suffix in (("generated", ""), ("caller's own (order-<run>-<n>-close)", "_ids")):
        row = [kind]
        for name in systems:
            r = results.get(name + suffix, {})
            row.append(
                f"failed: {r['error'].splitlines()[0][:60]}"
                if "error" in r
                else rate(add(name + suffix))
            )
        if both:
            row.append(times(add("delayq" + suffix), add("bullmq" + suffix)))
        rows.append(row)
    rows.append(
        ["caller's ÷ generated", *(times(add(n + "_ids"), add(n)) for n in systems)]
        + ([""] if both else [])
    )
    return table(headers, rows)


def scale_table(s: Result) -> str:
    headers = [
        "nodes",
        "steady: mean fire rate",
        "p50",
        "p99",
        "burst: drain",
        "mean fire rate",
        "peak fire rate",
        "p99",
        "missing (steady / burst)",
    ]
    rows: list[list[str]] = []
    for n in s["nodes"]:
        st, bu = s["steady"][str(n)], s["burst"][str(n)]
        if "error" in st or "error" in bu:
            rows.append(error_row(str(n), st if "error" in st else bu, len(headers)))
            continue
        reused = " (reused)" if st.get("reused") or bu.get("reused") else ""
        rows.append(
            [
                f"{n}{reused}",
                rate(st["mean_fire_rate_per_s"]),
                ms(lat(st, "p50")),
                ms(lat(st, "p99")),
                seconds(bu["drain_s"]),
                rate(bu["drain_fire_rate_per_s"]),
                rate(bu["peak_fire_rate_per_s"]),
                ms(lat(bu, "p99")),
                f"{count(st['missing'])} / {count(bu['missing'])}",
            ]
        )
    first, last = str(s["nodes"][0]), str(s["nodes"][-1])
    st0, st1, bu0, bu1 = s["steady"][first], s["steady"][last], s["burst"][first], s["burst"][last]
    if first != last and not any("error" in r for r in (st0, st1, bu0, bu1)):
        rows.append(
            [
                f"{first} → {last}",
                times(st1["mean_fire_rate_per_s"], st0["mean_fire_rate_per_s"]),
                times(lat(st1, "p50"), lat(st0, "p50")),
                times(lat(st1, "p99"), lat(st0, "p99")),
                times(bu1["drain_s"], bu0["drain_s"]),
                times(bu1["drain_fire_rate_per_s"], bu0["drain_fire_rate_per_s"]),
                times(bu1["peak_fire_rate_per_s"], bu0["peak_fire_rate_per_s"]),
                times(lat(bu1, "p99"), lat(bu0, "p99")),
                "",
            ]
        )
    return table(headers, rows)


# The process groups of benchmarks/cpu_share.py, in the order the CPU table lists them.
CPU_GROUPS = (
    ("delayq node", "delayq node(s)"),
    ("Redis", "Redis"),
    ("MariaDB", "MariaDB"),
    ("Kafka broker", "Kafka broker"),
    ("benchmark (client, consumer)", "benchmark: producer and consumer (a peer: its process)"),
    ("ZooKeeper", "ZooKeeper"),
)


# The rows a ratio to a peer means something in: processes both systems run (a peer
# leaves MariaDB and the broker idle), and the total.
COMPARED = ("Redis", "benchmark (client, consumer)", "", None)


def cpu_us(r: Result, group: str | None) -> float | None:
    """µs of CPU per received job of one process group (None: the total) over a run."""
    used: dict[str, float] | None = r.get("cpu_s")
    jobs = int(r.get("received") or 0)
    if not used or not jobs:
        return None
    cpu_s = sum(used.values()) if group is None else used.get(group, 0.0)
    return float(cpu_s / jobs * 1e6)


def cpu_table(s: Result) -> str:
    """µs of CPU per job by process group, each system's whole run (adding and firing),
    with delayq ÷ BullMQ."""
    results = {n: r for n, r in s["results"].items() if "error" not in r and r.get("cpu_s")}
    names = list(results)
    headers = ["process", *(NAMES.get(n, n) for n in names)]
    pairs = [(d, "bullmq") for d in ("delayq", EOS) if d in results and "bullmq" in results]
    headers += [f"{NAMES[d]} ÷ BullMQ" for d, _ in pairs]
    known = {g for r in results.values() for g in r["cpu_s"]}
    groups = [(g, title) for g, title in CPU_GROUPS if g in known]
    groups.append(("", "everything else (the sampler's host, idle services, the kernel)"))
    listed = {g for g, _ in CPU_GROUPS}

    def cell(r: Result, group: str) -> float | None:
        if group:
            return cpu_us(r, group)
        rest = {g: v for g, v in r["cpu_s"].items() if g not in listed}
        return cpu_us({**r, "cpu_s": rest}, None) if rest else 0.0

    def us(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f} µs"

    rows = []
    for group, title in [*groups, (None, "**total**")]:
        values = {
            n: (cpu_us(r, None) if group is None else cell(r, group)) for n, r in results.items()
        }
        rows.append(
            [
                title,
                *(us(values[n]) for n in names),
                *(times(values[d], values[p]) if group in COMPARED else "—" for d, p in pairs),
            ]
        )
    return table(headers, rows)


def ratio_pairs(
    results: dict[str, Result], mine: Sequence[str], peers: Sequence[str] = PEERS
) -> list[tuple[str, str]]:
    return [
        (d, p)
        for d in mine
        for p in peers
        if d in results and p in results and "error" not in results[d] and "error" not in results[p]
    ]


def ratio(results: dict[str, Result], d: str, p: str, key: str) -> str:
    return times(results[d].get(key), results[p].get(key))


# ----- the whole report ----------------------------------------------------------------


def titles(run: Result) -> dict[str, str]:
    s, o = run["scenarios"], run["options"]
    out = {}
    for rate, steady in s.get("steady", {}).get("by_rate", {}).items():
        out[f"steady-{rate}"] = (
            f"Steady: {int(rate):,} jobs/s due for {steady['seconds']:g} s "
            f"({steady['jobs']:,} jobs)"
        )
        if any(r.get("cpu_s") for r in steady["results"].values()):
            out[f"cpu-{rate}"] = f"CPU per job at {int(rate):,} jobs/s, by process"
        if any("stages" in steady["results"].get(d, {}) for d in ("delayq", EOS)):
            out[f"stages-{rate}"] = f"Where delayq's lateness goes at {int(rate):,} jobs/s"
    if "burst" in s:
        out["burst"] = f"Burst: {o['burst_jobs']:,} jobs due within the same second"
        if any(r.get("cpu_s") for r in s["burst"]["results"].values()):
            out["cpu_burst"] = "CPU per job in the burst, by process"
    if "backlog" in s:
        out["backlog"] = (
            f"Backlog: {o['backlog_jobs']:,} jobs due an hour ahead, spread over an hour"
        )
    if "ids" in s:
        out["ids"] = f"Caller-given ids: {s['ids']['jobs']:,} jobs due in 2–4 min, add rate per run"
    if "scale" in s:
        out["scale"] = (
            f"Scale: delayq with {', '.join(map(str, o['nodes']))} nodes, the "
            "steady and the burst load"
        )
    return out


def horizon_note(run: Result) -> str:
    backlog = run["scenarios"].get("backlog", {}).get("results", {})
    settings = backlog.get("delayq", {}).get("settings", {})
    horizon = settings.get("redis_horizon_ms")
    return f" redis_horizon_ms was {horizon / 60000:g} min." if horizon else ""


def scenario_notes(run: Result) -> dict[str, str]:
    o = run["options"]
    cap = (
        f"arq runs at most {o['arq_max_jobs']:,} jobs here (it fires about 1,000/s): "
        "its rates compare per second, its drain does not."
    )
    return {
        "steady": "Lateness = receive time − due time; ratios are delayq ÷ peer. The Kafka "
        "floor is a bare aiokafka producer sending each record as it comes due, through "
        "the same broker to a consumer like delayq's (benchmarks/kafka_floor.py): "
        "delayq − floor is what delayq adds to what Kafka costs here.",
        "stages": "Each row is measured on its own, from due time: p50s and p99s of "
        "successive stages do not add up. The node's rows come from its histograms "
        "(actors/metrics.py; scraped once at the end, quantiles interpolated within "
        "buckets as histogram_quantile does): move = due → moved to ready, claim = moved "
        "→ claimed, publish = claimed → broker ack, lateness = due → broker ack. The "
        "records' rows: fired_ms (the Redis clock at the claim), the Kafka timestamp "
        "(the producer appending the record) and the receive time, each − due.",
        "cpu": CPU_NOTE,
        "cpu_burst": CPU_NOTE,
        "ids": "Nothing fires: add rate = jobs ÷ seconds spent adding, jobs due in 2–4 "
        "minutes (inside redis_horizon_ms, so delayq writes MySQL and Redis). delayq: "
        f"schedule_many, {s_batch(run)} jobs per call; BullMQ: addBulk, 1,000 per call, "
        "with opts.jobId for caller ids. Generated ids: delayq's and BullMQ's own.",
        "burst": "Drain = last fire − first due; mean fire rate = jobs ÷ drain; "
        "peak = most fired in any 1 s. A peer's job fires when its worker "
        "receives it; a delayq job when its node hands the record to Kafka (the "
        "record's timestamp): one Python consumer on the same two cores reads a "
        "million records slower than a node publishes them, so its receive "
        "times would measure the consumer (they are in the JSON, at_consumer). "
        "Lateness is at the consumer for every system. " + cap,
        "backlog": "Redis bytes / job = (INFO used_memory after adding − before) ÷ jobs; "
        "own keys: MEMORY USAGE of the system's own keys (every element "
        "counted) ÷ jobs, which other clients of the same Redis cannot "
        "disturb (it leaves out the server's main key table). "
        "delayq three ways: the client alone, with one node holding the slots, "
        "and the client alone with the jobs due in 2–4 minutes, inside "
        "redis_horizon_ms (a job due later stays in MySQL alone until its slot's "
        "node loads it); MySQL is in neither Redis figure. "
        + f"arq adds at most {o['arq_max_jobs']:,} jobs here; its add rate and "
        "bytes per job still compare." + horizon_note(run),
        "scale": "One machine: every node shares the same cores with Redis, MariaDB, the "
        "broker and the consumer. The last row is the last node count ÷ the first.",
    }


CPU_NOTE = (
    "User + system CPU of every process over each system's whole run (adding, firing, "
    "stopping), read every 0.5 s (benchmarks/cpu_share.py's CpuMeter) ÷ the jobs of the "
    "run. The services are the processes on the stack's ports; a node goes by its "
    "command line; the benchmark group is what runs from benchmarks/: fire_bench's "
    "producer and consumer for delayq, the peer's own process (BullMQ's Node.js "
    "producer and worker) for a peer. Ratios are delayq ÷ BullMQ: below 1 is less CPU."
)


def s_batch(run: Result) -> str:
    """delayq's schedule_many batch in the ids scenario, as fire_bench reported it."""
    batch = run["scenarios"].get("ids", {}).get("results", {}).get("delayq", {}).get("batch")
    return f"{batch:,}" if batch else "5,000"


def machine_line(m: Result) -> str:
    git = m["git"]
    changed = git["uncommitted_changes"]
    tree = f"git {str(git['commit'])[:10]}" + (
        f" with uncommitted changes in {', '.join(changed)}" if changed else ""
    )
    return (
        f"{m['cpus']} × {m['cpu_model']}, {m['memory_gib']} GiB, {m['os']} "
        f"({m['platform']}); Python {m['python']}, Node {m['node']}; Redis {m['redis']}, "
        f"MariaDB {m['mariadb']}, {m['kafka_broker']}; BullMQ {m['bullmq']}, "
        f"arq {m['arq']}; {tree}; load average at start "
        f"{', '.join(map(str, m['loadavg_at_start']))}. The stores, the broker, every "
        "system and its consumer share these cores."
    )


HOW = """\
- delayq: `schedule_many` (a MySQL row and Redis per job), node process(es), fired to
  Kafka ({broker}); lateness at a Kafka consumer in the benchmark process, so it
  includes the broker round trip.
- delayq, exactly-once (when run): the same with `delivery = "exactly_once"`, each
  slot's records in Kafka transactions, read by a consumer with
  `isolation_level="read_committed"`.
- BullMQ: `addBulk` of delayed jobs (1,000 per call, `removeOnComplete`), one Worker with
  concurrency 200; lateness in the worker's job function.
- arq: `enqueue_job(_defer_until=...)`, one worker with `max_jobs` 200, other settings at
  their defaults; lateness in the job function.
- Kafka floor (steady only): a bare aiokafka producer (acks=all, linger_ms 0) sends each
  record, shaped and sized like delayq's, when it comes due; a consumer like delayq's reads
  it through the same broker (`benchmarks/kafka_floor.py`): what Kafka alone costs here.
- Same Redis, one system at a time, a fresh queue / key prefix each, 100-byte payloads,
  the same due times relative to each run's first due time; every job is added before
  the first one is due (a † on an add rate marks a run where adding ran past it).
- received / missing / early: jobs received, not received before the give-up time, and
  received (or, for delayq, fired) before their due time; "delivered twice" counts the
  records the live consumer received twice (delayq publishes at least once; a record
  that a re-read found first and the live consumer later is not one). The local broker
  can make a
  record visible out of order, past a live consumer: delayq's benchmark re-reads the
  topic for missing jobs; those it finds count as received ("found on a re-read") but,
  having no live receive time, stay out of the lateness and fire-rate numbers."""


def scenario_tables(run: Result) -> list[tuple[str, str, str]]:
    """(part, title, table) for every scenario that ran; a steady scenario has a part
    per rate, steady-<rate> and stages-<rate>."""
    builders = {
        "steady": steady_table,
        "stages": stages_table,
        "cpu": cpu_table,
        "cpu_burst": cpu_table,
        "burst": burst_table,
        "backlog": backlog_table,
        "ids": ids_table,
        "scale": scale_table,
    }
    tables = []
    for part, title in titles(run).items():
        kind, _, rate = part.partition("-")
        source = {"stages": "steady", "cpu": "steady", "cpu_burst": "burst"}
        scenario = run["scenarios"][source.get(kind, kind)]
        data = scenario["by_rate"][rate] if rate else scenario
        tables.append((part, title, builders[kind](data)))
    return tables


def section(run: Result, images: Sequence[Path]) -> str:
    """The generated section of docs/benchmarks.md (between the markers)."""
    by_name = {p.stem: p.as_posix() for p in images}
    parts = [
        f"_Generated by `benchmarks/harness.py` ({run['started']}, "
        f"{run['duration_s'] / 60:.0f} min); the next run replaces everything between the "
        "markers._",
        f"```sh\n{run['command']}\n```",
        f"Machine: {machine_line(run['machine'])}",
        HOW.format(broker=run["machine"]["kafka_broker"]),
    ]
    notes = scenario_notes(run)
    for part, title, text in scenario_tables(run):
        parts += [f"### {title}", text, notes[part.partition("-")[0]]]
        parts += [
            f"![{stem}]({path})"
            for stem, path in by_name.items()
            if stem == f"bench-{part}" or stem.startswith(f"bench-{part}-")
        ]
    return "\n\n".join(parts) + "\n"


def console(run: Result) -> str:
    lines = []
    for _name, title, text in scenario_tables(run):
        lines += [title, text, ""]
    return "\n".join(lines)


def write_docs(path: Path, body: str) -> None:
    """Replace the text between the markers, or append them under HEADING."""
    text = path.read_text()
    block = f"{BEGIN}\n{body}{END}"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    path.write_text(text)
