"""What `pip install delayq` puts on a machine: the wheel's top-level import names are
`cluster` and `actors` only, and it carries every Lua script, Lua include, schema file
and file of the web console (nothing of it is fetched at run time).
tests/test_installed.py installs this wheel into an empty virtualenv and runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(into: Path) -> Path:
    """The wheel of the working tree, built from a copy: setuptools' build/ folder in
    the tree could hide a missing file."""
    source = into / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".delayq", "build", "*.egg-info", "node_modules", "results"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(into),
            str(source),
        ],
        check=True,
        cwd=into,
        capture_output=True,
    )
    [wheel] = into.glob("delayq-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel")))


@pytest.fixture(scope="module")
def shipped(wheel: zipfile.ZipFile) -> set[str]:
    return set(wheel.namelist())


def test_the_wheel_installs_two_import_names(shipped: set[str]) -> None:
    top = {name.split("/")[0] for name in shipped}
    [dist_info] = [name for name in top if name.endswith(".dist-info")]
    assert top - {dist_info} == {"cluster", "actors"}


def test_the_wheel_ships_every_lua_sql_and_console_file(shipped: set[str]) -> None:
    wanted = {
        f"cluster/{path.relative_to(ROOT)}"
        for pattern in ("lua/**/*.lua", "schema/*.sql")
        for path in ROOT.glob(pattern)
    } | {str(path.relative_to(ROOT)) for path in ROOT.glob("cluster/web/console/*")}
    assert "cluster/lua/claim.lua" in wanted and "cluster/schema/001_jobs.sql" in wanted
    assert "cluster/web/console/index.html" in wanted
    assert wanted - shipped == set()


def test_the_wheel_ships_every_module_of_the_tree(shipped: set[str]) -> None:
    """A subpackage missing from pyproject's package list would be left out silently."""
    modules = {str(path.relative_to(ROOT)) for path in ROOT.glob("cluster/**/*.py")}
    modules |= {str(path.relative_to(ROOT)) for path in ROOT.glob("actors/**/*.py")}
    assert modules - shipped == set()


def test_the_delayq_script_is_the_cli(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [name for name in wheel.namelist() if name.endswith("entry_points.txt")]
    lines = wheel.read(entry_points).decode().split()
    assert "[console_scripts]" in lines
    assert lines[lines.index("[console_scripts]") + 1 :] == ["delayq", "=", "cluster.cli.main:main"]
