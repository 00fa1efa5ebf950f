"""Passwords never reach logs: redact_url for free text (errors, log lines) and
repr(Settings) for whole setting values, whatever characters a password holds and
wherever the URL carries it (user:password@, ?password=, ?…token=)."""

from __future__ import annotations

import pytest

from cluster.settings.config import Settings, redact_url
from cluster.settings.security import redact_value

SECRET = "s3cret"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "waiting for Redis at redis://127.0.0.1:6379/0?password=s3cret",
            "waiting for Redis at redis://127.0.0.1:6379/0?password=***",
        ),
        ("redis://h:1/0?db=2&password=s3cret", "redis://h:1/0?db=2&password=***"),
        ("redis://h/0?PASSWORD=s3cret&db=2", "redis://h/0?PASSWORD=***&db=2"),
        ("redis://h/0?sentinel_password=s3cret", "redis://h/0?sentinel_password=***"),
        ("at x://h/?client_secret=s3cret;y=1", "at x://h/?client_secret=***;y=1"),
        ("x://h/?auth_token=s3cret", "x://h/?auth_token=***"),
        ("redis://user:s3cret@h:1/0", "redis://user:***@h:1/0"),
        (
            "redis://:s3cret@h/0 then mysql://u:s3cret@h/db",
            "redis://:***@h/0 then mysql://u:***@h/db",
        ),
        (
            "rediss+cluster://delayq:s3cret@10.0.0.1:7001,10.0.0.2:7002",
            "rediss+cluster://delayq:***@10.0.0.1:7001,10.0.0.2:7002",
        ),
        # A text that starts with a URL: its password may hold spaces.
        ("redis://u:pa ss@h:1/0", "redis://u:***@h:1/0"),
        ("mysql://u:a/b c@h/db refused: x", "mysql://u:***@h/db refused: x"),
        # Nothing secret: unchanged.
        ("redis://127.0.0.1:6379/0?db=1", "redis://127.0.0.1:6379/0?db=1"),
        ("mysql://u@h/db?ssl_ca=/etc/ca.pem", "mysql://u@h/db?ssl_ca=/etc/ca.pem"),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    assert redact_url(text) == expected


@pytest.mark.parametrize(
    "password",
    [
        "pa ss",  # a space
        "s3cret with spaces",
        "a/b",  # characters that should have been percent-encoded
        "a?b",
        "a#b",
        "a@b",
        "p@ss w/rd?x=1",
        "a%20b",  # percent-encoded
        "tab\there",
    ],
)
def test_mysql_password_of_any_characters_is_redacted_in_repr(password: str) -> None:
    settings = Settings(mysql_url=f"mysql://delayq:{password}@127.0.0.1:3306/delayq")
    shown = repr(settings)
    assert "mysql_url='mysql://delayq:***@127.0.0.1:3306/delayq'" in shown
    assert password not in shown


def test_repr_keeps_what_is_not_secret() -> None:
    url = "mysql://delayq:pa ss@db.example:3306/delayq?ssl_ca=/etc/ca.pem"
    assert redact_value(url) == "mysql://delayq:***@db.example:3306/delayq?ssl_ca=/etc/ca.pem"
    # An @ after the host: more is hidden than needed, never less.
    assert redact_value("mysql://u:p@h/db?ssl_ca=/a@b/ca.pem") == "mysql://u:***@b/ca.pem"
    assert redact_value("mysql://delayq@h/db") == "mysql://delayq@h/db"
    assert redact_value("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redact_value("redis://[::1]:6379/0") == "redis://[::1]:6379/0"
    assert redact_value("127.0.0.1:9092,127.0.0.2:9092") == "127.0.0.1:9092,127.0.0.2:9092"


def test_query_password_is_redacted_in_repr() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:6379/0?password=two words&db=1")
    shown = repr(settings)
    assert "redis_url='redis://127.0.0.1:6379/0?password=***&db=1'" in shown
    assert "two" not in shown and "words" not in shown


def test_secret_settings_are_hidden_whole() -> None:
    shown = repr(Settings(zk_auth="delayq:s3cret", kafka_sasl_password="s3cret"))
    assert SECRET not in shown
