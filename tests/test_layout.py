"""The dependency rules of the folders (docs/architecture.md): producers' code never
pulls in the node runtime, the ingress uses the producer API alone, and nothing that runs
in production imports devstack."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).glob("*.py"))


@pytest.mark.parametrize(
    "path", modules("cluster") + modules("actors") + modules("web") + modules("ingress"), ids=str
)
def test_production_code_never_imports_devstack_at_load(path: Path) -> None:
    for module, top_level in imports(path):
        if module.split(".")[0] != "devstack":
            continue
        # The CLI loads the local stack for `delayq services` only, when asked.
        assert path.name == "cli.py" and not top_level, f"{path.name} imports {module}"


@pytest.mark.parametrize("path", modules("cluster"), ids=str)
def test_cluster_never_loads_the_node_runtime_at_import(path: Path) -> None:
    for module, top_level in imports(path):
        if module.split(".")[0] == "actors":
            assert not top_level, f"{path.name} imports {module} at module level"


@pytest.mark.parametrize("path", modules("web"), ids=str)
def test_web_never_imports_the_node(path: Path) -> None:
    """The web server serves the client's operations; it never runs node code."""
    for module, _ in imports(path):
        assert module.split(".")[0] != "actors", f"{path.name} imports {module}"


@pytest.mark.parametrize("path", modules("cluster"), ids=str)
def test_cluster_loads_the_ingress_only_when_the_cli_runs_it(path: Path) -> None:
    for module, top_level in imports(path):
        if module.split(".")[0] == "ingress":
            assert path.name == "cli.py" and not top_level, f"{path.name} imports {module}"


@pytest.mark.parametrize("path", modules("ingress"), ids=str)
def test_the_ingress_never_imports_the_node_runtime(path: Path) -> None:
    for module, _ in imports(path):
        assert module.split(".")[0] != "actors", f"{path.name} imports {module}"
