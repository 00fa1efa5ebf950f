"""A downstream consumer of fired jobs: the business logic lives here, not in delayq.

    python examples/consumer.py orders.close

Each record's value is JSON: job_id, topic, biz_id, biz_type, due_ms, fired_ms, attempt,
payload. delayq delivers at least once; after a crash a job may arrive twice, so make
the handler idempotent (keyed by job_id), or remember handled job_ids.
"""

from __future__ import annotations

import asyncio
import sys
import time

import orjson

from cluster.config import Settings
from cluster.kafka_conn import make_consumer, start_client


async def handle(job: dict[str, object]) -> None:
    late_ms = time.time() * 1000 - float(job["due_ms"])  # type: ignore[arg-type]
    print(f"{job['biz_type']} {job['biz_id']}: {job['payload']} (late {late_ms:.1f} ms)")


async def main(topic: str) -> None:
    # DELAYQ_KAFKA_* settings: bootstrap servers, TLS and SASL (docs/configuration.md).
    # Any Kafka client works; this one reuses delayq's settings for brevity.
    settings = Settings.from_env()
    consumer = make_consumer(
        settings,
        topic,
        group_id=f"{topic}.handlers",
        enable_auto_commit=False,  # commit only after the handler succeeded
        auto_offset_reset="earliest",
        # Latency: a fetch the broker has nothing for waits up to fetch_max_wait_ms
        # before it answers (aiokafka's default 500 ms), and records that arrive
        # meanwhile wait with it. 5 ms costs a few more fetch requests while idle.
        fetch_max_wait_ms=5,
    )
    await start_client(consumer, settings)
    try:
        async for message in consumer:
            await handle(orjson.loads(message.value))
            await consumer.commit()
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "orders.close"))
