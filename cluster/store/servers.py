"""The MySQL servers of a cluster, and where its logical shards start out.

A logical shard is one shard database, ``<main>_<d>`` (d < mysql_databases), with its job,
history, outbox and recurring tables: the unit that lives on one server and moves between
servers (cluster/store/shard_move.py). Server 0 is mysql_url; servers 1, 2, … are the
URLs of mysql_servers, in order. Every server uses mysql_url's database name, and a server
URL that names none of the TLS parameters (ssl_ca, ssl_cert, ssl_key, ssl_verify_hostname)
takes mysql_url's: TLS asked for in mysql_url alone holds for every server.

Where a shard lives is what the servers' ``delayq_shards`` tables say (cluster/store/
routing.py); mysql_shard_map only tells `db migrate` where to create a shard that no
server holds yet. Its default spreads the shards evenly, in ranges, over the servers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.store import sql

_RANGE = re.compile(r"(\d+)(?:-(\d+))?:(\d+)")


@dataclass(frozen=True)
class ServerSpec:
    """One MySQL server of the cluster (a Galera cluster counts as one: several
    addresses in one URL)."""

    index: int
    url: str  # holds the password: never print it
    name: str  # "host:port" of its first address: fit for logs, metrics and messages

    def __str__(self) -> str:
        return f"server {self.index} ({self.name})"


def server_specs(settings: Settings) -> list[ServerSpec]:
    """mysql_url, then each URL of mysql_servers, each naming the main database and,
    unless it names TLS parameters of its own, with mysql_url's."""
    main = sql.parse_mysql_url(settings.mysql_url)["db"]
    tls = _tls_parameters(settings.mysql_url)
    urls = [settings.mysql_url]
    for position, raw in enumerate(settings.mysql_servers.split(), start=1):
        url = raw if _tls_parameters(raw) else _with_parameters(raw, tls)
        path_start = url.find("/", url.find("://") + 3)
        database = url[path_start + 1 :].split("?", 1)[0] if path_start != -1 else ""
        if not database:
            # The database is mysql_url's: fill it in before the query, if any.
            head, _, query = url.partition("?")
            url = f"{head.rstrip('/')}/{main}" + (f"?{query}" if query else "")
        elif database != main:
            raise ConfigError(
                f"mysql_servers entry {position} names database {database!r}; every server "
                f"holds the cluster's database {main!r} (mysql_url's): leave it out or match it"
            )
        urls.append(url)
    specs = []
    for index, url in enumerate(urls):
        args = sql.parse_mysql_url(url)
        specs.append(ServerSpec(index, url, f"{args['host']}:{args['port']}"))
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"mysql_url and mysql_servers name a server twice: {names}")
    if len(specs) > 1 and settings.mysql_databases < 2:
        raise ConfigError(
            "several MySQL servers need mysql_databases >= 2 (a logical shard is a database; "
            "choose room to grow, e.g. 8 or 16, when the cluster is created)"
        )
    return specs


def _tls_parameters(url: str) -> list[str]:
    """The URL's TLS query parameters ("ssl_ca=…"), as written."""
    query = url.partition("?")[2]
    return [pair for pair in query.split("&") if pair.partition("=")[0] in sql.URL_TLS_OPTIONS]


def _with_parameters(url: str, pairs: list[str]) -> str:
    if not pairs:
        return url
    head, _, query = url.partition("?")
    return f"{head}?" + "&".join([*([query] if query else []), *pairs])


def with_database(settings: Settings, database: str) -> Settings:
    """settings whose servers all name `database` (a throw-away cluster's)."""
    servers = " ".join(_renamed(url, database) for url in settings.mysql_servers.split())
    return settings.replace(mysql_url=_renamed(settings.mysql_url, database), mysql_servers=servers)


def _renamed(url: str, database: str) -> str:
    head, _, query = url.partition("?")
    scheme, _, rest = head.partition("://")
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{database}" + (f"?{query}" if query else "")


def initial_placement(settings: Settings, servers: int) -> dict[int, int]:
    """Logical shard -> server index, where `db migrate` creates a shard no server holds:
    mysql_shard_map ("0-3:0 4-7:1", every shard once), or even ranges."""
    databases = settings.mysql_databases
    if not settings.mysql_shard_map.strip():
        return {d: d * servers // databases for d in range(databases)}
    placement: dict[int, int] = {}
    for part in settings.mysql_shard_map.split():
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ConfigError(
                f"mysql_shard_map: {part!r} is not FIRST-LAST:SERVER or SHARD:SERVER "
                '(e.g. "0-3:0 4-7:1")'
            )
        first, last, server = int(match[1]), int(match[2] or match[1]), int(match[3])
        if server >= servers:
            raise ConfigError(
                f"mysql_shard_map: {part!r} names server {server}; there are {servers} "
                "(0 is mysql_url, then mysql_servers in order)"
            )
        for d in range(first, last + 1):
            if d >= databases or d in placement:
                raise ConfigError(
                    f"mysql_shard_map: shard {d} is "
                    + ("placed twice" if d in placement else f"not below {databases}")
                )
            placement[d] = server
    missing = sorted(set(range(databases)) - set(placement))
    if missing:
        raise ConfigError(f"mysql_shard_map leaves out shard(s) {missing}")
    return placement
