"""`delayq db homes` refuses arguments that do not go together, before opening any store."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["homes", "--resolve", "0"], "--resolve SHARD and --server N go together"),
        (["homes", "--server", "1"], "--resolve SHARD and --server N go together"),
        (["homes", "2"], "takes only --resolve SHARD --server N"),
        (["migrate", "--server", "1"], "--resolve and --server belong to homes"),
        (["move-shard", "1", "--to", "1", "--resolve", "1"], "--server to homes"),
    ],
)
def test_db_homes_refuses_bad_arguments(args: list[str], why: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "db", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and why in done.stderr, done.stderr
