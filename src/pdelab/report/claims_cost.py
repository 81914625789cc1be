"""What each claim costs: the GPU-hours of the runs a paper's claim rests on.

Every registered paper declares its run claims as data (:class:`pdelab.report.declared.Declared`,
a module-level ``declared(studies)``), so the plan can price a claim from params.yaml alone:
the (task, variant, seed) runs it rests on (:func:`pdelab.report.declared.runs_of`, at its
study's seeds) are looked up among the plan's jobs (a run that repeats another's spec is the
job trained for it) and their hours summed. A run shared by several claims counts in full for
each of them; the total, the runs of every claim each counted once, is shown once, beside the
plan's total. Why: to see which claims a budget buys, and which would need more seeds.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from pdelab.plan.cost import JobCost, Plan
from pdelab.plan.hardware import GPUS
from pdelab.report.declared import Declared, price_key, runs_of
from pdelab.spec.studies import RunKey, Study

# the modules of a paper's package that may declare its run claims (``declared(studies)``)
DECLARING_MODULES = ("audit", "claims", "graph_probe_claims")

Run = tuple[str, str, int]


@dataclass(frozen=True)
class ClaimCost:
    """One claim's runs and what the plan's jobs for them cost (``missing``: runs the
    plan does not train, priced at nothing)."""

    paper: str
    claim: str
    kind: str
    runs: tuple[Run, ...]
    missing: tuple[Run, ...]
    gpu_hours: Mapping[str, float] = field(default_factory=dict)
    core_hours: float = 0.0


def _job_index(jobs: Iterable[JobCost]) -> dict[Run, JobCost]:
    return {(j.run.task, j.run.variant, j.run.seed): j for j in jobs}


def _trained(run: Run, same: Mapping[RunKey, RunKey]) -> Run:
    """The run trained for this one (itself, or the earlier run whose spec it repeats)."""
    key = same.get(RunKey(*run))
    return (key.task, key.variant, key.seed) if key else run


def cost_of(
    paper: str,
    declared: Declared,
    seeds: Sequence[int],
    jobs: Mapping[Run, JobCost],
    same: Mapping[RunKey, RunKey] | None = None,
) -> ClaimCost:
    """One claim's runs at these seeds, priced on the plan's jobs (each trained run once)."""
    runs = tuple(runs_of(declared, seeds))
    trained = dict.fromkeys(_trained(r, same or {}) for r in runs)
    found = [jobs[r] for r in trained if r in jobs]
    return ClaimCost(
        paper,
        price_key(declared),
        str(declared.kind),
        runs,
        tuple(r for r in runs if _trained(r, same or {}) not in jobs),
        {g.name: sum(j.gpu_hours(g.name) for j in found) for g in GPUS},
        sum(j.core_hours for j in found),
    )


def claim_costs(
    declared: Mapping[str, Sequence[Declared]],
    seeds: Mapping[str | None, Sequence[int]],
    jobs: Iterable[JobCost],
    same: Mapping[RunKey, RunKey] | None = None,
) -> list[ClaimCost]:
    """Every paper's claims (paper -> its declarations) priced on the plan's jobs, each at
    its study's seeds (``seeds``: study -> seeds; None: the seeds of a claim with no study)."""
    index = _job_index(jobs)
    out = []
    for paper, claims in declared.items():
        for d in claims:
            if d.study not in seeds and None not in seeds:
                raise KeyError(
                    f"claim {d.claim!r}: no seeds for study {d.study!r}: pass that study's "
                    "seeds (or seeds[None] for claims that name no study)"
                )
            at = seeds[d.study] if d.study in seeds else seeds[None]
            out.append(cost_of(paper, d, at, index, same))
    return out


def total_of(
    costs: Sequence[ClaimCost],
    jobs: Iterable[JobCost],
    same: Mapping[RunKey, RunKey] | None = None,
) -> ClaimCost:
    """The runs of every claim together, each trained run counted once."""
    index = _job_index(jobs)
    runs = tuple(dict.fromkeys(r for c in costs for r in c.runs))
    trained = dict.fromkeys(_trained(r, same or {}) for r in runs)
    found = [index[r] for r in trained if r in index]
    return ClaimCost(
        "",
        "every claim's runs, each once",
        "",
        runs,
        tuple(r for r in runs if _trained(r, same or {}) not in index),
        {g.name: sum(j.gpu_hours(g.name) for j in found) for g in GPUS},
        sum(j.core_hours for j in found),
    )


def _hours(h: float) -> str:
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def claims_table(costs: Sequence[ClaimCost], total: ClaimCost, fmt: str = "md") -> str:
    """The table of what each claim costs, its total row once at the end."""
    cpu = any(c.core_hours for c in [*costs, total])

    def row(c: ClaimCost) -> dict[str, Any]:
        out: dict[str, Any] = {"paper": c.paper, "claim": c.claim, "kind": c.kind}
        out |= {"runs": len(c.runs), "not in this plan": len(c.missing)}
        out |= {f"GPU-h {g.name}": _hours(c.gpu_hours.get(g.name, 0.0)) for g in GPUS}
        return out | ({"CPU core-h": _hours(c.core_hours)} if cpu else {})

    rows = [row(c) for c in costs] + [row(total)]
    return tabulate(rows, headers="keys", tablefmt="github" if fmt == "md" else "simple")


def declarations(studies: Mapping[str, Study]) -> dict[str, tuple[Declared, ...]]:
    """Each registered paper's declared run claims on these studies (paper title -> claims),
    from the ``declared(studies)`` of its :data:`DECLARING_MODULES`."""
    from pdelab.spec.plugins import load_all

    papers = load_all()
    out: dict[str, tuple[Declared, ...]] = {}
    for paper in (papers.get(name) for name in papers.in_order()):
        own = {n: s for n, s in studies.items() if s.kind in paper.study_kinds}
        if not own:
            continue
        found: list[Declared] = []
        for module in DECLARING_MODULES:
            try:
                loaded = importlib.import_module(f"{paper.package}.{module}")
            except ModuleNotFoundError as missing:
                if missing.name != f"{paper.package}.{module}":
                    raise
                continue
            if hasattr(loaded, "declared"):
                found += loaded.declared(own)
        if found:
            out[paper.title] = tuple(found)
    return out


def section(params: Mapping[str, Any], p: Plan, fmt: str = "md") -> str:
    """The plan's section on what each claim costs, as :func:`pdelab.plan.render.render`
    writes its others (Markdown, or plain text)."""
    from pdelab.spec.run_sheet import same_runs, validate
    from pdelab.spec.studies import studies_of

    studies = studies_of(params, p.profile)
    same = same_runs(validate(params, p.profile))
    seeds = {n: s.seeds for n, s in studies.items()}
    costs = claim_costs(declarations(studies), seeds, p.jobs, same)
    total = total_of(costs, p.jobs, same)
    head = "## " if fmt == "md" else ""
    return (
        "\n".join(
            [
                f"{head}What each claim costs",
                "",
                "The GPU-hours of the runs each declared run claim rests on, at its study's seeds "
                "(a run shared by several claims counts for each; the last row counts every "
                "claim's runs once; runs the plan does not train, outside the profile or left "
                "out by --only, are counted apart).",
                "",
                claims_table(costs, total, fmt),
            ]
        )
        + "\n"
    )
