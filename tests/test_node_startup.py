"""`delayq node` started while a store is unreachable waits for it (one line per attempt)
up to startup_timeout_s, then exits 1 with one line naming it; settings and credentials
that waiting cannot fix stop it at once."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from urllib.parse import urlparse

from cluster.settings.config import Settings
from tests.forwarder import forwarder, free_port
from tests.mysql_tools import mysql_ports, through_ports
from tests.processes import NodeProcess


def with_mysql_ports(settings: Settings) -> tuple[Settings, list[int]]:
    """settings whose every MySQL server is at a free port (nothing there yet); the
    ports, mysql_url's first."""
    ports = [free_port() for _ in mysql_ports(settings)]
    return through_ports(settings, ports), ports


def log_of(node: NodeProcess) -> str:
    return node.log_path.read_text(errors="replace")


async def test_node_gives_up_on_unreachable_mysql_with_one_line(
    settings: Settings, tmp_path: Path
) -> None:
    nowhere, [port, *_] = with_mysql_ports(settings)
    node = NodeProcess(
        nowhere,
        tmp_path,
        "no-mysql",
        {"DELAYQ_STARTUP_TIMEOUT_S": "3"},
    )
    try:
        assert await node.wait_exit(60) == 1
    finally:
        node.kill()
    log = log_of(node)
    assert f"waiting for MySQL at 127.0.0.1:{port}" in log
    assert "retrying in" in log
    [final] = [line for line in log.splitlines() if "could not start" in line]
    assert f"MySQL at 127.0.0.1:{port} did not answer within startup_timeout_s" in final
    assert "Traceback" not in log


async def test_node_with_wrong_mysql_password_stops_at_once(
    settings: Settings, tmp_path: Path
) -> None:
    url = urlparse(settings.mysql_url)
    wrong = url._replace(netloc=f"{url.username}:wrong-password@{url.hostname}:{url.port}")
    node = NodeProcess(
        settings.replace(mysql_url=wrong.geturl()),
        tmp_path,
        "bad-password",
        {"DELAYQ_STARTUP_TIMEOUT_S": "600"},  # a retry would outlast the wait below
    )
    try:
        assert await node.wait_exit(60) == 1
    finally:
        node.kill()
    log = log_of(node)
    assert "waiting for" not in log
    [final] = [line for line in log.splitlines() if "could not start" in line]
    assert "MySQL at" in final and "refused" in final and "Access denied" in final
    assert "wrong-password" not in log
    assert "Traceback" not in log


async def test_node_starts_once_mysql_appears(settings: Settings, tmp_path: Path) -> None:
    """MySQL is reached through a port that starts forwarding to the real MariaDB only
    after the node has tried (and logged) a few times."""
    late, ports = with_mysql_ports(settings)
    node = NodeProcess(late, tmp_path, "late-mysql")
    try:
        while "waiting for MySQL" not in log_of(node):
            assert node.returncode is None, node.log_tail()
            await asyncio.sleep(0.1)
        async with contextlib.AsyncExitStack() as forwarders:
            for port, real_port in zip(ports, mysql_ports(settings), strict=True):
                await forwarders.enter_async_context(forwarder(port, real_port))
            await node.wait_ready(timeout_s=60)
            assert await node.stop() == 0
    finally:
        node.kill()
    assert "Traceback" not in log_of(node)
