"""A non-editable install must carry every Lua script, Lua include and schema file, and
every file of the web console (nothing of it is fetched at run time)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_wheel_ships_every_lua_and_sql_file(tmp_path: Path) -> None:
    # Build from a copy: setuptools' build/ folder in the tree could hide a missing file.
    source = tmp_path / "src"
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
            str(tmp_path),
            str(source),
        ],
        check=True,
        cwd=tmp_path,
    )
    [wheel] = tmp_path.glob("delayq-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        str(path.relative_to(ROOT))
        for pattern in ("lua/**/*.lua", "schema/*.sql", "cluster/web/console/*")
        for path in ROOT.glob(pattern)
    }
    assert wanted, "no Lua or SQL files found in the source tree"
    assert "cluster/web/console/index.html" in wanted
    assert wanted - shipped == set()
