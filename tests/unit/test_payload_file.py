"""`delayq schedule --payload-file PATH` reads a regular file only, and a bounded part of
it: a FIFO or a device would make the command wait forever."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from cluster.cli.actions import read_regular_file, schedule
from cluster.settings.config import Settings


def test_a_regular_file_is_read_up_to_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    path.write_bytes(b'{"a": 1}' + b" " * 100)
    assert read_regular_file(str(path), 8) == b'{"a": 1}'


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path = str(tmp_path / "p")
    if kind == "fifo":
        os.mkfifo(path)  # no writer: open() without O_NONBLOCK would wait forever
    elif kind == "directory":
        os.mkdir(path)
    else:
        path = "/dev/zero"  # endless: read() would not end either
    with pytest.raises(OSError):
        read_regular_file(path, 100)


def test_schedule_with_a_fifo_payload_file_says_why_and_schedules_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "payload"
    os.mkfifo(fifo)
    args = argparse.Namespace(
        payload=None,
        payload_file=str(fifo),
        topic="orders.close",
        delay=1.0,
        at=None,
        job_id=None,
        biz_id=None,
        biz_type=None,
        max_attempts=None,
        expires_after=None,
        priority=None,
        json=False,
    )
    assert schedule(Settings(), args) == 2
    err = capsys.readouterr().err
    assert "cannot read the payload from" in err and "not a regular file" in err
    assert "nothing scheduled" in err
