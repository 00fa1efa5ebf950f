"""Reading setting values from their sources: a DELAYQ_* variable's text, and a TOML
file's keys (cluster/settings/config.py says which settings there are)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from cluster.errors import ConfigError


def parse_value(name: str, raw: str, kind: type) -> Any:
    """A variable's text as the setting's type (bool, int, float or str)."""
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise ConfigError(f"DELAYQ_{name.upper()}={raw!r} is not a valid {kind.__name__}") from None
    return raw


def load_toml(path: Path, known: dict[str, type]) -> dict[str, Any]:
    """Read settings from a TOML file: top-level keys named like the Settings fields
    (`known`: each one's type)."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"unknown setting {key!r} in {path}")
        kind = known[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"setting {key!r} in {path} must be {kind.__name__}")
        values[key] = value
    return values
