"""The search cursor (cluster/store/search.py): it round-trips, it is bound to its
search's filters and order, and anything else given as one is refused by name."""

from __future__ import annotations

import base64

import orjson
import pytest

from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.store.search import (
    CURSOR_MAX_CHARS,
    decode_cursor,
    encode_cursor,
    make_search,
    merge_keys,
    page_of,
    shard_selects,
)


def test_a_cursor_round_trips() -> None:
    search = make_search(topic="orders", status=["pending", "retrying"], limit=10)
    cursor = encode_cursor(search, 1_800_000_000_123, "job/ü 7")
    assert decode_cursor(cursor, search) == (1_800_000_000_123, "job/ü 7")
    assert make_search(
        topic="orders", status="retrying,pending".split(","), cursor=cursor
    ).after == (
        1_800_000_000_123,
        "job/ü 7",
    )
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_status_order_and_the_limit_do_not_change_the_filters() -> None:
    one = make_search(status=["retrying", "pending"], limit=5)
    other = make_search(status=["pending", "firing", "pending"], limit=500)
    assert one.statuses == (JobStatus.PENDING, JobStatus.FIRING)
    assert one.fingerprint() == other.fingerprint()


@pytest.mark.parametrize(
    "other",
    [
        {"topic": "invoices"},
        {"topic": "orders", "order": "latest"},
        {"topic": "orders", "status": "pending"},
        {"topic": "orders", "biz_id": "k"},
        {"topic": "orders", "biz_type": "t"},
        {"topic": "orders", "due_from": 0},
        {"topic": "orders", "due_to": 5},
    ],
)
def test_a_cursor_of_other_filters_is_refused(other: dict[str, object]) -> None:
    cursor = encode_cursor(make_search(topic="orders"), 5, "a")
    with pytest.raises(InvalidJob, match="cursor belongs to a search with other filters"):
        make_search(cursor=cursor, **other)  # type: ignore[arg-type]


def _forged(body: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(body)).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "x" * (CURSOR_MAX_CHARS + 1),
        "!!!",
        "bm90IGpzb24",  # "not json"
        _forged([1, "f", 5]),
        _forged([2, make_search().fingerprint(), 5, "a"]),
        _forged([1, make_search().fingerprint(), -5, "a"]),
        _forged([1, make_search().fingerprint(), 5, ""]),
        _forged([1, make_search().fingerprint(), True, "a"]),
        _forged([1, make_search().fingerprint(), 5, "a" * 201]),
        7,
    ],
)
def test_a_cursor_that_is_not_one_is_refused(cursor: object) -> None:
    with pytest.raises(InvalidJob, match="cursor"):
        make_search(cursor=cursor)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": 0}, "limit must be an int 1..1000"),
        ({"limit": True}, "limit must be an int"),
        ({"order": "newest"}, "order must be one of soonest, latest"),
        ({"status": "Pending"}, "status 'Pending' is not one of"),
        ({"status": 3}, "status must be a status name"),
        ({"biz_type": "x" * 65}, "biz_type must be 1..64"),
        ({"biz_id": "a\x00b"}, "biz_id must not contain control characters"),
        ({"due_to": 1.5}, "due_to must be epoch milliseconds"),
        ({"topic": ""}, "not a valid Kafka topic"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        make_search(**arguments)  # type: ignore[arg-type]


def test_a_page_has_a_next_cursor_only_when_more_were_found() -> None:
    search = make_search(limit=2, order="latest")
    keys = merge_keys(search, [(1, "b"), (2, "a"), (1, "a"), (2, "a")])
    assert keys == [(2, "a"), (1, "b"), (1, "a")]
    kept, cursor = page_of(search, keys)
    assert kept == [(2, "a"), (1, "b")]
    assert cursor is not None and decode_cursor(cursor, search) == (1, "b")
    assert page_of(search, keys[:2]) == (keys[:2], None)


def test_each_table_and_status_has_its_own_bounded_select() -> None:
    statement, params = shard_selects(
        make_search(topic="t", status=["dead", "pending"], limit=7), ["`d`.`j0`", "`d`.`j1`"]
    )
    assert statement.count("UNION ALL") == 3
    assert statement.count("FORCE INDEX (idx_status_topic_due)") == 4
    assert statement.count("LIMIT 8") == 4
    assert "OFFSET" not in statement
    assert params == ["t"] * 4
