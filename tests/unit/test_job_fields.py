"""The pieces that derive from the declaration of a job's fields
(cluster/model/job_fields.py) stay equal to it: the client's keywords, Job, ValidJob,
JobRecord and Definition, JOB_KEYS, the HTTP schemas, `delayq schedule`'s options, the
ingress, the MySQL columns and a job's JSON."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import inspect
import typing
from pathlib import Path

import pytest

from cluster.client.delay_client import DelayClient
from cluster.client.job_json import job_from_json, record_json
from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.job_bounds import check_valid_job
from cluster.model.job_fields import (
    FIELDS,
    JOB_KEYS,
    OPTION_NAMES,
    OPTIONS,
    JobOptions,
    KeptOptions,
)
from cluster.model.jobs import Job, ValidJob, validate, validate_job
from cluster.settings.config import Settings
from cluster.store.recurring_store import Definition
from cluster.store.rows import JOB_COLUMNS, OPTION_COLUMNS, JobRecord, record_of_row

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings()
NAMES = [job_field.name for job_field in FIELDS]


def test_every_option_declares_its_checks_column_and_http_schema() -> None:
    assert [option.name for option in OPTIONS] == [
        "biz_id",
        "biz_type",
        "max_attempts",
        "expires_after",
        "priority",
    ]
    for option in OPTIONS:
        assert option.check is not None and option.recheck is not None, option.name
        assert option.column and option.json_schema["type"], option.name
        assert option.doc and not option.doc.endswith("."), option.name
    assert len(set(NAMES)) == len(NAMES)


def test_job_options_typed_dict_is_the_declared_options() -> None:
    assert JobOptions.__optional_keys__ == OPTION_NAMES
    assert not JobOptions.__required_keys__
    assert {
        name: annotation.__forward_arg__ if hasattr(annotation, "__forward_arg__") else annotation
        for name, annotation in JobOptions.__annotations__.items()
    } == {option.name: option.annotation for option in OPTIONS}


def test_the_public_job_dataclass_is_the_declared_fields() -> None:
    fields = dataclasses.fields(Job)
    assert [f.name for f in fields] == NAMES
    declared = {job_field.name: job_field for job_field in FIELDS}
    for f in fields:
        assert f.type == declared[f.name].annotation, f.name
        if not declared[f.name].required:
            assert f.default is declared[f.name].default, f.name


def test_kept_options_are_the_declared_options() -> None:
    kept = {f.name: f for f in dataclasses.fields(KeptOptions)}
    assert list(kept) == [option.kept_as for option in OPTIONS]
    assert all(f.kw_only for f in kept.values())
    for option in OPTIONS:
        # An option a default fills in is never None once kept, and the reverse.
        assert ("None" not in str(kept[option.kept_as].type)) == option.kept_always, option.name


@pytest.mark.parametrize("kept", [ValidJob, JobRecord, Definition], ids=lambda c: c.__name__)
def test_every_kept_form_has_every_option(kept: type) -> None:
    assert issubclass(kept, KeptOptions)
    assert {option.kept_as for option in OPTIONS} <= {f.name for f in dataclasses.fields(kept)}


@pytest.mark.parametrize(
    "method", [DelayClient.schedule, DelayClient.schedule_in, DelayClient.schedule_recurring]
)
def test_the_client_takes_the_options_as_job_options(method: typing.Any) -> None:
    parameters = inspect.signature(method).parameters
    assert not OPTION_NAMES & set(parameters)  # not spelled out again
    options = parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD
    assert options.annotation == "Unpack[JobOptions]"


def test_validate_takes_every_option_and_refuses_another_keyword() -> None:
    given = {"biz_id": "b", "biz_type": "t", "max_attempts": 3, "expires_after": 2, "priority": 5}
    assert set(given) == OPTION_NAMES
    job = validate(topic="t", payload=1, delay=1, settings=SETTINGS, **given)
    assert (job.biz_id, job.biz_type, job.max_attempts, job.expires_after_ms, job.priority) == (
        "b",
        "t",
        3,
        2000,
        5,
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'priorty'"):
        validate(topic="t", payload=1, delay=1, settings=SETTINGS, priorty=1)


def test_job_keys_are_the_declared_fields() -> None:
    assert JOB_KEYS == set(NAMES)
    with pytest.raises(InvalidJob, match="unknown job keys"):
        validate_job({"topic": "t", "payload": 1, "delay": 1, "colour": 1}, SETTINGS, 0)


def test_a_valid_job_is_checked_again_option_by_option() -> None:
    job = validate(topic="t", payload=1, delay=1, settings=SETTINGS)
    for option in OPTIONS:
        with pytest.raises(InvalidJob, match=option.kept_as):
            check_valid_job(dataclasses.replace(job, **{option.kept_as: -1.5}))


def test_the_openapi_job_schemas_have_the_declared_fields() -> None:
    from cluster.web.api import RECURRING_FIELDS
    from cluster.web.openapi import openapi_document

    schemas = openapi_document(SETTINGS)["components"]["schemas"]
    request = schemas["JobRequest"]
    assert list(request["properties"]) == NAMES
    assert request["required"] == [f.name for f in FIELDS if f.required]
    recurring = schemas["RecurringRequest"]["properties"]
    assert OPTION_NAMES <= set(recurring) and set(recurring) == RECURRING_FIELDS
    record = schemas["Job"]
    assert OPTION_NAMES <= set(record["required"]) and OPTION_NAMES <= set(record["properties"])
    for option in OPTIONS:
        schema = request["properties"][option.name]
        assert schema["description"] == option.doc
        assert option.json_schema["type"] in schema["type"] and "null" in schema["type"]
        for bound, value in option.json_schema.items():
            if bound != "type":
                assert schema[bound] == value, (option.name, bound)
        if option.maximum_setting is not None:
            assert schema["maximum"] == getattr(SETTINGS, option.maximum_setting)


def test_delayq_schedule_has_one_option_per_declared_option() -> None:
    from cluster.cli.parser import build_parser

    parser = build_parser()
    commands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    schedule = commands.choices["schedule"]
    flags = {flag for action in schedule._actions for flag in action.option_strings}
    wanted = {"--" + option.name.replace("_", "-") for option in OPTIONS}
    assert wanted <= flags
    own = {"-h", "--help", "--topic", "--payload", "--payload-file", "--delay", "--at"}
    assert flags - wanted == own | {"--job-id", "--json"}
    helps = {action.dest: action.help for action in schedule._actions}
    for option in OPTIONS:
        assert helps[option.name] is not None and helps[option.name].startswith(option.doc)


def test_the_ingress_takes_exactly_the_declared_fields() -> None:
    from cluster.ingress.records import Accepted, parse_record

    class Record:
        topic, partition, offset, timestamp, key, headers = "in", 0, 7, 1, None, ()

        def __init__(self, value: bytes) -> None:
            self.value = value

    full = (
        b'{"topic": "t", "payload": 1, "delay": 1, "job_id": "j", "biz_id": "b", '
        b'"biz_type": "c", "max_attempts": 2, "expires_after": 3, "priority": 4}'
    )
    assert isinstance(parse_record(Record(full), SETTINGS, 0), Accepted)
    assert set(job_from_json({"topic": "t", "payload": 1, **dict.fromkeys(JOB_KEYS)})) == JOB_KEYS
    refused = parse_record(Record(b'{"topic": "t", "payload": 1, "colour": 1}'), SETTINGS, 0)
    assert not isinstance(refused, Accepted) and "colour" in refused.reason


def test_the_row_columns_are_the_declared_stored_fields() -> None:
    columns = [column.strip() for column in JOB_COLUMNS.split(",")]
    assert OPTION_COLUMNS == tuple(option.column for option in OPTIONS)
    assert set(OPTION_COLUMNS) <= set(columns) and len(set(columns)) == len(columns)
    schema = "".join(path.read_text() for path in sorted((ROOT / "schema").glob("*.sql")))
    for job_field in FIELDS:
        if job_field.column:
            assert job_field.column in schema, job_field.column
    values = {"job_id": "j", "topic": "t", "status": int(JobStatus.PENDING)}
    values |= {"action_time": None, "attempts": 0, "payload": "1", "slot": 3}
    values |= {"last_error": None, "gmt_create": None, "gmt_modified": None}
    values |= {"biz_id": "b", "biz_type": None, "max_attempts": 4}
    values |= {"expires_after_ms": 1500, "priority": 9}
    moment = dt.datetime(2026, 11, 24, 9, 0)
    values |= {"action_time": moment, "gmt_create": moment, "gmt_modified": moment}
    record = record_of_row([values[column] for column in columns])
    shown = record_json(record)
    assert (record.biz_id, record.max_attempts, record.priority) == ("b", 4, 9)
    for option in OPTIONS:
        assert shown[option.name] == option.shown(getattr(record, option.kept_as))
    assert shown["expires_after"] == 1.5


def test_a_recurring_schedule_shows_every_option() -> None:
    from cluster.client.recurring import describe, shown_key, validate_recurring
    from cluster.store.recurring_store import RecurringSchedule
    from cluster.web.openapi import openapi_document

    definition = validate_recurring(
        name="n",
        topic="t",
        payload=1,
        cron=None,
        every=60,
        tz=None,
        start_at=None,
        end_at=None,
        missed="skip",
        settings=SETTINGS,
        expires_after=2,
        priority=3,
    )
    schedule = RecurringSchedule(
        definition=definition,
        slot=0,
        generation=1,
        removed=False,
        next_tick_ms=None,
        last_tick_ms=None,
        epoch=0,
        created_ms=0,
        modified_ms=0,
    )
    shown = describe(schedule)
    schema = openapi_document(SETTINGS)["components"]["schemas"]["Recurring"]
    for option in OPTIONS:
        key = shown_key(option)
        assert key in shown and key in schema["required"] and key in schema["properties"]
    assert (shown["expires_after_s"], shown["priority"]) == (2, 3)
    assert [job.priority for job in definition.tick_jobs(1, [5, 6])] == [3, 3]
