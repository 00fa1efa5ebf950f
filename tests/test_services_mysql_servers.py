"""`delayq services --mysql-servers N`: the local stack's extra MariaDB servers answer,
each its own server with the stack's database and user, and `services env` names them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.devstack import stack
from cluster.store.connect import connect
from cluster.store.sql import parse_mysql_url
from tests.conftest import SECURE_RUN

# Against the single Redis only: it tests the local stack's commands.
pytestmark = pytest.mark.once

SERVERS = 3
COUNT_VARIABLE = "DELAYQ_SERVICES_MYSQL_SERVERS"


@pytest.fixture(scope="module")
def servers_env(stack_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The plain local stack with three MariaDB servers (`up` starts only the missing
    ones): its `services env` settings."""
    if os.environ.get("DELAYQ_TEST_EXTERNAL") == "1" or SECURE_RUN:
        pytest.skip("the plain local stack is not started here")
    saved = os.environ.get(COUNT_VARIABLE)
    os.environ[COUNT_VARIABLE] = str(SERVERS)
    try:
        stack.up()
        yield stack.stack_env()
    finally:
        if saved is None:
            os.environ.pop(COUNT_VARIABLE, None)
        else:
            os.environ[COUNT_VARIABLE] = saved


async def test_every_server_answers_with_the_stacks_database_and_user(
    servers_env: dict[str, str],
) -> None:
    extra = servers_env["DELAYQ_MYSQL_SERVERS"].split()
    assert len(extra) == SERVERS - 1
    seen: dict[int, str] = {}
    for url in [servers_env["DELAYQ_MYSQL_URL"], *extra]:
        args = parse_mysql_url(url)
        conn = await connect(**args)
        try:
            async with conn.cursor() as cur:
                await cur.execute(
                    "SELECT @@port, @@datadir, DATABASE(), CURRENT_USER(), "
                    "@@innodb_buffer_pool_size, @@performance_schema"
                )
                port, datadir, database, user, buffer_pool, perf_schema = await cur.fetchone()
        finally:
            conn.close()
        assert (port, database, user) == (args["port"], "delayq", "delayq@127.0.0.1")
        if url != servers_env["DELAYQ_MYSQL_URL"]:  # the extra ones are kept small
            assert (buffer_pool, perf_schema) == (64 * 1024 * 1024, 0)
        seen[port] = datadir
    assert len(set(seen.values())) == SERVERS  # three servers, not one thrice


def test_status_lists_the_extra_servers(
    servers_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    running = stack.status()
    assert running["mysql-1"] and running["mysql-2"]
    assert "mysql-2" in capsys.readouterr().out


def _services(state: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`delayq services ARGS` with the stack's default ports and a state folder of its own."""
    clean = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DELAYQ_SERVICES_", "DELAYQ_STATE_DIR"))
    }
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "services", *args],
        env={**clean, "DELAYQ_STATE_DIR": str(state), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_env_names_servers_1_to_n_minus_1(tmp_path: Path) -> None:
    url = "mysql://delayq:delayq@127.0.0.1:{}/delayq"
    lines = [
        f"export DELAYQ_MYSQL_SERVERS='{url.format(13316)} {url.format(13326)}'",
        "export DELAYQ_SERVICES_MYSQL_SERVERS=3",
    ]
    flag = _services(tmp_path, "env", "--mysql-servers", "3")
    assert flag.returncode == 0, flag.stderr
    assert flag.stdout.splitlines()[-2:] == lines
    variable = _services(tmp_path, "env", DELAYQ_SERVICES_MYSQL_SERVERS="3")
    assert variable.stdout == flag.stdout
    moved = _services(tmp_path, "env", "--mysql-servers", "2", DELAYQ_SERVICES_MYSQL_1_PORT="23316")
    assert f"export DELAYQ_MYSQL_SERVERS={url.format(23316)}" in moved.stdout.splitlines()
    plain = _services(tmp_path, "env")
    assert plain.returncode == 0, plain.stderr
    assert "MYSQL_SERVERS" not in plain.stdout


@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["up", "--secure", "--mysql-servers", "3"], {}, "the secure stack runs one MariaDB"),
        (["up", "--secure"], {COUNT_VARIABLE: "2"}, "the secure stack runs one MariaDB"),
        (["up"], {COUNT_VARIABLE: "ten"}, "the stack runs 1 to 9 MariaDB servers"),
        (["env", "--mysql-servers", "0"], {}, "invalid choice: 0"),
    ],
)
def test_bad_counts_are_refused_and_change_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], error: str
) -> None:
    state = tmp_path / "state"
    done = _services(state, *args, **env)
    assert done.returncode != 0
    assert error in done.stderr
    assert done.stdout == ""
    assert not state.exists()
