"""The `delayq` commands people run by hand, against the local stack: schedule and
reschedule, get --history, a store that does not answer (one line, exit 1), no library
INFO lines, and times printed as ISO-8601."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.node import Node
from cluster import DelayClient
from cluster.cli.main import main
from cluster.cli.times import iso_ms
from cluster.errors import StoreUnavailable
from cluster.model.contract import JobStatus
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.test_cli import cli, cli_env
from tests.test_dead_letters import make_dead

pytestmark = pytest.mark.once

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def unused_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def cli_with(
    settings: Settings, stdin: str | None, extra: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """`delayq ARGS` with text on stdin and the environment changed by extra."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster.cli.main", *args],
        env={**cli_env(settings), **extra},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ----- schedule, reschedule -------------------------------------------------------------------


async def test_schedule_from_an_argument_and_reschedule(
    settings: Settings, client: DelayClient
) -> None:
    result = await cli(
        settings,
        *("schedule", "--topic", "orders", "--payload", '{"order": 42}', "--delay", "1h"),
        *("--job-id", "cli-1", "--biz-id", "o-42", "--max-attempts", "3", "--json"),
        *("--priority", "7"),
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["job_id"], answer["created"]) == ("cli-1", True)
    assert ISO_MS.fullmatch(answer["due"])
    record = await client.get("cli-1")
    assert record is not None
    assert (record.topic, record.biz_id, record.max_attempts) == ("orders", "o-42", 3)
    assert record.priority == 7
    assert json.loads(record.payload_json) == {"order": 42}

    again = await cli(settings, "schedule", "--topic", "orders", "--payload", "1", "--delay", "5s",
                      "--job-id", "cli-1")  # fmt: skip
    assert again.returncode == 0 and "already scheduled" in again.stdout

    due_ms = (int(time.time()) + 2 * 86400) * 1000 + 678
    at = iso_ms(due_ms)
    moved = await cli(settings, "reschedule", "cli-1", "--at", at)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"rescheduled cli-1 due {at}"
    record = await client.get("cli-1")
    assert record is not None and record.due_ms == due_ms

    missing = await cli(settings, "reschedule", "nobody", "--delay", "10s")
    assert missing.returncode == 1 and "no such job" in missing.stdout


async def test_schedule_reads_the_payload_from_stdin_and_a_file(
    settings: Settings, client: DelayClient, tmp_path: Path
) -> None:
    piped = await cli_with(
        settings, '[1, "two"]', {}, "schedule", "--topic", "t", "--payload-file", "-",
        "--delay", "90s",
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    job_id = piped.stdout.split()[1]
    record = await client.get(job_id)
    assert record is not None and json.loads(record.payload_json) == [1, "two"]

    path = tmp_path / "payload.json"
    path.write_text('{"from": "file"}')
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=3)).replace(microsecond=0)
    local = at.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    filed = await cli(settings, "schedule", "--topic", "t", "--payload-file", str(path),
                      "--at", local, "--expires-after", "10m")  # fmt: skip
    assert filed.returncode == 0, filed.stderr
    record = await client.get(filed.stdout.split()[1])
    assert record is not None and json.loads(record.payload_json) == {"from": "file"}
    assert record.expires_after_ms == 600_000
    assert record.due_ms == int(at.timestamp()) * 1000


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--payload", "{not json", "--delay", "1s"], "not JSON"),
        (["--payload", "1", "--delay", "soon"], "not a duration"),
        (["--payload", "1", "--at", "2030-01-01T00:00:00"], "zone"),
        (["--payload", "1", "--delay", "1s", "--max-attempts", "0"], "max_attempts"),
        (["--payload", "1", "--delay", "1s", "--priority", "1001"], "priority"),
        (["--payload", "1", "--delay", "1s", "--expires-after", "0"], "expires_after"),
        (["--payload", "1"], "--delay"),
        (["--payload-file", "/nonexistent/p.json", "--delay", "1s"], "cannot read"),
        (["--payload", "1", "--delay", "1s", "--job-id", "bad id\x1b"], "job_id"),
    ],
)
async def test_schedule_refuses_bad_input_and_changes_nothing(
    settings: Settings, client: DelayClient, args: list[str], why: str
) -> None:
    result = await cli(settings, "schedule", "--topic", "refused", "--job-id", "refused-1", *args)
    assert result.returncode == 2
    assert why in result.stderr
    assert "Traceback" not in result.stderr
    assert await client.get("refused-1") is None


async def test_reschedule_refuses_a_bad_time(settings: Settings, client: DelayClient) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    before = await client.get(job_id)
    result = await cli(settings, "reschedule", job_id, "--at", "tomorrow")
    assert result.returncode == 2 and "not a time" in result.stderr
    assert await client.get(job_id) == before


# ----- get --history ---------------------------------------------------------------------------


async def test_get_with_history_starts_with_created(
    settings: Settings, client: DelayClient
) -> None:
    job_id = await client.schedule("t", {"a": 1}, delay=60)
    await client.reschedule(job_id, delay=120)
    result = await cli(settings, "get", job_id, "--history")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert [(e["status"], e["note"]) for e in answer["history"]] == [
        ("pending", "created"),
        ("pending", "rescheduled"),
    ]
    record = await client.get(job_id)
    assert record is not None
    created = dt.datetime.fromisoformat(answer["history"][0]["at"])
    assert round(created.timestamp() * 1000) == record.created_ms
    plain = json.loads((await cli(settings, "get", job_id)).stdout)
    assert "history" not in plain


