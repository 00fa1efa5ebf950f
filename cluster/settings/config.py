"""Settings of delayq, read from DELAYQ_* environment variables or a TOML file.

Every setting has a default; docs/configuration.md lists them all. Environment
variables override the TOML file (``DELAYQ_CONFIG=path/to/delayq.toml``), which
overrides the defaults.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cluster.settings.checks import DELIVERY_MODES as DELIVERY_MODES  # re-exported
from cluster.settings.checks import RECORD_OVERHEAD_BYTES as RECORD_OVERHEAD_BYTES
from cluster.settings.checks import check
from cluster.settings.security import redact_url as redact_url  # re-exported
from cluster.settings.security import redact_value
from cluster.settings.sources import load_toml, parse_value

SECRET_SETTINGS = frozenset({"kafka_sasl_password", "zk_auth", "web_tokens"})


def redact(name: str, value: object) -> object:
    """A setting's value fit for logs and error messages (security.redact_value)."""
    if name in SECRET_SETTINGS and value:
        return "***"
    if isinstance(value, str):
        return redact_value(value)
    return value


def _default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    """All knobs of a client and a node. Units are in the names."""

    # Connections.
    redis_url: str = "redis://127.0.0.1:6379/0"
    mysql_url: str = "mysql://delayq:delayq@127.0.0.1:3306/delayq"
    kafka_bootstrap: str = "127.0.0.1:9092"
    zk_hosts: str = "127.0.0.1:2181"
    zk_root: str = "/delayq"
    zk_session_timeout_ms: int = 10000
    # A node whose Redis or Kafka has not answered its checks for this long gives its
    # slots up and leaves the slot map, when another member can do their work; it takes
    # its share back once both have answered every check for as long
    # (actors/store_watch.py, actors/withdrawal.py). 0: never.
    store_unreachable_release_ms: int = 5000

    # Layout. Slot count must be a power of two and is fixed for the life of a cluster.
    key_prefix: str = "dq"
    slots: int = 16
    mysql_databases: int = 1  # logical shards, fixed at creation: room for more servers
    mysql_tables: int = 4
    # More MySQL servers (whitespace-separated URLs), where `db migrate` creates shard
    # databases ("0-3:0 4-7:1"), and how long a statement may take (docs/cluster.md).
    mysql_servers: str = ""
    mysql_shard_map: str = ""
    mysql_move_wait_s: float = 30.0  # how long a call waits out a shard move's switch
    mysql_statement_timeout_s: float = 30.0
    # A call over several servers cuts off one that answered nothing this long while
    # another's part is done: a frozen server holds back only its own jobs.
    mysql_stall_s: float = 2.0
    # A search's statement on one server is stopped after this long (and the search
    # refused with a message to narrow it): a filter outside the index costs no more.
    search_statement_max_ms: int = 5000

    # Input limits.
    payload_max_bytes: int = 65536
    max_delay_s: float = 365 * 86400.0
    default_max_attempts: int = 16

    # Tiering: a job due further ahead than this lives only in MySQL until the node that
    # owns its slot loads it into Redis (from horizon/2 ahead, every horizon/4), so
    # Redis holds the near future only. Producer and node clocks must agree within
    # horizon/2.
    redis_horizon_ms: int = 300000
    # Lean envelopes: a job due further ahead than this (by the Redis clock) is stored in
    # Redis without its payload (the envelope header alone); the owning node's filler
    # loads the payload from MySQL once the job comes within this of its due time, and
    # the dispatcher loads what is still missing when it claims the job. At most
    # redis_horizon_ms / 2 (the reconciler loads jobs that far ahead), at least
    # MIN_PAYLOAD_LEAD_MS; 0: always store full envelopes.
    payload_lead_ms: int = 120000
    # The Redis envelope header version this process writes (every one is read): 1 only
    # while processes of a release before 0.2.0 run (docs/operations.md, Upgrades).
    envelope_version: int = 2

    # Replication (docs/cluster.md): writes that back a promise (cancel() and
    # reschedule() returning True, the ack of a fired job, a slot's owner epoch) return
    # only once this many replicas of their Redis node have them (WAIT), so a failover
    # to a lagging replica cannot undo them. 0: do not wait (a Redis without replicas).
    redis_wait_replicas: int = 0
    # How long such a write waits for its replicas before the caller is told
    # (ReplicationUnconfirmed from the client; a warning in a node).
    redis_wait_timeout_ms: int = 500
    redis_wait_fallback: str = "raise"  # "mysql": see docs/cluster.md, no replica attached

    # Node: batching and pacing.
    move_batch: int = 1000
    claim_batch: int = 500
    dispatch_concurrency: int = 8
    record_batch: int = 2000
    record_interval_ms: int = 100
    marker_retention_ms: int = 60000
    reconcile_interval_ms: int = 300000
    # How often a node re-adds the recently created rows of its slots and checks whether
    # Redis restarted (actors/reconciler.py): bounds how late a job whose Redis add was
    # lost fires.
    recent_reconcile_ms: int = 5000
    safety_wake_ms: int = 1000
    # How often a node reads its slots' outbox: jobs scheduled inside a caller's own
    # transaction (schedule_in) reach Redis within about this long of the commit.
    outbox_poll_ms: int = 50
    # Recurring schedules (actors/recurring.py): how often a node looks for the ticks of
    # its slots' schedules to make into jobs, and how far ahead: each tick becomes an
    # ordinary job between lookahead/2 and lookahead before it is due, so ticks keep
    # firing on time through a hand-off of the schedule's slot as long as that takes
    # less than lookahead/2. At least 2 × recurring_poll_ms.
    recurring_poll_ms: int = 1000
    recurring_lookahead_ms: int = 60000
    # Jobs are moved and claimed up to this long before their due time and published at
    # it by the Redis clock (actors/dispatcher.py), so the round trips happen before the
    # due time instead of after it. 0 (the default): move and claim at the due time. Off
    # by default: on the local broker the records released one millisecond at a time
    # made more, smaller batches, and lateness at the consumer rose (docs/benchmarks.md).
    fire_advance_ms: int = 0
    # The least time between two of a node's move rounds (actors/scanner.py): the slots
    # that come due meanwhile are moved, then claimed, together, in fuller script calls
    # and fewer round trips. Costs up to this much lateness; the default is measured in
    # docs/benchmarks.md ("The round interval"). 0: move each slot as soon as it is due.
    round_interval_ms: int = 10
    reap_interval_ms: int = 1000
    inflight_timeout_ms: int = 30000
    retry_backoff_ms: int = 1000
    retry_backoff_max_ms: int = 300000
    queue_size: int = 1024
    node_id: str = field(default_factory=_default_node_id)
    # How long a starting node waits for MySQL, Redis, Kafka and ZooKeeper to answer
    # before it gives up (actors/node.py); 0: try each once.
    startup_timeout_s: float = 120.0
    # Testing hook: shift the node's own clock (scanner, lease checks) by this much.
    clock_offset_ms: int = 0

    # Kafka producer.
    kafka_idempotence: bool = True
    kafka_linger_ms: int = 2
    kafka_request_timeout_ms: int = 15000
    kafka_delivery_timeout_ms: int = 20000
    kafka_max_batch_bytes: int = 1048576
    # "at_least_once", or "exactly_once": each slot's records go in Kafka transactions
    # fenced per slot, for consumers reading with isolation_level=read_committed
    # (docs/guarantees.md); needs a broker with transactions and kafka_idempotence.
    delivery: str = "at_least_once"
    kafka_journal_topic: str = "delayq-journal"  # exactly_once: what each transaction carried

    # Security (docs/security.md). Redis and MySQL credentials go in their URLs
    # (redis://user:password@host, rediss:// for TLS; mysql://user:password@host/db).
    # Empty file settings mean "not used"; a CA file of "" with TLS on means the
    # system's trusted CAs.
    redis_ssl_cafile: str = ""
    redis_ssl_certfile: str = ""  # client certificate, when Redis asks for one
    redis_ssl_keyfile: str = ""
    mysql_ssl_ca: str = ""  # set: connect with TLS and verify the server against it
    mysql_ssl_cert: str = ""
    mysql_ssl_key: str = ""
    mysql_ssl_verify_hostname: bool = True
    kafka_security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    kafka_ssl_cafile: str = ""
    kafka_ssl_certfile: str = ""
    kafka_ssl_keyfile: str = ""
    kafka_sasl_mechanism: str = "PLAIN"  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = ""
    # "user:password": ZooKeeper digest authentication; every znode delayq creates is
    # then readable and writable by that user only.
    zk_auth: str = ""
    # Comma-separated fnmatch patterns ("orders.*,reminders"): producers refuse, and
    # nodes never publish to, a topic matching none (empty: any), nor __* or delayq's own.
    allowed_topics: str = ""

    # Operations (docs/operations.md).
    # The port of the node's /metrics, /healthz and /readyz; 0: none of them.
    metrics_port: int = 0
    metrics_host: str = "0.0.0.0"
    metrics_max_topics: int = 100  # more topics' series: summed as topic="(other)"
    # How often a node samples its slots' depths and checks Redis, MySQL and Kafka.
    stats_interval_ms: int = 2000
    # An actor busy with one step for longer than this is stuck (/healthz answers 503).
    stall_timeout_s: float = 60.0
    # /readyz wants Redis, MySQL and Kafka to have answered within this long.
    ready_timeout_s: float = 15.0
    # Fired and cancelled jobs (rows and history) older than this are deleted by the
    # node owning their slot, in batches of retention_batch; 0: keep them forever.
    retention_days: float = 7.0
    retention_interval_s: float = 60.0
    retention_batch: int = 1000
    # "text", or "json": one JSON object per line with node id, and slot and job id
    # where they apply.
    log_format: str = "text"

    # HTTP API and web console (`delayq web`, docs/http.md).
    web_host: str = "127.0.0.1"
    web_port: int = 8470
    # "TOKEN=ROLE,TOKEN=ROLE": bearer tokens and their roles (producer, operator,
    # viewer). Empty: no authentication, which `delayq web` allows on loopback only.
    web_tokens: str = ""
    web_tls_certfile: str = ""  # both set: HTTPS with this chain and key (PEM files)
    web_tls_keyfile: str = ""
    web_body_max_bytes: int = 16 * 1024 * 1024  # larger bodies: 413, never read
    web_allowed_hosts: str = ""  # "a.example,b.example": more names for Host (http.md)
    web_header_timeout_s: float = 10.0  # to send a request's headers, or be cut off
    # Searches, bulk cancels and pending counts one token may have running at once;
    # one more is answered 429 with Retry-After.
    web_searches_per_token: int = 2

    # Kafka ingress (`delayq ingress`, docs/ingress.md): records of this topic are jobs
    # to schedule; empty: no ingress.
    ingress_topic: str = ""
    # Where a record that is not a valid job goes, with the reason; empty:
    # "<ingress_topic>.errors".
    ingress_error_topic: str = ""
    ingress_group: str = "delayq-ingress"
    # Records scheduled per round (one schedule_batch() call), at most; at most 100,000.
    ingress_batch: int = 1000

    def __post_init__(self) -> None:
        check(self)

    def __repr__(self) -> str:
        """Every setting, with passwords replaced by *** (settings end up in logs)."""
        shown = ", ".join(
            f"{f.name}={redact(f.name, getattr(self, f.name))!r}" for f in fields(self)
        )
        return f"Settings({shown})"

    @property
    def zk_cluster_root(self) -> str:
        """The cluster's znode: <zk_root>/<key_prefix> (actors/membership.py)."""
        return f"{self.zk_root.rstrip('/')}/{self.key_prefix}"

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Defaults, then the TOML file named by DELAYQ_CONFIG, then DELAYQ_* variables."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        config_path = env.get("DELAYQ_CONFIG")
        if config_path:
            values.update(load_toml(Path(config_path), _field_types()))
        for f in fields(cls):
            raw = env.get(f"DELAYQ_{f.name.upper()}")
            if raw is not None:
                values[f.name] = parse_value(f.name, raw, _field_type(f.name))
        return cls(**values)


def _field_type(name: str) -> type:
    default = Settings.__dataclass_fields__[name].default
    if default is dataclasses.MISSING:
        return str
    return type(default)


def _field_types() -> dict[str, type]:
    return {f.name: _field_type(f.name) for f in fields(Settings)}
