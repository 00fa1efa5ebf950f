"""`make demo`: start a node, schedule a few dozen jobs over several seconds, and show
each one arriving from Kafka with its lateness (receive time − due time). Exits by
itself. Needs the local stack (`delayq services up`) and a migrated database.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import orjson
import uvloop
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from cluster import DelayClient, Job
from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.devstack.nodes import NodeProcess, NodeProcessError
from cluster.settings.config import Settings

JOBS = 40
SPREAD_S = 8.0
PARTITIONS = 3


async def start_node() -> NodeProcess:
    """A node logging to the state folder; exits the demo if it does not start."""
    node = NodeProcess("demo-node", Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq")))
    try:
        await node.wait_ready()
    except NodeProcessError as exc:
        node.kill()
        sys.exit(f"the node did not start: {exc}")
    return node


async def main() -> None:
    settings = Settings.from_env()
    topic = f"delayq.demo.{uuid.uuid4().hex[:6]}"
    admin = make_admin(settings)  # with the settings' TLS and SASL, like the node
    await start_client(admin, settings)
    await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    await admin.close()
    # A short fetch wait: the broker may hold a fetch until it expires.
    consumer = make_consumer(settings, fetch_max_wait_ms=5)
    await start_client(consumer, settings)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

    node = await start_node()
    print(
        f"node started (log: {node.log_path}); scheduling {JOBS} jobs over {SPREAD_S:.0f} s "
        f"to topic {topic}"
    )
    async with DelayClient(settings) as client:
        jobs = [
            Job(
                topic,
                {"order": i, "action": "close-unpaid"},
                delay=1 + SPREAD_S * i / JOBS,
                biz_id=f"order-{i}",
                biz_type="order.close",
            )
            for i in range(JOBS)
        ]
        ids = await client.schedule_many(jobs)
        for i in (5, 17):
            result = await client.cancel(ids[i])
            if result:
                print(f"cancelled order-{i}: it will never fire")
            else:
                print(f"order-{i} was not cancelled: {result.status}")
        expected = JOBS - 2
        lateness: list[float] = []
        deadline = time.monotonic() + SPREAD_S + 30
        while len(lateness) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            received_ms = time.time() * 1000
            for messages in batch.values():
                for message in messages:
                    record = orjson.loads(message.value)
                    late = received_ms - record["due_ms"]
                    lateness.append(late)
                    print(
                        f"fired {message.key.decode():<9} attempt {record['attempt']}  "
                        f"late {late:6.1f} ms  payload {record['payload']}"
                    )
        record = await client.get(ids[0])
        print(f"\nMySQL says {ids[0]} is {record.status.name if record else 'missing'}")
    await consumer.stop()
    await node.stop()
    if len(lateness) < expected:
        sys.exit(f"only {len(lateness)} of {expected} jobs arrived")
    print(
        f"{len(lateness)} jobs fired; lateness at the consumer: "
        f"p50 {statistics.median(lateness):.1f} ms, max {max(lateness):.1f} ms"
    )


if __name__ == "__main__":
    uvloop.run(main())
