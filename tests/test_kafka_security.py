"""Kafka TLS and SASL end to end, through cluster/connections/kafka_conn.py, against real brokers.

TLS: the secure local stack (`delayq services up --secure`), whose Kafka is Tansu behind
a TLS front (stunnel) on 127.0.0.1:19093, security_protocol SSL.

SASL: Tansu 0.6 cannot hold a SASL user here (with --authentication it refuses the
`tansu user create` request itself, and its memory storage forgets users across a
restart), so the tests start their own Tansu with --authentication, where every
login is refused, and a TLS front before it: what a wrong password, an unknown user, or
an unoffered mechanism look like over SASL_PLAINTEXT and SASL_SSL. A successful SASL
login needs Apache Kafka (docker-compose.yml).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from actors.node import Node, make_producer
from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.devstack import tansu
from cluster.devstack.secure import make_ca, make_server_cert
from cluster.errors import KafkaAccessError
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.forwarder import free_port

PASSWORD = "not-the-kafka-password-42"


@pytest.fixture(scope="module")
def secure_kafka(secure_env: dict[str, str]) -> Settings:
    """Kafka settings of the secure local stack (TLS, its CA)."""
    kafka = {k: v for k, v in secure_env.items() if k.startswith("DELAYQ_KAFKA_")}
    return Settings.from_env(kafka)


def _wait_listening(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, str]]:
    """A Tansu requiring SASL on a free port, and a TLS front to it (stunnel, with a
    throwaway CA): (plain port, TLS port, CA file). Stopped at the end of the module."""
    stunnel = shutil.which("stunnel4") or shutil.which("stunnel")
    if stunnel is None:
        pytest.skip("stunnel4 is not installed (the secure local stack installs it)")
    directory = tmp_path_factory.mktemp("sasl-broker")
    ca_cert, ca_key = make_ca(directory / "ca", "delayq SASL test CA")
    cert, key = directory / "server.pem", directory / "server.key"
    make_server_cert(ca_cert, ca_key, cert, key)
    plain, front = free_port(), free_port()
    url = f"tcp://127.0.0.1:{plain}"
    broker_log = open(directory / "tansu.log", "wb")  # closed below
    command = [tansu.binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    broker = subprocess.Popen(
        [*command, "--storage-engine", "memory://tansu/", "--authentication"],
        stdout=broker_log,
        stderr=subprocess.STDOUT,
    )
    config = directory / "stunnel.conf"
    config.write_text(
        f"foreground = yes\noutput = {directory / 'stunnel.log'}\n[kafka]\n"
        f"accept = 127.0.0.1:{front}\nconnect = 127.0.0.1:{plain}\n"
        f"cert = {cert}\nkey = {key}\n"
    )
    front_process = subprocess.Popen([stunnel, str(config)], stderr=subprocess.DEVNULL)
    try:
        _wait_listening(plain, broker, "tansu")
        _wait_listening(front, front_process, "stunnel")
        yield plain, front, str(ca_cert)
    finally:
        for process in (front_process, broker):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        broker_log.close()


async def _refusal(settings: Settings) -> str:
    """start_client's KafkaAccessError for a producer with these settings."""
    producer = make_producer(settings.replace(kafka_request_timeout_ms=5000))
    try:
        with pytest.raises(KafkaAccessError) as refused:
            await start_client(producer, settings)
    finally:
        await producer.stop()
    message = str(refused.value)
    assert message.startswith("Kafka at 127.0.0.1:"), message
    assert PASSWORD not in message and "\n" not in message
    return message


# ----- TLS: the secure local stack -------------------------------------------------------


async def test_produce_and_consume_over_tls(secure_kafka: Settings) -> None:
    topic = f"test.tls.{uuid.uuid4().hex[:10]}"
    admin = make_admin(secure_kafka)
    try:
        await start_client(admin, secure_kafka)
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = make_producer(secure_kafka)
    try:
        await start_client(producer, secure_kafka)
        await producer.send_and_wait(topic, orjson.dumps({"over": "tls"}), key=b"k")
    finally:
        await producer.stop()
    consumer = make_consumer(secure_kafka, enable_auto_commit=False)
    try:
        await start_client(consumer, secure_kafka)
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        batch = await consumer.getmany(timeout_ms=5000)
        values = [orjson.loads(m.value) for records in batch.values() for m in records]
        assert values == [{"over": "tls"}]
    finally:
        await consumer.stop()


async def test_a_plaintext_client_on_the_tls_port_is_refused(secure_kafka: Settings) -> None:
    message = await _refusal(secure_kafka.replace(kafka_security_protocol="PLAINTEXT"))
    assert "expects TLS" in message


