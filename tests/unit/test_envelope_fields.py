"""The envelope header's <fields> (cluster/model/envelope.py): both versions read to the
same fields, every field the contract names is written, and a header delayq did not
write is refused rather than guessed at. The Lua reader (lua/includes/common.lua) is
held to the same envelopes in tests/test_envelope_versions.py."""

from __future__ import annotations

import pytest

from cluster.model.contract import ENVELOPE_VERSIONS, EnvelopeField
from cluster.model.envelope import (
    LATEST_VERSION,
    EnvelopeError,
    EnvelopeFields,
    fields_of,
    fields_text,
    read_fields,
)

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
