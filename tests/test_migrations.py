"""Versioned schema migrations (cluster/store/migrations.py) against the real MariaDB: each
test migrates a database of its own, with extra migration files in a temporary folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.errors import SchemaError
from cluster.settings.config import Settings
from cluster.store.migration_files import load_migrations
from cluster.store.mysql_store import MySQLStore
from cluster.store.schema_check import check_schema
from cluster.store.servers import initial_placement, server_specs

ROOT = Path(__file__).resolve().parent.parent
FIRST = "001_jobs.sql"
# The packaged migrations, in order; a test's own migration comes after them.
PACKAGED = sorted(path.name for path in (ROOT / "schema").glob("[0-9]*.sql"))
NEXT = len(PACKAGED) + 1
TENANT = f"{NEXT:03d}_tenant.sql"
ADD_COLUMN = "ALTER TABLE {jobs} ADD COLUMN tenant VARCHAR(64) NULL;\n"

NewDatabase = Callable[..., Awaitable[Settings]]


@pytest.fixture
async def new_database(stack_env: dict[str, str]) -> AsyncIterator[NewDatabase]:
    """Makes empty (unmigrated) cluster databases with the given layout; drops them."""
    made: list[Settings] = []

    async def make(databases: int | None = None, tables: int = 2) -> Settings:
        """databases: None for the run's (one per MySQL server); 1 is a one-server cluster."""
        base = Settings.from_env()
        if databases == 1:
            base = base.replace(mysql_servers="")
        prefix = f"m{uuid.uuid4().hex[:10]}"
        base = base.replace(
            key_prefix=prefix,
            mysql_databases=databases or base.mysql_databases,
            mysql_tables=tables,
        )
        settings = await create_cluster_database(base, f"delayq_{prefix}", migrate=False)
        made.append(settings)
        return settings

    yield make
    for settings in made:
        await drop_cluster_database(settings)


def packaged_records(shards: int) -> list[tuple[int, str, int, bool]]:
    """What delayq_migrations holds once the packaged migrations ran on `shards` shards."""
    return [(version, name, shards, True) for version, name in enumerate(PACKAGED, 1)]


def schema_dir(tmp_path: Path, **extra: str) -> Path:
    """The packaged migrations plus `extra` (file name: text) in a folder of their own."""
    folder = tmp_path / f"schema-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    for name in PACKAGED:
        shutil.copy(ROOT / "schema" / name, folder / name)
    for name, text in extra.items():
        (folder / name).write_text(text)
    return folder


async def migrate(settings: Settings, folder: Path | None = None) -> Any:
    store = MySQLStore(settings, "test", schema_dir=folder)
    await store.open(check_schema=False)
    try:
        return await store.migrate()
    finally:
        await store.close()


async def query(settings: Settings, sql: str, *args: Any, server: int = 0) -> list[tuple[Any, ...]]:
    """sql's rows on one MySQL server (0: mysql_url's)."""
    store = MySQLStore(settings, "test")
    await store.open(check_schema=False)
    try:
        pool = await store.server_pool(server)
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(sql, args)
            return list(await cur.fetchall())
    finally:
        await store.close()


def first_server_tables(settings: Settings) -> int:
    """How many job tables MySQL server 0 (the one `recorded` reads) holds."""
    servers = len(server_specs(settings))
    placed = initial_placement(settings, servers).values()
    return settings.mysql_tables * sum(1 for server in placed if server == 0)


async def recorded(settings: Settings) -> list[tuple[int, str, int, bool]]:
    """(version, name, shards_done, applied) of every row of server 0's
    delayq_migrations (shards_done counts that server's job tables)."""
    rows = await query(
        settings,
        "SELECT version, name, shards_done, applied_at IS NOT NULL"
        " FROM delayq_migrations ORDER BY version",
    )
    return [(int(v), n, int(d), bool(a)) for v, n, d, a in rows]


async def tables_with_column(settings: Settings, column: str) -> set[str]:
    store = MySQLStore(settings, "test")
    schemas = {store.database_name(d) for d in range(settings.mysql_databases)}
    marks = ", ".join(["%s"] * len(schemas))
    found = set()
    for server in range(len(store.servers)):
        rows = await query(
            settings,
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.COLUMNS"
            f" WHERE COLUMN_NAME = %s AND TABLE_SCHEMA IN ({marks})",
            column,
            *sorted(schemas),
            server=server,
        )
        found |= {f"`{schema}`.`{table}`" for schema, table in rows}
    return found