async def test_an_unknown_ca_is_refused(secure_kafka: Settings, tmp_path: Path) -> None:
    other_ca, _ = make_ca(tmp_path, "a CA the broker never heard of")
    message = await _refusal(secure_kafka.replace(kafka_ssl_cafile=str(other_ca)))
    assert "not trusted" in message and "kafka_ssl_cafile" in message


async def test_a_node_with_an_unknown_ca_fails_at_start_at_once(
    settings: Settings, secure_kafka: Settings, tmp_path: Path
) -> None:
    other_ca, _ = make_ca(tmp_path, "a CA the broker never heard of")
    node_settings = settings.replace(
        kafka_bootstrap=secure_kafka.kafka_bootstrap,
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=str(other_ca),
        startup_timeout_s=60,  # a refusal is not waited for
    )
    started = time.monotonic()
    with pytest.raises(KafkaAccessError, match=r"Kafka at .* not trusted"):
        await Node(node_settings).start()
    assert time.monotonic() - started < 30


# ----- SASL: a Tansu of the tests' own -----------------------------------------------------


def _sasl(port: int, protocol: str, ca: str = "", mechanism: str = "SCRAM-SHA-512") -> Settings:
    return Settings(
        kafka_bootstrap=f"127.0.0.1:{port}",
        kafka_security_protocol=protocol,
        kafka_ssl_cafile=ca,
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="delayq",
        kafka_sasl_password=PASSWORD,
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
async def test_wrong_sasl_credentials_over_tls_are_refused(
    sasl_broker: tuple[int, int, str], mechanism: str
) -> None:
    _, front, ca = sasl_broker
    message = await _refusal(_sasl(front, "SASL_SSL", ca, mechanism))
    assert f"refused SASL authentication as 'delayq' with {mechanism}" in message
    assert "kafka_sasl_password" in message


async def test_wrong_sasl_credentials_over_plain_tcp_are_refused(
    sasl_broker: tuple[int, int, str],
) -> None:
    plain, _, _ = sasl_broker
    message = await _refusal(_sasl(plain, "SASL_PLAINTEXT"))
    assert "refused SASL authentication" in message


async def test_a_mechanism_the_broker_does_not_offer_is_refused(
    sasl_broker: tuple[int, int, str],
) -> None:
    plain, _, _ = sasl_broker
    message = await _refusal(_sasl(plain, "SASL_PLAINTEXT", mechanism="PLAIN"))
    assert "PLAIN" in message and "kafka_sasl_mechanism" in message


async def test_a_client_without_sasl_is_told_the_broker_requires_it(
    sasl_broker: tuple[int, int, str],
) -> None:
    plain, front, ca = sasl_broker
    message = await _refusal(Settings(kafka_bootstrap=f"127.0.0.1:{plain}"))
    assert "requires SASL" in message
    message = await _refusal(
        Settings(
            kafka_bootstrap=f"127.0.0.1:{front}", kafka_security_protocol="SSL", kafka_ssl_cafile=ca
        )
    )
    assert "requires SASL" in message


async def test_the_node_reports_a_sasl_refusal_in_one_line(
    settings: Settings, sasl_broker: tuple[int, int, str], caplog: pytest.LogCaptureFixture
) -> None:
    from actors.node import run_node

    _, front, ca = sasl_broker
    kafka = _sasl(front, "SASL_SSL", ca)
    node_settings = settings.replace(
        kafka_bootstrap=kafka.kafka_bootstrap,
        kafka_security_protocol="SASL_SSL",
        kafka_ssl_cafile=ca,
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="delayq",
        kafka_sasl_password=PASSWORD,
        startup_timeout_s=60,
    )
    started = time.monotonic()
    code = await asyncio.wait_for(run_node(node_settings), 45)
    assert code == 1 and time.monotonic() - started < 30
    lines = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(lines) == 1 and "refused SASL authentication" in lines[0], lines
    assert PASSWORD not in caplog.text


async def test_the_topic_fixture_and_collector_use_the_settings(
    settings: Settings, topic: str
) -> None:
    """tests/conftest.py makes its Kafka clients through cluster/connections/kafka_conn.py too."""
    producer = make_producer(settings)
    try:
        await start_client(producer, settings)
        record = {"job_id": "j1", "payload": {}}
        await producer.send_and_wait(topic, orjson.dumps(record), key=b"j1", partition=0)
    finally:
        await producer.stop()
    collector = Collector(settings, topic)
    await collector.start()
    try:
        received = await collector.until(1, 10)
    finally:
        await collector.stop()
    assert [r["job_id"] for r in received] == ["j1"]
