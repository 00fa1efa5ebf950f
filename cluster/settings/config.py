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

from cluster.errors import ConfigError
from cluster.settings.security import redact_url as redact_url  # re-exported
from cluster.settings.security import redact_value
from cluster.settings.sources import load_toml, parse_value

KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# What a fired record holds besides its payload, at most: job_id, biz_id (also the Kafka
# key) and biz_type at up to 4 UTF-8 bytes a character (200, 200, 64), the topic (249),
# field names, times, the delayq-node header and Kafka's record framing.
RECORD_OVERHEAD_BYTES = 4096
# A claimed job waits in the node for at most this long before it is published: cancel()
# answers "in flight" for it meanwhile, so the advance stays a matter of milliseconds.
MAX_FIRE_ADVANCE_MS = 1000
DELIVERY_MODES = ("at_least_once", "exactly_once")
# The Redis envelope header versions (cluster/model/contract.py describes them).
ENVELOPE_VERSIONS = (1, 2)
# The smallest payload_lead_ms other than 0: the filler passes four times per lead (at
# most once a second), and more often than that is not worth the bytes it saves.
MIN_PAYLOAD_LEAD_MS = 1000
# Settings whose whole value is a secret.
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
        self.validate()

    def validate(self) -> None:
        if self.slots < 1 or self.slots & (self.slots - 1):
            raise ConfigError(f"slots must be a power of two >= 1, got {self.slots}")
        if self.slots > 65536:
            raise ConfigError(f"slots must be <= 65536, got {self.slots}")
        for name in (
            "mysql_databases",
            "mysql_tables",
            "payload_max_bytes",
            "default_max_attempts",
            "move_batch",
            "claim_batch",
            "dispatch_concurrency",
            "record_batch",
            "record_interval_ms",
            "marker_retention_ms",
            "reconcile_interval_ms",
            "recent_reconcile_ms",
            "safety_wake_ms",
            "outbox_poll_ms",
            "recurring_poll_ms",
            "recurring_lookahead_ms",
            "reap_interval_ms",
            "inflight_timeout_ms",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "queue_size",
            "kafka_request_timeout_ms",
            "kafka_delivery_timeout_ms",
            "kafka_max_batch_bytes",
            "zk_session_timeout_ms",
            "redis_horizon_ms",
            "stats_interval_ms",
            "retention_batch",
            "web_body_max_bytes",
            "ingress_batch",
            "metrics_max_topics",
            "redis_wait_timeout_ms",
            "search_statement_max_ms",
            "web_searches_per_token",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.payload_max_bytes + RECORD_OVERHEAD_BYTES > self.kafka_max_batch_bytes:
            # Otherwise a payload producers accept could never be published: it would
            # use up its attempts and go dead.
            raise ConfigError(
                f"payload_max_bytes ({self.payload_max_bytes}) must leave "
                f"{RECORD_OVERHEAD_BYTES} bytes for the record's other fields within "
                f"kafka_max_batch_bytes ({self.kafka_max_batch_bytes}): at most "
                f"{self.kafka_max_batch_bytes - RECORD_OVERHEAD_BYTES}"
            )
        if self.allowed_topics and not all(p.strip() for p in self.allowed_topics.split(",")):
            raise ConfigError(
                "allowed_topics must be comma-separated fnmatch patterns without empty "
                f"ones, or empty for any topic; got {self.allowed_topics!r}"
            )
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0 (off) to 65535, got {self.metrics_port}")
        for name in (
            "stall_timeout_s",
            "ready_timeout_s",
            "retention_interval_s",
            "mysql_move_wait_s",
            "mysql_statement_timeout_s",
            "mysql_stall_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.retention_days >= 0:
            raise ConfigError(
                f"retention_days must be >= 0 (0: keep forever), got {self.retention_days}"
            )
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format must be 'text' or 'json', got {self.log_format!r}")
        if self.store_unreachable_release_ms < 0:
            raise ConfigError(
                "store_unreachable_release_ms must be >= 0 (0: never), got "
                f"{self.store_unreachable_release_ms}"
            )
        if self.redis_wait_replicas < 0:
            raise ConfigError(f"redis_wait_replicas must be >= 0, got {self.redis_wait_replicas}")
        if (fallback := self.redis_wait_fallback) not in ("raise", "mysql"):
            raise ConfigError(f"redis_wait_fallback must be 'raise' or 'mysql', got {fallback!r}")
        if not 0 <= self.fire_advance_ms <= MAX_FIRE_ADVANCE_MS:
            raise ConfigError(
                f"fire_advance_ms must be 0 (off) to {MAX_FIRE_ADVANCE_MS}, got "
                f"{self.fire_advance_ms}"
            )
        if self.delivery not in DELIVERY_MODES:
            raise ConfigError(f"delivery must be one of {DELIVERY_MODES}, got {self.delivery!r}")
        if self.delivery == "exactly_once" and not (
            self.kafka_idempotence and self.kafka_journal_topic
        ):
            raise ConfigError("delivery exactly_once needs kafka_idempotence and a journal topic")
        if self.kafka_linger_ms < 0:
            raise ConfigError(f"kafka_linger_ms must be >= 0, got {self.kafka_linger_ms}")
        if self.redis_horizon_ms < 1000:
            raise ConfigError(f"redis_horizon_ms must be >= 1000, got {self.redis_horizon_ms}")
        if self.payload_lead_ms != 0 and not (
            MIN_PAYLOAD_LEAD_MS <= self.payload_lead_ms <= self.redis_horizon_ms // 2
        ):
            # Beyond horizon/2 every job the reconciler loads is within the lead already, so
            # nothing would be lean: most likely a mistake in one of the two settings.
            raise ConfigError(
                f"payload_lead_ms must be 0 (always store payloads in Redis) or between "
                f"{MIN_PAYLOAD_LEAD_MS} and redis_horizon_ms / 2 "
                f"({self.redis_horizon_ms // 2}), got {self.payload_lead_ms}"
            )
        if (version := self.envelope_version) not in ENVELOPE_VERSIONS:
            raise ConfigError(f"envelope_version must be one of {ENVELOPE_VERSIONS}, got {version}")
        if self.recurring_lookahead_ms < 2 * self.recurring_poll_ms:
            # A tick must be made into a job before it is due, in one of the polls
            # between lookahead and lookahead/2 before it.
            raise ConfigError(
                f"recurring_lookahead_ms ({self.recurring_lookahead_ms}) must be at least "
                f"2 × recurring_poll_ms ({2 * self.recurring_poll_ms})"
            )
        if not self.startup_timeout_s >= 0:
            raise ConfigError(f"startup_timeout_s must be >= 0, got {self.startup_timeout_s}")
        if not self.max_delay_s > 0:
            raise ConfigError(f"max_delay_s must be > 0, got {self.max_delay_s}")
        if self.default_max_attempts > 1000:
            raise ConfigError("default_max_attempts must be <= 1000")
        if self.inflight_timeout_ms <= self.kafka_delivery_timeout_ms:
            # A slow but healthy broker must not turn every in-flight job into a duplicate:
            # the dispatcher gives up on (and retries) a batch before the reaper would.
            raise ConfigError(
                "inflight_timeout_ms must be longer than kafka_delivery_timeout_ms "
                f"({self.inflight_timeout_ms} <= {self.kafka_delivery_timeout_ms})"
            )
        if self.kafka_delivery_timeout_ms < self.kafka_request_timeout_ms:
            raise ConfigError(
                "kafka_delivery_timeout_ms must be at least kafka_request_timeout_ms "
                f"({self.kafka_delivery_timeout_ms} < {self.kafka_request_timeout_ms})"
            )
        if not self.zk_root.startswith("/") or (self.zk_root.endswith("/") and self.zk_root != "/"):
            raise ConfigError(f"zk_root must be an absolute znode path, got {self.zk_root!r}")
        if self.kafka_security_protocol not in KAFKA_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"kafka_security_protocol must be one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"
                f", got {self.kafka_security_protocol!r}"
            )
        if self.kafka_sasl_mechanism not in KAFKA_SASL_MECHANISMS:
            raise ConfigError(
                f"kafka_sasl_mechanism must be one of {', '.join(KAFKA_SASL_MECHANISMS)}, "
                f"got {self.kafka_sasl_mechanism!r}"
            )
        if self.kafka_security_protocol.startswith("SASL_") and not self.kafka_sasl_username:
            raise ConfigError(
                f"kafka_security_protocol {self.kafka_security_protocol} needs "
                "kafka_sasl_username and kafka_sasl_password"
            )
        if self.zk_auth and ":" not in self.zk_auth:
            raise ConfigError("zk_auth must be 'user:password'")
        if not 0 <= self.web_port <= 65535:
            raise ConfigError(f"web_port must be 0..65535, got {self.web_port}")
        if bool(self.web_tls_certfile) != bool(self.web_tls_keyfile):
            raise ConfigError("web_tls_certfile and web_tls_keyfile go together: set both")
        if not self.key_prefix or any(c in self.key_prefix for c in "{} /"):
            raise ConfigError(
                f"key_prefix must be non-empty without braces, spaces or '/': {self.key_prefix!r}"
            )

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
