"""What the contributor docs state about the tree, held to the tree: the make targets they
name exist, the test markers they list are the declared ones, and both drawings of the
error hierarchy (cluster/errors.py's docstring, docs/client.md) are the classes' own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import cluster.errors as errors

ROOT = Path(__file__).resolve().parents[2]
# Pages a contributor or an operator reads make commands in.
PAGES = ["README.md", "CONTRIBUTING.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]


def _page(name: str) -> str:
    path = ROOT / name if (ROOT / name).exists() else ROOT / "docs" / name
    return path.read_text()


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, flags=re.MULTILINE))


def test_every_make_target_the_docs_name_exists() -> None:
    targets = _make_targets()
    named = {
        (page, target)
        for page in PAGES
        for target in re.findall(r"`make ([a-z][a-z0-9-]*)", _page(page))
    }
    assert named, "no `make X` found: the pattern no longer matches the docs"
    missing = sorted((page, target) for page, target in named if target not in targets)
    assert missing == [], missing


def test_contributing_lists_the_declared_markers() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]["markers"]
    names = {line.split(":")[0] for line in declared}
    sentence = re.search(r"The markers (.+?) are declared", _page("CONTRIBUTING.md"), re.DOTALL)
    assert sentence is not None
    assert set(re.findall(r"`([a-z_]+)`", sentence.group(1))) == names


def _tree(text: str) -> dict[str, str]:
    """{class: parent} of a drawing of the hierarchy ("├── Name (Base)" lines, "A, B"
    for siblings), from DelayqError down."""
    parents: dict[str, str] = {}
    stack: list[str] = []
    margin = 0  # the drawing's indentation (the docstring's is 4)
    for line in text.splitlines():
        if line.strip() == "DelayqError":
            stack, margin = ["DelayqError"], len(line) - len(line.lstrip())
            continue
        found = re.match(r"^([│ ]*)[├└]── ([A-Za-z, ]+?)(?:\s+\(|\s{2,}|$)", line[margin:])
        if found is None:
            continue
        depth = len(found.group(1)) // 4 + 1
        del stack[depth:]
        for name in (part.strip() for part in found.group(2).split(",")):
            parents[name] = stack[depth - 1]
        stack.append(found.group(2).split(",")[-1].strip())
    return parents


def _actual() -> dict[str, str]:
    actual = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if cls is errors.DelayqError:
            continue
        parent = next(base for base in cls.__mro__[1:] if issubclass(base, errors.DelayqError))
        actual[name] = parent.__name__
    return actual


def test_the_error_tree_of_the_docstring_is_the_code() -> None:
    assert _tree(errors.__doc__ or "") == _actual()


def test_the_error_tree_of_the_client_doc_is_the_code() -> None:
    text = _page("client.md")
    block = text[text.index("\nDelayqError\n") : text.index("```", text.index("\nDelayqError\n"))]
    assert _tree(block) == _actual()


def test_every_error_has_a_row_in_the_client_doc() -> None:
    text = _page("client.md")
    rows = set(re.findall(r"^\| `([A-Za-z]+)` \|", text, flags=re.MULTILINE))
    assert set(errors.__all__) - rows == set()
