"""Versioned schema migrations of the job shards: what a migration is, and `delayq db
migrate` applying them. The files are read by cluster/store/migration_files.py; nodes
and producers check the schema on open in cluster/store/schema_check.py.

A migration is a file ``schema/NNN_name.sql`` (package data; NNN is its version, 001,
002, … without gaps). `delayq db migrate` applies, in version order, every migration the
database has not recorded, to every shard: each statement of the file (statements end
with ``;`` at the end of a line) runs once per shard with ``{jobs}``, ``{history}``,
``{outbox}`` and ``{recurring}`` replaced by that shard's fully qualified table names.
To change the schema, add the next numbered file; never edit one that has been applied.
Nodes of the previous release keep running on the migrated schema during an upgrade,
so a migration adds (columns, indexes) and does not take away what that release uses.

Each server (cluster/store/servers.py) has the main database and migrates the shards
it holds; a server not answering is reported and the others go on. A shard no server
holds is created where mysql_shard_map places it, once every server answers. The main
database of each server holds three tables besides the shards:

- ``delayq_meta``: the shard layout (databases, tables, key_prefix, slots), fixed by the
  first migrate, and ``schema_version``, the highest applied version (older delayq
  releases read it).
- ``delayq_shards``: the logical shards the server holds, and their state
  (cluster/store/routing.py).
- ``delayq_migrations``: one row per migration (version, name, checksum, shards_done,
  applied_at). A migration is applied once ``applied_at`` is set, after it ran on every
  shard of the server. ``shards_done`` counts the shards, in layout order, that it ran on, so that a
  rerun after a failure continues with the shard that failed instead of repeating DDL
  that MySQL cannot roll back.

The checksum is the SHA-256 of a file's statements with comment lines left out, so the
explanation in ``--`` lines can be edited. `migrate` refuses (applying nothing) when an
applied migration's statements changed, naming the file; nodes and producers only check
that every migration they know is applied. A database migrated before migrations were
versioned (``delayq_meta`` with ``schema_version``, no recorded migration) is adopted: its
versions 1..schema_version are recorded as applied without running them again.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from typing import Any, Protocol

import aiomysql
import pymysql

from cluster.errors import SchemaError
from cluster.settings.config import Settings
from cluster.store.migration_files import Migration, load_migrations
from cluster.store.routing import COPYING, HOME, recorded_shards
from cluster.store.servers import ServerSpec, initial_placement
from cluster.store.tick_rows import place_tick_rows

LOCK_WAIT_S = 60


class ShardedDatabase(Protocol):
    """What migrating and checking need of a store (MySQLStore is one): its settings,
    servers, pools and table names. A Protocol: the store's module calls this one."""

    @property
    def settings(self) -> Settings: ...

    @property
    def database(self) -> str: ...

    @property
    def servers(self) -> list[ServerSpec]: ...

    async def server_pool(self, index: int) -> aiomysql.Pool: ...

    def open_pools(self) -> dict[int, aiomysql.Pool]: ...

    def database_name(self, db_index: int) -> str: ...

    def all_shards(self, databases: Iterable[int] | None = None) -> list[tuple[int, int]]: ...

    def shard_tables(self, shard: tuple[int, int]) -> tuple[str, str]: ...

    def outbox_table(self, shard: tuple[int, int]) -> str: ...

    def recurring_table(self, shard: tuple[int, int]) -> str: ...


@dataclass
class MigrationReport:
    """What one migrate did."""

    applied: list[str] = field(default_factory=list)  # files run by this migrate
    adopted: list[str] = field(default_factory=list)  # recorded without running them
    versions: int = 0  # migrations this delayq knows, all applied now
    shards: int = 0  # job tables each migration runs on, over every server
    servers_down: list[str] = field(default_factory=list)  # "server 1 (host:port): why"
    newer: list[int] = field(default_factory=list)  # recorded versions this delayq lacks
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Record:
    name: str
    checksum: str
    shards_done: int
    applied: bool


def layout_of(settings: Settings) -> dict[str, str]:
    """The delayq_meta entries fixed for the life of a deployment."""
    return {
        "databases": str(settings.mysql_databases),
        "tables": str(settings.mysql_tables),
        "key_prefix": settings.key_prefix,
        "slots": str(settings.slots),
    }


async def read_meta(cur: Any, database: str) -> dict[str, str]:
    await cur.execute(f"SELECT name, value FROM `{database}`.delayq_meta")
    return {name: value for name, value in await cur.fetchall()}


