"""cluster/connections/kafka_conn.py without a broker: the aiokafka options each security protocol
gives, the TLS context, and that the SASL password shows up nowhere."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from actors.publisher import make_producer
from cluster.connections.kafka_conn import (
    connection_options,
    diagnose,
    hide_password,
    make_admin,
    make_consumer,
    ssl_context,
)
from cluster.devstack.secure import make_ca
from cluster.errors import ConfigError
from cluster.settings.config import Settings

PASSWORD = "kafka-pa55word-never-shown"


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    cert, _ = make_ca(tmp_path_factory.mktemp("ca"), "delayq test CA")
    return str(cert)


def sasl(protocol: str, ca: str = "", mechanism: str = "SCRAM-SHA-512") -> Settings:
    return Settings(
        kafka_bootstrap="b1:9093, b2:9093",
        kafka_security_protocol=protocol,
        kafka_ssl_cafile=ca,
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="delayq",
        kafka_sasl_password=PASSWORD,
    )


def test_plaintext_gives_only_the_servers() -> None:
    options = connection_options(Settings(kafka_bootstrap="a:9092,b:9092"))
    assert options == {"bootstrap_servers": ["a:9092", "b:9092"], "security_protocol": "PLAINTEXT"}


def test_ssl_verifies_the_broker_certificate_and_host_name(ca_file: str) -> None:
    options = connection_options(Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=ca_file))
    assert set(options) == {"bootstrap_servers", "security_protocol", "ssl_context"}
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "delayq test CA"),),)
    ]


def test_ssl_without_a_ca_file_trusts_the_system_cas() -> None:
    context = ssl_context(Settings(kafka_security_protocol="SSL"))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_gives_the_credentials_and_no_tls(mechanism: str) -> None:
    options = connection_options(sasl("SASL_PLAINTEXT", mechanism=mechanism))
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    assert "ssl_context" not in options
    assert options["sasl_mechanism"] == mechanism
    assert options["sasl_plain_username"] == "delayq"
    assert options["sasl_plain_password"] == PASSWORD
    assert options["bootstrap_servers"] == ["b1:9093", "b2:9093"]


def test_sasl_ssl_gives_both(ca_file: str) -> None:
    options = connection_options(sasl("SASL_SSL", ca_file))
    assert options["security_protocol"] == "SASL_SSL"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"


def test_the_password_is_in_no_repr(ca_file: str) -> None:
    settings = sasl("SASL_SSL", ca_file)
    options = connection_options(settings)
    assert PASSWORD not in repr(options) and PASSWORD not in str(options)
    assert "'sasl_plain_password': '***'" in repr(options)
    assert PASSWORD not in repr(settings)
    assert hide_password(f"broker said {PASSWORD}", settings) == "broker said ***"


async def test_every_client_gets_the_security_options(ca_file: str) -> None:
    settings = sasl("SASL_SSL", ca_file)
    producer = make_producer(settings)
    consumer = make_consumer(settings, "some.topic", enable_auto_commit=False)
    admin = make_admin(settings)
    try:
        for client in (producer.client, consumer._client, admin._client):
            assert client._security_protocol == "SASL_SSL"
            assert client._sasl_mechanism == "SCRAM-SHA-512"
            assert client._sasl_plain_username == "delayq"
            assert isinstance(client._ssl_context, ssl.SSLContext)
    finally:
        await producer.stop()
        await consumer.stop()
        await admin.close()


def test_a_missing_ca_file_is_a_clear_config_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    for protocol in ("SSL", "SASL_SSL"):
        with pytest.raises(ConfigError, match=r"kafka_ssl_cafile '.*nope\.pem': no such file") as e:
            connection_options(sasl(protocol, missing))
        assert PASSWORD not in str(e.value)
    # Not used without TLS: no error.
    connection_options(sasl("SASL_PLAINTEXT", missing))


def test_an_unreadable_ca_file_is_a_clear_config_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="cannot load the Kafka TLS files"):
        ssl_context(Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=str(bogus)))


def test_a_key_without_a_certificate_is_refused(ca_file: str) -> None:
    with pytest.raises(ConfigError, match="kafka_ssl_keyfile is set without kafka_ssl_certfile"):
        ssl_context(
            Settings(
                kafka_security_protocol="SSL", kafka_ssl_cafile=ca_file, kafka_ssl_keyfile=ca_file
            )
        )


def test_sasl_without_a_username_is_refused_by_the_settings() -> None:
    with pytest.raises(ConfigError, match="needs kafka_sasl_username"):
        Settings(kafka_security_protocol="SASL_SSL")


async def test_no_broker_is_not_a_refusal() -> None:
    # Nothing listens there: a broker not up yet, which start-up waits for.
    assert await diagnose(Settings(kafka_bootstrap="127.0.0.1:1")) is None
    assert "not host:port" in (await diagnose(Settings(kafka_bootstrap="nohost")) or "")
