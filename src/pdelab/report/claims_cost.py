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
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from pdelab.plan.budget import JobClass, Want, choose
from pdelab.plan.cost import JobCost, Plan
from pdelab.plan.hardware import GPUS
from pdelab.report.decide import SEEDS_CAP
from pdelab.report.decision_price import (
    OTHER,
    OWN,
    PAPER,
    PAPER_SD_SEEDS,
    DecisionPrice,
    best_needed,
    classes_of,
)
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


SUMMARY_FILE = Path("results/summary.parquet")  # every trained run's one row (report.aggregate)


def read_summary(path: Path | None) -> pd.DataFrame:
    """The run summary, or an empty one where there is none (no run trained yet)."""
    if path is None or not Path(path).exists():
        return pd.DataFrame(columns=["profile", "task", "variant", "seed", "status"])
    return pd.read_parquet(path)


def pricing_gpu(p: Plan) -> str:
    """The GPU kind a decision is priced on by default: the one with the most jobs priced from
    measurements (the first named on a tie)."""
    return max(GPUS, key=lambda g: sum(j.time_source.get(g.name) != "assumed" for j in p.jobs)).name


def decision_prices(
    declared: Mapping[str, Sequence[Declared]],
    studies: Mapping[str, Study],
    summary: pd.DataFrame,
    p: Plan,
    gpu: str,
    same: Mapping[RunKey, RunKey] | None = None,
) -> list[DecisionPrice]:
    """Every claim's seeds needed and what a seed of each class it rests on costs on ``gpu``
    (the mean over the study's seeds of the job trained for each; a class keyed by the runs
    trained for it, so two claims sharing runs share a class)."""
    index = _job_index(p.jobs)
    out = []
    for paper, claims in declared.items():
        for d in claims:
            study = studies.get(d.study or "")
            seeds = list(study.seeds) if study else [0]
            needed, source = best_needed(d, studies, summary, p.profile)
            hours: dict[JobClass, float] = {}
            classes, missing = [], []
            for task, variant in classes_of(d):
                trained = [_trained((task, variant, s), same or {}) for s in seeds]
                key = trained[0][:2]
                classes.append(key)
                found = [index[r].gpu_hours(gpu) for r in trained if r in index]
                if found:
                    hours[key] = sum(found) / len(found)
                else:
                    missing.append(key)
            made = tuple(dict.fromkeys(classes))
            out.append(
                DecisionPrice(
                    paper, price_key(d), needed, source, made, hours, tuple(dict.fromkeys(missing))
                )
            )
    return out


def trained_seeds(summary: pd.DataFrame, profile: str) -> dict[JobClass, int]:
    """Seeds a side each job class of ``profile`` has trained (finished runs of the summary)."""
    if summary.empty or "profile" not in summary:
        return {}
    done = summary[(summary["profile"] == profile) & (summary["status"] == "ok")]
    counts = done.groupby(["task", "variant"])["seed"].nunique()
    return {(str(t), str(v)): int(n) for (t, v), n in counts.items()}


def prices_table(prices: Sequence[DecisionPrice], gpu: str, fmt: str = "md") -> str:
    """Per claim: seeds a side (range), the spread's source, its runs and their GPU-hours."""
    rows = []
    for c in prices:
        row: dict[str, Any] = {"paper": c.paper, "claim": c.claim}
        row |= {"seeds a side (range)": c.needed_text(), "spread from": c.source}
        row |= {"job classes": len(c.classes), "not in this plan": len(c.missing)}
        if c.sized and c.needed:
            n, low, high = c.needed
            cost = _hours(c.hours(n))
            if (low, high) != (n, n):
                cost += f" ({_hours(c.hours(low))}-{_hours(c.hours(high))})"
        else:
            cost = "-"
        rows.append(row | {f"GPU-h {gpu} at those seeds": cost})
    return tabulate(rows, headers="keys", tablefmt="github" if fmt == "md" else "simple")


