"""The MySQL grants of docs/security.md (MySQL grants), as the page shows them: the
secure local stack creates its producer, node, admin and ``schedule_in`` users from this
text, and a unit test (tests/unit/test_security_recipes.py) holds the page's SQL block
and ``DOCUMENTED`` together.

- ``account_statements``: the users and their database-level grants (each ``up
  --secure``): every statement that names no table;
- ``table_statements``: the table-level grants for one migrated database, the lines
  naming ``…_0000`` repeated for each of its tables (as the page's "for each NNNN" says).
"""

from __future__ import annotations

DOCUMENTED = """\
-- Producers: the job tables and their history, the recurring schedules, the schema
-- check and the shard map.
CREATE USER 'delayq_producer'@'%' IDENTIFIED BY '…' REQUIRE SSL;
GRANT SELECT ON `delayq`.`delayq_meta` TO 'delayq_producer'@'%';
GRANT SELECT ON `delayq`.`delayq_migrations` TO 'delayq_producer'@'%';
GRANT SELECT ON `delayq`.`delayq_shards` TO 'delayq_producer'@'%';
-- for each job table job_NNNN and history table job_history_NNNN (a script or a loop):
GRANT SELECT, INSERT, UPDATE ON `delayq`.`job_0000` TO 'delayq_producer'@'%';
GRANT SELECT, INSERT ON `delayq`.`job_history_0000` TO 'delayq_producer'@'%';
-- producers that manage recurring schedules (schedule_recurring writes the schedule and
-- its first ticks, with outbox rows), also for each NNNN:
GRANT SELECT, INSERT, UPDATE ON `delayq`.`job_recurring_0000` TO 'delayq_producer'@'%';
GRANT INSERT ON `delayq`.`job_outbox_0000` TO 'delayq_producer'@'%';

-- Services that schedule inside their own transactions (schedule_in), as the user of
-- their own connection: the shard map, and for each NNNN the job table (an existing
-- job_id keeps its row: the insert reads that column) and the outbox.
CREATE USER 'shop'@'%' IDENTIFIED BY '…' REQUIRE SSL;
GRANT SELECT ON `delayq`.`delayq_shards` TO 'shop'@'%';
GRANT SELECT (job_id), INSERT, UPDATE ON `delayq`.`job_0000` TO 'shop'@'%';
GRANT INSERT ON `delayq`.`job_outbox_0000` TO 'shop'@'%';

-- Nodes: read and write the jobs and their history (a database-level grant).
CREATE USER 'delayq_node'@'%' IDENTIFIED BY '…' REQUIRE SSL;
GRANT SELECT, INSERT, UPDATE, DELETE ON `delayq`.* TO 'delayq_node'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON `delayq\\_%`.* TO 'delayq_node'@'%';

-- Operators: migrations create the databases and tables.
CREATE USER 'delayq_admin'@'%' IDENTIFIED BY '…' REQUIRE SSL;
GRANT ALL PRIVILEGES ON `delayq`.* TO 'delayq_admin'@'%';
GRANT ALL PRIVILEGES ON `delayq\\_%`.* TO 'delayq_admin'@'%';
"""

# The secure stack's clients, nodes and tests log in as the page's operator (they create
# and migrate a database per test).
ADMIN_USER = "delayq_admin"
# The users the page creates, and the names of their passwords in the secure stack.
USERS = {
    "delayq_producer": "mysql_producer",
    "shop": "mysql_shop",
    "delayq_node": "mysql_node",
    "delayq_admin": "mysql_admin",
}
_PLACEHOLDER = "'…'"
_TABLE_NUMBER = "0000"


def statements() -> list[str]:
    """The page's statements, comments and blank lines left out."""
    lines = [line for line in DOCUMENTED.splitlines() if line and not line.startswith("--")]
    return [line.removesuffix(";") for line in lines]


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def account_statements(passwords: dict[str, str]) -> list[str]:
    """The users (their passwords from `passwords`, by user) and the grants that name no
    table. Idempotent: an existing user gets the documented password and rights anew."""
    out: list[str] = []
    for statement in statements():
        if statement.startswith("CREATE USER "):
            user = statement.split("'")[1]
            account = f"'{user}'@'%'"
            secret = _quote(passwords[user])
            out += [
                statement.replace("CREATE USER ", "CREATE USER IF NOT EXISTS ").replace(
                    _PLACEHOLDER, secret
                ),
                f"ALTER USER {account} IDENTIFIED BY {secret} REQUIRE SSL",
                f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}",
            ]
        elif "`.* TO " in statement:
            out.append(statement)
    return out


def table_statements(database: str, tables: int) -> list[str]:
    """The table-level grants for `database` (migrated, with `tables` job tables)."""
    out: list[str] = []
    for statement in statements():
        if not statement.startswith("GRANT ") or "`.* TO " in statement:
            continue
        named = statement.replace("ON `delayq`.", f"ON `{database}`.")
        if f"_{_TABLE_NUMBER}`" in statement:
            out += [named.replace(_TABLE_NUMBER, f"{n:04d}") for n in range(tables)]
        else:
            out.append(named)
    return out
