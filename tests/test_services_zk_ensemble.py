"""`delayq services … --zk-ensemble 3`: three ZooKeeper servers with a leader, a client
session over all three, `status` and `down` covering them, a standalone server's data
moving into the ensemble, and the secure stack's digest ACLs across a failover.

Each test runs the ZooKeeper servers of a stack of its own (its state under tmp_path, its
ports B, B + 100, B + 200 and secure B + 1, B + 101, B + 201, with their quorum and
election ports + 10 and + 20, for the first B from 23181 on, in steps of 1000, whose
ports are all free), started through cluster/devstack's own functions (the rest of the
stack is not needed) and stopped by `delayq services down`. The shared local stack is
never touched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiozk import ZKClient, exc, protocol

from cluster.connections.zk_conn import open_zk
from cluster.devstack import processes, stack, zk_ensemble
from cluster.devstack.service import Service
from cluster.settings.config import Settings

# One worker runs the module: each test takes the first free ports from 23181 on.
pytestmark = [pytest.mark.once, pytest.mark.xdist_group("zk-ensemble-ports")]

NAMES = ("ZOOKEEPER", "ZOOKEEPER_2", "ZOOKEEPER_3")
PORTS: dict[str, int] = {}  # this test's, by state()
SECURE_PORTS: dict[str, int] = {}


def free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base() -> int:
    """The first base port from 23181 on (steps of 1000) whose ensemble ports, plain
    and secure, client, quorum and election, are all free now."""
    for base in range(23181, 32000, 1000):
        ports = [base + 100 * i + s + d for i in range(3) for s in (0, 1) for d in (0, 10, 20)]
        if all(free(port) for port in ports):
            return base
    raise AssertionError("no free ports for a ZooKeeper ensemble below 32000")


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """This test's stack: DELAYQ_STATE_DIR and the ZooKeeper ports, in this process's
    environment too (the devstack functions read it); what runs is stopped at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    env["DELAYQ_STATE_DIR"] = str(tmp_path / "state")
    base = free_base()
    PORTS.update({name: base + 100 * i for i, name in enumerate(NAMES)})
    SECURE_PORTS.update({name: base + 1 + 100 * i for i, name in enumerate(NAMES)})
    for name, port in PORTS.items():
        env[f"DELAYQ_SERVICES_{name}_PORT"] = str(port)
    for name, port in SECURE_PORTS.items():
        env[f"DELAYQ_SERVICES_SECURE_{name}_PORT"] = str(port)
    for name in list(os.environ):
        if name.startswith("DELAYQ_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        yield env
    finally:
        for pid in SPAWNED:  # stopped (and reaped) whoever stopped or killed them
            if processes.alive(pid):
                processes.stop_pid(pid)
            processes.forget(pid)
        SPAWNED.clear()
        os.environ.pop("DELAYQ_SERVICES_ZK_ENSEMBLE", None)  # set by the tests


# The servers a test started (pids), stopped at its end if still running.
SPAWNED: list[int] = []


def services(*args: str, ensemble: str | None = "3") -> subprocess.CompletedProcess[str]:
    """`delayq services ARGS [--zk-ensemble N]` on this test's stack."""
    flag = ["--zk-ensemble", ensemble] if ensemble else []
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "services", *args, *flag],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def servers(secure: bool = False) -> list[Service]:
    return [svc for svc in stack.services(secure=secure) if svc.marker == zk_ensemble.MARKER]


def start(svcs: list[Service]) -> None:
    """Start these servers and wait until each serves (an ensemble's: with a quorum)."""
    started = []
    for svc in svcs:
        svc.dir.mkdir(parents=True, exist_ok=True)
        started.append((svc, processes.spawn(svc)))
        SPAWNED.append(started[-1][1])
    for svc, pid in started:
        processes.wait_ready(svc, pid, timeout_s=60)


async def sync(zk: ZKClient, path: str) -> None:
    """ZooKeeper's sync: the server this client is connected to catches up with the
    leader before it answers, so a read after it sees every write made before."""
    await zk.send(protocol.SyncRequest(path=zk.normalize_path(path)))


def lines_of(output: str, names: list[str]) -> dict[str, str]:
    """The output line of each of these services."""
    return {line.split()[0]: line for line in output.splitlines() if line.split()[0] in names}


