"""The secure stack's MariaDB set-up and probe never put a password on the `mariadb`
client's command line (every local user can read /proc/<pid>/cmdline): the SQL goes
through stdin, the password through a 0600 option file that is deleted afterwards."""

from __future__ import annotations

import inspect
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster.devstack import mariadb
from cluster.devstack.secure import PASSWORD_NAMES, Secrets
from cluster.devstack.service import Service

PASSWORD = "Pw-for-the-argv-test_0123456789"


@pytest.fixture
def svc(tmp_path: Path) -> Service:
    secrets = Secrets(tmp_path / "secure", {name: PASSWORD for name in PASSWORD_NAMES})
    service = Service(
        "mysql",
        13307,
        tmp_path,
        "mariadbd",
        mariadb.prepare,
        mariadb.command,
        mariadb.probe,
        mariadb.setup,
        secrets,
    )
    service.dir.mkdir(parents=True)
    return service


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every mariadb client run, as it was asked for, with its option file as it was."""
    seen: list[dict[str, Any]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        named = [a.split("=", 1)[1] for a in argv if a.startswith("--defaults-file=")]
        options = Path(named[0]) if named else None
        seen.append(
            {
                "argv": argv,
                "input": kwargs.get("input"),
                "env": kwargs.get("env"),
                "options": options,
                "options_text": options.read_text() if options else None,
                "options_mode": stat.S_IMODE(options.stat().st_mode) if options else None,
            }
        )
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(mariadb.subprocess, "run", run)
    monkeypatch.setattr(mariadb, "require_program", lambda program, package: program)
    monkeypatch.setenv("MYSQL_PWD", "from-the-environment")
    return seen


def test_setup_sends_its_sql_through_stdin(svc: Service, runs: list[dict[str, Any]]) -> None:
    mariadb.setup(svc)
    [done] = runs
    assert not any(PASSWORD in arg for arg in done["argv"])
    assert "-e" not in done["argv"] and "--execute" not in done["argv"]
    assert f"IDENTIFIED BY '{PASSWORD}' REQUIRE SSL" in done["input"]
    assert "MYSQL_PWD" not in done["env"]
    assert done["options"] is not None and not done["options"].exists()  # deleted after


def test_probe_passes_the_password_in_a_private_file(
    svc: Service, runs: list[dict[str, Any]]
) -> None:
    mariadb.probe(svc)
    [done] = runs
    assert not any(PASSWORD in arg for arg in done["argv"])
    assert done["input"] == "SELECT 1;\n"
    assert done["options_text"] == f'[client]\npassword="{PASSWORD}"\n'
    assert done["options_mode"] == 0o600
    assert done["options"] is not None and done["options"].parent == svc.dir
    assert "MYSQL_PWD" not in done["env"]
    assert not done["options"].exists()


def test_option_values_are_quoted() -> None:
    assert mariadb._option_value('a"b\\c d') == '"a\\"b\\\\c d"'


def test_no_code_path_builds_a_password_argument() -> None:
    source = inspect.getsource(mariadb)
    for flag in ('"-e"', '"--execute"', "--password=", '"-p"', 'MYSQL_PWD"] ='):
        assert flag not in source
    assert os.environ.get("MYSQL_PWD") != PASSWORD
