"""OutageFilter (cluster/settings/logs.py) on hand-made records of aiokafka's and aiozk's
log lines: which pass, which go to DEBUG, and the outage lines it says instead.
tests/test_outage_logs.py does the same with a real node and real outages."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from aiokafka import errors as kafka_errors

from cluster.settings import logs


def record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The outage lines, with fresh outage states."""
    lines: list[str] = []
    monkeypatch.setattr(logs, "KAFKA", logs.Outage("Kafka broker k:9092"))
    monkeypatch.setattr(logs, "ZOOKEEPER", logs.Outage("ZooKeeper"))
    monkeypatch.setattr(logs.log, "warning", lambda msg, *a: lines.append(msg % a))
    yield lines


def test_a_kafka_outage_is_one_line_each_way(said: list[str]) -> None:
    keep = logs.OutageFilter(logging.INFO)
    refused = kafka_errors.KafkaConnectionError("Connection refused")
    for _ in range(50):
        assert not keep.filter(
            record("aiokafka", logging.ERROR, "Unable connect to node with id %s: %s", 1, refused)
        )
        assert not keep.filter(
            record("aiokafka", logging.ERROR, "Unable to update metadata from %s", [1])
        )
    mine = "publishing %d job(s) of slot %d failed: %s"
    assert not keep.filter(
        record("actors.dispatcher", logging.WARNING, mine, 1, 3, "KafkaTimeoutError: x")
    )
    assert len(said) == 1 and "Kafka broker k:9092 unreachable" in said[0]
    logs.KAFKA.last_error -= logs.KAFKA_QUIET_S  # a second without errors
    logs.kafka_answered()
    assert len(said) == 2 and "reachable again" in said[1] and "(100 errors" in said[1]
    # Afterwards delayq's own warnings pass again.
    assert keep.filter(
        record("actors.dispatcher", logging.WARNING, mine, 1, 3, "KafkaTimeoutError: x")
    )


def test_a_metadata_answer_amid_errors_does_not_end_it(said: list[str]) -> None:
    keep = logs.OutageFilter(logging.INFO)
    keep.filter(record("aiokafka", logging.ERROR, "Unable to update metadata from %s", [1]))
    logs.kafka_answered()  # another broker answered, this one still fails
    assert logs.KAFKA.open and len(said) == 1


def test_other_kafka_errors_pass(said: list[str]) -> None:
    keep = logs.OutageFilter(logging.INFO)
    unknown = kafka_errors.UnknownTopicOrPartitionError()
    line = record(
        "aiokafka.producer.sender", logging.WARNING, "Got error produce response: %s", unknown
    )
    assert keep.filter(line) and line.levelno == logging.WARNING
    assert said == []


def test_a_zookeeper_outage_is_one_line_each_way(said: list[str]) -> None:
    keep = logs.OutageFilter(logging.INFO)
    assert not keep.filter(record("aiozk.session", logging.INFO, "Connected to %s:%s", "z", 2181))
    assert said == []  # connecting at start is no outage's end
    for _ in range(3):
        assert not keep.filter(
            record("aiozk.session", logging.ERROR, "Couldn't connect to %s:%s", "z", 2181)
        )
        assert not keep.filter(
            record("aiozk.session", logging.INFO, "Connecting to %s:%s", "z", 2181)
        )
    assert not keep.filter(record("aiozk.session", logging.INFO, "Connected to %s:%s", "z", 2181))
    assert said[0].startswith("ZooKeeper unreachable (Couldn't connect to z:2181")
    assert said[1].startswith("ZooKeeper reachable again (connected to z:2181)")
    assert len(said) == 2


def test_debug_keeps_every_line(said: list[str]) -> None:
    keep = logs.OutageFilter(logging.DEBUG)
    line = record("aiozk.connection", logging.ERROR, "Error reading response.")
    assert keep.filter(line) and line.levelname == "DEBUG"
    assert len(said) == 1
