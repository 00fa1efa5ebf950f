"""Browse and search the jobs of every shard: by status, topic, business key, business
type and due time, a page at a time in due-time order (DelayClient.search_jobs,
GET /v1/jobs, `delayq jobs list`; cancel_matching lists what it cancels through it).

Each page is found in two steps. First one statement per MySQL server, a UNION ALL of
one SELECT per shard table and status, each walking one index of migrations 009 and 012
in (action_time, job_id) order from the cursor and stopping after limit + 1 keys: the
keys of every server are merged and the first `limit` kept. Then the rows of those jobs are
read by job id. The cursor is the (due ms, job id) of a page's last job: the next page
starts strictly after it, so paging never uses OFFSET and a deep page costs what the
first does.

Which index a search rides (every shape has one, so none is refused for want of it):
    biz_id given                -> idx_biz_id (biz_id, status, action_time), per status
    else biz_type and topic     -> idx_biz_type_topic (biz_type, status, topic, action_time)
    else biz_type given         -> idx_biz_type (biz_type, status, action_time), per status
    else topic given            -> idx_status_topic_due (status, topic, action_time), per status
    else                        -> idx_status_action_time (status, action_time), per status
No status given means every status (one index range each). Every equality filter is in
its index's prefix except topic and biz_type beside a biz_id: a business key's jobs are
few unless one producer makes them many, so that shape, like every other, is bounded in
time instead (search_statement_max_ms: the statement is stopped and the search refused
with a message to narrow it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson
import pymysql

from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.job_fields import check_text
from cluster.model.jobs import (
    BIZ_ID_MAX_CHARS,
    BIZ_TYPE_MAX_CHARS,
    JOB_ID_MAX_CHARS,
    check_topic,
)
from cluster.store.rows import JobRecord
from cluster.store.sql import datetime_to_ms, ms_to_datetime

if TYPE_CHECKING:
    from cluster.store.mysql_store import MySQLStore

LIMIT_MAX = 1000
LIMIT_DEFAULT = 100
ORDERS = ("soonest", "latest")
CURSOR_MAX_CHARS = 1024
# Status names a search takes: JobStatus's, and "retrying" for FIRING (what people call
# a job with a retry scheduled).
STATUS_NAMES: dict[str, JobStatus] = {str(status): status for status in JobStatus}
STATUS_NAMES["retrying"] = JobStatus.FIRING
# Due times a search takes, epoch ms: 1970 .. 9999 (what DATETIME(3) holds).
DUE_MAX_MS = 253_402_300_799_999
_CURSOR_VERSION = 1
# A statement stopped by its time bound: MariaDB's ER_STATEMENT_TIMEOUT, MySQL's
# ER_QUERY_TIMEOUT.
STATEMENT_TIMEOUT_CODES = frozenset({1969, 3024})


@dataclass(frozen=True)
class JobSearch:
    """A checked search (make_search builds it). statuses: empty means every status;
    due_from_ms inclusive, due_to_ms exclusive; after: the cursor's (due ms, job id)."""

    topic: str | None = None
    statuses: tuple[JobStatus, ...] = ()
    biz_id: str | None = None
    biz_type: str | None = None
    due_from_ms: int | None = None
    due_to_ms: int | None = None
    order: str = "soonest"
    limit: int = LIMIT_DEFAULT
    after: tuple[int, str] | None = None

    @property
    def index(self) -> str:
        """The index every shard's SELECT of this search walks (the module's table)."""
        if self.biz_id is not None:
            return "idx_biz_id"
        if self.biz_type is not None:
            return "idx_biz_type" if self.topic is None else "idx_biz_type_topic"
        if self.topic is not None:
            return "idx_status_topic_due"
        return "idx_status_action_time"

    def fingerprint(self) -> str:
        """A short hash of the filters and order (not the limit): a cursor carries it, so
        a cursor given with other filters is refused instead of skipping jobs."""
        filters = [
            self.topic,
            [int(s) for s in self.statuses],
            self.biz_id,
            self.biz_type,
            self.due_from_ms,
            self.due_to_ms,
            self.order,
        ]
        return hashlib.sha256(orjson.dumps(filters)).hexdigest()[:16]


@dataclass(frozen=True)
class JobPage:
    """One page of a search: its jobs in order, and the cursor of the next page (None
    when this page is the last)."""

    jobs: list[JobRecord]
    next_cursor: str | None


def _text(name: str, value: object, most: int) -> str | None:
    """A biz_id or biz_type filter: the rules of a job's own (a value no job can have
    is refused, not searched for)."""
    return check_text(name, value, most)


