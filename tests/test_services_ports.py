"""`delayq services` remembers the ports `up` moved with DELAYQ_SERVICES_<NAME>_PORT:
status, env and down in a shell without those variables look where the stack runs, and
env prints the variables too (cluster/devstack/port_memory.py). No service is started:
the record is the one `up` writes before starting anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.devstack import port_memory

MOVED = {
    "DELAYQ_SERVICES_REDIS_PORT": "23379",
    "DELAYQ_SERVICES_MYSQL_PORT": "23306",
    "DELAYQ_SERVICES_ZOOKEEPER_PORT": "23181",
    "DELAYQ_SERVICES_KAFKA_PORT": "23092",
}


def services(state: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`delayq services ARGS` in a shell without DELAYQ_SERVICES_* variables (but env)."""
    clean = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DELAYQ_SERVICES_", "DELAYQ_STATE_DIR"))
    }
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "services", *args],
        env={**clean, "DELAYQ_STATE_DIR": str(state), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder holding what `up` records when started with the MOVED ports."""
    for name, value in MOVED.items():
        monkeypatch.setenv(name, value)
    state = tmp_path / "state"
    state.mkdir()
    port_memory.record(state, secure=False)
    for name in MOVED:
        monkeypatch.delenv(name)
    return state


def test_env_without_the_variables_uses_the_recorded_ports(recorded: Path) -> None:
    result = services(recorded, "env")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "export DELAYQ_REDIS_URL=redis://127.0.0.1:23379/0" in lines
    assert "export DELAYQ_MYSQL_URL=mysql://delayq:delayq@127.0.0.1:23306/delayq" in lines
    assert "export DELAYQ_ZK_HOSTS=127.0.0.1:23181" in lines
    for name, value in MOVED.items():
        assert f"export {name}={value}" in lines


def test_status_without_the_variables_looks_on_the_recorded_ports(recorded: Path) -> None:
    result = services(recorded, "status")
    assert result.returncode == 1  # nothing runs there
    addresses = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()}
    assert addresses["redis"] == "127.0.0.1:23379"
    assert addresses["mysql"] == "127.0.0.1:23306"
    assert addresses["zookeeper"] == "127.0.0.1:23181"


def test_a_variable_set_in_the_shell_wins(recorded: Path) -> None:
    result = services(recorded, "env", DELAYQ_SERVICES_REDIS_PORT="24379")
    assert "export DELAYQ_REDIS_URL=redis://127.0.0.1:24379/0" in result.stdout.splitlines()
    assert json.loads((recorded / "ports.json").read_text()) == MOVED  # not rewritten


def test_default_ports_record_nothing(tmp_path: Path) -> None:
    port_memory.record(tmp_path, secure=False)
    assert not (tmp_path / "ports.json").exists()
    assert "_PORT=" not in services(tmp_path, "env").stdout


def test_a_broken_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "ports.json").write_text("{not json")
    result = services(tmp_path, "status")
    assert result.returncode == 1
    assert "ports.json cannot be read" in result.stderr
