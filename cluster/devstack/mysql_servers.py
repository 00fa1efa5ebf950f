"""Several MariaDB servers in the local stack: ``delayq services up --mysql-servers N``
(DELAYQ_SERVICES_MYSQL_SERVERS=N). Server 0 is the stack's ``mysql`` service; servers 1 ..
N-1 are ``mysql-1``, ``mysql-2``, … on the mysql port + 10 * i (13316, 13326, …; moved with
DELAYQ_SERVICES_MYSQL_<i>_PORT), each with its own data folder, the same database and user
as server 0 (cluster/devstack/mariadb.py), and small caches.

Like the Redis Cluster, the extra servers are included when wanted or when an earlier
`up` created them (their folders exist), so `down` and `status` cover them without the
flag; `env` names them only when asked. The secure stack has none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cluster.devstack import mariadb
from cluster.devstack.service import (
    HOST,
    MYSQL_DATABASE,
    MYSQL_PASSWORD,
    MYSQL_SERVERS_MAX,
    MYSQL_USER,
    Service,
    ServicesError,
    mysql_servers_wanted,
    service_port,
)

MARKER = "mariadbd"


def server_name(index: int) -> str:
    """The service of server `index`: "mysql" for 0, "mysql-<index>" for the others."""
    return "mysql" if index == 0 else f"mysql-{index}"


def extra_names(root: Path) -> list[str]:
    """mysql-1 .. mysql-<N-1>: as many as asked for, or as an earlier `up` made (more
    if both: a smaller count does not leave servers behind that `down` would miss)."""
    made = 1
    while made < MYSQL_SERVERS_MAX and (root / server_name(made)).is_dir():
        made += 1
    count = max(mysql_servers_wanted() or 1, made)
    return [server_name(index) for index in range(1, count)]


def extra_services(make: Callable[..., Service], root: Path, secure: bool) -> list[Service]:
    """The extra servers, built with the stack's `make(name, marker, prepare, command,
    probe, setup)`; none in the secure stack."""
    if secure:
        return []
    prepare = mariadb.prepare_with(mariadb.SMALL_MEMORY)
    return [
        make(name, MARKER, prepare, mariadb.command, mariadb.probe, mariadb.setup)
        for name in extra_names(root)
    ]


def server_url(index: int) -> str:
    """The URL of server `index` of the plain stack."""
    port = service_port(server_name(index))
    return f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{HOST}:{port}/{MYSQL_DATABASE}"


def extra_env() -> dict[str, str]:
    """With --mysql-servers N: DELAYQ_MYSQL_SERVERS (servers 1 .. N-1) and the count."""
    wanted = mysql_servers_wanted()
    if wanted is None:
        return {}
    return {
        "DELAYQ_MYSQL_SERVERS": " ".join(server_url(index) for index in range(1, wanted)),
        "DELAYQ_SERVICES_MYSQL_SERVERS": str(wanted),
    }


def refuse_secure(secure: bool) -> None:
    """The secure stack runs one MariaDB server."""
    wanted = mysql_servers_wanted()
    if secure and wanted is not None and wanted > 1:
        raise ServicesError(
            f"--secure with --mysql-servers {wanted} (or DELAYQ_SERVICES_MYSQL_SERVERS="
            f"{wanted}): the secure stack runs one MariaDB server"
        )
