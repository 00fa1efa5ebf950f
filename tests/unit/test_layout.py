"""The layers of the installed packages (docs/architecture.md, CONTRIBUTING.md): each
subpackage imports only from the layers below it, nothing imports in a circle, the
development stack and the terminal UI stay out of production code, and no module grows
past what a reader takes in at once.

The layers, from the bottom up; subpackages of one layer never import each other:

    cluster.errors, cluster.deprecated  (0.1's import paths, by name only)
    cluster.settings
    cluster.connections, cluster.model
    cluster.store                       (MySQL)
    cluster.scripts                     (Redis and Lua)
    cluster.client, cluster.observe, cluster.process
    actors, cluster.web, cluster.ingress
    cluster.devstack                    (development only)
    cluster.cli                         (may run all of the above)

The root ``cluster`` (``from cluster import DelayClient``) is for the package's users:
no module of the package imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cluster", "actors")
LAYERS = [
    ["cluster.errors", "cluster.deprecated"],
    ["cluster.settings"],
    ["cluster.connections", "cluster.model"],
    ["cluster.store"],
    ["cluster.scripts"],
    ["cluster.client", "cluster.observe", "cluster.process"],
    ["actors", "cluster.web", "cluster.ingress"],
    ["cluster.devstack"],
    ["cluster.cli"],
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
MAX_LINES = 450


@dataclass(frozen=True)
class Import:
    target: str  # the module imported, resolved to a submodule where it names one
    line: int
    top_level: bool  # at module level (else inside a function: lazy)
    type_only: bool  # under `if TYPE_CHECKING:`


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


MODULES = all_modules()


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage of cluster, or `actors`."""
    parts = module.split(".")
    if parts[0] == "actors":
        return "actors"
    return ".".join(parts[:2]) if len(parts) > 1 else "cluster"


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path) -> Iterator[Import]:
    """Every import of delayq's own modules in a file."""
    tree = ast.parse(path.read_text(), str(path))

    def visit(node: ast.AST, top_level: bool, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(alias.name, child.lineno, top_level, type_only)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    target = sub if sub in MODULES else child.module
                    yield Import(target, child.lineno, top_level, type_only)
            else:
                inside = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                yield from visit(
                    child, top_level and not inside, type_only or _type_checking(child)
                )

    for found in visit(tree, True, False):
        if found.target.split(".")[0] in PACKAGES or found.target.split(".")[0] == "rich":
            yield found


def ours(found: Import) -> bool:
    return found.target.split(".")[0] in PACKAGES


def test_every_module_is_in_a_layer() -> None:
    assert "cluster.client.delay_client" in MODULES
    units = {unit_of(module) for module in MODULES} - {"cluster", "cluster.lua", "cluster.schema"}
    assert units - set(RANK) == set(), "a new subpackage needs its place in LAYERS"


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_imports_run_down_the_layers(module: str) -> None:
    unit = unit_of(module)
    if unit not in RANK:
        return  # cluster/__init__, the package data
    for found in filter(ours, imports_of(MODULES[module])):
        target = unit_of(found.target)
        assert target != "cluster", f"{module}:{found.line} imports the root `cluster`"
        if target == unit:
            continue
        assert RANK[target] < RANK[unit], (
            f"{module}:{found.line} imports {found.target}: {target} is not below {unit}"
        )


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_production_code_loads_the_development_stack_never(module: str) -> None:
    """Only `delayq services` (cluster.cli) imports cluster.devstack, when it runs."""
    if unit_of(module) in ("cluster.devstack", "cluster.cli"):
        if unit_of(module) == "cluster.cli":
            for found in imports_of(MODULES[module]):
                if unit_of(found.target) == "cluster.devstack":
                    assert not found.top_level, f"{module}:{found.line} at module level"
        return
    for found in imports_of(MODULES[module]):
        assert unit_of(found.target) != "cluster.devstack", f"{module}:{found.line}"


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_only_delayq_top_imports_the_terminal_ui(module: str) -> None:
    """The web server and the node load no rich: the cluster's snapshot model they share
    with `delayq top` is cluster.observe.snapshot. The command line's progress bars
    (cluster.cli.progress) are rich too."""
    for found in imports_of(MODULES[module]):
        if found.target.split(".")[0] == "rich":
            assert module in ("cluster.cli.top", "cluster.cli.progress"), (
                f"{module}:{found.line} imports rich"
            )


def test_no_import_circle_at_run_time() -> None:
    """Over every import that runs (module level or inside a function; not the ones
    for type checkers only)."""
    graph = {
        module: {
            f.target
            for f in imports_of(path)
            if ours(f) and not f.type_only and f.target in MODULES and f.target != module
        }
        for module, path in MODULES.items()
    }
    circles = []
    done: set[str] = set()

    def walk(module: str, trail: list[str]) -> None:
        if module in trail:
            circles.append([*trail[trail.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            walk(target, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    assert circles == [], "\n".join(" -> ".join(circle) for circle in circles)


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_no_module_is_over_450_lines(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by what it does"


@pytest.mark.parametrize(
    "package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py"), ids=str
)
def test_every_package_says_its_role(package: str) -> None:
    tree = ast.parse(MODULES[package].read_text())
    assert ast.get_docstring(tree), f"{package}/__init__.py has no docstring"
