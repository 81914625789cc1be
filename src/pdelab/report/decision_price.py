"""The price of a decision: per declared run claim, the seeds a side that would decide it, from
the best spread there is, and the GPU-hours of those runs.

Why: a claim the smoke profile cannot judge waits for the paper profile's runs, and what a
reader books for it is seeds x job classes x hours a seed. The seeds needed are
:func:`pdelab.report.decide.seeds_needed` (with its range: the spread's own 95% interval) on
every pair the claim's kind needs (:func:`pdelab.report.declared.judgement`), the largest of
them; the spread comes from, best first:

1. the profile's own runs (its rows of the run summary);
2. the paper's reported deviations: the single ``std`` (or ``*_std``) column of the claim's
   study's paper table, one per variant, read as a per-seed deviation over
   :data:`PAPER_SD_SEEDS` seeds (papers rarely print n), in the table's unit (a fraction where
   its means are at most 1, then times the claim's scale);
3. the smoke profile's runs: smaller models on less data, so a spread of another experiment,
   named as such.

A correlation claim (per family) takes its values from a probe, not the run summary: it is
left unsized here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from pdelab.plan.budget import JobClass
from pdelab.report.decide import ALPHA, SEEDS_CAP, Estimate, claimed_effect, seeds_needed
from pdelab.report.declared import Declared, Kind, judgement, runs_of
from pdelab.report.tables import paper_table
from pdelab.spec.studies import Study

OWN = "this profile's runs"
PAPER = "the paper's reported deviations"
OTHER = "another profile's runs (another experiment's spread, the profile named)"
NO_SPREAD = "no spread"
PAPER_SD_SEEDS = 5  # the seeds a paper's printed deviation is assumed to be over

Needed = tuple[int, int, int]  # seeds a side: (central, at the spread's low end, at its high)


def combine(parts: Sequence[Needed | None]) -> Needed | None:
    """A claim's seeds needed: every pair's, the largest at each end (None: a pair unsized)."""
    if not parts or any(p is None for p in parts):
        return None
    return tuple(max(p[i] for p in parts if p) for i in range(3))  # type: ignore[return-value]


def _correlation(d: Declared) -> bool:
    return d.kind == Kind.PER_FAMILY or any(_correlation(p) for p in d.parts)


def needed_from_runs(d: Declared, summary: pd.DataFrame) -> Needed | None:
    """Seeds a side from the spread of these runs (a run summary's rows), None where a pair has
    no spread (fewer than two seeds a side) or the claim is a correlation."""
    if _correlation(d) or summary.empty:
        return None
    try:
        judged = judgement(d, summary)
    except (KeyError, ValueError):
        return None
    found = []
    for _, (interval, _, _) in judged.parts:
        if interval is None or interval.measured is None or interval.claimed is None:
            return None
        found.append(seeds_needed(interval.measured, interval.claimed, ALPHA))
    return combine(found)


def paper_deviations(d: Declared, study: Study | None) -> dict[str, float]:
    """Variant -> the paper's printed per-seed deviation in the claim's unit ({}: none printed,
    or more than one deviation column to choose from)."""
    if study is None or not study.paper_table:
        return {}
    table = paper_table(study.paper.package, study.paper_table)
    columns = [c for c in table.columns if c == "std" or str(c).endswith("_std")]
    if len(columns) != 1:
        return {}
    means = pd.to_numeric(table.get("mean", pd.Series(dtype=float)), errors="coerce")
    scale = d.scale if len(means.dropna()) and means.max() <= 1 else 1.0
    values = pd.to_numeric(table[columns[0]], errors="coerce").dropna()
    return {str(k): float(v) * scale for k, v in values.items()}


def pairs(d: Declared) -> list[tuple[str, str | None, str]]:
    """(claimed variant, the one it is set against or None, the pair's key) of every pair the
    claim's kind needs (:func:`pdelab.report.declared.judgement`'s)."""
    v = d.runs.variants if d.runs else ()
    if d.kind == Kind.BEST:
        return [(v[0], r, r) for r in v[1:]]
    if d.kind == Kind.ORDERING:
        return [(a, b, b) for a, b in zip(v, v[1:], strict=False)]
    if d.kind == Kind.EACH_TASK:
        return [(v[0], v[1], t) for t in d.runs.tasks] if d.runs else []
    b = v[1] if len(v) > 1 else None
    return [(v[0], b, b or v[0])]


def needed_from_paper(d: Declared, studies: Mapping[str, Study]) -> Needed | None:
    """Seeds a side from the paper's printed deviations of every variant a pair compares."""
    if _correlation(d):
        return None
    if d.kind == Kind.ALL_OF:
        return combine([needed_from_paper(p, studies) for p in d.parts])
    deviations = paper_deviations(d, studies.get(d.study or ""))
    found = []
    for a, b, key in pairs(d):
        if a not in deviations or (b is not None and b not in deviations):
            return None
        arms = 1 if b is None else 2  # against zero, or two independent arms (pooled)
        sd = math.sqrt(sum(deviations[v] ** 2 for v in (a, b) if v is not None) / arms)
        spread = Estimate(
            math.nan,
            math.nan,
            math.nan,
            (PAPER_SD_SEEDS,) * arms,
            PAPER,
            sd,
            arms * (PAPER_SD_SEEDS - 1),
            arms,
        )
        claim = claimed_effect(d.sign, d.effect_of(key), d.unit, d.margin, d.threshold)
        found.append(seeds_needed(spread, claim, ALPHA))
    return combine(found)


def best_needed(
    d: Declared,
    studies: Mapping[str, Study],
    summary: pd.DataFrame,
    profile: str,
) -> tuple[Needed | None, str]:
    """(seeds needed, the spread it comes from): the profile's own runs, else the paper's
    printed deviations, else another profile's runs in the summary (the smoke profile's, in
    practice), named as such."""
    rows = summary[summary["profile"] == profile] if "profile" in summary else summary.iloc[:0]
    if (found := needed_from_runs(d, rows)) is not None:
        return found, OWN
    if (found := needed_from_paper(d, studies)) is not None:
        return found, PAPER
    others = sorted(set(summary["profile"]) - {profile}) if "profile" in summary else []
    for other in others:
        rows = summary[summary["profile"] == other]
        if (found := needed_from_runs(d, rows)) is not None:
            return found, f"the {other} profile's runs (another experiment's spread)"
    return None, NO_SPREAD


@dataclass(frozen=True)
class DecisionPrice:
    """One claim: its seeds needed a side (with the range) and their spread's source, the job
    classes it rests on, and one seed's GPU-hours of each (``missing``: classes the plan does
    not train, priced at nothing)."""

    paper: str
    claim: str
    needed: Needed | None
    source: str
    classes: tuple[JobClass, ...]
    seed_hours: Mapping[JobClass, float] = field(default_factory=dict)
    missing: tuple[JobClass, ...] = ()

    @property
    def sized(self) -> bool:
        """Seeds needed known and within the cap: a decision a budget can buy."""
        return self.needed is not None and self.needed[0] <= SEEDS_CAP

    def hours(self, seeds: int) -> float:
        """GPU-hours of ``seeds`` a side of every class the claim rests on."""
        return seeds * sum(self.seed_hours.get(c, 0.0) for c in self.classes)

    def needed_text(self) -> str:
        if self.needed is None:
            return "not sized"

        def one(n: int) -> str:
            return f">{SEEDS_CAP}" if n > SEEDS_CAP else str(n)

        n, low, high = self.needed
        return one(n) if low == high == n else f"{one(n)} ({one(low)} to {one(high)})"


def classes_of(d: Declared) -> tuple[JobClass, ...]:
    """The job classes (task, variant) a claim's runs train, each once."""
    return tuple(dict.fromkeys((t, v) for t, v, _ in runs_of(d, [0])))
