"""A run claim declared as data: the paper's words, the runs it rests on and the comparison it
makes, judged by the kit from the declaration alone.

A paper's sentence fixes its comparison: "the best of seven positions" compares one variant
with every other, "on IMDb, AG News and SST-2" holds on each task (not on their mean),
"correlates for FNA and LA" needs one r per family, "trails ViT by about 0.5 with fewer
parameters" is an equivalence around -0.5 at the paper's parameter ratio. A :class:`Declared`
names that comparison (its :class:`Kind`) with the runs it rests on (:class:`Runs`), and
:func:`judgement` builds every pair the kind needs from the declaration itself: an audit hands
over where the values come from, never the pairs, so no claim of a best can be judged against
one rival chosen by hand. Because a declaration is data, the cost plan can price each claim's
runs (:func:`runs_of`, :mod:`pdelab.report.claims_cost`) without any result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import pandas as pd

from pdelab.report.claims import (
    NOT_MEASURABLE,
    Claim,
    Judged,
    Reading,
    all_pairs,
    correlation,
    difference,
    measured,
)
from pdelab.report.floor import FLOOR_KEY


class Kind(StrEnum):
    """The comparison a claim makes, and so the pairs its verdict needs."""

    DIFFERENCE = "difference"  # variants[0] − variants[1] (one variant: against zero)
    BEST = "best"  # variants[0] against every other listed variant: every pair
    ORDERING = "ordering"  # variants[0] > variants[1] > ...: every adjacent pair
    EACH_TASK = "each_task"  # variants[0] − variants[1] on every listed task, not their mean
    PER_FAMILY = "per_family"  # one correlation per family, every family must hold
    EQUIVALENCE = "equivalence"  # variants[0] − variants[1] inside the paper's effect ± margin
    THRESHOLD = "threshold"  # variants[0] − variants[1] beyond the paper's threshold
    NULL = "null"  # no effect: variants[0] − variants[1] inside ± margin
    ALL_OF = "all_of"  # every pair of every part at once ("at every position")


@dataclass(frozen=True)
class Runs:
    """The runs a claim rests on: its tasks, its variants (the claimed one first) and the
    metric compared. Several tasks outside :attr:`Kind.EACH_TASK` are averaged per seed (the
    paper's average over them). ``families``: for :attr:`Kind.PER_FAMILY`, each family's name
    and its variants."""

    tasks: tuple[str, ...]
    variants: tuple[str, ...]
    metric: str = "test_acc"
    families: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "families", tuple((name, tuple(vs)) for name, vs in self.families))
        if not self.tasks:
            raise ValueError("Runs: no task: name the task(s) the claim's runs are trained on")
        for name, values in (("task", self.tasks), ("variant", self.variants)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"Runs: {name}(s) {repeated} listed twice: list each once")

    @property
    def all_variants(self) -> tuple[str, ...]:
        """Every variant the claim's runs use, its families' included, each once."""
        return tuple(dict.fromkeys([*self.variants, *(v for _, vs in self.families for v in vs)]))


# (tasks, variant) -> one value per seed; for PER_FAMILY, (tasks, family) -> (x, y), both
# indexed by (setting, seed) as :func:`pdelab.report.claims.correlation` takes them
Values = Callable[[tuple[str, ...], str], "pd.Series | tuple[pd.Series, pd.Series]"]


@dataclass(frozen=True)
class Declared:
    """One run claim as data. ``paper``: the paper's number(s) as printed. ``effect``: the
    paper's effect in ``unit`` (NaN: a claim of sign alone); ``effects``: one per rival
    (``BEST``), per adjacent pair (``ORDERING``, keyed by its lower variant) or per task
    (``EACH_TASK``), keyed by its name. ``margin`` None: the documented
    default of :func:`pdelab.report.decide.claimed_effect`. ``ratio``: for ``EQUIVALENCE``
    made at a stated size, the paper's ratio (e.g. parameters of variants[0] over
    variants[1]); a run at a ratio further than ``ratio_tolerance`` from it does not make the
    paper's comparison. ``names``: the name shown for each pair (rival, task or family; the
    kind's default otherwise). ``parts``: for ``ALL_OF``, the declarations whose every pair
    must hold."""

    claim: str
    where: str
    quote: str
    paper: str
    kind: Kind
    runs: Runs | None = None
    sign: int = +1
    effect: float = math.nan
    effects: Mapping[str, float] = field(default_factory=dict)
    margin: float | None = None
    threshold: float | None = None
    ratio: float | None = None
    ratio_tolerance: float = 0.1
    ratio_of: str = "the reference's size"  # what the ratio measures, as the verdict says it
    unit: str = "points"
    scale: float = 100.0
    settings: str = "settings"  # PER_FAMILY: what each seed's r runs over
    names: Mapping[str, str] = field(default_factory=dict)
    readings: tuple[Reading, ...] = ()
    headline: bool = True
    study: str | None = None  # the study whose seeds the runs are trained with
    parts: tuple[Declared, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        object.__setattr__(self, "effects", dict(self.effects))
        object.__setattr__(self, "names", dict(self.names))
        object.__setattr__(self, "parts", tuple(self.parts))
        object.__setattr__(self, "readings", tuple(self.readings))
        where = f"claim {self.claim!r} ({self.kind})"
        if self.kind == Kind.ALL_OF:
            if len(self.parts) < 2:
                raise ValueError(
                    f"{where}: needs two or more parts; one part is that part's own claim"
                )
            if self.runs is not None:
                raise ValueError(f"{where}: its runs are its parts'; leave runs unset")
            return
        if self.parts:
            raise ValueError(f"{where}: parts are for kind all_of only")
        if self.runs is None:
            raise ValueError(f"{where}: no runs: declare Runs(tasks, variants, metric)")
        variants, tasks = self.runs.variants, self.runs.tasks
        if self.sign not in (-1, 0, 1):
            raise ValueError(f"{where}: sign {self.sign} is not +1, -1 or 0")
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"{where}: margin {self.margin} must be positive (None: default)")
        if self.kind == Kind.BEST:
            if len(variants) < 3:
                raise ValueError(
                    f"{where}: a best is judged against every rival, and {list(variants)} "
                    "names fewer than two: list the claimed variant first and every rival "
                    "after it, or declare kind 'difference' for a comparison with one"
                )
            self._keyed(variants[1:], "rival")
        elif self.kind == Kind.ORDERING:
            if len(variants) < 2:
                raise ValueError(
                    f"{where}: an ordering needs two or more variants, highest first; got "
                    f"{list(variants)}"
                )
            self._keyed(variants[1:], "lower variant of each adjacent pair")
        elif self.kind == Kind.EACH_TASK:
            if len(tasks) < 2:
                raise ValueError(
                    f"{where}: holds on each of several tasks, and {list(tasks)} names one: "
                    "list every task the paper names, or declare kind 'difference'"
                )
            if len(variants) != 2:
                raise ValueError(
                    f"{where}: compares two variants on each task; got {list(variants)}"
                )
            self._keyed(tasks, "task")
        elif self.kind == Kind.PER_FAMILY:
            if not self.runs.families:
                raise ValueError(
                    f"{where}: no families: declare Runs(families=((name, variants), ...)), "
                    "one correlation per family"
                )
            if self.runs.metric.count(",") != 1:
                raise ValueError(
                    f"{where}: a correlation needs two metrics: metric='x,y' (got "
                    f"{self.runs.metric!r})"
                )
        else:
            if not 1 <= len(variants) <= 2:
                raise ValueError(
                    f"{where}: compares one variant with another (or with zero); got "
                    f"{list(variants)}: declare kind 'best' for one against several"
                )
            if self.effects:
                raise ValueError(f"{where}: effects are per rival or per task: use effect=")
        if self.kind == Kind.THRESHOLD and self.threshold is None:
            raise ValueError(f"{where}: no threshold: declare threshold= (the paper's bound)")
        if self.kind != Kind.THRESHOLD and self.threshold is not None:
            raise ValueError(f"{where}: a threshold is for kind 'threshold' only")
        if self.kind == Kind.NULL and self.sign != 0:
            raise ValueError(f"{where}: a null claim has sign 0 (no effect)")
        if self.kind != Kind.NULL and self.kind != Kind.PER_FAMILY and self.sign == 0:
            raise ValueError(f"{where}: sign 0 is a claim of no effect: declare kind 'null'")
        if self.kind == Kind.EQUIVALENCE and math.isnan(self.effect):
            raise ValueError(
                f"{where}: an equivalence is around the paper's effect: declare effect="
            )
        if self.ratio is not None and self.kind != Kind.EQUIVALENCE:
            raise ValueError(f"{where}: a stated ratio is for kind 'equivalence' only")

    def _keyed(self, keys: Sequence[str], what: str) -> None:
        """Per-key effects, where given, must name each key exactly."""
        if self.effects and set(self.effects) != set(keys):
            raise ValueError(
                f"claim {self.claim!r} ({self.kind}): effects name {sorted(self.effects)}, "
                f"the {what}s are {sorted(keys)}: give one effect per {what}"
            )

    def effect_of(self, key: str) -> float:
        """The paper's effect of one pair (its rival or task), else the claim's one effect."""
        return float(self.effects.get(key, self.effect))

    def name_of(self, key: str) -> str:
        return self.names.get(key, key)


def runs_of(declared: Declared, seeds: Sequence[int]) -> list[tuple[str, str, int]]:
    """The (task, variant, seed) runs a claim rests on, each once, in declaration order."""
    if declared.kind == Kind.ALL_OF:
        found = [run for part in declared.parts for run in runs_of(part, seeds)]
        return list(dict.fromkeys(found))
    runs = declared.runs
    return [(t, v, s) for t in runs.tasks for v in runs.all_variants for s in seeds]


def metric_per_seed(
    summary: pd.DataFrame, tasks: Sequence[str], variant: str, metric: str = "test_acc"
) -> pd.Series:
    """A metric per seed of a variant's finished runs, averaged over the tasks (seeds that
    have every task): what a claim over several tasks compares."""
    runs = summary[
        (summary["variant"] == variant) & summary["task"].isin(tasks) & (summary["status"] == "ok")
    ]
    per = runs.pivot_table(index="seed", columns="task", values=metric)
    return per.reindex(columns=list(tasks)).dropna().mean(axis=1)


@dataclass(frozen=True)
class Judgement:
    """A declaration judged: the claim's one verdict and each pair it rests on (rival, task
    or family -> its own interval, verdict and reason)."""

    declared: Declared
    judged: Judged
    parts: tuple[tuple[str, Judged], ...]

    def part(self, key: str) -> Judged:
        return dict(self.parts)[key]

    def claim(self, profile: str, ours: str) -> Claim:
        """The run verdict the report shows (:func:`pdelab.report.claims.measured`)."""
        d = self.declared
        made = measured(profile, d.claim, d.where, d.quote, d.paper, ours, self.judged, d.headline)
        if d.readings:
            made = replace(made, readings=d.readings)
        if d.runs is not None and d.kind != Kind.PER_FAMILY:  # what its floor is read by
            where = {"tasks": list(d.runs.tasks), "metric": d.runs.metric, "scale": d.scale}
            made = replace(made, extra={**made.extra, FLOOR_KEY: json.dumps(where)})
        return made


def _source(values: Values | pd.DataFrame, metric: str) -> Values:
    if isinstance(values, pd.DataFrame):
        return lambda tasks, variant: metric_per_seed(values, tasks, variant, metric)
    return values


def judgement(
    declared: Declared, values: Values | pd.DataFrame, ratio: float | None = None
) -> Judgement:
    """Judge a declaration on its runs' values (a summary, or a function of (tasks, variant)
    giving one value per seed), building every pair its kind needs: a best against each
    rival, an ordering pair by adjacent pair, a gain on each task, one correlation per
    family, every pair of every part.
    ``ratio``: ours, for an equivalence declared at the paper's ratio (NaN or None: not
    known, judged as run)."""
    d = declared
    if d.kind == Kind.ALL_OF:
        done = [judgement(part, values, ratio) for part in d.parts]
        pairs = [(p.declared.name_of(k), j) for p in done for k, j in p.parts]
        return Judgement(d, all_pairs([j for _, j in pairs], [k for k, _ in pairs]), tuple(pairs))
    runs = d.runs
    source = _source(values, runs.metric)
    tasks, variants = runs.tasks, runs.variants

    def compare(on: tuple[str, ...], a: str, b: str | None, effect: float) -> Judged:
        return difference(
            source(on, a),
            None if b is None else source(on, b),
            d.sign,
            effect,
            d.unit,
            d.scale,
            margin=d.margin,
            threshold=d.threshold,
        )

    if d.kind == Kind.BEST:
        parts = [(r, compare(tasks, variants[0], r, d.effect_of(r))) for r in variants[1:]]
    elif d.kind == Kind.ORDERING:
        pairs = zip(variants, variants[1:], strict=False)
        parts = [(b, compare(tasks, a, b, d.effect_of(b))) for a, b in pairs]
    elif d.kind == Kind.EACH_TASK:
        parts = [(t, compare((t,), variants[0], variants[1], d.effect_of(t))) for t in tasks]
    elif d.kind == Kind.PER_FAMILY:
        parts = []
        for family, _ in runs.families:
            x, y = source(tasks, family)
            parts.append((family, correlation(x, y, d.sign, d.effect, d.settings, margin=d.margin)))
    else:
        b = variants[1] if len(variants) > 1 else None  # the key: what variants[0] is set against
        parts = [(b or variants[0], compare(tasks, variants[0], b, d.effect))]
    if len(parts) == 1:
        judged = parts[0][1]
    else:
        judged = all_pairs([j for _, j in parts], [d.name_of(k) for k, _ in parts])
    if (
        d.kind == Kind.EQUIVALENCE
        and d.ratio is not None
        and ratio is not None
        and not math.isnan(ratio)
        and abs(ratio - d.ratio) > d.ratio_tolerance
    ):
        judged = (
            None if judged[0] is None else replace(judged[0], measured=None, claimed=None),
            NOT_MEASURABLE,
            f"made at {ratio:.2f} times {d.ratio_of}, not the paper's {d.ratio:.2f}: "
            "the comparison the claim makes is not the one run here",
        )
    return Judgement(d, judged, tuple(parts))


def evaluate(
    declared: Declared,
    values: Values | pd.DataFrame,
    profile: str,
    ours: str | Callable[[Judgement], str],
    ratio: float | None = None,
) -> Claim:
    """The claim a declaration makes, judged on its runs (:func:`judgement`), with our
    measure in words (or a function of the judgement giving it)."""
    judged = judgement(declared, values, ratio)
    return judged.claim(profile, ours(judged) if callable(ours) else ours)


def price_key(declared: Declared) -> str:
    """How a claim is named in a table of what each claim costs."""
    return f"{declared.claim} ({declared.where})"
