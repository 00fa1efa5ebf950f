"""The projected cluster sizes of docs/capacity.md, computed from the measured costs.

    python benchmarks/capacity_model.py                       # the inputs docs/capacity.md uses
    python benchmarks/capacity_model.py --fired benchmarks/results/capacity-<time>.json
    python benchmarks/capacity_model.py --node-us 40 --redis-us 30   # what if

A job in steady state is scheduled once and fired once, so at R jobs/s each process p
spends R × µs(p) of CPU per second. Each kind of process is kept at `--utilisation` of
what it has (0.5: room for bursts, catch-up after a pause and a failed peer's share):

- nodes: one core each (one asyncio process); R × node µs + slots × idle cost per slot,
  plus a fixed cost per node; at least 2 (failover);
- Redis masters: one core each (commands run on one thread), R × Redis µs, times how
  unevenly the slots fall on the masters (the spread, capacity_bench.py's `spread`);
- MySQL servers of --mysql-cores: the fewest N whose share of R × MariaDB µs plus the
  nodes' polling (per server and per logical shard) fits;
- Kafka brokers of --broker-cores, replication factor 3: R × broker µs, at least 3;
- producer and consumer processes, Python, one core each.

With --fired, the µs per job of the producer, Redis, MariaDB, the node and the redo log
come from a capacity_bench.py run's `fired` step (the larger of its near and far paths,
as the document does); the other inputs keep their defaults unless given.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import orjson
from redis.crc import key_slot

# Jobs per second, slots and logical shards (docs/capacity.md, "Slots and logical shards").
SIZES = ((10_000, 64, 8), (100_000, 1_024, 16), (1_000_000, 4_096, 32))
MASTER_COLUMNS = (3, 6, 12, 24, 48, 96)
DAY_S = 86_400


@dataclass(frozen=True)
class Inputs:
    """What one job and one owned slot cost; each default says where it was measured."""

    producer_us: float = 27.6  # capacity B, near
    redis_us: float = 47.5  # capacity B, near
    mariadb_us: float = 41.6  # capacity B, far
    node_us: float = 63.9  # capacity B, far
    broker_us: float = 51.3  # capacity C: three brokers, RF 3, with one consumer
    consumer_us: float = 19.1  # capacity C: aiokafka, three brokers
    slot_idle_ms_per_s: float = 0.28  # capacity E: node CPU per owned slot, nothing due
    node_fixed_cores: float = 0.03  # capacity E: a node owning nothing
    poll_per_server_cores: float = 0.005  # capacity C: a node's polling, per MySQL server
    poll_per_shard_cores: float = 0.0037  # capacity C: and per logical shard
    redo_bytes: float = 1_263  # capacity B, near: redo log per job
    kafka_bytes: float = 348  # capacity B: Kafka log per record, one replica
    stored_bytes: float = 858  # capacity B: a fired job's row and history row
    lean_bytes: float = 266.3  # capacity A: a pending job in Redis without its payload
    whole_bytes: float = 618.4  # capacity A: with its 100-byte payload
    marker_bytes: float = 145  # operations.md: a fire marker, kept marker_retention_ms
    loaded_ahead_s: float = 150  # half of redis_horizon_ms: how far ahead jobs are loaded
    whole_ahead_s: float = 120  # payload_lead_ms: how far ahead payloads are filled
    marker_s: float = 60  # marker_retention_ms
    utilisation: float = 0.5
    mysql_cores: int = 16
    broker_cores: int = 8
    retention_days: float = 7


def spread(slots: int, masters: int, prefix: str = "dq") -> float:
    """The largest master's delayq slots ÷ the mean, the masters holding equal hash-slot
    ranges as `redis-cli --cluster create` makes them."""
    counts = [0] * masters
    for slot in range(slots):
        counts[min(masters - 1, key_slot(f"{{{prefix}:{slot}}}".encode()) * masters // 16384)] += 1
    return max(counts) / (slots / masters)


def nodes_for(rate: int, slots: int, i: Inputs) -> tuple[float, int]:
    """(cores the nodes spend, nodes): each node adds its fixed cost, so solve for it."""
    cores = rate * i.node_us / 1e6 + slots * i.slot_idle_ms_per_s / 1000
    nodes = max(2, math.ceil(cores / (i.utilisation - i.node_fixed_cores)))
    return cores + nodes * i.node_fixed_cores, nodes


def masters_for(rate: int, slots: int, i: Inputs) -> tuple[float, int, float]:
    """(Redis cores, masters, the spread used): the even share first, then the spread of
    the smallest tabulated master count at least that large."""
    cores = rate * i.redis_us / 1e6
    even = max(1, math.ceil(cores / i.utilisation))
    column = next((m for m in MASTER_COLUMNS if m >= even), MASTER_COLUMNS[-1])
    factor = spread(slots, column) if even > 1 else 1.0
    return cores, max(1, math.ceil(even * factor)), factor


def mysql_servers_for(rate: int, nodes: int, shards: int, i: Inputs) -> tuple[float, float, int]:
    """(MariaDB cores for the jobs, for the polling at that size, servers by CPU)."""
    jobs = rate * i.mariadb_us / 1e6
    for servers in range(1, shards + 1):
        polling = nodes * (i.poll_per_server_cores * servers + i.poll_per_shard_cores * shards)
        if (jobs + polling) / servers <= i.utilisation * i.mysql_cores:
            return jobs, polling, servers
    return jobs, polling, shards


def processes(cores: float, i: Inputs) -> int:
    """Python processes of one core each for `cores` of work, each kept at utilisation."""
    return max(1, math.ceil(cores / i.utilisation))


def model(i: Inputs) -> list[dict[str, float | int]]:
    rows: list[dict[str, float | int]] = []
    for rate, slots, shards in SIZES:
        node_cores, nodes = nodes_for(rate, slots, i)
        redis_cores, masters, factor = masters_for(rate, slots, i)
        jobs_cores, polling, servers = mysql_servers_for(rate, nodes, shards, i)
        broker_cores = rate * i.broker_us / 1e6
        producer_cores = rate * i.producer_us / 1e6
        consumer_cores = rate * i.consumer_us / 1e6
        rows.append(
            {
                "rate": rate,
                "slots": slots,
                "node_cores": node_cores,
                "nodes": nodes,
                "redis_cores": redis_cores,
                "redis_masters": masters,
                "spread": factor,
                "shards": shards,
                "mariadb_job_cores": jobs_cores,
                "mariadb_polling_cores": polling,
                "mysql_servers_by_cpu": servers,
                "broker_cores": broker_cores,
                "brokers": max(3, math.ceil(broker_cores / (i.utilisation * i.broker_cores))),
                "producers": processes(producer_cores, i),
                "consumers": processes(consumer_cores, i),
                "all_cores": node_cores
                + redis_cores
                + jobs_cores
                + polling
                + broker_cores
                + producer_cores
                + consumer_cores,
                "redo_mb_per_s": rate * i.redo_bytes / 1e6,
                "kafka_mb_per_s": rate * i.kafka_bytes * 3 / 1e6,
                "retained_tb": rate * DAY_S * i.retention_days * i.stored_bytes / 1e12,
                "redis_gb": rate
                * (
                    (i.loaded_ahead_s - i.whole_ahead_s) * i.lean_bytes
                    + i.whole_ahead_s * i.whole_bytes
                    + i.marker_s * i.marker_bytes
                )
                / 1e9,
            }
        )
    return rows


def from_fired(path: Path, base: Inputs) -> Inputs:
    """base with the per-job costs of a capacity_bench.py `fired` step."""
    runs = orjson.loads(path.read_bytes()).get("fired") or []
    if not runs:
        raise SystemExit(f"{path} has no `fired` step: run capacity_bench.py --steps fired")

    def us(group: str) -> float:
        found = [
            run["cpu"]["groups"][group]["us_per_job"]
            for run in runs
            if group in run["cpu"]["groups"]
        ]
        if not found:
            raise SystemExit(f"{path}: no CPU of {group!r} in its `fired` step")
        return float(max(found))

    return dataclasses.replace(
        base,
        producer_us=us("producer (this process)"),
        redis_us=us("Redis"),
        mariadb_us=us("MariaDB"),
        node_us=us("delayq node"),
        redo_bytes=max(run["redo_bytes_per_job"] for run in runs),
        stored_bytes=max(run["mysql_bytes_per_fired_job"] for run in runs),
    )


def table(rows: list[dict[str, float | int]]) -> str:
    """The rows as the Markdown table of docs/capacity.md's model."""
    shown = (
        ("fired per second", "rate", "{:,}"),
        ("slots", "slots", "{:,}"),
        ("delayq node cores", "node_cores", "{:.2f}"),
        ("**nodes**", "nodes", "**{}**"),
        ("Redis cores", "redis_cores", "{:.2f}"),
        ("spread factor used", "spread", "{:.2f}"),
        ("**Redis masters**", "redis_masters", "**{}**"),
        ("logical shards", "shards", "{}"),
        ("MariaDB cores for the jobs", "mariadb_job_cores", "{:.1f}"),
        ("MariaDB cores for the nodes' polling", "mariadb_polling_cores", "{:.1f}"),
        ("**MySQL servers** by CPU", "mysql_servers_by_cpu", "**{}**"),
        ("broker cores (RF 3)", "broker_cores", "{:.1f}"),
        ("**Kafka brokers**", "brokers", "**{}**"),
        ("producer processes", "producers", "{:,}"),
        ("consumer processes", "consumers", "{:,}"),
        ("all of delayq's cores", "all_cores", "{:.1f}"),
        ("MySQL redo log, MB/s", "redo_mb_per_s", "{:,.0f}"),
        ("Kafka log, three replicas, MB/s", "kafka_mb_per_s", "{:,.0f}"),
        ("Redis memory for the jobs due soon and the fire markers, GB", "redis_gb", "{:,.1f}"),
        ("fired jobs kept by retention, TB", "retained_tb", "{:,.1f}"),
    )
    lines = [
        "| " + " | ".join(["figure", *(f"{row['rate']:,}" for row in rows)]) + " |",
        "|" + "---|" * (len(rows) + 1),
    ]
    for label, key, form in shown[1:]:
        lines.append("| " + " | ".join([label, *(form.format(row[key]) for row in rows)]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fired", type=Path, help="a capacity_bench.py results file")
    for f in dataclasses.fields(Inputs):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", type=type(f.default), help=f"default {f.default}"
        )
    args = parser.parse_args()
    inputs = from_fired(args.fired, Inputs()) if args.fired else Inputs()
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(Inputs)
        if getattr(args, f.name) is not None
    }
    inputs = dataclasses.replace(inputs, **given)
    for f in dataclasses.fields(Inputs):
        print(f"{f.name:>24} = {getattr(inputs, f.name)}")
    print()
    print(table(model(inputs)))


if __name__ == "__main__":
    main()
