"""mysql_url with several addresses of one server (a Galera cluster's nodes) and the
wsrep_sync_wait parameter: what sql.parse_mysql_url makes of them, and the session
setting connect() puts into a connection's init command."""

from __future__ import annotations

import pytest

from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.store import connect
from cluster.store.servers import server_specs
from cluster.store.sql import parse_mysql_url, session_init_extra


def test_one_address_gives_no_list() -> None:
    args = parse_mysql_url("mysql://u:pw@db.example:3307/delayq")
    assert (args["host"], args["port"], args["db"]) == ("db.example", 3307, "delayq")
    assert "addresses" not in args
    assert "wsrep_sync_wait" not in args


def test_several_addresses_in_order_with_the_default_port() -> None:
    args = parse_mysql_url("mysql://u:p%40ss@h1:3306,H2:3307,h3,[::1]:3310,[fe80::2]/delayq")
    assert args["addresses"] == [
        ("h1", 3306),
        ("h2", 3307),
        ("h3", 3306),
        ("::1", 3310),
        ("fe80::2", 3306),
    ]
    assert (args["host"], args["port"]) == ("h1", 3306)
    assert (args["user"], args["password"], args["db"]) == ("u", "p@ss", "delayq")


def test_no_host_is_the_local_one() -> None:
    args = parse_mysql_url("mysql://u:pw@/delayq")
    assert (args["host"], args["port"]) == ("127.0.0.1", 3306)


@pytest.mark.parametrize("value", ["0", "1", "15"])
def test_wsrep_sync_wait(value: str) -> None:
    args = parse_mysql_url(f"mysql://u:pw@h1,h2/delayq?wsrep_sync_wait={value}")
    assert args["wsrep_sync_wait"] == int(value)
    assert session_init_extra(args) == f", wsrep_sync_wait = {value}"
    assert session_init_extra(parse_mysql_url("mysql://u:pw@h1/delayq")) == ""


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:hunter2@h1:3306,,h3/delayq", "an empty address"),
        ("mysql://u:hunter2@h1:3306,/delayq", "an empty address"),
        ("mysql://u:hunter2@h1:3306,h2:99999/delayq", "no valid port"),
        ("mysql://u:hunter2@h1:0/delayq", "no valid port"),
        ("mysql://u:hunter2@h1:33x6,h2/delayq", "no valid port"),
        ("mysql://u:hunter2@::1/delayq", "in brackets"),
        ("mysql://u:hunter2@[::1/delayq", "in brackets"),
        ("mysql://u:hunter2@[::1]x/delayq", "in brackets"),
        ("mysql://u:hunter2@h1/delayq?wsrep_sync_wait=16", "from 0 to 15"),
        ("mysql://u:hunter2@h1/delayq?wsrep_sync_wait=-1", "from 0 to 15"),
        ("mysql://u:hunter2@h1/delayq?wsrep_sync_wait=", "from 0 to 15"),
        ("mysql://u:hunter2@h1/delayq?wsrep_sync_wait=one", "from 0 to 15"),
        ("mysql://u:hunter2@h1/delayq?wsrep_sync_wai=1", "unknown parameter"),
    ],
)
def test_bad_urls_are_refused_without_showing_them(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mysql_url(url)
    assert message in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_sync_wait_goes_into_the_init_command() -> None:
    """connect() takes the URL's arguments as they are: wsrep_sync_wait becomes part of
    the session's init command, once, and never reaches aiomysql as an argument."""
    plain = connect._with_session_settings({"host": "h", "wsrep_sync_wait": 1})
    assert plain == {"host": "h", "init_command": "SET SESSION wsrep_sync_wait = 1"}
    appended = connect._with_session_settings(
        {"wsrep_sync_wait": 3, "init_command": "SET NAMES utf8mb4"}
    )
    assert appended == {"init_command": "SET NAMES utf8mb4, wsrep_sync_wait = 3"}
    built = "SET NAMES utf8mb4" + session_init_extra({"wsrep_sync_wait": 2})
    assert connect._with_session_settings({"wsrep_sync_wait": 2, "init_command": built}) == {
        "init_command": built
    }
    assert connect._with_session_settings({"host": "h"}) == {"host": "h"}
    with pytest.raises(ValueError, match="SET statement"):
        connect._with_session_settings({"wsrep_sync_wait": 1, "init_command": "DO 1"})


def test_servers_take_the_tls_parameters_of_mysql_url_unless_they_name_their_own() -> None:
    settings = Settings(
        mysql_url="mysql://u:p@h0/main?ssl_verify_hostname=false&wsrep_sync_wait=1",
        mysql_databases=4,
        mysql_servers=(
            "mysql://u:p@h1/ mysql://u:p@h2/main?wsrep_sync_wait=3 "
            "mysql://u:p@h3?ssl_verify_hostname=true"
        ),
    )
    assert [spec.url for spec in server_specs(settings)[1:]] == [
        "mysql://u:p@h1/main?ssl_verify_hostname=false",
        "mysql://u:p@h2/main?wsrep_sync_wait=3&ssl_verify_hostname=false",
        "mysql://u:p@h3/main?ssl_verify_hostname=true",
    ]
