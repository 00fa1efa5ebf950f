"""Low-level MySQL helpers shared by the job store and the migrator: the connection URL,
time conversions, SQL literals built by hand, and overlapped statement execution.

Hot statements are built as text here rather than by the driver, because aiomysql's
per-parameter escaping cost more than the database's work (see cluster/mysql_store.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import unquote, urlparse

from cluster.config import ConfigError

UTC = dt.UTC
ROWS_PER_STATEMENT = 2000
STATEMENT_BYTES = 4 << 20  # well under MySQL's default max_allowed_packet (16 MiB)

# PyMySQL's "Lost connection to MySQL server during query": the statement was sent, so
# when it was the commit, nobody knows whether it took effect.
LOST_DURING_QUERY = 2013


def parse_mysql_url(url: str) -> dict[str, Any]:
    """aiomysql connection arguments of a mysql:// (or mariadb://) URL naming a database."""
    parsed = urlparse(url)
    if parsed.scheme not in ("mysql", "mariadb"):
        raise ConfigError(f"mysql_url must start with mysql://, got {url!r}")
    database = parsed.path.lstrip("/")
    if not database:
        raise ConfigError(f"mysql_url must name a database: {url!r}")
    return {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": unquote(parsed.username or "root"),
        "password": unquote(parsed.password or ""),
        "db": database,
    }


def ms_to_datetime(ms: int) -> dt.datetime:
    """A naive UTC datetime (what a DATETIME column holds) of epoch milliseconds."""
    return dt.datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def datetime_to_ms(value: dt.datetime) -> int:
    return round(value.replace(tzinfo=UTC).timestamp() * 1000)


def int_list(values: Iterable[int]) -> str:
    """The SQL text of integers for an IN (...) list, e.g. of job statuses."""
    return ", ".join(str(int(value)) for value in values)


def quoter(conn: Any) -> Callable[[str | None], str]:
    """A SQL literal for a text value (or NULL), escaped the way this connection needs."""

    def quote(value: str | None) -> str:
        return "NULL" if value is None else f"'{conn.escape_string(value)}'"

    return quote


def multi_row(head: str, rows: Iterable[str], tail: str = "") -> Iterator[str]:
    """Statements `head row,row,… tail` of at most ROWS_PER_STATEMENT rows and about
    STATEMENT_BYTES each, built as they are consumed (see execute_overlapped)."""
    values: list[str] = []
    size = 0
    for row in rows:
        values.append(row)
        size += len(row)
        if len(values) == ROWS_PER_STATEMENT or size >= STATEMENT_BYTES:
            yield head + ",".join(values) + tail
            values, size = [], 0
    if values:
        yield head + ",".join(values) + tail


class DatetimeLiterals:
    """SQL DATETIME(3) literals of UTC epoch milliseconds; the second's text is cached,
    since the jobs of one call tend to share seconds."""

    def __init__(self) -> None:
        self._seconds: dict[int, str] = {}

    def of(self, ms: int) -> str:
        second, millis = divmod(ms, 1000)
        text = self._seconds.get(second)
        if text is None:
            text = self._seconds[second] = f"{ms_to_datetime(second * 1000):%Y-%m-%d %H:%M:%S}"
        return f"'{text}.{millis:03d}'"


async def execute_overlapped(cur: Any, statements: Iterable[str]) -> None:
    """Run the statements in order, building each next one while MySQL runs the last:
    the producer's CPU and the database's work overlap instead of taking turns."""
    running: asyncio.Task[Any] | None = None
    try:
        for statement in statements:
            if running is not None:
                await running
            running = asyncio.create_task(cur.execute(statement))
            await asyncio.sleep(0)  # the task sends the statement before we build on
        if running is not None:
            await running
    finally:
        if running is not None and not running.done():
            # Building failed: the connection must not go back to the pool mid-query.
            await asyncio.wait([running])
