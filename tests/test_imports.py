"""The package's import graph, read statically: no cycles, papers plug in, the core names none.

Every ``import pdelab...`` / ``from pdelab... import`` statement counts, at any depth (a
function-level import still ties two modules together). ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PAPERS = (
    "diffusion_positions",
    "continuous_time_attention",
    "fractional_attention",
    "linear_diffusion",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((SRC / "pdelab").rglob("*.py"))}


def imports(name: str) -> set[str]:
    """The pdelab modules this module imports."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports(name) for name in MODULES}


def find_cycle() -> list[str] | None:
    """A cycle in GRAPH as a list of modules, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_read() -> None:
    assert "pdelab.config" in GRAPH["pdelab.run_sheet"]
    assert "pdelab.report.tables" in GRAPH["pdelab.report.__main__"]


def test_no_import_cycle() -> None:
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_can_fail() -> None:
    GRAPH["pdelab.specs"].add("pdelab.run_sheet")  # run_sheet -> config -> specs
    try:
        assert find_cycle() is not None
    finally:
        GRAPH["pdelab.specs"].discard("pdelab.run_sheet")


def core_modules() -> list[str]:
    return [m for m in MODULES if not m.startswith("pdelab.papers.") and m != "pdelab.papers"]


@pytest.mark.parametrize("module", core_modules())
def test_the_core_imports_no_paper(module: str) -> None:
    papers = {m for m in GRAPH[module] if m.startswith("pdelab.papers.")}
    assert not papers, f"{module} imports {sorted(papers)}: the core must loop over papers"


@pytest.mark.parametrize("paper", PAPERS)
def test_a_paper_imports_no_other_paper(paper: str) -> None:
    own = f"pdelab.papers.{paper}"
    for module in (m for m in MODULES if m == own or m.startswith(own + ".")):
        others = {
            m for m in GRAPH[module] if m.startswith("pdelab.papers.") and not m.startswith(own)
        }
        assert not others, f"{module} imports {sorted(others)}"


def test_report_names_no_paper() -> None:
    for path in (SRC / "pdelab" / "report").glob("*.py"):
        text = path.read_text()
        for paper in PAPERS:
            assert paper not in text, f"{path.name} names {paper}"
