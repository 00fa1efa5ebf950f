"""MySQL of the local stack: ``mariadbd`` with database ``delayq`` and user delayq/delayq.
How to initialise its data folder (once), write its config, start it, create the database
and user (on every start), and probe it with the ``mariadb`` client. Every function takes
the ``Service``, so one module serves each MariaDB server of the stack; ``prepare_with``
adds [mysqld] options (the small caches of the extra servers of ``--mysql-servers``).

In the secure stack (``svc.secrets`` set) the server has a TLS certificate, and the
delayq user has a generated password, must use TLS (REQUIRE SSL), and may only touch
delayq's databases: ``delayq`` and ``delayq_*`` (shards, and one per test).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from cluster.devstack import mysql_grants as grants
from cluster.devstack.packages import require_program
from cluster.devstack.service import (
    HOST,
    MYSQL_DATABASE,
    MYSQL_PASSWORD,
    MYSQL_USER,
    Service,
    ServicesError,
    log_tail,
    say,
)

_UNIX_SOCKET_MAX = 100  # sun_path is 108 bytes including the terminating NUL.


def _datadir(svc: Service) -> Path:
    return svc.dir / "data"


def _config(svc: Service) -> Path:
    return svc.dir / "my.cnf"


def socket_path(svc: Service) -> Path:
    """The server's unix socket: in its folder, or in /tmp when that path is too long."""
    sock = svc.dir / "mysql.sock"
    if len(str(sock)) <= _UNIX_SOCKET_MAX:
        return sock
    digest = hashlib.sha1(str(svc.dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"delayq-mysql-{digest}.sock"


def _os_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


# The extra servers of `--mysql-servers N` share the machine with everything else: small
# caches (MariaDB's defaults: a 128M buffer pool, 128M of Aria and MyISAM key caches).
SMALL_MEMORY = (
    "innodb_buffer_pool_size = 64M",
    "key_buffer_size = 8M",
    "aria_pagecache_buffer_size = 8M",
    "performance_schema = OFF",
)


def prepare_with(options: Sequence[str]) -> Callable[[Service], None]:
    """``prepare`` with more [mysqld] options (they win over the ones before them)."""

    def prepare_server(svc: Service) -> None:
        _prepare(svc, options)

    return prepare_server


def prepare(svc: Service) -> None:
    _prepare(svc, ())


def _prepare(svc: Service, options: Sequence[str]) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)
    datadir = _datadir(svc)
    lines = [
        "# Written by `delayq services up`; rewritten on every start.",
        "[mysqld]",
        f"datadir = {datadir}",
        f"socket = {socket_path(svc)}",
        f"port = {svc.port}",
        f"bind-address = {HOST}",
        f"pid-file = {svc.dir / 'mariadbd.pid'}",
        f"log-error = {svc.log_file}",
        "skip-name-resolve",
        "max_connections = 500",
        "character-set-server = utf8mb4",
        "collation-server = utf8mb4_general_ci",
    ]
    if svc.secrets is not None:
        lines += [
            f"ssl_cert = {svc.secrets.cert_file}",
            f"ssl_key = {svc.secrets.key_file}",
            f"ssl_ca = {svc.secrets.ca_file}",
        ]
    lines += options
    if os.geteuid() == 0:
        lines.append("user = root")  # mariadbd refuses to run as root without it
    _config(svc).write_text("\n".join(lines) + "\n")
    if (datadir / "mysql").is_dir():
        return  # initialised before: never again, the data is kept
    say(svc, f"initialising {datadir}")
    # --defaults-file must come first; it also keeps /etc/mysql/my.cnf out of the way.
    install = [
        require_program("mariadb-install-db", "mariadb-server"),
        f"--defaults-file={_config(svc)}",
        f"--user={_os_user()}",
        f"--datadir={datadir}",
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
        "--skip-name-resolve",
    ]
    with svc.log_file.open("ab") as log:
        done = subprocess.run(
            install, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        shutil.rmtree(datadir, ignore_errors=True)  # a half-made datadir would look done
        raise ServicesError(
            f"mariadb-install-db failed (exit {done.returncode}); see {svc.log_file}{log_tail(svc)}"
        )


def command(svc: Service) -> list[str]:
    return [require_program("mariadbd", "mariadb-server"), f"--defaults-file={_config(svc)}"]


def _client(svc: Service, *args: str, sql: str, password: str | None = None) -> None:
    """Run `sql` with the ``mariadb`` client. Neither the SQL (which may hold a
    password) nor the password goes on its command line, which every local user can read
    in /proc/<pid>/cmdline: the SQL goes through stdin, the password through an option
    file readable by this user only (0600), deleted afterwards."""
    fd, options = tempfile.mkstemp(prefix="client-", suffix=".cnf", dir=svc.dir)
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp: created 0600
            out.write("[client]\n")
            if password is not None:
                out.write(f"password={_option_value(password)}\n")
        run = [
            require_program("mariadb", "mariadb-client"),
            # Only this file: no ~/.my.cnf or /etc/mysql options, as --no-defaults did.
            f"--defaults-file={options}",
            "--batch",
            "--connect-timeout=3",
            *args,
        ]
        env = {name: value for name, value in os.environ.items() if name != "MYSQL_PWD"}
        done = subprocess.run(
            run, input=sql, capture_output=True, text=True, env=env, timeout=30, check=False
        )
    finally:
        Path(options).unlink(missing_ok=True)
    if done.returncode != 0:
        raise ServicesError(done.stderr.strip() or f"mariadb exited {done.returncode}")


def _option_value(value: str) -> str:
    """A value for an option file, quoted (an option file reads \\ and \" as escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def password(svc: Service) -> str:
    """The delayq user's password: fixed in the plain stack, generated in the secure one."""
    return MYSQL_PASSWORD if svc.secrets is None else svc.secrets.password("mysql_delayq")


def setup(svc: Service) -> None:
    """Create the database and the delayq user; idempotent, runs on every start."""
    statements = [f"CREATE DATABASE IF NOT EXISTS `{MYSQL_DATABASE}` CHARACTER SET utf8mb4"]
    secret = password(svc)
    for host in (HOST, "localhost"):
        account = f"'{MYSQL_USER}'@'{host}'"
        if svc.secrets is None:
            statements += [
                f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{secret}'",
                f"ALTER USER {account} IDENTIFIED BY '{secret}'",
                # Shard databases delayq_0, delayq_1, ... are created by delayq itself.
                f"GRANT ALL PRIVILEGES ON *.* TO {account}",
            ]
            continue
        statements += [
            f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{secret}' REQUIRE SSL",
            f"ALTER USER {account} IDENTIFIED BY '{secret}' REQUIRE SSL",
            f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}",
            # delayq, its shards delayq_0, delayq_1, … and the tests' delayq_<prefix>
            # (an escaped _: a literal underscore, not LIKE's any-character).
            f"GRANT ALL PRIVILEGES ON `{MYSQL_DATABASE}`.* TO {account}",
            f"GRANT ALL PRIVILEGES ON `{MYSQL_DATABASE}\\_%`.* TO {account}",
        ]
    if svc.secrets is not None:
        # docs/security.md's users, from the page's own statements.
        passwords = {user: svc.secrets.password(name) for user, name in grants.USERS.items()}
        statements += grants.account_statements(passwords)
    run_as_administrator(svc, statements)


def run_as_administrator(svc: Service, statements: list[str]) -> None:
    """Run SQL statements as the server's administrator, who authenticates with
    unix_socket: the OS user of the install (through stdin, never a command line)."""
    admin = "root" if os.geteuid() == 0 else _os_user()
    _client(
        svc,
        "--protocol=socket",
        f"--socket={socket_path(svc)}",
        f"--user={admin}",
        sql=";\n".join(statements) + ";\n",
    )


def grant_documented_tables(svc: Service, database: str, tables: int) -> None:
    """docs/security.md's table-level grants on a migrated database of this server."""
    run_as_administrator(svc, grants.table_statements(database, tables))


def probe(svc: Service) -> None:
    tls = (
        []
        if svc.secrets is None
        else ["--ssl", f"--ssl-ca={svc.secrets.ca_file}", "--ssl-verify-server-cert"]
    )
    _client(
        svc,
        "--protocol=tcp",
        f"--host={HOST}",
        f"--port={svc.port}",
        f"--user={MYSQL_USER}",
        *tls,
        MYSQL_DATABASE,
        sql="SELECT 1;\n",
        password=password(svc),
    )
