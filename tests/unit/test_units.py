"""Pure logic of config, envelope, keys, journal entries and the scanner."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as kafka_murmur2

from actors.ownership import StaticOwnership
from actors.queues import SlotQueue
from actors.recorder import parse_entry
from actors.scanner import SlotScanner
from cluster.errors import ConfigError, InvalidJob
from cluster.model.contract import NO_TIME, JobStatus
from cluster.model.envelope import fire_of, make_tail, murmur2, partition_of, record_of
from cluster.model.jobs import check_topic, new_job_id
from cluster.model.keys import KeySpace, shard_of, slot_of
from cluster.settings.config import Settings

# ----- config -------------------------------------------------------------------------------


def test_env_overrides_toml_overrides_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "delayq.toml"
    toml.write_text('slots = 64\nkey_prefix = "fromfile"\nmax_delay_s = 60\n')
    settings = Settings.from_env(
        {"DELAYQ_CONFIG": str(toml), "DELAYQ_SLOTS": "128", "DELAYQ_KAFKA_IDEMPOTENCE": "false"}
    )
    assert settings.slots == 128
    assert settings.key_prefix == "fromfile"
    assert settings.max_delay_s == 60.0
    assert settings.kafka_idempotence is False
    assert Settings.from_env({}).kafka_idempotence is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DELAYQ_SLOTS": "12"}, "power of two"),
        ({"DELAYQ_SLOTS": "many"}, "not a valid int"),
        ({"DELAYQ_KAFKA_IDEMPOTENCE": "maybe"}, "not a valid bool"),
        ({"DELAYQ_CLAIM_BATCH": "0"}, "claim_batch"),
        ({"DELAYQ_INFLIGHT_TIMEOUT_MS": "20000"}, "longer than kafka_delivery_timeout_ms"),
        ({"DELAYQ_KAFKA_DELIVERY_TIMEOUT_MS": "1000"}, "at least kafka_request_timeout_ms"),
        ({"DELAYQ_KEY_PREFIX": "a{b}"}, "braces"),
        ({"DELAYQ_CONFIG": "/nonexistent/delayq.toml"}, "not found"),
        ({"DELAYQ_METRICS_PORT": "70000"}, "metrics_port"),
        ({"DELAYQ_STALL_TIMEOUT_S": "0"}, "stall_timeout_s"),
        ({"DELAYQ_RETENTION_DAYS": "-1"}, "retention_days"),
        ({"DELAYQ_LOG_FORMAT": "xml"}, "log_format"),
        ({"DELAYQ_FIRE_ADVANCE_MS": "-1"}, "fire_advance_ms must be 0"),
        ({"DELAYQ_FIRE_ADVANCE_MS": "1001"}, "fire_advance_ms must be 0"),
    ],
)
def test_bad_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_toml_rejects_unknown_and_mistyped(tmp_path: Path) -> None:
    toml = tmp_path / "delayq.toml"
    toml.write_text("slotz = 4\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings.from_env({"DELAYQ_CONFIG": str(toml)})
    toml.write_text('slots = "4"\n')
    with pytest.raises(ConfigError, match="must be int"):
        Settings.from_env({"DELAYQ_CONFIG": str(toml)})


# ----- keys and envelope ------------------------------------------------------------------


def test_slot_keys_share_one_hash_tag() -> None:
    keys = KeySpace("dq").slot(7)
    names = [
        keys.delay,
        keys.ready,
        keys.inflight,
        keys.dead,
        keys.jobs,
        keys.attempts,
        keys.tomb,
        keys.seq,
        keys.done,
        keys.acked,
    ]
    assert all(name.startswith("{dq:7}:") for name in names)
    assert len(set(names)) == len(names)


def test_slot_and_shard_are_stable_and_in_range() -> None:
    assert slot_of("order-1", 16) == slot_of("order-1", 16)
    assert {slot_of(f"j{i}", 16) for i in range(1000)} == set(range(16))
    shards = {shard_of(f"j{i}", 2, 4) for i in range(1000)}
    assert shards == {(d, t) for d in range(2) for t in range(4)}


def test_fire_splices_record_without_parsing_payload() -> None:
    tail = make_tail("j|1", "orders", b'{"a":[1,"|"]}', biz_id="biz|9", biz_type="close")
    envelope = b"00000000002a|16|1700000000123|" + tail
    fire = fire_of(envelope, 3, 1700000000130)
    assert fire.topic == "orders"
    assert fire.key == b"biz|9"
    assert orjson.loads(fire.value) == {
        "job_id": "j|1",
        "topic": "orders",
        "biz_id": "biz|9",
        "biz_type": "close",
        "priority": 0,
        "payload": {"a": [1, "|"]},
        "due_ms": 1700000000123,
        "fired_ms": 1700000000130,
        "attempt": 3,
    }
    assert record_of(envelope)["due_ms"] == 1700000000123


def test_murmur2_and_partition_match_kafkas_default_partitioner() -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randint(0, 300)) for _ in range(3000)]
    keys += [b"", b"a", b"ab", b"abc", b"order-42", "日本".encode()]
    partitions = list(range(12))
    for key in keys:
        assert murmur2(key) == kafka_murmur2(key)
        expected = DefaultPartitioner()(key, partitions, partitions)
        assert partition_of(murmur2(key), partitions) == expected


def test_envelope_carries_the_key_hash() -> None:
    envelope = b"000000000001|16|5|" + make_tail("job-7", "t", b"null", biz_id="biz-1")
    assert fire_of(envelope, 1, 6).key_hash == murmur2(b"biz-1")


def test_key_defaults_to_job_id() -> None:
    envelope = b"000000000001|16|5|" + make_tail("job-7", "t", b"null")
    assert fire_of(envelope, 1, 6).key == b"job-7"


def test_journal_entry_with_odd_id_and_note() -> None:
    job_id = "id|with|bars ✓"
    raw = job_id.encode()
    entry = b"4|16|1700000000000|%d|%sKafkaTimeoutError: |x|" % (len(raw), raw)
    outcome = parse_entry(entry, 5)
    assert outcome.job_id == job_id
    assert outcome.status == JobStatus.DEAD
    assert outcome.attempt == 16
    assert outcome.note == "KafkaTimeoutError: |x|"
    assert outcome.slot == 5


# ----- slot queue and scanner -------------------------------------------------------------


async def test_slot_queue_holds_each_slot_once() -> None:
    queue = SlotQueue(4)
    for slot in (1, 2, 1, 1, 3):
        await queue.put(slot)
    assert [await queue.get() for _ in range(queue.qsize())] == [1, 2, 3]
    await queue.put(1)
    assert await queue.get() == 1


async def test_scanner_sends_a_slot_when_due_and_keeps_earlier_wakes() -> None:
    queue = SlotQueue(16)
    scanner = SlotScanner(StaticOwnership(4), queue, safety_wake_ms=3_600_000)
    task = asyncio.create_task(scanner.run())
    # The first pass is the safety wake: every slot goes to the mover once.
    first = sorted([await asyncio.wait_for(queue.get(), 1) for _ in range(4)])
    assert first == [0, 1, 2, 3]
    now = int(scanner.redis_now_ms())
    scanner.report(0, now + 3_600_000, now)  # far away
    scanner.report(1, NO_TIME, now)  # empty
    scanner.report(2, now + 3_600_000, now)
    scanner.report(3, now + 3_600_000, now)
    scanner.wake(2, now + 30)  # an earlier job arrived in slot 2
    assert await asyncio.wait_for(queue.get(), 1) == 2
    scanner.wake(3, now + 50)
    scanner.wake(3, now + 10_000_000)  # later than known: must not replace now + 50
    assert await asyncio.wait_for(queue.get(), 1) == 3
    scanner.stop()
    await asyncio.wait_for(task, 1)


async def test_scanner_keeps_a_wake_that_arrives_during_a_move() -> None:
    queue = SlotQueue(16)
    scanner = SlotScanner(StaticOwnership(1), queue, safety_wake_ms=3_600_000)
    task = asyncio.create_task(scanner.run())
    assert await asyncio.wait_for(queue.get(), 1) == 0  # a move of slot 0 is on its way
    now = int(scanner.redis_now_ms())
    scanner.wake(0, now)  # a job became due while the move runs
    scanner.report(0, now + 3_600_000, now)  # the move did not see it
    assert await asyncio.wait_for(queue.get(), 1) == 0
    scanner.stop()
    await asyncio.wait_for(task, 1)


@pytest.mark.parametrize("round_interval_ms", [0, 100])
async def test_scanner_sends_slots_due_within_a_round_interval_together(
    round_interval_ms: int,
) -> None:
    queue = SlotQueue(16)
    scanner = SlotScanner(
        StaticOwnership(2), queue, safety_wake_ms=3_600_000, round_interval_ms=round_interval_ms
    )
    task = asyncio.create_task(scanner.run())
    assert sorted([await asyncio.wait_for(queue.get(), 1) for _ in range(2)]) == [0, 1]
    now = int(scanner.redis_now_ms())
    scanner.report(0, NO_TIME, now)
    scanner.report(1, NO_TIME, now)
    scanner.wake(0, now)  # due now, just after a round
    for _ in range(10):
        await asyncio.sleep(0)
    # Without an interval slot 0 went at once; with one it waits for the next round.
    assert queue.get_waiting() == ([0] if round_interval_ms == 0 else [])
    scanner.wake(1, now)
    assert await asyncio.wait_for(queue.get(), 1) == (1 if round_interval_ms == 0 else 0)
    if round_interval_ms:
        assert queue.get_waiting() == [1]  # the round took both
    scanner.stop()
    await asyncio.wait_for(task, 1)


def test_round_interval_is_bounded() -> None:
    assert Settings.from_env({"DELAYQ_ROUND_INTERVAL_MS": "100"}).round_interval_ms == 100
    for bad in ("-1", "101"):
        with pytest.raises(ConfigError, match="round_interval_ms must be 0"):
            Settings.from_env({"DELAYQ_ROUND_INTERVAL_MS": bad})


def test_batch_histograms_match_prometheus_buckets() -> None:
    from actors.histogram import Histograms

    h = Histograms((0.01, 0.1, 1.0))
    h.observe_many(("a",), [0.005, 0.01, 0.05, 2.0])  # 0.01 belongs to le="0.01"
    h.observe(("a",), 0.5, count=3)
    h.observe(("b",), -0.001)  # a clock step: the first bucket, never lost
    series = {labels: (buckets, total) for labels, buckets, total in h.cumulative()}
    buckets, total = series[("a",)]
    assert buckets == [("0.01", 2), ("0.1", 3), ("1.0", 6), ("+Inf", 7)]
    assert total == pytest.approx(0.005 + 0.01 + 0.05 + 2.0 + 1.5)
    assert series[("b",)][0][0] == ("0.01", 1)


def test_json_log_lines() -> None:
    import logging

    from cluster.settings.logs import JsonFormatter

    record = logging.LogRecord(
        "actors.x", logging.WARNING, __file__, 1, "slot %d: %s", (7, "x"), None
    )
    record.slot = 7
    line = orjson.loads(JsonFormatter("node-a").format(record))
    assert line["msg"] == "slot 7: x" and line["slot"] == 7 and line["node_id"] == "node-a"
    assert line["level"] == "WARNING" and line["ts"].endswith("+00:00")
    assert "job_id" not in line


def test_new_job_ids_are_unique_time_ordered_hex() -> None:
    ids = [new_job_id() for _ in range(20_000)]  # several refills of the random buffer
    assert len(set(ids)) == len(ids)
    assert all(len(job_id) == 32 and int(job_id, 16) >= 0 for job_id in ids)
    assert ids[0][:12] <= ids[-1][:12]


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    new_job_id()  # the parent's buffer is filled
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then exit at once
        os.write(write_end, " ".join(new_job_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_job_id() for _ in range(100)}
    assert len(child) == 100
    assert {job_id[12:] for job_id in child}.isdisjoint(job_id[12:] for job_id in parent)


def test_a_topic_found_valid_once_stays_valid_and_bad_ones_stay_bad() -> None:
    assert check_topic("orders.close") == "orders.close"
    assert check_topic("orders.close") == "orders.close"  # from the cache
    for bad in ("", ".", "bad topic", "x" * 250, b"orders.close"):
        with pytest.raises(InvalidJob):
            check_topic(bad)
