"""How delayq's ZooKeeper sessions look for a server when none answers
(cluster/connections/zk_conn.py): rounds over the servers no further apart than a
quarter of the session timeout, so a node is back soon after ZooKeeper is."""

from __future__ import annotations

from typing import Any

import pytest
from aiozk import retry

from cluster.connections.zk_conn import make_zk
from cluster.settings.config import Settings

HOSTS = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"


class FakeConnection:
    start_read_only = False


@pytest.mark.parametrize("auth", ["", "delayq:secret"])
@pytest.mark.parametrize("timeout_ms", [3000, 10000, 60000])
async def test_a_session_tries_again_within_a_quarter_of_its_timeout(
    monkeypatch: pytest.MonkeyPatch, auth: str, timeout_ms: int
) -> None:
    session = make_zk(
        Settings.from_env(
            {
                "DELAYQ_ZK_HOSTS": HOSTS,
                "DELAYQ_ZK_SESSION_TIMEOUT_MS": str(timeout_ms),
                "DELAYQ_ZK_AUTH": auth,
            }
        )
    ).session
    tried: list[tuple[str, int]] = []
    waits: list[float] = []
    rounds = 12  # an outage of many rounds: all servers down, or no quorum

    async def make_connection(host: str, port: str) -> Any:
        tried.append((host, int(port)))
        return FakeConnection() if len(tried) > 3 * rounds else None

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(session, "make_connection", make_connection)
    monkeypatch.setattr(retry.asyncio, "sleep", sleep)  # the policy's wait between rounds
    await session.find_server(allow_read_only=False)
    assert isinstance(session.conn, FakeConnection)
    assert len(tried) == 3 * rounds + 1  # every server each round, then the first that answers
    assert len(waits) == rounds
    assert max(waits) <= timeout_ms / 1000 / 4
    assert waits == sorted(waits)  # backing off, up to the cap
