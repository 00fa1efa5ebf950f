"""TLS and authentication against the secure local stack (`delayq services up --secure`):
a refused connection fails at once with one error naming the store and the cause, never
the password; the delayq Redis user has least privilege; MySQL never truncates.
docs/security.md."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pymysql
import pytest
from redis.exceptions import NoPermissionError

from actors.node import Node
from actors.preflight import check_redis
from cluster import DelayClient
from cluster.connections.redis_conn import connect_subscriber, open_redis
from cluster.devstack import stack
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.secure import make_ca
from cluster.errors import ConfigError, StoreAccessError
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.sql import parse_mysql_url


@pytest.fixture(scope="session")
def secure_settings(secure_env: dict[str, str]) -> Settings:
    """Settings of the secure stack (Redis and MySQL; Kafka and ZooKeeper are not used)."""
    return Settings.from_env(secure_env).replace(
        key_prefix=f"s{uuid.uuid4().hex[:10]}", startup_timeout_s=30.0
    )


@pytest.fixture
async def secure_db(secure_settings: Settings) -> AsyncIterator[Settings]:
    """secure_settings with a migrated database of this test's own."""
    settings = await create_cluster_database(
        secure_settings, f"delayq_{secure_settings.key_prefix}_{uuid.uuid4().hex[:6]}"
    )
    yield settings
    await drop_cluster_database(settings)


@pytest.fixture(scope="session")
def foreign_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA that did not sign the stack's certificates."""
    cert, _ = make_ca(tmp_path_factory.mktemp("foreign-ca"), "not the delayq stack")
    return str(cert)


def _password(url: str) -> str:
    password = parse_mysql_url(url)["password"] if url.startswith("mysql") else None
    if password is None:
        password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    return str(password)


def _wrong_redis_password(settings: Settings) -> Settings:
    return settings.replace(redis_url=settings.redis_url.replace("delayq:", "delayq:x", 1))


def _wrong_mysql_password(settings: Settings) -> Settings:
    return settings.replace(mysql_url=settings.mysql_url.replace("@", "x@", 1))


def _plain_redis(settings: Settings) -> Settings:
    return settings.replace(redis_url=settings.redis_url.replace("rediss", "redis", 1))


# ----- Redis ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong password", "authentication failed"),
        ("plain text to the TLS port", "TLS-only port"),
        ("a CA that is not the stack's", "certificate is not trusted"),
    ],
)
async def test_redis_refusal_is_one_clear_error(
    secure_db: Settings, foreign_ca: str, case: str, expected: str
) -> None:
    settings = {
        "wrong password": _wrong_redis_password(secure_db),
        "plain text to the TLS port": _plain_redis(secure_db),
        "a CA that is not the stack's": secure_db.replace(redis_ssl_cafile=foreign_ca),
    }[case]
    client = DelayClient(settings)
    try:
        with pytest.raises(StoreAccessError, match=expected) as caught:
            await client.open()
    finally:
        await client.close()
    message = str(caught.value)
    assert message.startswith("Redis at ")
    assert _password(secure_db.redis_url) not in message
    assert _password(settings.redis_url) not in message


async def test_node_start_fails_at_once_on_a_refusal(secure_db: Settings) -> None:
    """No waiting out startup_timeout_s: a wrong password is not cured by time."""
    node = Node(_wrong_redis_password(secure_db).replace(startup_timeout_s=60.0))
    started = time.monotonic()
    with pytest.raises(StoreAccessError, match=r"^Redis at .*authentication failed"):
        await node.start()
    assert time.monotonic() - started < 10
    node = Node(_wrong_mysql_password(secure_db).replace(startup_timeout_s=60.0))
    with pytest.raises(StoreAccessError, match=r"^MySQL at .*access denied"):
        await node.start()
    assert time.monotonic() - started < 20


async def test_redis_delayq_user_has_least_privilege(secure_settings: Settings) -> None:
    redis = await open_redis(secure_settings)
    try:
        key = f"{{{secure_settings.key_prefix}:0}}:probe"
        await redis.set(key, b"1")
        assert await redis.get(key) == b"1"
        await redis.delete(key)
        for forbidden in (
            redis.flushall(),
            redis.keys("*"),
            redis.config_get("maxmemory-policy"),
            redis.set("outside-the-prefix", b"1"),
        ):
            with pytest.raises(NoPermissionError):
                await forbidden
        # The node's preflight check cannot read CONFIG: a warning, not a failure.
        warnings = await check_redis(redis)
        assert warnings and "could not read the Redis configuration" in warnings[0]
    finally:
        await redis.aclose()


async def test_subscriber_uses_tls_and_the_user(secure_settings: Settings) -> None:
    channel = f"{secure_settings.key_prefix}:wake"
    subscriber = connect_subscriber(secure_settings)
    redis = await open_redis(secure_settings)
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1)  # the subscribe confirmation
        await redis.publish(channel, b"3:42")
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
        assert message is not None and message["data"] == b"3:42"
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
        await redis.aclose()


