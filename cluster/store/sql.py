"""Low-level MySQL helpers shared by the job store and the migrator: the connection URL,
time conversions, SQL literals built by hand, and overlapped statement execution.

Hot statements are built as text here rather than by the driver, because aiomysql's
per-parameter escaping cost more than the database's work (see cluster/store/job_writes.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.settings.security import client_tls, describe_tls_error, tls_cause

UTC = dt.UTC
ROWS_PER_STATEMENT = 2000
STATEMENT_BYTES = 4 << 20  # well under MySQL's default max_allowed_packet (16 MiB)

# PyMySQL's "Lost connection to MySQL server during query": the statement was sent, so
# when it was the commit, nobody knows whether it took effect.
LOST_DURING_QUERY = 2013
ACCESS_DENIED = 1045  # wrong password, or an account that REQUIRE SSL over plain text
DB_ACCESS_DENIED = 1044


# TLS options a mysql_url may carry as query parameters (?ssl_ca=/path/ca.pem&…), the
# same as the mysql_ssl_* settings, which fill in what the URL leaves out.
URL_TLS_OPTIONS = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_hostname")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_mysql_url(url: str) -> dict[str, Any]:
    """aiomysql connection arguments of a mysql:// (or mariadb://) URL naming a database;
    with ssl_ca/ssl_cert/ssl_key query parameters also "ssl", a verifying TLS context.

    The URL may list several addresses of one server (a Galera cluster's nodes):
    mysql://user:pw@h1:3306,h2:3307,[::1]/db. "host" and "port" are then the first, and
    "addresses" lists them all, for connect() to fail over between them. A
    wsrep_sync_wait=N parameter (0-15) becomes "wsrep_sync_wait": N, which every
    connection sets for its session (session_init_extra).

    Errors never show the URL: it holds the password, and a malformed one (a / or @ in
    an unquoted password) cannot be redacted reliably."""
    try:
        parsed = urlparse(url)
    except ValueError:  # an unclosed [ of an IPv6 address
        raise ConfigError("mysql_url: an IPv6 address must be in brackets: [::1]:3306") from None
    if parsed.scheme not in ("mysql", "mariadb"):
        raise ConfigError(
            "mysql_url must start with mysql:// or mariadb://, got "
            f"{parsed.scheme + '://' if parsed.scheme else 'no scheme'}"
        )
    addresses = _addresses(parsed.netloc.rpartition("@")[2])
    database = parsed.path.lstrip("/")
    if not database:
        raise ConfigError("mysql_url must name a database: mysql://user:password@host/DATABASE")
    args: dict[str, Any] = {
        "host": addresses[0][0],
        "port": addresses[0][1],
        "user": unquote(parsed.username or "root"),
        "password": unquote(parsed.password or ""),
        "db": database,
    }
    if len(addresses) > 1:
        args["addresses"] = addresses
    options = dict(parse_qsl(parsed.query, keep_blank_values=True))
    unknown = sorted(set(options) - {*URL_TLS_OPTIONS, "wsrep_sync_wait"})
    if unknown:
        raise ConfigError(
            f"mysql_url: unknown parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(URL_TLS_OPTIONS)}, wsrep_sync_wait"
        )
    if "wsrep_sync_wait" in options:
        args["wsrep_sync_wait"] = _sync_wait(options.pop("wsrep_sync_wait"))
    if options:
        verify = options.get("ssl_verify_hostname", "true").lower()
        if verify not in _TRUE + _FALSE:
            raise ConfigError("mysql_url: ssl_verify_hostname must be true or false")
        context = mysql_tls(
            options.get("ssl_ca", ""),
            options.get("ssl_cert", ""),
            options.get("ssl_key", ""),
            verify_hostname=verify in _TRUE,
        )
        if context is not None:
            args["ssl"] = context
    return args


_BAD_PORT = (
    "mysql_url has no valid port after the host (a password with / # ? or @ in it "
    "must be percent-encoded, e.g. %2F)"
)


def _addresses(hosts: str) -> list[tuple[str, int]]:
    """(host, port) of each comma-separated host[:port] (IPv6 in brackets); the port
    defaults to 3306, and a URL without any host means 127.0.0.1."""
    if not hosts:
        return [("127.0.0.1", 3306)]
    found: list[tuple[str, int]] = []
    for entry in hosts.split(","):
        if entry.startswith("["):
            host, bracket, rest = entry[1:].partition("]")
            if not bracket or not host or (rest and not rest.startswith(":")):
                raise ConfigError("mysql_url: an IPv6 address must be in brackets: [::1]:3306")
            port_text = rest[1:] if rest else ""
        else:
            host, _, port_text = entry.partition(":")
            if ":" in port_text:
                raise ConfigError("mysql_url: an IPv6 address must be in brackets: [::1]:3306")
        if not host:
            raise ConfigError("mysql_url: an empty address in its list of hosts")
        if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ConfigError(_BAD_PORT)
        found.append((host.lower(), int(port_text) if port_text else 3306))
    return found


def _sync_wait(text: str) -> int:
    if not (text.isdigit() and 0 <= int(text) <= 15):
        raise ConfigError("mysql_url: wsrep_sync_wait must be an integer from 0 to 15")
    return int(text)


def session_init_extra(args: dict[str, Any]) -> str:
    """What a connection's `SET NAMES ...` init command appends for the URL's session
    settings: ", wsrep_sync_wait = N" when the URL asks for it, else ""."""
    wait = args.get("wsrep_sync_wait")
    return "" if wait is None else f", wsrep_sync_wait = {int(wait)}"


def mysql_tls(
    ca: str, cert: str = "", key: str = "", *, verify_hostname: bool = True
) -> ssl.SSLContext | None:
    """A TLS context that verifies the MySQL server (CERT_REQUIRED; the host name too,
    unless verify_hostname is off), or None when no CA or client certificate is given."""
    if not (ca or cert):
        return None
    try:
        return client_tls(ca, cert, key, check_hostname=verify_hostname)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"MySQL TLS files: {exc}") from None


def mysql_connect_args(settings: Settings, url: str | None = None) -> dict[str, Any]:
    """aiomysql connection arguments of mysql_url (or of `url`, another server's): the
    URL's, plus TLS from the mysql_ssl_* settings (unless the URL has its own)."""
    args = parse_mysql_url(settings.mysql_url if url is None else url)
    if "ssl" not in args:
        context = mysql_tls(
            settings.mysql_ssl_ca,
            settings.mysql_ssl_cert,
            settings.mysql_ssl_key,
            verify_hostname=settings.mysql_ssl_verify_hostname,
        )
        if context is not None:
            args["ssl"] = context
    return args


def mysql_refusal(error: BaseException, args: dict[str, Any]) -> str | None:
    """Why MySQL refused a connection, when waiting cannot help; None otherwise."""
    tls = tls_cause(error)
    if tls is not None:
        return describe_tls_error(tls, "mysql_ssl_ca")
    code = error.args[0] if getattr(error, "args", None) else None
    if code == ACCESS_DENIED:
        hint = (
            "wrong user or password"
            if "ssl" in args
            else "wrong user or password, or the account requires TLS (set mysql_ssl_ca)"
        )
        return f"access denied for user {args['user']!r}: {hint}"
    if code == DB_ACCESS_DENIED:
        return f"user {args['user']!r} has no privileges on database {args['db']!r}"
    return None


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


def utf8_literal(text: bytes) -> str:
    """A SQL literal for UTF-8 text given as bytes (orjson's output): a hexadecimal
    literal, which a text column stores as those bytes. bytes.hex() runs in C, about a
    tenth of the cost of escaping the decoded text, and nothing in it needs escaping."""
    return f"X'{text.hex()}'"


def multi_row(head: str, rows: Iterable[str], tail: str = "") -> Iterator[str]:
    """Statements `head row,row,… tail` of at most ROWS_PER_STATEMENT rows and at most
    STATEMENT_BYTES bytes each (a single larger row makes a statement of its own), built
    as they are consumed (see execute_overlapped).

    Sizes are in UTF-8 bytes, as max_allowed_packet is: a row of 4-byte characters is
    four times its length. str.isascii() is O(1) in CPython, so only rows that are not
    ASCII are encoded to be measured."""
    limit = STATEMENT_BYTES
    fixed = _utf8_len(head) + _utf8_len(tail)
    values: list[str] = []
    size = fixed
    for row in rows:
        row_bytes = _utf8_len(row) + 1  # and its comma
        if values and (len(values) == ROWS_PER_STATEMENT or size + row_bytes > limit):
            yield head + ",".join(values) + tail
            values, size = [], fixed
        values.append(row)
        size += row_bytes
    if values:
        yield head + ",".join(values) + tail


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


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


async def execute_overlapped(cur: Any, statements: Iterable[str]) -> int:
    """Run the statements in order, building each next one while MySQL runs the last:
    the producer's CPU and the database's work overlap instead of taking turns. Returns
    the rows they affected, added up."""
    running: asyncio.Task[int] | None = None
    affected = 0
    try:
        for statement in statements:
            if running is not None:
                affected += await running
            running = asyncio.create_task(cur.execute(statement))
            await asyncio.sleep(0)  # the task sends the statement before we build on
        if running is not None:
            affected += await running
        return affected
    finally:
        if running is not None and not running.done():
            # Building failed: the connection must not go back to the pool mid-query.
            await asyncio.wait([running])
