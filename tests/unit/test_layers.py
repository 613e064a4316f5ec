"""The house rules the code can check on itself (docs/ARCHITECTURE.md, "Floors").

Imports point down the floors and never in a circle; no product file is over
400 lines. Each is read from the source (ast), so a new import or a grown file
fails here, in the unit tier, before review.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "raykueue"

# Which of our packages each package may import (docs/ARCHITECTURE.md, "Floors").
# Ground floor: core imports nothing of ours; kube (I/O without domain knowledge)
# and webhooks (pure admission decisions) import core only.
# Middle floor: coexist and certs import the ground's core and kube; the
# controller also the pure webhooks decisions (adopt classifies a running pod as
# the pod webhook would have) and coexist's selectors; uninstall sits on top of
# the middle floor, since it deletes what the controller made (its Workloads).
# Top floor: app wires everything.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "kube": frozenset({"core"}),
    "webhooks": frozenset({"core"}),
    "coexist": frozenset({"core", "kube"}),
    "certs": frozenset({"core", "kube"}),
    "controller": frozenset({"core", "kube", "webhooks", "coexist"}),
    "uninstall": frozenset({"core", "kube", "webhooks", "controller"}),
    "app": frozenset({"core", "kube", "webhooks", "coexist", "certs", "controller", "uninstall"}),
}
FLOOR = {"core": 0, "kube": 0, "webhooks": 0, "coexist": 1, "certs": 1, "controller": 1,
         "uninstall": 1, "app": 2}

MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ours `name` refers to (a module, else its package)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, *, top_level_only: bool) -> Iterator[str]:
    """Our modules imported by `tree`; `top_level_only`: those run at import time."""
    nodes = (ast.iter_child_nodes(tree) if top_level_only else ast.walk(tree))
    for node in nodes:
        if top_level_only and isinstance(node, ast.If) and not _type_checking(node):
            yield from _imports(ast.Module(body=node.body + node.orelse, type_ignores=[]),
                                top_level_only=True)
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _resolve(alias.name)
                if found:
                    yield found
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                found = _resolve(f"{node.module}.{alias.name}") or _resolve(node.module)
                if found:
                    yield found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _trees() -> dict[str, ast.AST]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def test_every_package_has_a_floor() -> None:
    packages = {_package(m) for m in MODULES} - {""}
    assert packages == set(ALLOWED) == set(FLOOR)


def test_imports_point_down_the_floors() -> None:
    for deps in ALLOWED.values():
        assert deps <= set(ALLOWED)
    for package, deps in ALLOWED.items():
        assert all(FLOOR[d] <= FLOOR[package] for d in deps), package
    wrong = []
    for name, tree in _trees().items():
        mine = _package(name)
        for target in set(_imports(tree, top_level_only=False)):
            theirs = _package(target)
            if mine and theirs and theirs != mine and theirs not in ALLOWED[mine]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports that point up or sideways (docs/ARCHITECTURE.md):\n" + "\n".join(sorted(wrong))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_modules_or_packages() -> None:
    trees = _trees()
    modules = {name: {t for t in _imports(tree, top_level_only=True) if t != name}
               for name, tree in trees.items()}
    found = _cycle(modules)
    assert found is None, "import cycle: " + " -> ".join(found or [])
    packages: dict[str, set[str]] = {}
    for name, targets in modules.items():
        packages.setdefault(_package(name), set()).update(
            _package(t) for t in targets if _package(t) != _package(name))
    found = _cycle(packages)
    assert found is None, "package cycle: " + " -> ".join(found or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_file_is_over_400_lines(path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    assert _lines(path) <= MAX_LINES, f"{relative}: {_lines(path)} lines; split it by what it does"


# Comments say why, not which issue asked: the issue's text is not in the code.
_ISSUE_NUMBER = re.compile(r"\bissues? \d+\b|(?<![\w&])#\d+\b", re.IGNORECASE)


def test_no_issue_numbers_in_the_product() -> None:
    found = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
             for path in MODULES.values()
             for i, line in enumerate(path.read_text().splitlines(), 1) if _ISSUE_NUMBER.search(line)]
    assert not found, "say why instead:\n" + "\n".join(found)
