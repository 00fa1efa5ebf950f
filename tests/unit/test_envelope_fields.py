"""The envelope header's <fields> (cluster/model/envelope.py): both versions read to the
same fields, every field the contract names is written, and a header delayq did not
write is refused rather than guessed at. The Lua reader (lua/includes/common.lua) is
held to the same envelopes in tests/test_envelope_versions.py."""

from __future__ import annotations

import orjson
import pytest

from cluster.model.contract import ENVELOPE_VERSIONS, EnvelopeField
from cluster.model.envelope import (
    LATEST_VERSION,
    EnvelopeError,
    EnvelopeFields,
    fields_of,
    fields_text,
    fire_of,
    make_tail,
    read_fields,
)
from cluster.model.job_fields import FIELDS, OPTIONS
from cluster.settings.config import Settings

CASES = [
    EnvelopeFields(1),
    EnvelopeFields(1000, 1, 0),
    EnvelopeFields(5, 86_400_000, 1000),
    EnvelopeFields(5, None, 1),
]


@pytest.mark.parametrize("fields", CASES)
@pytest.mark.parametrize("version", ENVELOPE_VERSIONS)
def test_every_version_reads_back_what_it_wrote(fields: EnvelopeFields, version: int) -> None:
    text = fields_text(fields, version).encode()
    assert read_fields(text) == fields
    assert fields_of(b"%012x|%s|17|" % (7, text)) == fields


def test_version_2_names_each_field_and_leaves_defaults_out() -> None:
    text = fields_text(EnvelopeFields(5, 60_000, 10))
    assert LATEST_VERSION == ENVELOPE_VERSIONS[-1] == 2
    pairs = dict(pair.split("=") for pair in text.split(";"))
    assert pairs == {
        EnvelopeField.VERSION: "2",
        EnvelopeField.MAX_ATTEMPTS: "5",
        EnvelopeField.EXPIRES_AFTER_MS: "60000",
        EnvelopeField.PRIORITY: "10",
    }
    assert fields_text(EnvelopeFields(5)) == "v=2;a=5"
    # Every field EnvelopeFields has is one the contract names (and the Lua side reads).
    assert len(EnvelopeFields.__slots__) == len(EnvelopeField) - 1


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"v=2",  # no max attempts
        b"v=3;a=5",  # a version this release does not know
        b"v=2;a=5;z=1",  # a field it does not know
        b"v=2;a=-5",
        b"v=2;a=5;p=1_0",
        b"v=2;a=5;;p=1",
        b"v=2;a= 5",
        b"5:",
        b"5:x",
        b"5px",
        b"+5",
        b"abc",
    ],
)
def test_a_header_delayq_did_not_write_is_refused(bad: bytes) -> None:
    with pytest.raises(EnvelopeError, match="not an envelope header's fields"):
        read_fields(bad)


def test_an_unknown_version_to_write_is_refused() -> None:
    with pytest.raises(ValueError, match="envelope version 3"):
        fields_text(EnvelopeFields(5), 3)


def test_the_declared_fields_travel_in_the_header_or_the_record() -> None:
    """cluster/model/job_fields.py marks the fields a job carries through Redis
    (envelope) and those its fired record has (in_record): the record make_tail and
    fire_of build has exactly the latter, and every one of the former is in the header
    (EnvelopeFields) or in the record."""
    tail = make_tail("j", "t", b'{"n":1}', biz_id="b", biz_type="k", priority=3)
    record = orjson.loads(fire_of(b"%012x|v=2;a=5|17|" % 1 + tail, 2, 18).value)
    in_record = {f.name for f in FIELDS if f.in_record}
    assert set(record) == in_record | {"due_ms", "fired_ms", "attempt"}
    in_header = set(EnvelopeFields.__slots__)
    for job_field in FIELDS:
        if job_field.envelope:
            assert job_field.kept_as in in_header or job_field.in_record, job_field.name
    assert in_header <= {f.kept_as for f in OPTIONS if f.envelope}


def test_an_option_not_kept_always_is_none_when_absent() -> None:
    # checked_options keeps such an option as None without calling its check.
    for option in OPTIONS:
        if not option.kept_always:
            assert option.check is not None and option.check(None, Settings()) is None
