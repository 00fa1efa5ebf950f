"""The `delayq` command line against the local stack: dead-letter replay and purge ask
before acting on many jobs, and untrusted text is printed escaped."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys

import pytest

from cluster import DelayClient
from cluster.cli.main import main
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.mysql_tools import on_job
from tests.test_dead_letters import make_dead

# The command line over the client: the client's Redis side is tested in both passes.
pytestmark = pytest.mark.once


def cli_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "DELAYQ_KEY_PREFIX": settings.key_prefix,
        "DELAYQ_MYSQL_URL": settings.mysql_url,
        "DELAYQ_MYSQL_SERVERS": settings.mysql_servers,
    }


async def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m cluster.cli.main ARGS` with no terminal on stdin."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster.cli.main", *args],
        env=cli_env(settings),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def dead_count(client: DelayClient) -> int:
    return len(await client.dead_letters(limit=1000))


@pytest.mark.parametrize("limit", ["0", "-3", "ten"])
async def test_dead_list_refuses_a_limit_below_one(settings: Settings, limit: str) -> None:
    result = await cli(settings, "dead", "list", "--limit", limit)
    assert result.returncode == 2
    assert "--limit" in result.stderr and ">= 1" in result.stderr


@pytest.mark.parametrize("selector", [["--all"], ["--topic", "TOPIC"]])
@pytest.mark.parametrize("action", ["replay", "purge"])
async def test_replay_and_purge_of_many_need_yes(
    settings: Settings,
    client: DelayClient,
    scripts: Scripts,
    topic: str,
    action: str,
    selector: list[str],
) -> None:
    await make_dead(client, scripts, topic, 3)
    args = ["dead", action, *[topic if arg == "TOPIC" else arg for arg in selector]]

    dry = await cli(settings, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"3 dead job(s) to {action}" in dry.stdout and "nothing changed" in dry.stdout
    assert await dead_count(client) == 3

    refused = await cli(settings, *args)
    assert refused.returncode == 2
    assert f"3 dead job(s) to {action}" in refused.stdout
    assert "refusing without --yes" in refused.stderr
    assert await dead_count(client) == 3

    done = await cli(settings, *args, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"{'replayed' if action == 'replay' else 'purged'} 3 dead job(s)" in done.stdout
    assert await dead_count(client) == 0


async def test_dry_run_of_named_jobs_counts_the_dead_ones(
    settings: Settings, client: DelayClient, scripts: Scripts, topic: str
) -> None:
    ids = await make_dead(client, scripts, topic, 2)
    result = await cli(
        settings, "dead", "purge", "--job-id", ids[0], "--job-id", "nobody", "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    assert "would purge 1 dead job(s)" in result.stdout
    assert await dead_count(client) == 2


class Terminal(io.StringIO):
    """A stdin that says it is a terminal and answers with its text."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "code", "left"), [("n\n", 2, 2), ("", 2, 2), ("y\n", 0, 0)])
async def test_replay_asks_on_a_terminal(
    settings: Settings,
    client: DelayClient,
    scripts: Scripts,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
    code: int,
    left: int,
) -> None:
    await make_dead(client, scripts, topic, 2)
    for name, value in cli_env(settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    # main() runs its own event loop: in a thread, beside this test's.
    assert await asyncio.to_thread(main, ["dead", "purge", "--all"]) == code
    out = capsys.readouterr().out
    assert "2 dead job(s) to purge" in out and "purge 2 dead job(s)? [y/N]" in out
    assert await dead_count(client) == left


async def test_untrusted_text_is_printed_escaped(
    settings: Settings, client: DelayClient, scripts: Scripts, topic: str
) -> None:
    """An error text (from a broker, or any row written before controls were refused)
    holding terminal controls and a bidi override is shown escaped."""
    [job_id] = await make_dead(client, scripts, topic, 1)
    hostile = "\x1b]0;owned\x07 \x9b31m \u202eevil"
    await on_job(
        client.mysql,
        job_id,
        "UPDATE {jobs} SET last_error = %s, biz_type = %s WHERE job_id = %s",
        (hostile, hostile[:20], job_id),
    )
    outputs = [
        await cli(settings, "dead", "list"),
        await cli(settings, "dead", "show", job_id),
        await cli(settings, "get", job_id),
    ]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert not any(c in result.stdout for c in "\x1b\x07\x9b\u202e"), result.stdout
    assert "\\x1b]0;owned\\x07 \\x9b31m \\u202eevil" in outputs[0].stdout
    assert "\\u001b]0;owned\\u0007 \\u009b31m \\u202eevil" in outputs[2].stdout
