"""The field schemas the OpenAPI document (cluster/web/openapi.py) is built of: the
limits cluster/model/jobs.py checks, written as JSON Schema (a job's options straight
from their declaration, cluster/model/job_fields.py), shared by the components
(cluster/web/openapi_schemas.py) and the operations' parameters.
"""

from __future__ import annotations

from typing import Any

from cluster.model.job_fields import JOB_ID_MAX_CHARS, OPTIONS, JobField


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema `name` (cluster/web/openapi_schemas.py)."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(kind: str, **more: Any) -> dict[str, Any]:
    """A value of JSON type `kind`, or null."""
    return {"type": [kind, "null"], **more}


STATUS = {
    "type": "string",
    "enum": ["pending", "firing", "fired", "cancelled", "dead", "expired"],
}
# Why a cancel or reschedule was refused (409): cluster/web/api.py REFUSAL_STATUS.
REFUSAL = {"type": "string", "enum": ["fired", "cancelled", "dead", "expired", "in_flight"]}
# What cluster/model/jobs.py refuses in text: C0 and C1 controls, DEL and the bidirectional
# controls; a job id also must not end with a space.
_NOT_CONTROL = (
    "[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]"
)
_NOT_CONTROL_OR_SPACE = _NOT_CONTROL[:-1] + " ]"
JOB_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": JOB_ID_MAX_CHARS,
    "pattern": f"^{_NOT_CONTROL}*{_NOT_CONTROL_OR_SPACE}$",
}
TEXT = {"pattern": f"^{_NOT_CONTROL}*$"}
TOPIC = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,249}$"}
TIME = {
    "description": "epoch seconds, or an RFC 3339 time with its offset",
    "oneOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "format": "date-time"},
    ],
}


def exactly_one(first: tuple[str, Any], second: tuple[str, Any]) -> list[dict[str, Any]]:
    """The oneOf of two fields of which exactly one is given: each (name, the schema it
    has when given); the other is then null or absent."""
    return [
        {"required": [name], "properties": {name: given, other: {"type": "null"}}}
        for (name, given), (other, _) in ((first, second), (second, first))
    ]


# A job's due time, in a schedule and a reschedule: exactly one of delay or at.
DELAY = nullable("number", minimum=0, description="seconds from now")
AT = {"oneOf": [*TIME["oneOf"], {"type": "null"}]}
DELAY_OR_AT = exactly_one(("delay", {"type": "number"}), ("at", {"not": {"type": "null"}}))


def option_schema(option: JobField) -> dict[str, Any]:
    """The schema of a job option's value over HTTP, from its declaration
    (cluster/model/job_fields.py): its JSON type and bounds, or null; its doc line."""
    bounds = {key: value for key, value in option.json_schema.items() if key != "type"}
    text = TEXT if option.text else {}
    return nullable(option.json_schema["type"], **bounds, **text, description=option.doc)


def option_record_schema(option: JobField) -> dict[str, Any]:
    """The schema of a job option's value in a job's record (cluster/client/job_json.py)."""
    kind = option.json_schema["type"]
    if option.kept_always:
        return {"type": kind, "description": option.doc}
    return nullable(kind, description=f"{option.doc}; null: not given")


# The options of a job request (and of a recurring schedule's), by name; and as a job's
# record shows them.
OPTION_SCHEMAS = {option.name: option_schema(option) for option in OPTIONS}
RECORD_OPTION_SCHEMAS = {option.name: option_record_schema(option) for option in OPTIONS}
BIZ_ID = OPTION_SCHEMAS["biz_id"]
BIZ_TYPE = OPTION_SCHEMAS["biz_type"]
