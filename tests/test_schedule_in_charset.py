"""schedule_in() writes through the caller's connection with literals escaped for
utf8mb4. A session whose character set the caller changed on the server (SET NAMES gbk)
reads those bytes differently: a payload could break out of its SQL literal. Such a
connection is refused, by asking the server, before anything is written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiomysql
import pytest

from cluster import DelayClient
from cluster.errors import InvalidJob
from cluster.settings.config import Settings
from cluster.store.sql import mysql_connect_args
from tests.mysql_tools import count_outbox, count_rows, id_on_server

# In GBK, the last byte of 中's UTF-8 (0xAD) and the backslash escaping the quote
# (0x5C) are one character: the quote would end the literal and the rest be SQL.
BREAKOUT = "中', 0, NULL) -- x"  # '-- ' comments out the rest of the line


@pytest.fixture
async def conn(settings: Settings) -> AsyncIterator[Any]:
    """The caller's own connection, utf8mb4 as far as the driver knows."""
    connection = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(settings))
    yield connection
    connection.close()


async def job_rows(client: DelayClient) -> int:
    return await count_rows(client.mysql) + await count_outbox(client.mysql)


@pytest.mark.parametrize(
    "statement",
    [
        "SET NAMES gbk",
        "SET character_set_client = gbk",
        "SET NAMES utf8mb4, character_set_connection = latin1",
    ],
)
async def test_a_session_charset_changed_on_the_server_is_refused(
    settings: Settings, conn: Any, statement: str
) -> None:
    async with DelayClient(settings) as client:
        async with conn.cursor() as cur:
            await cur.execute(statement)
        await conn.begin()
        with pytest.raises(InvalidJob, match="character set") as caught:
            await client.schedule_in(conn, "t", {"note": BREAKOUT}, delay=60, biz_id=BREAKOUT)
        assert "utf8mb4" in str(caught.value)
        await conn.commit()
        assert await job_rows(client) == 0
        # Back to utf8mb4, the same call writes the job, payload intact.
        async with conn.cursor() as cur:
            await cur.execute("SET NAMES utf8mb4")
        await conn.begin()
        job_id = id_on_server(client.mysql, 0, "breakout")  # conn's server
        await client.schedule_in(
            conn, "t", {"note": BREAKOUT}, delay=60, biz_id=BREAKOUT, job_id=job_id
        )
        await conn.commit()
        record = await client.get(job_id)
        assert record is not None and record.biz_id == BREAKOUT
        assert json.loads(record.payload_json) == {"note": BREAKOUT}


async def test_no_backslash_escapes_keeps_values_intact(settings: Settings, conn: Any) -> None:
    """The caller's sql_mode may turn backslash escapes off: quotes are doubled instead."""
    tricky = "a'b\\'c\\\\' -- \"d"
    async with DelayClient(settings) as client:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
        await conn.begin()
        job_id = id_on_server(client.mysql, 0, "tricky")  # conn's server
        await client.schedule_in(conn, "t", {"v": tricky}, delay=60, biz_id=tricky, job_id=job_id)
        await conn.commit()
        record = await client.get(job_id)
        assert record is not None and record.biz_id == tricky
        assert json.loads(record.payload_json) == {"v": tricky}
