"""The ports a stack was started on, remembered in its state folder.

`delayq services up` with DELAYQ_SERVICES_<NAME>_PORT variables moves services off
their default ports. A later `status`, `env` or `down` in a shell without those
variables would look on the defaults and find nothing, so `up` records the variables in
<state>/ports.json and every later command takes them from there when they are not set
(a variable set in the shell still wins). `down --purge` forgets them with the folder.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from cluster.devstack.service import ServicesError

PORTS_FILE = "ports.json"
_VARIABLE = re.compile(r"DELAYQ_SERVICES_(?:SECURE_)?[A-Z0-9_]+_PORT")


def _ours(name: str, secure: bool) -> bool:
    """Whether a variable moves a port of this stack (the secure one has SECURE_)."""
    return bool(_VARIABLE.fullmatch(name)) and name.startswith("DELAYQ_SERVICES_SECURE_") == secure


def moved_ports(secure: bool) -> dict[str, str]:
    """The stack's DELAYQ_SERVICES_*_PORT variables now in the environment, by name."""
    return {name: value for name, value in sorted(os.environ.items()) if _ours(name, secure)}


def record(root: Path, secure: bool) -> None:
    """Write the moved ports into root/ports.json (none moved: remove the file)."""
    path = root / PORTS_FILE
    ports = moved_ports(secure)
    if not ports:
        path.unlink(missing_ok=True)
        return
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(ports, indent=2) + "\n")
    temporary.replace(path)


def recall(root: Path, secure: bool) -> None:
    """Set the recorded port variables that the environment does not set."""
    path = root / PORTS_FILE
    try:
        recorded = json.loads(path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise ServicesError(f"{path} cannot be read ({exc}): delete it and set the ports") from None
    if not isinstance(recorded, dict):
        raise ServicesError(f"{path} is not a JSON object: delete it and set the ports")
    for name, value in recorded.items():
        if isinstance(name, str) and _ours(name, secure) and str(value).isdigit():
            os.environ.setdefault(name, str(value))


def export_lines(secure: bool) -> list[str]:
    """`export` lines of the moved ports, for `delayq services env`."""
    return [f"export {name}={shlex.quote(value)}" for name, value in moved_ports(secure).items()]
