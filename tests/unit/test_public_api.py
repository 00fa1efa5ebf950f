"""The public API's version and its deprecated paths (CHANGELOG.md): the release is
one number everywhere, and each path 0.1 documented still gives the same object, with a
DeprecationWarning naming the new path, until the release that removes it."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

import cluster
from cluster.deprecated import MOVED_MODULES, REMOVED_IN

ROOT = Path(__file__).resolve().parents[2]


def test_one_version_in_pyproject_the_package_and_the_changelog() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cluster.__version__ == project["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(cluster.__version__)} ", changelog, re.MULTILINE)


def _major_minor(version: str) -> tuple[int, int]:
    major, minor, *_ = version.split(".")
    return int(major), int(minor)


def test_deprecated_paths_go_in_a_later_release() -> None:
    """A deprecated path lives one minor release: once the version reaches REMOVED_IN,
    this fails until the shims are deleted."""
    assert _major_minor(cluster.__version__) < _major_minor(REMOVED_IN)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_a_moved_module_still_imports_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} is deprecated.*use {new}"):
        module = importlib.import_module(old)
    target = importlib.import_module(new)
    public = [name for name in vars(target) if not name.startswith("_")]
    assert public and all(getattr(module, name) is getattr(target, name) for name in public)
    assert changelog_row(old, new)


def changelog_row(old: str, new: str) -> bool:
    text = (ROOT / "CHANGELOG.md").read_text()
    return any(old in line and new in line for line in text.splitlines())


def test_the_old_client_path_gives_the_client_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="use cluster.DelayClient") as caught:
        from cluster.client import DelayClient
    assert DelayClient is cluster.DelayClient
    assert caught[0].filename == __file__  # the warning points at the importing line
    assert changelog_row("from cluster.client import DelayClient", "from cluster import")


def test_the_front_door_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from cluster import DelayClient, Job, Settings  # noqa: F401
        from cluster.client.consumer import FiredRecords  # noqa: F401


def test_an_unknown_name_of_the_client_package_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        cluster.client.Nothing  # type: ignore[attr-defined]  # noqa: B018
