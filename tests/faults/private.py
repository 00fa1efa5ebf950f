"""A private local stack for the fault modules that kill services: `delayq services`
with a state folder, ports and flags of its own, so the shared stack is never touched;
and the fixtures such a module uses in place of conftest's.

    STACK = PrivateStack(Path("/tmp/delayq-fault-x"), {"REDIS": "27379", ...},
                         ("--zk-ensemble", "3"))
    private_env = env_fixture(STACK)  # up for the module, down at its end
    settings = settings_fixture(STACK, healthy=...)  # a database per test
    redis = redis_fixture()

conftest's client, topic and collector are then made with the module's settings.

Its ports stay below Linux's ephemeral range (32768-60999), where a client connection
of the suite could hold one when the stack starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings
from tests.conftest import wait_for


@dataclass(frozen=True)
class PrivateStack:
    state_dir: Path
    ports: dict[str, str]  # DELAYQ_SERVICES_<NAME>_PORT by NAME
    flags: tuple[str, ...]  # given to every `delayq services` command

    def services_env(self) -> dict[str, str]:
        """This process's environment without any DELAYQ_* (the shared stack's), plus
        the private stack's state folder and ports."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
        env["DELAYQ_STATE_DIR"] = str(self.state_dir)
        for name, port in self.ports.items():
            env[f"DELAYQ_SERVICES_{name}_PORT"] = port
        return env

    def services(self, *args: str) -> str:
        """`delayq services ARGS FLAGS` on the private stack; its output."""
        done = subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "services", *args, *self.flags],
            env=self.services_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"delayq services {args}: {done.stdout}{done.stderr}"
        return done.stdout

    @contextlib.contextmanager
    def running(self) -> Iterator[dict[str, str]]:
        """The stack up for the block: its DELAYQ_* settings (`services env`); down after."""
        try:
            self.services("up")
            env: dict[str, str] = {}
            for line in self.services("env").splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                env[name] = shlex.split(value)[0] if value else ""
            yield env
        finally:
            self.services("down")

    def pid(self, service: str) -> int:
        """The pid of one of its services (mysql-1, zookeeper-2, …)."""
        return int((self.state_dir / service / f"{service}.pid").read_text())

    async def restart_servers(self) -> None:
        """Start what is down of the stack (a killed server) and wait until it answers."""
        await asyncio.to_thread(self.services, "up")


def env_fixture(stack: PrivateStack) -> Any:
    """A module-scoped fixture `private_env`: the stack up for the module, its DELAYQ_*
    settings; down at the module's end."""

    @pytest.fixture(scope="module")
    def private_env() -> Iterator[dict[str, str]]:
        """The private stack, up for this module: its DELAYQ_* settings."""
        with stack.running() as env:
            yield env

    return private_env


def settings_fixture(
    stack: PrivateStack,
    *,
    healthy: Callable[[Settings], Awaitable[bool]],
    env: dict[str, str] | None = None,
    changes: Callable[[pytest.FixtureRequest], dict[str, Any]] | None = None,
) -> Any:
    """A fixture `settings` on the private stack (it replaces conftest's): the stack's
    settings with `env` on top, its servers started again first unless `healthy` (one
    left down by a scenario that failed half-way), a key prefix and a cluster database
    of the test's own with changes(request) (which may read the test's other fixtures),
    dropped after the test."""

    @pytest.fixture
    async def settings(
        private_env: dict[str, str], request: pytest.FixtureRequest
    ) -> AsyncIterator[Settings]:
        base = Settings.from_env({**private_env, **(env or {})})
        if not await healthy(base):  # left down by a scenario that failed half-way
            await stack.restart_servers()
        prefix = f"t{uuid.uuid4().hex[:10]}"
        made = await create_cluster_database(
            base.replace(
                key_prefix=prefix,
                node_id=f"test-{uuid.uuid4().hex[:6]}",
                **(changes(request) if changes else {}),
            ),
            f"delayq_{prefix}",
        )
        yield made
        await drop_cluster_database(made)

    return settings


def redis_fixture() -> Any:
    """A fixture `redis`: a client of the settings fixture's Redis (it replaces
    conftest's, which is the shared stack's)."""

    @pytest.fixture
    async def redis(settings: Settings) -> AsyncIterator[RedisClient]:
        client = await open_redis(settings)
        yield client
        await client.aclose()

    return redis


async def gone(pid: int) -> None:
    """Wait until a killed process (not our child: reaped by init) has exited."""

    async def exited() -> bool:
        return _state(pid) == "Z"

    assert await wait_for(exited, timeout_s=30, interval_s=0.02)


def _state(pid: int) -> str:
    """A process's state letter; "Z" (a zombie) once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
