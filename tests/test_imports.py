"""The package's layers, read from the source (pdelab.records.import_graph): each package of
pdelab is one layer, the layers are in order, no import runs up a layer, there is no cycle, and
the papers plug in on top while the core names none of them.

A module's layer is its package (``pdelab.training.train`` is on ``training``); the loose
modules at the top are listed by name. An import that runs up a layer must be listed in
UPWARD with the reason it is there.
"""

from __future__ import annotations

import pytest

from pdelab.records.import_graph import SRC, graph, modules

PACKAGE = SRC / "pdelab"
# every paper package: a folder of pdelab/papers with an __init__.py (nothing to keep by hand)
PAPERS = sorted(p.parent.name for p in (PACKAGE / "papers").glob("*/__init__.py"))

# the layers, lowest first: a module imports only from its own layer or below
LAYERS: list[tuple[str, str]] = [
    ("pdelab", "the package itself, empty"),
    ("spec", "params.yaml -> validated run specs, registries, the plug-in contract; no torch"),
    ("records", "a run's records, written atomically, and what made them (provenance)"),
    ("data", "each task's data, fetched and prepared; a data job imports only its task"),
    ("models", "the backbone with named sites, the kernel registry, the factory"),
    ("runtime", "how jobs run: warm start, GPU slots, GPU jobs, cluster, DVC stages"),
    ("tracking", "MLflow, an observer of the records"),
    ("training", "exactly one training job's code"),
    ("plan", "every job before it runs: shapes, cost plan, card fit, rehearsal, timing"),
    ("report", "tables, figures, claims and REPORT.md from the runs' results"),
    ("cli", "the one `pdelab` command"),
    ("papers", "the papers, each one folder, on top of everything"),
]
LOOSE = {"pdelab.cli"}  # the only modules at the top of the package
# Imports that run up a layer, each with its reason (at most two).
UPWARD: dict[tuple[str, str], str] = {
    ("pdelab.tracking.parents", "pdelab.report.stats"): "a parent run's interval over its seeds "
    "is the report's own t interval: one rule for every interval the project prints",
}

MODULES = modules()
GRAPH = graph()  # mutable: the can-fail tests add an edge and take it away
NAMES = [name for name, _ in LAYERS]


def layer(module: str) -> int:
    """A module's layer: its package's (the papers' namespace package sits with the specs,
    where the plug-in contract walks it; each paper is on the top layer)."""
    parts = module.split(".")
    if module == "pdelab.papers":
        return NAMES.index("spec")
    return NAMES.index(parts[1]) if len(parts) > 1 else 0


def upward_imports() -> list[tuple[str, str]]:
    return sorted((m, n) for m in GRAPH for n in GRAPH[m] if layer(n) > layer(m))


def test_every_package_is_a_layer() -> None:
    """A new package of pdelab is placed among the layers on purpose, never by default."""
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(NAMES) - {"pdelab", "cli"}


def test_at_most_three_loose_modules() -> None:
    loose = {
        m
        for m in MODULES
        if m.count(".") == 1
        and m.replace(".", "/") + ".py"
        in {p.relative_to(SRC).with_suffix(".py").as_posix() for p in PACKAGE.glob("*.py")}
    }
    assert loose - {"pdelab.__init__"} == LOOSE and len(LOOSE) <= 3


def test_no_import_runs_up_a_layer() -> None:
    unlisted = [
        f"{m} ({NAMES[layer(m)]}) imports {n} ({NAMES[layer(n)]})"
        for m, n in upward_imports()
        if (m, n) not in UPWARD
    ]
    assert not unlisted, "imports that run up a layer:\n" + "\n".join(unlisted)
    assert len(UPWARD) <= 2 and all(UPWARD.values())


def test_the_layer_check_can_fail() -> None:
    GRAPH["pdelab.spec.config"].add("pdelab.report.tables")
    try:
        assert ("pdelab.spec.config", "pdelab.report.tables") in upward_imports()
    finally:
        GRAPH["pdelab.spec.config"].discard("pdelab.report.tables")


def test_the_graph_is_read() -> None:
    assert "pdelab.spec.config" in GRAPH["pdelab.spec.run_sheet"]
    assert "pdelab.report.tables" in GRAPH["pdelab.report.__main__"]


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


def test_no_import_cycle() -> None:
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_can_fail() -> None:
    GRAPH["pdelab.spec.fields"].add("pdelab.spec.run_sheet")  # run_sheet -> config -> fields
    try:
        assert find_cycle() is not None
    finally:
        GRAPH["pdelab.spec.fields"].discard("pdelab.spec.run_sheet")


def test_the_papers_are_found() -> None:
    assert "diffusion_positions" in PAPERS and "mechanisms" in PAPERS


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


@pytest.mark.parametrize("linked", ["papers/fractional_attention", "papers/linear_diffusion"])
def test_a_paper_folder_that_is_a_symbolic_link_is_read(tmp_path, linked: str) -> None:
    """A paper folder linked in from elsewhere holds modules like any other (a module of it
    missing from the graph was a KeyError in provenance); a link back up is walked once."""
    src = tmp_path / "src"
    package = src / "pdelab"
    (package / "papers").mkdir(parents=True)
    for init in ("__init__.py", "papers/__init__.py"):
        (package / init).write_text("")
    elsewhere = tmp_path / "checkout"
    (elsewhere / "tests").mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("from pdelab.papers import other\n")
    (elsewhere / "report.py").write_text("import pdelab.papers\n")
    (elsewhere / "tests" / "test_report.py").write_text("")
    (elsewhere / "loop").symlink_to(package, target_is_directory=True)
    (package / linked).symlink_to(elsewhere, target_is_directory=True)
    name = "pdelab." + linked.replace("/", ".")
    found = modules.__wrapped__(src)
    assert sorted(found) == sorted(["pdelab", "pdelab.papers", name, f"{name}.report"])
    assert found[f"{name}.report"] == package / linked / "report.py"
    assert graph(src)[f"{name}.report"] == {"pdelab.papers"}
