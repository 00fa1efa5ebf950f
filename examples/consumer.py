"""A downstream consumer of fired jobs: the business logic lives here, not in delayq.

    python examples/consumer.py orders.close

Each record's value is JSON: job_id, topic, biz_id, biz_type, due_ms, fired_ms, attempt,
payload. delayq delivers at least once; after a crash a job may arrive twice. FiredRecords
decodes each record, and its Deduplicator drops repeated deliveries of a job seen in the
last ten minutes by this process (cluster/client/consumer.py says exactly which); a handler that
must never run twice still keys its own writes by job_id.
"""

from __future__ import annotations

import asyncio
import sys
import time

from cluster.client.consumer import Deduplicator, FiredRecord, FiredRecords
from cluster.connections.kafka_conn import make_consumer, start_client
from cluster.settings.config import Settings


async def handle(job: FiredRecord) -> None:
    late_ms = time.time() * 1000 - job.due_ms
    print(f"{job.biz_type} {job.biz_id}: {job.payload} (late {late_ms:.1f} ms)")


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
    # per_job: also drop delayq's re-publish of a job after a failure (the next attempt).
    dedupe = Deduplicator(window_s=600, per_job=True)
    try:
        async for job in FiredRecords(consumer, dedupe):
            await handle(job)
            await consumer.commit()
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "orders.close"))
