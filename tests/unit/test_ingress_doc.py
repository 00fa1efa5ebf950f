"""docs/ingress.md's table of a record's fields is the list the ingress accepts: every
field of cluster.model.jobs.JOB_KEYS, and no other (the page says others are refused)."""

from __future__ import annotations

import re
from pathlib import Path

from cluster.model.jobs import JOB_KEYS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ingress.md"


def record_table_fields() -> set[str]:
    """The first column of the table under "## The record"."""
    section = PAGE.read_text().split("## The record", 1)[1].split("\n## ", 1)[0]
    table = section.split("| field |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))


def test_the_record_table_names_every_accepted_field() -> None:
    assert record_table_fields() == set(JOB_KEYS)
