"""The processes of the local stack: spawning a service detached with its log and pid file,
telling whether a pid is alive and really runs that service, who listens on a port, and
stopping a process. Process and socket facts come from psutil.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from cluster.devstack.service import (
    HOST,
    POLL_S,
    STOP_TIMEOUT_S,
    Service,
    ServicesError,
    log_tail,
)

# Children started by this process, so that they can be reaped (a zombie still has a pid).
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(svc: Service) -> int:
    """Prepare and start a service in a session of its own; write its pid file."""
    svc.prepare(svc)
    command = svc.command(svc)
    with svc.log_file.open("ab") as log:
        log.write(
            f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} delayq services up: "
            f"{shlex.join(command)}\n".encode()
        )
        log.flush()
        child = subprocess.Popen(
            command,
            cwd=svc.dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[child.pid] = child
    svc.pid_file.write_text(f"{child.pid}\n")
    return child.pid


def forget(pid: int) -> None:
    """Drop a stopped child from the ones this process reaps."""
    _children.pop(pid, None)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None  # also reaps it
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we may not look closer


def cmdline(pid: int) -> str | None:
    """The process's command line joined by spaces; None when it cannot be read."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.Error:
        return None


def is_ours(svc: Service, pid: int) -> bool:
    """The pid is alive and runs this service's program (not a reused pid)."""
    if not alive(pid):
        return False
    line = cmdline(pid)
    return line is None or svc.marker in line


def read_pid(svc: Service) -> int | None:
    return read_pid_file(svc.pid_file)


def read_pid_file(path: Path) -> int | None:
    """The pid a pid file names; None when it is missing or not a number."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def running_pid(svc: Service) -> int | None:
    """The pid of this service started by us, if it is alive; removes a stale pid file."""
    pid = read_pid(svc)
    if pid is None or not is_ours(svc, pid):
        svc.pid_file.unlink(missing_ok=True)  # unreadable, garbage or stale
        return None
    return pid


def listening_pids(port: int) -> set[int] | None:
    """The pids listening on a TCP port (any address, IPv4 or IPv6); None when the system
    does not let us list sockets. A listener we may not inspect has no pid here."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return None
    return {
        conn.pid
        for conn in connections
        if conn.status == psutil.CONN_LISTEN
        and conn.laddr
        and conn.laddr.port == port
        and conn.pid is not None
    }


def serves(svc: Service, pid: int) -> bool:
    """The process itself listens on the service port (not merely: the port is open)."""
    pids = listening_pids(svc.port)
    if pids is None:
        return port_open(svc.port)  # sockets hidden from us: the best we can tell
    return pid in pids


def port_owner(port: int) -> int | None:
    """The pid listening on a TCP port, if we may see it."""
    pids = listening_pids(port)
    return min(pids) if pids else None


def describe_owner(port: int) -> str:
    owner = port_owner(port)
    if owner is None:
        return "another process"
    return f"pid {owner} ({cmdline(owner) or '?'})"


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def stop_pid(pid: int) -> bool:
    """SIGTERM, wait, then SIGKILL. True when the process had to be killed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive(pid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 5.0
            while alive(pid) and time.monotonic() < kill_deadline:
                time.sleep(0.05)
            return True
        time.sleep(0.1)
    return False


def wait_ready(
    svc: Service,
    pid: int,
    *,
    timeout_s: float,
    setup: Callable[[Service], None] | None = None,
    ready: str = "ready",
    stop: str = "delayq services down",
) -> None:
    """Wait until svc's process `pid` serves its port, has run `setup` once (if given),
    and answers svc.probe. ServicesError when the process exits, or at the deadline
    (then it is left running for a look), saying which step it reached."""
    deadline = time.monotonic() + timeout_s
    last_error = "the port never accepted a connection"
    while True:
        if not alive(pid):
            svc.pid_file.unlink(missing_ok=True)
            raise ServicesError(
                f"{svc.name} (pid {pid}) exited while starting; see {svc.log_file}{log_tail(svc)}"
            )
        if serves(svc, pid):
            try:
                if setup is not None:
                    setup(svc)
                    setup = None
                svc.probe(svc)
                return
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}".strip()
        if time.monotonic() >= deadline:
            raise ServicesError(
                f"{svc.name} (pid {pid}) not {ready} on {svc.address} after "
                f"{timeout_s:.0f} s ({last_error}); it is left running for a look "
                f"(`{stop}` stops it); see {svc.log_file}{log_tail(svc)}"
            )
        time.sleep(POLL_S)
