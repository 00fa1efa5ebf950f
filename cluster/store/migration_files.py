"""The migration files: ``schema/NNN_name.sql`` (package data) read, split into
statements, and checksummed (cluster/store/migrations.py says what a migration may do
and how migrate applies them).

A statement ends with ``;`` at the end of a line. The checksum is the SHA-256 of a
file's statements with comment lines left out, so the explanation in ``--`` lines can
be edited after the file was applied.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from cluster.errors import SchemaError

MIGRATION_NAME = re.compile(r"(\d{3})_([a-z0-9_]+)\.sql")
# A statement ends with ";" at the end of a line (as in every schema file so far).
_STATEMENT_END = re.compile(r";[ \t]*(?:\r?\n|\Z)")


@dataclass(frozen=True)
class Migration:
    """One schema/NNN_name.sql file."""

    version: int
    name: str
    statements: tuple[str, ...]
    checksum: str

    def for_shard(self, jobs: str, history: str, outbox: str, recurring: str) -> list[str]:
        # str.replace rather than str.format: a statement may hold braces of its own.
        return [
            s.replace("{jobs}", jobs)
            .replace("{history}", history)
            .replace("{outbox}", outbox)
            .replace("{recurring}", recurring)
            for s in self.statements
        ]


def parse_migration(version: int, name: str, text: str) -> Migration:
    statements = tuple(
        s.strip()
        for s in _STATEMENT_END.split(text)
        if not all(line.lstrip().startswith("--") for line in s.strip().splitlines())
    )
    if not statements:
        raise SchemaError(f"migration {name} holds no SQL statement")
    code = ";\n".join(
        "\n".join(line.rstrip() for line in s.splitlines() if not line.lstrip().startswith("--"))
        for s in statements
    )
    return Migration(version, name, statements, hashlib.sha256(code.encode()).hexdigest())


def load_migrations(directory: Traversable | None = None) -> list[Migration]:
    """The migrations of a directory (default: the packaged schema/), in version order."""
    if directory is None:
        return _packaged()
    found: list[Migration] = []
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = MIGRATION_NAME.fullmatch(entry.name)
        if match is None:
            raise SchemaError(
                f"{entry.name}: a migration file is named NNN_name.sql (three digits, then "
                "lowercase letters, digits and underscores)"
            )
        text = entry.read_text(encoding="utf-8")
        found.append(parse_migration(int(match[1]), entry.name, text))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)) or not found:
        raise SchemaError(
            "migration versions must run 001, 002, … without gaps or repeats; found "
            f"{[m.name for m in found]} in {directory}"
        )
    return found


@functools.cache
def _packaged() -> list[Migration]:
    # Read once per process: every DelayClient.open() checks the schema against them.
    return load_migrations(importlib.resources.files("cluster.schema"))
