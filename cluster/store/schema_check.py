"""The schema check of nodes and producers on open: every migration this delayq knows is
applied on every server whose pool is open, and the database's fixed layout is the one
the settings give (cluster/store/migrations.py records both).
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from typing import Any

import aiomysql

from cluster.errors import SchemaError
from cluster.store.migration_files import Migration, load_migrations
from cluster.store.migrations import ShardedDatabase, layout_of, read_meta, read_records
from cluster.store.servers import ServerSpec


async def check_schema(store: ShardedDatabase, directory: Traversable | None = None) -> None:
    """Refuse a database that is not migrated, misses a migration this delayq knows, or
    was laid out for other settings (what nodes and producers check on open), on every
    server whose pool is open (a server that did not answer is checked by no one: its
    shards stay unavailable until it answers)."""
    migrations = load_migrations(directory)
    for index, pool in sorted(store.open_pools().items()):
        async with pool.acquire() as conn, conn.cursor() as cur:
            await _check_server(store, store.servers[index], cur, migrations)


async def _check_server(
    store: ShardedDatabase, server: ServerSpec, cur: Any, migrations: list[Migration]
) -> None:
    where = f"database {store.database!r}" + (f" on {server}" if len(store.servers) > 1 else "")
    try:
        meta = await read_meta(cur, store.database)
    except aiomysql.ProgrammingError:
        meta = {}
    if not meta:
        raise SchemaError(f"{where} has no delayq schema: run `delayq db migrate`")
    try:
        records = await read_records(cur, store.database)
        applied = {version for version, record in records.items() if record.applied}
    except aiomysql.ProgrammingError:
        # Not adopted yet: the old schema_version says what ran.
        applied = set(range(1, int(meta.get("schema_version", "0")) + 1))
    missing = [m.name for m in migrations if m.version not in applied]
    if missing:
        raise SchemaError(
            f"the delayq schema of {where} is out of date ({', '.join(missing)} not applied): "
            "run `delayq db migrate`"
        )
    wanted = layout_of(store.settings)
    if meta.get("key_prefix", wanted["key_prefix"]) != wanted["key_prefix"]:
        raise SchemaError(
            f"{where} belongs to the cluster with key_prefix "
            f"{meta.get('key_prefix')!r}, not {wanted['key_prefix']!r}: give each cluster "
            "its own database"
        )
    if {k: meta.get(k) for k in ("databases", "tables")} != {
        k: wanted[k] for k in ("databases", "tables")
    }:
        raise SchemaError(
            f"the database holds a {meta.get('databases')}×{meta.get('tables')} shard "
            f"layout but settings say {wanted['databases']}×{wanted['tables']}"
        )
    if meta.get("slots", wanted["slots"]) != wanted["slots"]:
        # A producer with another slot count would put jobs in slots no node owns.
        raise SchemaError(
            f"the cluster has {meta['slots']} slots but settings say "
            f"slots={wanted['slots']}: the slot count is fixed when a cluster is created"
        )
