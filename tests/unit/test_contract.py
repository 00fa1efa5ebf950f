"""The Lua ↔ Python ↔ SQL contract (cluster/model/contract.py) is defined once and used by
name: the generated Lua include is current, the schema names every status, and the
scripts hold no bare codes or hand-sliced members."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from cluster.errors import Fenced
from cluster.model.contract import (
    SEQ_DIGITS,
    AddCode,
    ChangeCode,
    ErrorCode,
    JobStatus,
    ReplayCode,
    TakeCode,
    lua_include,
    member_id,
    member_of,
    member_seq,
    seq_hex,
    split_member,
    sql_status_comment,
)
from cluster.scripts.facade import SCRIPT_NAMES, load_source, script_error

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "lua"
GENERATED = LUA / "includes" / "contract.lua"


def test_the_lua_include_is_generated_from_the_contract() -> None:
    assert GENERATED.read_text() == lua_include(), (
        "lua/includes/contract.lua is out of date; regenerate it with\n  make contract"
    )


def test_the_schema_comment_names_every_status() -> None:
    """The job table's status column is commented with every status: by the latest
    migration that (re)defines it."""
    comments = []
    for path in sorted((ROOT / "schema").glob("[0-9][0-9][0-9]_*.sql")):
        # The job table's status column (created or modified); the history table's
        # status column says something else.
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")
        )
        found = re.search(
            r"^\s*(?:MODIFY COLUMN\s+)?status\s+TINYINT\b[^;]*?COMMENT '([^']*)'",
            code,
            re.MULTILINE,
        )
        if found and "pending" in found.group(1):
            comments.append(found.group(1))
    assert comments, "no status column with a comment in schema/"
    comment = comments[-1]
    # Each "<number> <name>", with any aside in parentheses: "1 firing (retrying)".
    named = dict(re.findall(r"(\d+) (\w+)", comment))
    assert named == {str(int(s)): s.name.lower() for s in JobStatus}, comment
    assert sql_status_comment() in comment.replace(" (retrying)", "")


# What a script must not hold: codes and statuses as bare numbers, members cut by hand.
FORBIDDEN = [
    (re.compile(r"\bjournal\([^,()]*,\s*-?\d"), "a bare journal status: use STATUS_*"),
    (re.compile(r"(?:\breturn|=)\s*\{?\s*-\d"), "a bare negative code: use the contract's name"),
    (re.compile(r"\bstring\.sub\([^)]*\b1[23]\b"), "a hand-cut member: use member_seq/member_id"),
    (re.compile(r"%0?12x"), "a hand-made seq: use seq_hex"),
]


def lua_sources() -> list[Path]:
    sources = sorted([*LUA.glob("*.lua"), *LUA.glob("includes/*.lua")])
    return [path for path in sources if path != GENERATED]


@pytest.mark.parametrize("path", lua_sources(), ids=lambda path: path.name)
def test_scripts_use_the_contract_names(path: Path) -> None:
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("--", 1)[0]  # comments may name numbers
        problems += [
            f"{path.name}:{number}: {why}: {line.strip()}"
            for pattern, why in FORBIDDEN
            if pattern.search(code)
        ]
    assert problems == []


def test_the_scan_catches_bare_codes() -> None:
    caught = [
        "journal(done, 2, attempt, now, id, '')",
        "return -4",
        "return {-2, 0}",
        "local next_due = -1",
        "if score == -1 then",
        "local id = string.sub(member, 13)",
        "string.sub(v, 1, 12)",
        "string.format('%012x', n)",
    ]
    for line in caught:
        assert any(pattern.search(line) for pattern, _ in FORBIDDEN), line
    fine = [
        "journal(done, STATUS_FIRED, attempt, now, id, '')",
        "return CHANGE_FIRED",
        "return {retried, dead, earliest}",
        "redis.call('LTRIM', done, n, -1)",
        "math.max(attempt - 1, 0)",
        "string.sub(v, body_at)",
        "return 1",
    ]
    for line in fine:
        assert not any(pattern.search(line) for pattern, _ in FORBIDDEN), line


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_defines_the_contract_once(name: str) -> None:
    source = load_source(name)
    assert not re.search(r"^--@include", source, re.MULTILINE)
    uses = re.search(
        r"\b(STATUS|ADD|CHANGE|TAKE|REPLAY|ERROR)_[A-Z_]+\b|\bNO_TIME\b"
        r"|\bmember_(of|seq|id)\(|\bseq_hex\(",
        source,
    )
    assert source.count("local NO_TIME =") == (1 if uses else 0)


@pytest.mark.parametrize("enum", [JobStatus, AddCode, ChangeCode, TakeCode, ReplayCode, ErrorCode])
def test_enum_values_are_distinct(enum: type[Enum]) -> None:
    values = [member.value for member in enum.__members__.values()]  # aliases too
    assert len(set(values)) == len(values)


def test_member_helpers() -> None:
    seq = seq_hex(0x1F)
    assert seq == "00000000001f" and len(seq) == SEQ_DIGITS
    member = member_of(seq, "job-1")
    assert (member_seq(member), member_id(member)) == (seq, "job-1")
    assert split_member(member.encode()) == (seq.encode(), b"job-1")


def test_script_errors_map_to_exceptions_in_one_place() -> None:
    fenced = script_error(ResponseError("FENCED slot epoch is 2, caller has 1"), 7)
    assert isinstance(fenced, Fenced) and fenced.slot == 7
    assert str(fenced) == "slot 7 is fenced: slot epoch is 2, caller has 1"
    other = ResponseError("ERR Error running script: boom")
    assert script_error(other, 7) is other  # not a code of the contract: left as it is