async def test_an_ensemble_of_three_serves_with_one_leader(state: dict[str, str]) -> None:
    os.environ["DELAYQ_SERVICES_ZK_ENSEMBLE"] = "3"
    root = stack.stack_root()
    names = ["zookeeper", "zookeeper-2", "zookeeper-3"]
    start(servers())
    modes = zk_ensemble.modes(root)
    assert list(modes) == names
    assert sorted(str(mode) for mode in modes.values()) == ["follower", "follower", "leader"]
    assert zk_ensemble.leader(root) in names
    for number, name in enumerate(names, start=1):
        assert (root / name / "data" / "myid").read_text() == f"{number}\n"

    env = services("env")
    assert env.returncode == 0, env.stderr
    hosts = ",".join(f"127.0.0.1:{port}" for port in PORTS.values())
    assert f"export DELAYQ_ZK_HOSTS={hosts}" in env.stdout.splitlines()

    # A session over the three; what it writes every server has.
    zk = await open_zk(Settings.from_env({"DELAYQ_ZK_HOSTS": hosts}))
    try:
        await zk.create("/ensemble-test", data=b"written once")
    finally:
        await zk.close()
    for port in PORTS.values():
        one = ZKClient(f"127.0.0.1:{port}", session_timeout=5)
        await one.start()
        try:
            await sync(one, "/ensemble-test")
            assert await one.get_data("/ensemble-test") == b"written once"
        finally:
            await one.close()

    # Without the flag: the folders say the ensemble is there.
    status = services("status", ensemble=None)
    assert status.returncode == 1  # the rest of the stack is not running
    for name, line in lines_of(status.stdout, names).items():
        assert line.split()[-1] == "running", name
    assert len(lines_of(status.stdout, names)) == 3
    pids = [processes.read_pid(svc) for svc in servers()]
    down = services("down", ensemble=None)
    assert down.returncode == 0, down.stderr
    assert all("stopped (pid" in line for line in lines_of(down.stdout, names).values())
    assert zk_ensemble.modes(root) == dict.fromkeys(names)
    assert not any(pid is not None and processes.alive(pid) for pid in pids)


async def test_a_standalone_servers_data_moves_into_the_ensemble(state: dict[str, str]) -> None:
    """Its znodes survive even when servers 2 and 3 form a quorum before it is back
    (their leader would otherwise truncate its history), and it cannot turn into an
    ensemble while it runs standalone, nor the ensemble back into one server."""
    root = stack.stack_root()
    start(servers())
    assert zk_ensemble.modes(root) == {"zookeeper": "standalone"}
    zk = await open_zk(Settings.from_env({"DELAYQ_ZK_HOSTS": zk_ensemble.hosts(root)}))
    try:
        await zk.create("/from-standalone-days", data=b"kept")
    finally:
        await zk.close()

    refused = services("up")
    assert refused.returncode == 1
    assert "zookeeper runs standalone: stop the stack first" in refused.stderr
    assert not (root / "zookeeper-2").exists()

    assert services("down", ensemble=None).returncode == 0
    os.environ["DELAYQ_SERVICES_ZK_ENSEMBLE"] = "3"
    first, *others = servers()
    start(others)  # a quorum of two, without server 1
    assert sorted(str(mode) for mode in zk_ensemble.modes(root).values()) == [
        "None",
        "follower",
        "leader",
    ]
    start([first])
    zk = await open_zk(Settings.from_env({"DELAYQ_ZK_HOSTS": zk_ensemble.hosts(root)}))
    try:
        await sync(zk, "/from-standalone-days")
        assert await zk.get_data("/from-standalone-days") == b"kept"
    finally:
        await zk.close()

    back = services("up", ensemble="1")
    assert back.returncode == 1
    assert "cannot go back to one server" in back.stderr


async def test_the_secure_ensemble_keeps_its_acls_across_a_failover(
    state: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The secure stack's digest auth over the ensemble: a znode delayq makes is closed
    to others on every server, and the session logs in again on the server it moves to
    when its own is killed. It moves as soon as the killed server's connection closes,
    not when a ping goes unanswered: with a 60 s session the first ping would fail 20
    to 60 s after the kill (cluster/connections/zk_conn.py)."""
    caplog.set_level(logging.INFO, logger="cluster.connections.zk_conn")
    os.environ["DELAYQ_SERVICES_ZK_ENSEMBLE"] = "3"
    start(servers(secure=True))
    env = stack.stack_env(secure=True)
    assert env["DELAYQ_ZK_HOSTS"] == ",".join(f"127.0.0.1:{p}" for p in SECURE_PORTS.values())
    assert env["DELAYQ_ZK_AUTH"].startswith("delayq:")
    settings = Settings.from_env(
        {
            "DELAYQ_ZK_HOSTS": env["DELAYQ_ZK_HOSTS"],
            "DELAYQ_ZK_AUTH": env["DELAYQ_ZK_AUTH"],
            "DELAYQ_ZK_SESSION_TIMEOUT_MS": "60000",
        }
    )
    zk = await open_zk(settings)
    try:
        await zk.create("/secure-ensemble", data=b"0")
        connected = zk.session.conn.port
        for port in SECURE_PORTS.values():
            anonymous = ZKClient(f"127.0.0.1:{port}", session_timeout=5)
            await anonymous.start()
            try:
                await sync(anonymous, "/secure-ensemble")
                with pytest.raises(exc.NoAuth):
                    await anonymous.set_data("/secure-ensemble", b"not yours")
            finally:
                await anonymous.close()
        killed = next(svc for svc in servers(secure=True) if svc.port == connected)
        pid = processes.running_pid(killed)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while True:  # the session moves to another server and logs in there again
            try:
                await zk.set_data("/secure-ensemble", b"1")
                break
            except (exc.ZKError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, "the session did not move on"
                await asyncio.sleep(0.2)
        assert zk.session.conn.port != connected
        assert f"127.0.0.1:{connected} closed the connection" in caplog.text
        assert await zk.get_data("/secure-ensemble") == b"1"
    finally:
        await zk.close()
    down = services("down", "--secure", ensemble=None)
    assert down.returncode == 0, down.stderr
    assert lines_of(down.stdout, [killed.name])[killed.name].split()[-1] != "running"