def budget_section(
    prices: Sequence[DecisionPrice],
    budget: float,
    gpu: str,
    trained: Mapping[JobClass, int],
    fmt: str = "md",
) -> list[str]:
    """The claims a budget decides (greedy, :mod:`pdelab.plan.budget`), the runs to train first
    for them, and what that rests on."""
    table = "github" if fmt == "md" else "simple"
    bullet = "- " if fmt == "md" else "* "
    sized = [c for c in prices if c.sized and not c.missing]
    wants = [Want(f"{c.paper}: {c.claim}", dict.fromkeys(c.classes, c.needed[0])) for c in sized]
    seed_hours = {k: h for c in sized for k, h in c.seed_hours.items()}
    chosen, have = choose(wants, seed_hours, budget, trained)
    spent = chosen[-1].cumulative if chosen else 0.0
    decided = [
        {"order": i + 1, "claim": c.want.name, "seeds a side": max(c.want.seeds.values())}
        | {"adds GPU-h": _hours(c.hours), "total GPU-h": _hours(c.cumulative)}
        for i, c in enumerate(chosen)
    ]
    runs = [
        {"task": k[0], "variant": k[1], "seeds a side": n, "trained": trained.get(k, 0)}
        | {"to train": n - trained.get(k, 0)}
        | {"GPU-h": _hours((n - trained.get(k, 0)) * seed_hours.get(k, 0.0))}
        for k, n in sorted(have.items())
        if n > trained.get(k, 0)
    ]
    head = "## " if fmt == "md" else ""
    assumptions = [
        f"Budget: {budget:g} GPU-hours on {gpu} (the plan's hours a seed of each job class on "
        "that kind, training steps only); runs this profile has already trained cost nothing.",
        "Greedy: the claim whose runs not yet trained or chosen cost least is taken first, while "
        "it fits; every claim counts one; runs shared by claims are paid once. Not an optimum.",
        "A claim counts as decided at its central seeds a side, every job class of it at that "
        "many seeds; at the high end of its spread's interval it may need more (the range "
        "above), at a level of 0.05 before Holm's adjustment across a paper's claims, with 80% "
        "power (pdelab.report.decide.seeds_needed).",
        f"Left out: {len(prices) - len(sized)} claims not sized (no spread, or more than "
        f"{SEEDS_CAP} seeds a side) or resting on runs this plan does not train.",
    ]
    return [
        f"{head}Within {budget:g} GPU-hours on {gpu}",
        "",
        f"{len(chosen)} of {len(prices)} claims decided for {_hours(spent)} GPU-hours.",
        "",
        tabulate(decided, headers="keys", tablefmt=table) if decided else "(none fits)",
        "",
        "Runs to train first:",
        "",
        tabulate(runs, headers="keys", tablefmt=table) if runs else "(none)",
        "",
        "Assumptions:",
        "",
        *(bullet + line for line in assumptions),
    ]


def section(
    params: Mapping[str, Any],
    p: Plan,
    fmt: str = "md",
    budget: float | None = None,
    gpu: str | None = None,
    summary: Path | None = SUMMARY_FILE,
) -> str:
    """The plan's sections on what each claim costs, the price of deciding each and, with a
    ``budget`` (GPU-hours on ``gpu``; default :func:`pricing_gpu`), the claims it decides; as
    :func:`pdelab.plan.render.render` writes its others (Markdown, or plain text)."""
    from pdelab.spec.run_sheet import same_runs, validate
    from pdelab.spec.studies import studies_of

    studies = studies_of(params, p.profile)
    same = same_runs(validate(params, p.profile))
    seeds = {n: s.seeds for n, s in studies.items()}
    declared = declarations(studies)
    costs = claim_costs(declared, seeds, p.jobs, same)
    total = total_of(costs, p.jobs, same)
    gpu = gpu or pricing_gpu(p)
    runs = read_summary(summary)
    prices = decision_prices(declared, studies, runs, p, gpu, same)
    head = "## " if fmt == "md" else ""
    lines = [
        f"{head}What each claim costs",
        "",
        "The GPU-hours of the runs each declared run claim rests on, at its study's seeds "
        "(a run shared by several claims counts for each; the last row counts every "
        "claim's runs once; runs the plan does not train, outside the profile or left "
        "out by --only, are counted apart).",
        "",
        claims_table(costs, total, fmt),
        "",
        f"{head}The price of a decision",
        "",
        "Per claim: the seeds a side that would decide it (pdelab.report.decide.seeds_needed on "
        "every pair its kind needs; in brackets, at each end of the spread's 95% interval), "
        f"from the best spread there is: {OWN}, else {PAPER} (over {PAPER_SD_SEEDS} seeds "
        f"assumed), else {OTHER}; and the GPU-hours on {gpu} of that many seeds of every job "
        "class it rests on.",
        "",
        prices_table(prices, gpu, fmt),
    ]
    if budget is not None:
        lines += ["", *budget_section(prices, budget, gpu, trained_seeds(runs, p.profile), fmt)]
    return "\n".join(lines) + "\n"