async def test_a_second_migrate_applies_nothing(new_database: NewDatabase) -> None:
    settings = await new_database()
    first = await migrate(settings)
    assert (first.applied, first.adopted, first.versions) == (PACKAGED, [], len(PACKAGED))
    second = await migrate(settings)
    assert (second.applied, second.adopted, second.versions) == ([], [], len(PACKAGED))
    assert await recorded(settings) == packaged_records(first_server_tables(settings))
    store = MySQLStore(settings, "node")
    await store.open()  # the schema check passes
    await store.close()


@pytest.mark.parametrize("databases", [1, 2])
async def test_a_new_migration_is_applied_once_to_every_shard(
    new_database: NewDatabase, tmp_path: Path, databases: int
) -> None:
    settings = await new_database(databases=databases, tables=2)
    await migrate(settings)
    folder = schema_dir(tmp_path, **{TENANT: "-- a tenant per job\n" + ADD_COLUMN})

    # A node or producer that knows it refuses the database until it is applied.
    early = MySQLStore(settings, "node", schema_dir=folder)
    with pytest.raises(SchemaError, match=rf"{TENANT} not applied.*run `delayq db migrate`"):
        await early.open()

    report = await migrate(settings, folder)
    assert (report.applied, report.shards) == ([TENANT], databases * 2)
    store = MySQLStore(settings, "test")
    every_job_table = {store.shard_tables(shard)[0] for shard in store.all_shards()}
    assert len(every_job_table) == databases * 2
    assert await tables_with_column(settings, "tenant") == every_job_table
    here = first_server_tables(settings)
    assert await recorded(settings) == [*packaged_records(here), (NEXT, TENANT, here, True)]
    meta = dict(await query(settings, "SELECT name, value FROM delayq_meta"))
    assert meta["schema_version"] == str(NEXT)

    # Applied once: running it again would fail on the existing column.
    assert (await migrate(settings, folder)).applied == []
    # An older delayq (without it) applies nothing and says the database is newer.
    older = await migrate(settings)
    assert (older.applied, older.newer) == ([], [NEXT])
    late = MySQLStore(settings, "node", schema_dir=folder)
    await late.open()
    await late.close()


async def test_an_old_style_database_is_adopted(new_database: NewDatabase, tmp_path: Path) -> None:
    """A database migrated before migrations were versioned: delayq_meta with
    schema_version=1 and the tables, no delayq_migrations (one server: older delayq
    knew no other)."""
    settings = await new_database(databases=1, tables=2)
    only_first = tmp_path / "schema-001"
    only_first.mkdir()
    shutil.copy(ROOT / "schema" / FIRST, only_first / FIRST)
    store = MySQLStore(settings, "old", schema_dir=only_first)
    await store.open(check_schema=False)
    try:
        async with store.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                "CREATE TABLE delayq_meta (name VARCHAR(64) NOT NULL PRIMARY KEY,"
                " value VARCHAR(255) NOT NULL)"
            )
            layout = {
                "databases": "1",
                "tables": "2",
                "key_prefix": settings.key_prefix,
                "slots": str(settings.slots),
                "schema_version": "1",
            }
            await cur.executemany("INSERT INTO delayq_meta VALUES (%s, %s)", layout.items())
            first = load_migrations()[0]
            for shard in store.all_shards():
                for statement in first.for_shard(
                    *store.shard_tables(shard),
                    store.outbox_table(shard),
                    store.recurring_table(shard),
                ):
                    await cur.execute(statement)
        # Nodes that know version 1 only accept it before it is adopted: nothing is
        # missing for them (nodes that know 002 wait for `delayq db migrate`).
        await store.check_layout()
        with pytest.raises(
            SchemaError,
            match=r"002_created_index\.sql, 003_retention_index\.sql, 004_outbox\.sql, "
            r"005_recurring\.sql, 006_expiry\.sql, 007_recurring_expiry\.sql, "
            r"008_restored\.sql(, [0-9]{3}_\w+\.sql)* not applied",
        ):
            await check_schema(store)  # the packaged migrations
    finally:
        await store.close()

    report = await migrate(settings)
    # Version 1 is adopted; the later packaged migrations are applied.
    assert (report.adopted, report.applied) == ([FIRST], PACKAGED[1:])
    assert report.versions == len(PACKAGED)
    assert await recorded(settings) == packaged_records(first_server_tables(settings))
    again = await migrate(settings)
    assert (again.adopted, again.applied) == ([], [])


