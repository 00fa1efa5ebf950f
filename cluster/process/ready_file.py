"""The ready file of a `delayq node` or `delayq ingress` started with --ready-file: a
small JSON object written once the process has started and deleted when it stops, so a
supervisor (or cluster.devstack.nodes) knows when it serves, whatever the log level."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def write_ready_file(path: Path, info: dict[str, Any]) -> None:
    """Say "started" in a file, atomically (a reader never sees half of it); `info`
    gets the process id."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(orjson.dumps({**info, "pid": os.getpid()}))
    temporary.replace(path)


def clear_ready_file(path: Path) -> None:
    path.unlink(missing_ok=True)
