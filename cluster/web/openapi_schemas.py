"""The components of the OpenAPI document (cluster/web/openapi.py): the JSON schemas of
the requests and answers of every route, by name. openapi_document() fills in the
limits of the server's settings (max_delay_s) on a copy.
"""

from __future__ import annotations

from typing import Any

from cluster.client.delay_client import MAX_BATCH
from cluster.client.recurring import shown_key
from cluster.model.job_fields import BY_NAME, OPTIONS
from cluster.model.tick_ids import RECURRING_PREFIX
from cluster.model.ticks import MIN_EVERY_MS, Missed
from cluster.web.api import DEAD_SELECTION_MAX
from cluster.web.openapi_fields import (
    AT,
    DELAY,
    DELAY_OR_AT,
    JOB_ID,
    OPTION_SCHEMAS,
    RECORD_OPTION_SCHEMAS,
    REFUSAL,
    STATUS,
    TOPIC,
    exactly_one,
    nullable,
    option_record_schema,
    ref,
)
from cluster.web.problems import KINDS

# A schedule's options as describe() shows them (GET /v1/recurring/{name}).
SCHEDULE_OPTION_SCHEMAS = {shown_key(option): option_record_schema(option) for option in OPTIONS}

SCHEMAS: dict[str, Any] = {
    "JobRequest": {
        "type": "object",
        "description": "One job: exactly one of delay or at. The same job_id twice is one job. "
        "The payload's JSON is at most payload_max_bytes; at is at most max_delay_s ahead.",
        "required": ["topic", "payload"],
        "additionalProperties": False,
        "properties": {
            "topic": {**TOPIC, "description": BY_NAME["topic"].doc},
            "payload": {"description": BY_NAME["payload"].doc},
            "delay": DELAY,
            "at": AT,
            "job_id": {
                "oneOf": [
                    {**JOB_ID, "not": {"pattern": f"^{RECURRING_PREFIX}"}},
                    {"type": "null"},
                ],
                "description": "your key; generated when absent. Not starting with "
                f"{RECURRING_PREFIX} (the ids of recurring schedules' ticks)",
            },
            **OPTION_SCHEMAS,
        },
        "oneOf": DELAY_OR_AT,
    },
    "JobBatch": {
        "type": "object",
        "required": ["jobs"],
        "additionalProperties": False,
        "properties": {
            "jobs": {"type": "array", "maxItems": MAX_BATCH, "items": ref("JobRequest")}
        },
    },
    "Scheduled": {
        "type": "object",
        "required": ["job_id", "created"],
        "properties": {
            "job_id": {"type": "string"},
            "created": nullable(
                "boolean",
                description="true: this request created the job; false: it was already "
                "there; null: stored, but not confirmed in Redis yet (see warning)",
            ),
            "warning": {"type": "string"},
        },
    },
    "ScheduledBatch": {
        "type": "object",
        "required": ["jobs"],
        "properties": {
            "jobs": {"type": "array", "items": ref("Scheduled")},
            "warning": {"type": "string"},
        },
    },
    "HistoryEntry": {
        "type": "object",
        "required": ["status", "attempt", "node", "slot", "at", "note"],
        "properties": {
            "status": STATUS,
            "attempt": {"type": "integer"},
            # null on the "created" entry: made from the row, no node wrote it.
            "node": nullable("string"),
            "slot": {"type": "integer"},
            "at": {"type": "string", "format": "date-time"},
            "note": nullable("string"),
        },
    },
    "Job": {
        "type": "object",
        "description": "A job's durable record (MySQL's)",
        "required": [
            "job_id",
            "topic",
            "status",
            "due_ms",
            "due",
            "attempts",
            "payload",
            "slot",
            "last_error",
            "created_ms",
            "modified_ms",
            *RECORD_OPTION_SCHEMAS,
        ],
        "properties": {
            "job_id": {"type": "string"},
            "topic": {"type": "string"},
            "status": STATUS,
            "due_ms": {"type": "integer"},
            "due": {"type": "string", "format": "date-time"},
            "attempts": {"type": "integer"},
            "payload": {},
            "slot": {"type": "integer"},
            "last_error": nullable("string"),
            "created_ms": {"type": "integer"},
            "modified_ms": {"type": "integer"},
            "recurring": nullable("string", description="the recurring schedule of a tick"),
            "tick_ms": nullable("integer", description="the time of that tick"),
            **RECORD_OPTION_SCHEMAS,
            "payload_hidden": {
                "type": "boolean",
                "description": "true: the token's role may not read payloads (payload null)",
            },
            "history": {"type": "array", "items": ref("HistoryEntry")},
        },
    },
    "Cancelled": {
        "type": "object",
        "required": ["job_id", "cancelled"],
        "properties": {"job_id": {"type": "string"}, "cancelled": {"const": True}},
    },
    "Reschedule": {
        "type": "object",
        "description": "exactly one of delay or at",
        "additionalProperties": False,
        "properties": {
            "delay": DELAY,
            "at": AT,
        },
        "oneOf": DELAY_OR_AT,
    },
    "Rescheduled": {
        "type": "object",
        "required": ["job_id", "rescheduled", "due_ms"],
        "properties": {
            "job_id": {"type": "string"},
            "rescheduled": {"const": True},
            "due_ms": nullable("integer"),
        },
    },
    "DeadJob": {
        "type": "object",
        "required": [
            "job_id",
            "slot",
            "topic",
            "died_ms",
            "died",
            "attempts",
            "last_error",
            "record",
        ],
        "properties": {
            "job_id": {"type": "string"},
            "slot": {"type": "integer"},
            "topic": {"type": "string"},
            "died_ms": {"type": "integer"},
            "died": {"type": "string", "format": "date-time"},
            "attempts": nullable("integer"),
            "last_error": nullable("string"),
            "record": {
                "type": "object",
                "description": "the record it would have fired (without its payload when "
                "payload_hidden)",
            },
            "payload_hidden": {
                "type": "boolean",
                "description": "true: the token's role may not read payloads",
            },
            "history": {"type": "array", "items": ref("HistoryEntry")},
        },
    },
    "DeadList": {
        "type": "object",
        "required": ["dead_letters", "count"],
        "properties": {
            "dead_letters": {"type": "array", "items": ref("DeadJob")},
            "count": {"type": "integer", "description": "dead jobs in all (of the topic)"},
        },
    },
    "Selection": {
        "description": 'Which dead jobs: exactly one of job_ids, topic, or "all": true',
        "oneOf": [
            {
                "type": "object",
                "required": ["job_ids"],
                "additionalProperties": False,
                "properties": {
                    "job_ids": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": DEAD_SELECTION_MAX,
                        "items": JOB_ID,
                    }
                },
            },
            {
                "type": "object",
                "required": ["topic"],
                "additionalProperties": False,
                "properties": {"topic": TOPIC},
            },
            {
                "type": "object",
                "required": ["all"],
                "additionalProperties": False,
                "properties": {"all": {"const": True}},
            },
        ],
    },
    "ExpiredList": {
        "type": "object",
        "required": ["expired", "count"],
        "properties": {
            "expired": {"type": "array", "items": ref("Job")},
            "count": {"type": "integer", "description": "expired jobs in all (of the topic)"},
        },
    },
    "RecurringRequest": {
        "type": "object",
        "description": "A recurring schedule: exactly one of cron or every. The same "
        "definition again changes nothing; another one replaces the schedule from now on.",
        "required": ["topic", "payload"],
        "additionalProperties": False,
        "properties": {
            "topic": {**TOPIC, "description": "the Kafka topic every tick fires to"},
            "payload": {"description": "any JSON value, published verbatim by every tick"},
            "cron": nullable(
                "string",
                description="a 5-field cron expression, read on the wall clock of tz",
            ),
            "every": nullable(
                "number",
                minimum=MIN_EVERY_MS / 1000,
                description="an interval in seconds: ticks at start_at + k × every, or on "
                "multiples of every since the epoch",
            ),
            "tz": nullable("string", description="an IANA zone (cron only); default UTC"),
            "start_at": {**AT, "description": "no tick before"},
            "end_at": {**AT, "description": "no tick at or after"},
            "missed": nullable(
                "string",
                enum=[*(str(m) for m in Missed), None],
                description="ticks no node made in time: fire the last once (default), or "
                "skip them",
            ),
            **OPTION_SCHEMAS,
        },
        "oneOf": exactly_one(("cron", {"type": "string"}), ("every", {"type": "number"})),
    },
    "Recurring": {
        "type": "object",
        "description": "A recurring schedule as stored, and where its ticks stand",
        "required": [
            "name",
            "topic",
            "payload",
            "cron",
            "every_s",
            "tz",
            "start_ms",
            "end_ms",
            "missed",
            *SCHEDULE_OPTION_SCHEMAS,
            "generation",
            "removed",
            "next_ms",
            "made_until_ms",
            "last_made_ms",
        ],
        "properties": {
            "name": {"type": "string"},
            "topic": {"type": "string"},
            "payload": {},
            "cron": nullable("string"),
            "every_s": nullable("number"),
            "tz": {"type": "string"},
            "start_ms": nullable("integer"),
            "end_ms": nullable("integer"),
            "missed": {"type": "string", "enum": [str(m) for m in Missed]},
            **SCHEDULE_OPTION_SCHEMAS,
            "generation": {"type": "integer", "description": "definitions the name has had"},
            "removed": {"type": "boolean"},
            "paused": {"type": "boolean", "description": "no ticks until resumed"},
            "paused_ms": nullable("integer", description="when it was paused"),
            "next_ms": nullable("integer", description="the next tick; null: no more"),
            "made_until_ms": nullable("integer", description="ticks before this are jobs already"),
            "last_made_ms": nullable("integer", description="the last tick made a job"),
        },
    },
    "RecurringList": {
        "type": "object",
        "required": ["recurring"],
        "properties": {"recurring": {"type": "array", "items": ref("Recurring")}},
    },
    "RecurringRemoved": {
        "type": "object",
        "required": ["name", "removed"],
        "properties": {"name": {"type": "string"}, "removed": {"const": True}},
    },
    "Replayed": {
        "type": "object",
        "required": ["replayed"],
        "properties": {"replayed": {"type": "integer"}},
    },
    "Purged": {
        "type": "object",
        "required": ["purged"],
        "properties": {"purged": {"type": "integer"}},
    },
    "Cluster": {
        "type": "object",
        "description": "Members (ZooKeeper), the slot map with owners, epochs and depths",
        "required": ["root", "slots", "members", "slot_status"],
        "properties": {
            "root": {"type": "string"},
            "slots": {"type": "integer"},
            "members": {"type": "object", "additionalProperties": {"type": "object"}},
            "slot_status": {"type": "array", "items": ref("SlotStatus")},
        },
    },
    "SlotStatus": {
        "type": "object",
        "required": ["slot", "owner", "delay", "ready", "inflight", "dead", "overdue_ms"],
        "properties": {
            "slot": {"type": "integer"},
            "owner": nullable("string"),
            "owner_node": nullable("string"),
            "epoch": {"type": "integer"},
            "redis_epoch": {"type": "integer"},
            "delay": {"type": "integer"},
            "ready": {"type": "integer"},
            "inflight": {"type": "integer"},
            "dead": {"type": "integer"},
            "overdue_ms": {"type": "integer"},
        },
    },
    "Stats": {
        "type": "object",
        "description": "The latest `delayq top` snapshot and the points sampled so far",
        "required": ["snapshot", "error", "interval_s", "points"],
        "properties": {
            "snapshot": nullable("object"),
            "error": nullable("string"),
            "interval_s": {"type": "number"},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["at_ms", "fire_rate", "p50_ms", "p99_ms"],
                    "properties": {
                        "at_ms": {"type": "integer"},
                        "fire_rate": nullable("number"),
                        "p50_ms": nullable("number"),
                        "p99_ms": nullable("number"),
                        "delay": {"type": "integer"},
                        "ready": {"type": "integer"},
                        "inflight": {"type": "integer"},
                        "dead": {"type": "integer"},
                    },
                },
            },
        },
    },
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {
                "type": "string",
                "enum": [f"urn:delayq:problem:{kind}" for kind in KINDS],
            },
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "job_ids": {"type": "array", "items": {"type": "string"}},
            "job_status": REFUSAL,
            "fired_ms": {"type": "integer", "description": "409 of a fired job, when recorded"},
            "attempt": {"type": "integer", "description": "409 of a fired job, when recorded"},
        },
    },
}
