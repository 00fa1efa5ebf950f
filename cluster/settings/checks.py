"""What each setting may hold: checked once, when a Settings is made.

A bad value raises ConfigError naming the setting, what it may be, and what it got, so
a node or a client with a wrong DELAYQ_* variable stops at once with a clear message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.errors import ConfigError

if TYPE_CHECKING:
    from cluster.settings.config import Settings

KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# What a fired record holds besides its payload, at most: job_id, biz_id (also the Kafka
# key) and biz_type at up to 4 UTF-8 bytes a character (200, 200, 64), the topic (249),
# field names, times, the delayq-node header and Kafka's record framing.
RECORD_OVERHEAD_BYTES = 4096
# A claimed job waits in the node for at most this long before it is published: cancel()
# answers "in flight" for it meanwhile, so the advance stays a matter of milliseconds.
MAX_FIRE_ADVANCE_MS = 1000
MAX_ROUND_INTERVAL_MS = 100
DELIVERY_MODES = ("at_least_once", "exactly_once")
# The Redis envelope header versions (cluster/model/contract.py describes them).
ENVELOPE_VERSIONS = (1, 2)
# The smallest payload_lead_ms other than 0: the filler passes four times per lead (at
# most once a second), and more often than that is not worth the bytes it saves.
MIN_PAYLOAD_LEAD_MS = 1000
# Settings whose whole value is a secret.


def check(s: Settings) -> None:
    """Raise ConfigError for the first setting out of its bounds."""
    if s.slots < 1 or s.slots & (s.slots - 1):
        raise ConfigError(f"slots must be a power of two >= 1, got {s.slots}")
    if s.slots > 65536:
        raise ConfigError(f"slots must be <= 65536, got {s.slots}")
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
        if getattr(s, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(s, name)}")
    if s.payload_max_bytes + RECORD_OVERHEAD_BYTES > s.kafka_max_batch_bytes:
        # Otherwise a payload producers accept could never be published: it would
        # use up its attempts and go dead.
        raise ConfigError(
            f"payload_max_bytes ({s.payload_max_bytes}) must leave "
            f"{RECORD_OVERHEAD_BYTES} bytes for the record's other fields within "
            f"kafka_max_batch_bytes ({s.kafka_max_batch_bytes}): at most "
            f"{s.kafka_max_batch_bytes - RECORD_OVERHEAD_BYTES}"
        )
    if s.allowed_topics and not all(p.strip() for p in s.allowed_topics.split(",")):
        raise ConfigError(
            "allowed_topics must be comma-separated fnmatch patterns without empty "
            f"ones, or empty for any topic; got {s.allowed_topics!r}"
        )
    if not 0 <= s.metrics_port <= 65535:
        raise ConfigError(f"metrics_port must be 0 (off) to 65535, got {s.metrics_port}")
    for name in (
        "stall_timeout_s",
        "ready_timeout_s",
        "retention_interval_s",
        "mysql_move_wait_s",
        "mysql_statement_timeout_s",
        "mysql_stall_s",
    ):
        if not getattr(s, name) > 0:
            raise ConfigError(f"{name} must be > 0, got {getattr(s, name)}")
    if not s.retention_days >= 0:
        raise ConfigError(f"retention_days must be >= 0 (0: keep forever), got {s.retention_days}")
    if s.log_format not in ("text", "json"):
        raise ConfigError(f"log_format must be 'text' or 'json', got {s.log_format!r}")
    if s.store_unreachable_release_ms < 0:
        raise ConfigError(
            "store_unreachable_release_ms must be >= 0 (0: never), got "
            f"{s.store_unreachable_release_ms}"
        )
    if s.redis_wait_replicas < 0:
        raise ConfigError(f"redis_wait_replicas must be >= 0, got {s.redis_wait_replicas}")
    if (fallback := s.redis_wait_fallback) not in ("raise", "mysql"):
        raise ConfigError(f"redis_wait_fallback must be 'raise' or 'mysql', got {fallback!r}")
    if not 0 <= s.fire_advance_ms <= MAX_FIRE_ADVANCE_MS:
        raise ConfigError(
            f"fire_advance_ms must be 0 (off) to {MAX_FIRE_ADVANCE_MS}, got {s.fire_advance_ms}"
        )
    if not 0 <= s.round_interval_ms <= MAX_ROUND_INTERVAL_MS:
        raise ConfigError(
            f"round_interval_ms must be 0 (off) to {MAX_ROUND_INTERVAL_MS}, got "
            f"{s.round_interval_ms}"
        )
    if s.delivery not in DELIVERY_MODES:
        raise ConfigError(f"delivery must be one of {DELIVERY_MODES}, got {s.delivery!r}")
    if s.delivery == "exactly_once" and not (s.kafka_idempotence and s.kafka_journal_topic):
        raise ConfigError("delivery exactly_once needs kafka_idempotence and a journal topic")
    if s.kafka_linger_ms < 0:
        raise ConfigError(f"kafka_linger_ms must be >= 0, got {s.kafka_linger_ms}")
    if s.redis_horizon_ms < 1000:
        raise ConfigError(f"redis_horizon_ms must be >= 1000, got {s.redis_horizon_ms}")
    if s.payload_lead_ms != 0 and not (
        MIN_PAYLOAD_LEAD_MS <= s.payload_lead_ms <= s.redis_horizon_ms // 2
    ):
        # Beyond horizon/2 every job the reconciler loads is within the lead already, so
        # nothing would be lean: most likely a mistake in one of the two settings.
        raise ConfigError(
            f"payload_lead_ms must be 0 (always store payloads in Redis) or between "
            f"{MIN_PAYLOAD_LEAD_MS} and redis_horizon_ms / 2 "
            f"({s.redis_horizon_ms // 2}), got {s.payload_lead_ms}"
        )
    if (version := s.envelope_version) not in ENVELOPE_VERSIONS:
        raise ConfigError(f"envelope_version must be one of {ENVELOPE_VERSIONS}, got {version}")
    if s.recurring_lookahead_ms < 2 * s.recurring_poll_ms:
        # A tick must be made into a job before it is due, in one of the polls
        # between lookahead and lookahead/2 before it.
        raise ConfigError(
            f"recurring_lookahead_ms ({s.recurring_lookahead_ms}) must be at least "
            f"2 × recurring_poll_ms ({2 * s.recurring_poll_ms})"
        )
    if not s.startup_timeout_s >= 0:
        raise ConfigError(f"startup_timeout_s must be >= 0, got {s.startup_timeout_s}")
    if not s.max_delay_s > 0:
        raise ConfigError(f"max_delay_s must be > 0, got {s.max_delay_s}")
    if s.default_max_attempts > 1000:
        raise ConfigError("default_max_attempts must be <= 1000")
    if s.inflight_timeout_ms <= s.kafka_delivery_timeout_ms:
        # A slow but healthy broker must not turn every in-flight job into a duplicate:
        # the dispatcher gives up on (and retries) a batch before the reaper would.
        raise ConfigError(
            "inflight_timeout_ms must be longer than kafka_delivery_timeout_ms "
            f"({s.inflight_timeout_ms} <= {s.kafka_delivery_timeout_ms})"
        )
    if s.kafka_delivery_timeout_ms < s.kafka_request_timeout_ms:
        raise ConfigError(
            "kafka_delivery_timeout_ms must be at least kafka_request_timeout_ms "
            f"({s.kafka_delivery_timeout_ms} < {s.kafka_request_timeout_ms})"
        )
    if not s.zk_root.startswith("/") or (s.zk_root.endswith("/") and s.zk_root != "/"):
        raise ConfigError(f"zk_root must be an absolute znode path, got {s.zk_root!r}")
    if s.kafka_security_protocol not in KAFKA_SECURITY_PROTOCOLS:
        raise ConfigError(
            f"kafka_security_protocol must be one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"
            f", got {s.kafka_security_protocol!r}"
        )
    if s.kafka_sasl_mechanism not in KAFKA_SASL_MECHANISMS:
        raise ConfigError(
            f"kafka_sasl_mechanism must be one of {', '.join(KAFKA_SASL_MECHANISMS)}, "
            f"got {s.kafka_sasl_mechanism!r}"
        )
    if s.kafka_security_protocol.startswith("SASL_") and not s.kafka_sasl_username:
        raise ConfigError(
            f"kafka_security_protocol {s.kafka_security_protocol} needs "
            "kafka_sasl_username and kafka_sasl_password"
        )
    if s.zk_auth and ":" not in s.zk_auth:
        raise ConfigError("zk_auth must be 'user:password'")
    if not 0 <= s.web_port <= 65535:
        raise ConfigError(f"web_port must be 0..65535, got {s.web_port}")
    if bool(s.web_tls_certfile) != bool(s.web_tls_keyfile):
        raise ConfigError("web_tls_certfile and web_tls_keyfile go together: set both")
    if not s.key_prefix or any(c in s.key_prefix for c in "{} /"):
        raise ConfigError(
            f"key_prefix must be non-empty without braces, spaces or '/': {s.key_prefix!r}"
        )