def _due(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= DUE_MAX_MS:
        raise InvalidJob(f"{name} must be epoch milliseconds (an int 0..{DUE_MAX_MS})")
    return value


def parse_statuses(value: object) -> tuple[JobStatus, ...]:
    """Status names (or JobStatus values) as a sorted tuple without repeats; a name not
    known is refused, naming the known ones."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str | JobStatus) else value
    if not isinstance(items, Sequence) or len(items) > 2 * len(STATUS_NAMES):
        raise InvalidJob("status must be a status name or a list of them")
    found: set[JobStatus] = set()
    for item in items:
        if isinstance(item, JobStatus):
            found.add(item)
        elif isinstance(item, str) and item in STATUS_NAMES:
            found.add(STATUS_NAMES[item])
        else:
            known = ", ".join(sorted(STATUS_NAMES))
            raise InvalidJob(f"status {item!r:.40} is not one of: {known}")
    return tuple(sorted(found))


def make_search(
    *,
    topic: object = None,
    status: object = None,
    biz_id: object = None,
    biz_type: object = None,
    due_from: object = None,
    due_to: object = None,
    order: object = "soonest",
    limit: object = LIMIT_DEFAULT,
    cursor: object = None,
) -> JobSearch:
    """A JobSearch of raw arguments (due times in epoch ms); InvalidJob names the one
    that is wrong."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
        raise InvalidJob(f"limit must be an int 1..{LIMIT_MAX}, got {limit!r:.40}")
    if order not in ORDERS:
        raise InvalidJob(f"order must be one of {', '.join(ORDERS)}, got {order!r:.40}")
    search = JobSearch(
        topic=None if topic is None else check_topic(topic),
        statuses=parse_statuses(status),
        biz_id=_text("biz_id", biz_id, BIZ_ID_MAX_CHARS),
        biz_type=_text("biz_type", biz_type, BIZ_TYPE_MAX_CHARS),
        due_from_ms=_due("due_from", due_from),
        due_to_ms=_due("due_to", due_to),
        order=str(order),
        limit=limit,
    )
    if cursor is None:
        return search
    return replace(search, after=decode_cursor(cursor, search))


def encode_cursor(search: JobSearch, due_ms: int, job_id: str) -> str:
    """The opaque cursor of the page after the job (due_ms, job_id) of this search."""
    body = orjson.dumps([_CURSOR_VERSION, search.fingerprint(), due_ms, job_id])
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_cursor(cursor: object, search: JobSearch) -> tuple[int, str]:
    """(due ms, job id) of a cursor made by encode_cursor for a search with the same
    filters and order; InvalidJob otherwise."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > CURSOR_MAX_CHARS:
        raise InvalidJob(f"cursor must be a string of 1..{CURSOR_MAX_CHARS} characters")
    try:
        body = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        version, fingerprint, due_ms, job_id = body
    except (binascii.Error, orjson.JSONDecodeError, ValueError, TypeError):
        raise InvalidJob("cursor is not one a search returned (it does not decode)") from None
    ok_due = isinstance(due_ms, int) and not isinstance(due_ms, bool) and 0 <= due_ms <= DUE_MAX_MS
    ok_id = isinstance(job_id, str) and 0 < len(job_id) <= JOB_ID_MAX_CHARS
    if version != _CURSOR_VERSION or not ok_due or not ok_id:
        raise InvalidJob("cursor is not one a search returned (its content is not valid)")
    if fingerprint != search.fingerprint():
        raise InvalidJob(
            "cursor belongs to a search with other filters or another order: give the "
            "same topic, status, biz_id, biz_type, due range and order as the search "
            "that returned it, or leave the cursor out to start again"
        )
    return due_ms, job_id


def shard_selects(search: JobSearch, tables: Sequence[str]) -> tuple[str, list[Any]]:
    """One statement (a UNION ALL of one SELECT per table and status, each riding
    search.index) giving (table position, action_time, job_id) of at most limit + 1
    jobs per SELECT after the cursor, and its parameters."""
    per_status = list(search.statuses or JobStatus)
    latest = search.order == "latest"
    parts: list[str] = []
    params: list[Any] = []
    for position, table in enumerate(tables):
        for status in per_status:
            where, values = _where(search, status, latest)
            way = "DESC" if latest else "ASC"
            parts.append(
                f"(SELECT {position} AS t, action_time, job_id FROM {table}"
                f" FORCE INDEX ({search.index}) WHERE {where}"
                f" ORDER BY action_time {way}, job_id {way} LIMIT {search.limit + 1})"
            )
            params += values
    return " UNION ALL ".join(parts), params


def time_bounded(statement: str, server_info: str, most_ms: int) -> str:
    """The statement stopped by its server after most_ms: MariaDB's max_statement_time
    for this statement alone, or MySQL's MAX_EXECUTION_TIME hint on a SELECT around it
    (either way the server raises one of STATEMENT_TIMEOUT_CODES)."""
    if "mariadb" in server_info.lower():
        return f"SET STATEMENT max_statement_time={most_ms / 1000:.3f} FOR {statement}"
    return f"SELECT /*+ MAX_EXECUTION_TIME({most_ms}) */ * FROM ({statement}) AS bounded"


def _where(search: JobSearch, status: JobStatus, latest: bool) -> tuple[str, list[Any]]:
    """The WHERE of one table's SELECT: the index's equalities first, then the due range
    and the cursor (ranges on action_time, the index's next column)."""
    terms: list[str] = []
    values: list[Any] = []
    if search.biz_id is not None:
        terms.append("biz_id = %s")
        values.append(search.biz_id)
    if search.biz_type is not None:
        terms.append("biz_type = %s")
        values.append(search.biz_type)
    terms.append(f"status = {int(status)}")
    if search.topic is not None:
        terms.append("topic = %s")
        values.append(search.topic)
    if search.due_from_ms is not None:
        terms.append("action_time >= %s")
        values.append(ms_to_datetime(search.due_from_ms))
    if search.due_to_ms is not None:
        terms.append("action_time < %s")
        values.append(ms_to_datetime(search.due_to_ms))
    if search.after is not None:
        at = ms_to_datetime(search.after[0])
        op, edge = ("<", "<=") if latest else (">", ">=")
        terms.append(f"action_time {edge} %s AND (action_time {op} %s OR job_id {op} %s)")
        values += [at, at, search.after[1]]
    return " AND ".join(terms), values


def merge_keys(search: JobSearch, found: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """Every shard's (due ms, job id) keys in the search's order (job ids compare as the
    binary collation does: by code point)."""
    return sorted(set(found), reverse=search.order == "latest")


def page_of(
    search: JobSearch, keys: list[tuple[int, str]]
) -> tuple[list[tuple[int, str]], str | None]:
    """The first `limit` of merged keys, and the next page's cursor (None when no key
    is left: every SELECT asked one more than the limit, so fewer means no more)."""
    kept = keys[: search.limit]
    if len(keys) <= search.limit or not kept:
        return kept, None
    return kept, encode_cursor(search, *kept[-1])


async def search_keys(
    store: MySQLStore, search: JobSearch
) -> tuple[list[tuple[int, str]], str | None]:
    """(due ms, job id) of one page of the search over every shard, and the next
    page's cursor: one statement per MySQL server, all servers at once."""

    most_ms = store.settings.search_statement_max_ms

    async def read(conn: Any, dbs: list[int]) -> list[tuple[int, str]]:
        tables = [store.shard_tables(shard)[0] for shard in store.all_shards(dbs)]
        statement, params = shard_selects(search, tables)
        statement = time_bounded(statement, str(conn.get_server_info()), most_ms)
        async with conn.cursor() as cur:
            try:
                await cur.execute(statement, params)
            except pymysql.err.MySQLError as exc:
                if exc.args and exc.args[0] in STATEMENT_TIMEOUT_CODES:
                    raise InvalidJob(
                        f"the search read for over {most_ms} ms "
                        "(search_statement_max_ms) without filling its page: narrow it "
                        "with a status, a due range, or a topic without a biz_id"
                    ) from None
                raise
            return [(datetime_to_ms(due), str(job_id)) for _, due, job_id in await cur.fetchall()]

    dbs = range(store.settings.mysql_databases)
    parts = await store.router.run_grouped(dbs, read)
    return page_of(search, merge_keys(search, [key for part in parts for key in part]))


async def search_jobs(store: MySQLStore, search: JobSearch) -> JobPage:
    """One page of the search: the jobs' records, in the search's order. A job whose row
    went meanwhile (retention) is left out; a record shows the row as read after the
    keys, so a job that changed status a moment ago may show its new one."""
    keys, cursor = await search_keys(store, search)
    rows = await store.get_many([job_id for _, job_id in keys])
    return JobPage([rows[job_id] for _, job_id in keys if job_id in rows], cursor)
