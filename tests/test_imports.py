# SPDX-License-Identifier: GPL-2.0
"""No import cycle in the harness (python/asyncfork).

Every module is read with `ast`: its imports of the package's own modules,
at module level and inside functions alike (`import asyncfork.X`,
`from asyncfork import X`, `from asyncfork.X import name`, relative
imports), make a graph, which must have no cycle.  A cycle found is
printed, module by module."""

import ast
from pathlib import Path

PACKAGE = "asyncfork"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / "python" / PACKAGE


def modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__")


def imported(source: str, known: set[str]) -> set[str]:
    """The package's modules that `source` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != PACKAGE:
                    continue
                rest = parts[1:]
            elif node.level == 1:
                rest = (node.module or "").split(".") if node.module else []
            else:
                continue
            if rest:
                found.add(rest[0])
            else:
                found.update(a.name for a in node.names if a.name in known)
    return found & known


def graph() -> dict[str, set[str]]:
    known = set(modules())
    return {m: imported((PACKAGE_DIR / f"{m}.py").read_text(), known) - {m} for m in sorted(known)}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `g` as [a, b, ..., a], or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(g, WHITE)
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        stack.append(m)
        for n in sorted(g[m]):
            if colour[n] == GREY:
                return stack[stack.index(n):] + [n]
            if colour[n] == WHITE:
                cycle = visit(n)
                if cycle:
                    return cycle
        stack.pop()
        colour[m] = BLACK
        return None

    for m in sorted(g):
        if colour[m] == WHITE:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def test_reader_sees_every_form():
    known = {"soak", "test_deb", "vm", "paths", "suite"}
    src = ("import asyncfork.vm\nfrom asyncfork import paths, os\n"
           "from asyncfork.suite import Case\n"
           "def f():\n    from asyncfork import test_deb\n"
           "    from . import soak\n")
    assert imported(src, known) == {"vm", "paths", "suite", "test_deb", "soak"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    g = graph()
    assert len(g) > 10, f"too few modules read from {PACKAGE_DIR}"
    cycle = find_cycle(g)
    if cycle:
        print("import cycle: " + " -> ".join(cycle))
    assert cycle is None, "import cycle in python/asyncfork: " + " -> ".join(cycle)