async def apply_migrations(
    store: ShardedDatabase, directory: Traversable | None = None
) -> MigrationReport:
    """On every server that answers: the main database's tables, the shard databases,
    and each shard's migrations not yet applied, in order. A rerun applies nothing."""
    migrations = load_migrations(directory)
    report = MigrationReport(versions=len(migrations))
    recorded: dict[int, dict[int, str]] = {}
    for spec in store.servers:
        try:
            async with (await store.server_pool(spec.index)).acquire() as conn:
                async with conn.cursor() as cur:
                    recorded[spec.index] = await recorded_shards(
                        cur, store.database, store.settings.mysql_databases
                    )
        except (pymysql.err.OperationalError, OSError) as exc:
            report.servers_down.append(f"{spec}: {exc}")
    plan = _plan(store, recorded)
    for index in sorted(recorded):
        spec = store.servers[index]
        try:
            async with (await store.server_pool(index)).acquire() as conn:
                async with conn.cursor() as cur:
                    part = await _migrate_locked(store, cur, migrations, plan[index])
        except (pymysql.err.OperationalError, OSError) as exc:
            report.servers_down.append(f"{spec}: {exc}")
            continue
        report.shards += part.shards
        report.applied += [m for m in part.applied if m not in report.applied]
        report.adopted += [m for m in part.adopted if m not in report.adopted]
        report.warnings += part.warnings
        report.newer = sorted(set(report.newer) | set(part.newer))
    return report


def _plan(store: ShardedDatabase, recorded: dict[int, dict[int, str]]) -> dict[int, list[int]]:
    """The logical shards each answering server holds or is to hold."""
    plan = {
        index: sorted(d for d, state in rows.items() if state in (HOME, COPYING))
        for index, rows in recorded.items()
    }
    if len(recorded) == len(store.servers):
        known = {d for rows in recorded.values() for d in rows}
        placement = initial_placement(store.settings, len(store.servers))
        for d, index in sorted(placement.items()):
            if d not in known:
                plan[index].append(d)
    return plan


async def _migrate_locked(
    store: ShardedDatabase, cur: Any, migrations: list[Migration], dbs: list[int]
) -> MigrationReport:
    lock = f"delayq_migrate:{store.database}"[:64]
    with warnings.catch_warnings():
        # "IF NOT EXISTS" on an existing database or table is a MySQL warning.
        warnings.simplefilter("ignore", pymysql.Warning)
        # Two migrates at once would run the same DDL twice.
        await cur.execute("SELECT GET_LOCK(%s, %s)", (lock, LOCK_WAIT_S))
        if (await cur.fetchone())[0] != 1:
            raise SchemaError(f"another `delayq db migrate` of {store.database!r} is running")
        try:
            return await _migrate(store, cur, migrations, dbs)
        finally:
            with contextlib.suppress(pymysql.MySQLError):
                await cur.execute("SELECT RELEASE_LOCK(%s)", (lock,))


