"""`delayq node` as a subprocess, for tests, benchmarks and the demo.

``NodeProcess`` starts ``python -m cluster.cli.main [--log-level L] node --ready-file PATH``
(or another command that takes --ready-file: ``command="ingress"``) with its output
appended to a log file. Readiness is the ready file, which the node writes
atomically once started (JSON: node_id, member, pid) and deletes when it stops
(actors/node.py), so it does not depend on log text or the log level.

    node = NodeProcess("node-1", log_dir, settings=settings, node_id="node-1")
    await node.wait_ready()
    ...
    assert await node.stop() == 0
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from signal import SIGCONT, SIGKILL, SIGTERM, Signals
from typing import Any

import orjson

from cluster.devstack.service import file_tail
from cluster.errors import DelayqError
from cluster.settings.config import Settings

_POLL_S = 0.05


class NodeProcessError(DelayqError, RuntimeError):
    """A node did not start or stop in time, or exited while starting; the message ends
    with the tail of its log."""


def free_port() -> int:
    """A local TCP port nothing listens on (right now): a node's metrics_port, say."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def settings_env(settings: Settings) -> dict[str, str]:
    """DELAYQ_* variables that give a node these settings, all but node_id (which must
    differ per node process)."""
    env: dict[str, str] = {}
    for f in fields(settings):
        if f.name == "node_id":
            continue
        value = getattr(settings, f.name)
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env[f"DELAYQ_{f.name.upper()}"] = text
    return env


class NodeProcess:
    """A `delayq node` subprocess with a log file ``<log_dir>/<name>.log`` and a ready
    file ``<log_dir>/<name>.ready``.

    Its environment is this process's, then ``settings`` as DELAYQ_* variables (all but
    node_id), then ``node_id``, then ``env``. ``log_level`` is the node's --log-level
    (default: the CLI's, INFO). ``command`` is the CLI command to run: "node", or
    "ingress" (`delayq ingress`, which writes and deletes its ready file the same way).
    ``cwd``: the folder it runs in, whose ``cluster`` package it runs (another release's
    tree, say). The process starts at once; ``wait_ready`` waits for it.
    """

    def __init__(
        self,
        name: str,
        log_dir: Path,
        *,
        settings: Settings | None = None,
        node_id: str | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str | None = None,
        command: str = "node",
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.ready_path = log_dir / f"{name}.ready"
        log_dir.mkdir(parents=True, exist_ok=True)
        # A file left by an earlier node of this name (killed) must not count as ready.
        self.ready_path.unlink(missing_ok=True)
        full_env = {
            **os.environ,
            **(settings_env(settings) if settings else {}),
            **({"DELAYQ_NODE_ID": node_id} if node_id else {}),
            **(env or {}),
        }
        level = ["--log-level", log_level] if log_level else []
        argv = [
            sys.executable,
            "-m",
            "cluster.cli.main",
            *level,
            command,
            "--ready-file",
            str(self.ready_path),
        ]
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                argv,
                env=full_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once it exited (negative: killed by that signal), else None."""
        return self.proc.poll()

    def ready_info(self) -> dict[str, Any] | None:
        """The ready file's content if it is there and this process wrote it, else None."""
        try:
            info = orjson.loads(self.ready_path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        if not isinstance(info, dict) or info.get("pid") != self.pid:
            return None  # not this node's
        return info

    async def wait_ready(self, timeout_s: float = 60) -> dict[str, Any]:
        """Wait until the node has started; returns its ready file (node_id, member, pid).
        Raises NodeProcessError if it exits first or timeout_s passes (it is left running)."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.ready_info()
            if info is not None:
                return info
            code = self.proc.poll()
            if code is not None:
                raise NodeProcessError(
                    f"{self.name} (pid {self.pid}) exited with {code} "
                    f"while starting{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise NodeProcessError(
                    f"{self.name} (pid {self.pid}) not ready after {timeout_s:g} s{self.log_tail()}"
                )
            await asyncio.sleep(_POLL_S)

    async def wait_exit(self, timeout_s: float = 60) -> int:
        """Wait until the process exits; returns its exit code."""
        deadline = time.monotonic() + timeout_s
        while (code := self.proc.poll()) is None:
            if time.monotonic() >= deadline:
                raise NodeProcessError(
                    f"{self.name} (pid {self.pid}) did not exit within "
                    f"{timeout_s:g} s{self.log_tail()}"
                )
            await asyncio.sleep(_POLL_S)
        return code

    def signal(self, sig: Signals) -> None:
        """Send a signal, unless the process has exited (its pid may be reused)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    async def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM (a clean stop: slots handed over, ready file deleted) and wait for the
        exit; returns the exit code."""
        self.signal(SIGTERM)
        return await self.wait_exit(timeout_s)

    def kill(self) -> None:
        """SIGKILL at once (after SIGCONT, in case it was paused) and reap it; removes the
        ready file the node could not. Safe to call on a node that already exited."""
        if self.proc.poll() is None:
            self.proc.send_signal(SIGCONT)
            self.proc.send_signal(SIGKILL)
            self.proc.wait()
        self.ready_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the node's log, for an error message; "" if there are none."""
        tail = file_tail(self.log_path, lines)
        if not tail:
            return ""
        return f"; last lines of {self.log_path}:\n" + "\n".join(f"    {t}" for t in tail)
