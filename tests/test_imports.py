"""The package's import graph (pdelab.import_graph, read from the source): floors in order, no
cycles, papers plug in and the core names none.

The floors, lowest first: a module imports only from its own floor or below. An import that
runs up a floor must be listed in UPWARD with the reason it is there.
"""

from __future__ import annotations

import pytest

from pdelab.import_graph import SRC, graph, modules

# every paper package: a folder of pdelab/papers with an __init__.py (nothing to keep by hand)
PAPERS = sorted(p.parent.name for p in (SRC / "pdelab" / "papers").glob("*/__init__.py"))

# (floor, module prefixes): a module's floor is that of the longest prefix naming it
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    # contracts and helpers every layer may use: the plug-in registries, spec building, a
    # run's records, atomic writes, process plumbing
    (
        "core",
        (
            "pdelab.registry",
            "pdelab.import_graph",
            "pdelab.specs",
            "pdelab.atomic",
            "pdelab.records",
            "pdelab.plugins",
            "pdelab.causal_verdict",
            "pdelab.bleu",
            "pdelab.gpu_slots",
            "pdelab.gpu_job",  # a job that opens CUDA, on a GPU slot of its own
            "pdelab.cluster",  # what each rule asks a cluster for; SLURM status checks
            "pdelab.warm",
            "pdelab.job",
            "pdelab.job_lines",  # a job's lines in Snakemake's output, kept to a screen's width
            "pdelab.build_summary",  # the lines a build ends with, read from run records
            "pdelab.environment",  # the interpreter and packages a run is trained with
            "pdelab.papers",  # the papers' namespace package only; each paper is on top
        ),
    ),
    # what params.yaml may say about a network, torch-free
    ("model specs", ("pdelab.models", "pdelab.models.spec", "pdelab.models.options")),
    ("config", ("pdelab.config",)),  # one run, resolved from params.yaml
    ("data", ("pdelab.data",)),  # each task's data, built from its params block
    # every run of a run profile: studies, the run sheet, each task kind's option checks
    (
        "plan",
        (
            "pdelab.run_sheet",
            "pdelab.studies",
            "pdelab.task_kinds",
            "pdelab.dvc_stages",
            "pdelab.cli",
            "pdelab.shadowed",  # params.yaml keys a run profile overrides in every run
            "pdelab.provenance",  # the source a run executes, read without importing it
            "pdelab.staleness",  # whether a run is current, from its records
        ),
    ),
    # the torch side: networks, mechanisms, task kinds' training strategies, checkpoints
    (
        "models",
        (
            "pdelab.models.attention",
            "pdelab.models.diffusion",
            "pdelab.models.factory",
            "pdelab.models.seq2seq",
            "pdelab.models.smoothing",
            "pdelab.models.transformer",
            "pdelab.precision",
            "pdelab.causality",
            "pdelab.task_kinds.",
            "pdelab.checkpoint",
            "pdelab.trained",  # a trained run loaded back, checked, for the papers' probes
            "pdelab.shapes",  # a task's shapes before its data exists: models at paper size
            "pdelab.micro_batch",  # a step in micro-batches: the trainer's session holds it
            "pdelab.distributed",  # processes sharing each batch: the session holds their world
        ),
    ),
    ("tracking", ("pdelab.tracking",)),  # MLflow: runs logged live or from their records
    # training, and what it will cost and whether it runs at paper scale, before it does
    (
        "training",
        (
            "pdelab.train",
            "pdelab.step_timing",
            "pdelab.plan",  # the cost plan: counted steps, their cost, rendering, the check
            "pdelab.card_fit",  # each job's micro-batch for a card, from the plan's counts
            "pdelab.plan_calibration",  # the cost plan measured on a GPU
            "pdelab.rehearsal",
        ),
    ),
    ("report", ("pdelab.report",)),
    ("papers", ("pdelab.papers.",)),
]
# Imports that run up a floor, each with its reason (at most two).
UPWARD: dict[tuple[str, str], str] = {
    ("pdelab.cli", "pdelab.plan.__main__"): (
        "`pdelab plan` counts training steps with torch; imported inside that subcommand "
        "alone, so the CLI's other subcommands stay torch-free"
    ),
    ("pdelab.cli", "pdelab.tracking.__main__"): (
        "`pdelab mlflow` prints the links that open the runs tables; imported inside that "
        "subcommand alone, so the CLI's other subcommands never import mlflow"
    ),
}


MODULES = modules()
GRAPH = graph()  # mutable: the can-fail tests add an edge and take it away


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


def floor(module: str) -> int:
    """The floor of a module: that of the longest prefix naming it (a prefix ending in a dot
    names the modules under it; one without, the module and the modules under it)."""
    if module == "pdelab":
        return 0
    best, found = -1, -1
    for level, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            named = (
                module.startswith(prefix)
                if prefix.endswith(".")
                else (module == prefix or module.startswith(prefix + "."))
            )
            if named and len(prefix) > best:
                best, found = len(prefix), level
    return found


def upward_imports() -> list[tuple[str, str]]:
    return sorted((m, n) for m in GRAPH for n in GRAPH[m] if floor(n) > floor(m))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_floor(module: str) -> None:
    assert floor(module) >= 0, f"{module} is on no floor: add it to FLOORS"


def test_no_import_runs_up_a_floor() -> None:
    unlisted = [
        f"{m} ({FLOORS[floor(m)][0]}) imports {n} ({FLOORS[floor(n)][0]})"
        for m, n in upward_imports()
        if (m, n) not in UPWARD
    ]
    assert not unlisted, "imports that run up a floor:\n" + "\n".join(unlisted)
    assert len(UPWARD) <= 2 and all(UPWARD.values())


def test_the_floor_check_can_fail() -> None:
    GRAPH["pdelab.config"].add("pdelab.report.tables")
    try:
        assert ("pdelab.config", "pdelab.report.tables") in upward_imports()
    finally:
        GRAPH["pdelab.config"].discard("pdelab.report.tables")


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