async def _migrate(
    store: ShardedDatabase, cur: Any, migrations: list[Migration], dbs: list[int]
) -> MigrationReport:
    main = f"`{store.database}`"
    await cur.execute(f"CREATE DATABASE IF NOT EXISTS {main}")
    await cur.execute(
        f"CREATE TABLE IF NOT EXISTS {main}.delayq_meta ("
        " name VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL)"
    )
    await cur.execute(
        f"CREATE TABLE IF NOT EXISTS {main}.delayq_migrations ("
        " version INT UNSIGNED NOT NULL PRIMARY KEY,"
        " name VARCHAR(255) NOT NULL COMMENT 'file name',"
        " checksum CHAR(64) NOT NULL COMMENT 'SHA-256 of its statements, comment lines left out',"
        " shards_done INT UNSIGNED NOT NULL COMMENT 'shards, in layout order, it ran on',"
        " applied_at DATETIME(3) NULL COMMENT 'when it had run on every shard; NULL until then'"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
    meta = await read_meta(cur, store.database)
    wanted = layout_of(store.settings)
    if meta and {k: meta.get(k, wanted[k]) for k in wanted} != wanted:
        raise SchemaError(
            f"database is laid out as {meta}, settings ask for {wanted}; the "
            "shard layout and key prefix of an existing deployment cannot change"
        )
    shards = store.all_shards(dbs)
    report = MigrationReport(shards=len(shards))
    records = await read_records(cur, store.database)
    if not records and meta.get("schema_version"):
        # Migrated before migrations were versioned: what it ran is what it recorded.
        for migration in migrations[: int(meta["schema_version"])]:
            await _record(cur, main, migration, len(shards), applied=True)
            records[migration.version] = _Record(
                migration.name, migration.checksum, len(shards), applied=True
            )
            report.adopted.append(migration.name)
    _check_checksums(store.database, migrations, records, report)
    # The layout is fixed from here on, before any table exists: shards_done relies on it.
    for name, value in wanted.items():
        await cur.execute(
            f"REPLACE INTO {main}.delayq_meta (name, value) VALUES (%s, %s)", (name, value)
        )
    await cur.execute(
        f"CREATE TABLE IF NOT EXISTS {main}.delayq_shards ("
        " db_index INT UNSIGNED NOT NULL PRIMARY KEY COMMENT 'logical shard',"
        " state VARCHAR(16) NOT NULL COMMENT 'home, copying (a move) or moved',"
        " changed_at DATETIME(3) NOT NULL"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
    for d in dbs:
        await cur.execute(f"CREATE DATABASE IF NOT EXISTS `{store.database_name(d)}`")
        await cur.execute(
            f"INSERT IGNORE INTO {main}.delayq_shards (db_index, state, changed_at)"
            f" VALUES (%s, '{HOME}', NOW(3))",
            (d,),
        )
    for migration in migrations:
        record = records.get(migration.version)
        if record is not None and record.applied:
            continue
        start = record.shards_done if record is not None else 0
        for index in range(start, len(shards)):
            jobs, history = store.shard_tables(shards[index])
            outbox = store.outbox_table(shards[index])
            recurring = store.recurring_table(shards[index])
            for statement in migration.for_shard(jobs, history, outbox, recurring):
                try:
                    await cur.execute(statement)
                except pymysql.MySQLError as exc:
                    raise SchemaError(
                        f"migration {migration.name} failed on {jobs} (shard {index + 1} of "
                        f"{len(shards)}): {exc}. It is not recorded as applied; fix the file "
                        "(or the database) and run `delayq db migrate` again, which continues "
                        "with this shard"
                    ) from exc
            await _record(cur, main, migration, index + 1, applied=index + 1 == len(shards))
        if not shards:  # a server holding no shard (yet): applied all the same
            await _record(cur, main, migration, 0, applied=True)
        report.applied.append(migration.name)
        await cur.execute(
            f"REPLACE INTO {main}.delayq_meta (name, value) VALUES ('schema_version', %s)",
            (str(migration.version),),
        )
    report.newer = sorted(v for v in records if v > len(migrations))
    await place_tick_rows(store, cur, dbs)  # older clusters' ticks to their schedule's shard
    return report


def _check_checksums(
    database: str,
    migrations: list[Migration],
    records: dict[int, _Record],
    report: MigrationReport,
) -> None:
    for migration in migrations:
        record = records.get(migration.version)
        if record is None or record.checksum == migration.checksum:
            continue
        if not record.applied:
            # Fixing the migration that failed is what a rerun is for.
            report.warnings.append(
                f"{migration.name} changed since it ran on the first {record.shards_done} "
                "shard(s); the remaining shards get the file as it is now"
            )
            continue
        raise SchemaError(
            f"migration {migration.name} was changed after it was applied (recorded "
            f"checksum {record.checksum[:12]}…, file now {migration.checksum[:12]}…). An "
            "applied migration must not be edited: restore it and put the change in a new "
            "numbered file. If the edit is deliberate and needs no migration, accept it with "
            f"UPDATE `{database}`.delayq_migrations SET checksum = '{migration.checksum}' "
            f"WHERE version = {migration.version}"
        )


async def read_records(cur: Any, database: str) -> dict[int, _Record]:
    await cur.execute(
        "SELECT version, name, checksum, shards_done, applied_at IS NOT NULL"
        f" FROM `{database}`.delayq_migrations"
    )
    return {
        int(version): _Record(name, checksum, int(done), bool(applied))
        for version, name, checksum, done, applied in await cur.fetchall()
    }


async def _record(cur: Any, main: str, migration: Migration, done: int, *, applied: bool) -> None:
    await cur.execute(
        f"REPLACE INTO {main}.delayq_migrations"
        " (version, name, checksum, shards_done, applied_at)"
        f" VALUES (%s, %s, %s, %s, {'NOW(3)' if applied else 'NULL'})",
        (migration.version, migration.name, migration.checksum, done),
    )