def test_redis_url_errors_hide_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        connect_subscriber(Settings(redis_url="http://user:hunter2@host:1/0"))
    assert "hunter2" not in str(caught.value)


# ----- MySQL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong password", "access denied for user 'delayq_admin': wrong user or password$"),
        ("plain text to a REQUIRE SSL account", "the account requires TLS"),
        ("a CA that is not the stack's", "certificate is not trusted"),
    ],
)
async def test_mysql_refusal_is_one_clear_error(
    secure_db: Settings, foreign_ca: str, case: str, expected: str
) -> None:
    settings = {
        "wrong password": _wrong_mysql_password(secure_db),
        "plain text to a REQUIRE SSL account": secure_db.replace(mysql_ssl_ca=""),
        "a CA that is not the stack's": secure_db.replace(mysql_ssl_ca=foreign_ca),
    }[case]
    client = DelayClient(settings)
    try:
        with pytest.raises(StoreAccessError, match=expected) as caught:
            await client.open()
    finally:
        await client.close()
    message = str(caught.value)
    assert message.startswith("MySQL at 127.0.0.1:")
    assert _password(secure_db.mysql_url) not in message


async def test_mysql_tls_to_a_server_without_tls_is_refused(secure_settings: Settings) -> None:
    """PyMySQL quietly stays in plain text when the server offers no TLS; delayq does not."""
    plain = stack.stack_env()["DELAYQ_MYSQL_URL"]
    host_port = plain.split("@", 1)[1].split("/", 1)[0].split(":")
    try:
        socket.create_connection((host_port[0], int(host_port[1])), timeout=1).close()
    except OSError:
        pytest.skip("the plain local stack's MariaDB is not running")
    store = MySQLStore(secure_settings.replace(mysql_url=plain), "test")
    with pytest.raises(StoreAccessError, match="does not offer TLS"):
        await store.open(check_schema=False)
    await store.close()


async def test_mysql_tls_from_url_parameters(secure_db: Settings) -> None:
    url = f"{secure_db.mysql_url}?ssl_ca={secure_db.mysql_ssl_ca}"
    store = MySQLStore(secure_db.replace(mysql_url=url, mysql_ssl_ca=""), "test")
    await store.open()
    try:
        async with store.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            (_, cipher) = await cur.fetchone()
        assert cipher
    finally:
        await store.close()


@pytest.mark.parametrize(
    "url",
    [
        "mysqls://delayq:hunter2@127.0.0.1:3306/delayq",  # unknown scheme
        "mysql://delayq:hunter2@127.0.0.1:33x6/delayq",  # bad port
        "mysql://delayq:hun/ter2@127.0.0.1/delayq",  # an unquoted / in the password
        "mysql://delayq:hunter2@127.0.0.1:3306/",  # no database
        "mysql://delayq:hunter2@127.0.0.1/delayq?sslca=x",  # unknown parameter
    ],
)
def test_mysql_url_errors_hide_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mysql_url(url)
    assert "hunter2" not in str(caught.value)
    assert "hun" not in str(caught.value).replace("hunk", "")


async def test_mysql_never_truncates(settings: Settings) -> None:
    """Strict sql_mode on every connection: a value longer than its column raises."""
    store = MySQLStore(settings, "test")
    await store.open()
    jobs, _ = store.shard_tables((0, 0))
    try:
        pool = await store.pool_for(0)  # the server of shard (0, 0)
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SELECT @@SESSION.sql_mode, @@character_set_client")
            mode, charset = await cur.fetchone()
            assert "STRICT_ALL_TABLES" in mode and charset == "utf8mb4"
            with pytest.raises(pymysql.err.DataError, match="topic"):
                await cur.execute(
                    f"INSERT INTO {jobs} (job_id, topic, action_time, payload, slot) "
                    "VALUES (%s, %s, NOW(3), '{}', 0)",
                    ("too-long-topic", "t" * 250),
                )
            await cur.execute(f"SELECT COUNT(*) FROM {jobs} WHERE job_id = 'too-long-topic'")
            assert await cur.fetchone() == (0,)
    finally:
        await store.close()


def test_secure_env_names(secure_env: dict[str, str]) -> None:
    """The variables other parts (Kafka, ZooKeeper clients, tests) rely on."""
    assert secure_env["DELAYQ_REDIS_URL"].startswith(("rediss://delayq:", "rediss+cluster://"))
    assert Path(secure_env["DELAYQ_REDIS_SSL_CAFILE"]).is_file()
    assert secure_env["DELAYQ_MYSQL_SSL_CA"] == secure_env["DELAYQ_REDIS_SSL_CAFILE"]
    assert secure_env["DELAYQ_ZK_AUTH"].startswith("delayq:")
    assert secure_env["DELAYQ_KAFKA_SECURITY_PROTOCOL"] in ("SSL", "SASL_SSL")
    Settings.from_env(secure_env)  # valid as a whole
