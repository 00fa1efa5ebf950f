"""The OpenAPI document fuzzed against a running server with schemathesis: every
operation with generated valid and invalid requests, every check but
positive_data_acceptance. No answer may be a 5xx, and every answer must match the
document (status, content type, headers, body schema).

Two checks are left out, each because the API means something the check does not
assume: positive_data_acceptance, because some limits depend on the time of the request,
which a schema cannot say (`at` may be at most max_delay_s ahead of now); and
use_after_free, because DELETE /v1/jobs/{job_id} cancels a job, whose record stays
readable (status "cancelled") rather than disappearing, and DELETE /v1/recurring/{name}
stops a schedule, which stays readable (removed: true).

The seed is fixed so that a run is repeatable; DELAYQ_FUZZ_SEED and
DELAYQ_FUZZ_EXAMPLES change it and the examples per operation.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from actors.node import Node
from cluster import DelayClient
from cluster.settings.config import Settings
from cluster.web.api import ROUTES
from tests.test_web import OPERATOR, TOKENS, serving

SEED = os.environ.get("DELAYQ_FUZZ_SEED", "20261124")
EXAMPLES = os.environ.get("DELAYQ_FUZZ_EXAMPLES", "50")


@pytest.mark.skipif(
    bool(os.environ.get("DELAYQ_TEST_SECURE"))
    or os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1",
    reason="fuzzed once per suite run, against the single Redis",
)
async def test_the_openapi_document_holds_under_fuzzing(settings: Settings, tmp_path: Path) -> None:
    settings = settings.replace(web_tokens=TOKENS)
    schemathesis = Path(sys.executable).parent / "schemathesis"
    node = Node(settings)  # so /v1/cluster has a cluster to show
    await node.start()
    try:
        async with DelayClient(settings) as client, serving(settings, client) as api:
            process = await asyncio.create_subprocess_exec(
                str(schemathesis),
                "run",
                f"{api.base}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance,use_after_free",
                "--max-examples",
                EXAMPLES,
                "--seed",
                SEED,
                "--header",
                f"Authorization: Bearer {OPERATOR}",
                "--no-color",
                cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            output, _ = await process.communicate()
    finally:
        await node.stop()
    report = output.decode(errors="replace")
    assert process.returncode == 0, report[-6000:]
    assert f"{len(ROUTES)}/{len(ROUTES)}" in report  # every operation was tested