# ----- stores that do not answer ---------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["get", "abc"], ["dead", "list"], ["db", "migrate"], ["schedule", "--topic",
                "t", "--payload", "1", "--delay", "1s"]],
)  # fmt: skip
async def test_mysql_that_does_not_answer_is_one_line(
    settings: Settings, command: list[str]
) -> None:
    port = unused_port()
    url = f"mysql://delayq:s3cret-pw@127.0.0.1:{port}/delayq"
    result = await cli_with(
        settings, None, {"DELAYQ_MYSQL_URL": url, "DELAYQ_MYSQL_SERVERS": ""}, *command
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr
    assert f"MySQL at 127.0.0.1:{port} does not answer" in result.stderr
    assert 'eval "$(delayq services env)"' in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["get", "abc"], ["cluster", "status"]])
async def test_redis_that_does_not_answer_is_one_line(
    settings: Settings, command: list[str]
) -> None:
    port = unused_port()
    extra = {"DELAYQ_REDIS_URL": f"redis://user:s3cret-pw@127.0.0.1:{port}/0"}
    result = await cli_with(settings, None, extra, *command)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr
    assert f"Redis at 127.0.0.1:{port} does not answer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_zookeeper_that_does_not_answer_is_one_line(settings: Settings) -> None:
    port = unused_port()
    extra = {"DELAYQ_ZK_HOSTS": f"127.0.0.1:{port}", "DELAYQ_ZK_SESSION_TIMEOUT_MS": "2000"}
    result = await cli_with(settings, None, extra, "cluster", "status")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    # The outage's own warning line, then the command's answer.
    last = result.stderr.strip().splitlines()[-1]
    assert f"ZooKeeper at 127.0.0.1:{port} does not answer" in last, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


async def test_client_open_raises_store_unavailable_naming_the_address(
    settings: Settings,
) -> None:
    port = unused_port()
    no_mysql = settings.replace(mysql_url=f"mysql://u:s3cret@127.0.0.1:{port}/delayq")
    with pytest.raises(StoreUnavailable, match=f"MySQL at 127.0.0.1:{port}") as caught:
        async with DelayClient(no_mysql):
            pass
    assert "s3cret" not in str(caught.value) and "delayq services env" in str(caught.value)
    no_redis = settings.replace(redis_url=f"redis://:s3cret@127.0.0.1:{port}/0")
    with pytest.raises(StoreUnavailable, match=f"Redis at 127.0.0.1:{port}") as caught:
        async with DelayClient(no_redis):
            pass
    assert "s3cret" not in str(caught.value)


# ----- quiet commands, human output ------------------------------------------------------------


async def test_cluster_status_logs_no_info_lines(settings: Settings, node: Node) -> None:
    result = await cli(settings, "cluster", "status")
    assert result.returncode == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert any("1 member(s)" in line for line in lines)
    assert [line for line in lines if " INFO " in line or " DEBUG " in line] == []
    # The libraries do log: --log-level shows them.
    verbose = await cli(settings, "--log-level", "DEBUG", "cluster", "status")
    assert any(" DEBUG aiozk" in line for line in verbose.stderr.splitlines())


@pytest.mark.parametrize(
    ("args", "level"),
    [
        (["get", "nobody"], logging.WARNING),
        (["--log-level", "INFO", "get", "nobody"], logging.INFO),
    ],
)
def test_commands_for_people_log_warnings_only_by_default(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, args: list[str], level: int
) -> None:
    for name, value in cli_env(settings).items():
        monkeypatch.setenv(name, value)
    try:
        assert main(args) == 1  # no such job
        assert logging.getLogger().level == level
    finally:
        logging.getLogger().setLevel(logging.INFO)


async def test_dead_list_prints_iso_times(
    settings: Settings, client: DelayClient, scripts: Scripts, topic: str
) -> None:
    [job_id] = await make_dead(client, scripts, topic, 1)
    result = await cli(settings, "dead", "list")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith(job_id)]
    died = re.search(r"died (\S+)", line)
    assert died is not None and ISO_MS.fullmatch(died[1]), line
    shown = json.loads((await cli(settings, "dead", "show", job_id)).stdout)
    assert dt.datetime.fromisoformat(shown["died"]).utcoffset() == dt.timedelta(0)
    assert isinstance(shown["history"], list)


async def test_purge_of_a_topic_in_pages_leaves_other_topics(
    settings: Settings, client: DelayClient, scripts: Scripts, topic: str
) -> None:
    await make_dead(client, scripts, topic, 3)
    others = await make_dead(client, scripts, f"{topic}.other", 2)
    result = await cli(settings, "dead", "purge", "--topic", topic, "--yes")
    assert result.returncode == 0, result.stderr
    assert "purged 3 dead job(s)" in result.stdout
    left = await client.dead_letters(limit=100)
    assert sorted(job.job_id for job in left) == sorted(others)


def test_job_status_prints_its_name() -> None:
    assert (str(JobStatus.PENDING), f"{JobStatus.FIRED}") == ("pending", "fired")
    assert int(JobStatus.FIRED) == 2 and JobStatus(2) is JobStatus.FIRED