async def test_a_failing_migration_is_not_recorded_and_names_the_file(
    new_database: NewDatabase, tmp_path: Path
) -> None:
    settings = await new_database(tables=2)
    await migrate(settings)
    name = f"{NEXT:03d}_broken.sql"
    broken = schema_dir(tmp_path, **{name: "ALTER TABLE {jobs} ADD COLUMN oops NOT A TYPE;\n"})
    with pytest.raises(SchemaError, match=rf"migration {name} failed on .*job_0000"):
        await migrate(settings, broken)
    assert await recorded(settings) == packaged_records(first_server_tables(settings))
    with pytest.raises(SchemaError, match=rf"{name} not applied"):
        await MySQLStore(settings, "node", schema_dir=broken).open()
    # Fixed, it applies.
    (broken / name).write_text(ADD_COLUMN)
    assert (await migrate(settings, broken)).applied == [name]


async def test_a_migration_that_failed_part_way_continues_with_the_failed_shard(
    new_database: NewDatabase, tmp_path: Path
) -> None:
    """DDL cannot be rolled back: the shards a migration ran on are recorded, and the
    rerun starts at the shard that failed."""
    settings = await new_database(tables=3)
    await migrate(settings)
    store = MySQLStore(settings, "test")
    second_table = store.shard_tables((0, 1))[0]
    await query(settings, f"ALTER TABLE {second_table} ADD COLUMN tenant INT NULL")
    folder = schema_dir(tmp_path, **{TENANT: ADD_COLUMN})
    with pytest.raises(SchemaError, match=rf"{TENANT} failed on .*job_0001.*shard 2 of 3"):
        await migrate(settings, folder)
    here = first_server_tables(settings)  # shard (0, 1) is on server 0
    assert await recorded(settings) == [*packaged_records(here), (NEXT, TENANT, 1, False)]
    with pytest.raises(SchemaError, match="not applied"):
        await MySQLStore(settings, "node", schema_dir=folder).open()

    await query(settings, f"ALTER TABLE {second_table} DROP COLUMN tenant")
    # job_0000 has the column already: running the migration on it again would fail.
    assert (await migrate(settings, folder)).applied == [TENANT]
    assert len(await tables_with_column(settings, "tenant")) == settings.mysql_databases * 3
    assert await recorded(settings) == [*packaged_records(here), (NEXT, TENANT, here, True)]


async def test_an_applied_migration_that_was_edited_is_refused(
    new_database: NewDatabase, tmp_path: Path
) -> None:
    settings = await new_database()
    await migrate(settings, schema_dir(tmp_path, **{TENANT: ADD_COLUMN}))
    edited = schema_dir(tmp_path, **{TENANT: ADD_COLUMN.replace("VARCHAR(64)", "VARCHAR(128)")})
    with pytest.raises(SchemaError, match=rf"{TENANT} was changed after it was applied"):
        await migrate(settings, edited)
    # Comment lines are not part of the checksum.
    commented = schema_dir(tmp_path, **{TENANT: "-- why: billing\n" + ADD_COLUMN})
    assert (await migrate(settings, commented)).applied == []


def test_migration_files_are_numbered_without_gaps(tmp_path: Path) -> None:
    assert [m.name for m in load_migrations()] == PACKAGED
    assert PACKAGED[:2] == [FIRST, "002_created_index.sql"]
    with pytest.raises(SchemaError, match="without gaps"):
        load_migrations(schema_dir(tmp_path, **{f"{NEXT + 1:03d}_skipped.sql": ADD_COLUMN}))
    with pytest.raises(SchemaError, match=r"NNN_name\.sql"):
        load_migrations(schema_dir(tmp_path, **{"2_short.sql": ADD_COLUMN}))
    with pytest.raises(SchemaError, match="no SQL statement"):
        load_migrations(schema_dir(tmp_path, **{f"{NEXT:03d}_empty.sql": "-- nothing yet\n"}))


async def test_db_migrate_command_reports_what_it_did(new_database: NewDatabase) -> None:
    settings = await new_database()
    env = {
        **os.environ,
        "DELAYQ_KEY_PREFIX": settings.key_prefix,
        "DELAYQ_MYSQL_URL": settings.mysql_url,
        "DELAYQ_MYSQL_SERVERS": settings.mysql_servers,
        "DELAYQ_MYSQL_TABLES": "2",
    }

    def db_migrate() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "db", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = db_migrate()
    for name in PACKAGED:
        assert f"applied {name} to {settings.mysql_databases * 2} job table(s)" in first
    assert f"schema ready: {len(PACKAGED)} migration(s) applied" in first
    assert f"schema up to date: {len(PACKAGED)} migration(s) applied" in db_migrate()
