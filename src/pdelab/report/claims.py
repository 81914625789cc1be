"""The claims kit: every paper's audit is a list of :class:`Claim`, judged by one rule and
rendered by one function.

A claim is the paper's statement (its words and where they are), our measure, and a verdict
from one vocabulary. Two kinds, shown in two sections:

* a *finding* holds in any profile: the paper's own inconsistencies, theory checked by
  computation, the released code read against the text (``profile=None``);
* a *verdict of this profile's runs* rests on trained models, so it says nothing beyond the
  profile that made them (``profile`` names it).

The rule for a measured effect is :mod:`pdelab.report.decide`'s: a t interval over independent
seeds, paired where both arms share them, read against the claim (inside the paper's effect
± its margin: reproduced; on the claimed side only: in sign only; the other side or no effect:
not reproduced; else not measurable here), at the level Holm's step-down over the paper's run
verdicts gives it (:func:`adjust`, called by :func:`render`). Only a profile params.yaml marks
``judged`` may decide a claim. Model settings are never seeds: :func:`per_seed` refuses a
repeated seed, which is what pooling settings makes. A correlation obeys the same rule: it is
computed within each seed over the settings, and its interval runs over the seeds
(:func:`correlation`). Where a claim stays undecided, its interval says how many seeds a side
the decision it waits for would need. :func:`judge` remains for intervals made by hand (a
share of runs, timing repeats), which carry no test to adjust.

A finding that charges the paper (*fails*, *inconsistent as printed*) must hold under every
reasonable reading of what the paper leaves undefined: a claim that declares its
:class:`Reading` s takes the verdict they agree on, or *ambiguous as printed* where they do not.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd
from tabulate import tabulate

from pdelab.report import decide
from pdelab.report.decide import (
    ALPHA,
    MIN_SEEDS,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    POWER,
    REPRODUCED,
    SEEDS_CAP,
    SIGN_ONLY,
    Claimed,
    Estimate,
)
from pdelab.report.profiles import profiles_here
from pdelab.report.verdicts import fmt

# --------------------------------------------------------------------------------------------
# One vocabulary
# --------------------------------------------------------------------------------------------

NEEDS_PAPER = "needs the paper profile"
NO_EXPERIMENT = "the paper has no experiment for this claim"
# findings that hold in any profile
HOLDS = "holds"
FAILS = "fails"
CONSISTENT = "consistent as printed"
INCONSISTENT = "inconsistent as printed"
AMBIGUOUS = "ambiguous as printed"  # the readings of what the paper leaves open disagree

DECIDED = decide.OUTCOMES  # reproduced, reproduced in sign only, not reproduced
RUN_VERDICTS = (*DECIDED, NOT_MEASURABLE, NEEDS_PAPER, NO_EXPERIMENT)
FINDING_VERDICTS = (HOLDS, FAILS, CONSISTENT, INCONSISTENT, AMBIGUOUS, NO_EXPERIMENT)
SETTLED = (*DECIDED, HOLDS, FAILS, CONSISTENT, INCONSISTENT)  # what the coverage calls decided

RULE = (
    "A verdict reads a t interval over independent seeds (at least "
    f"{MIN_SEEDS} a side; model settings never count as seeds), paired where both arms share "
    "their seeds, Welch's otherwise (the *test* column), at the level Holm's step-down gives "
    f"each claim so that a paper's run verdicts together err with probability at most "
    f"{ALPHA:.0%} (the *level* column: raw, then adjusted). Inside the paper's effect ± the "
    f"*margin* it is {REPRODUCED}; wholly on the claimed side of zero, {SIGN_ONLY}; wholly on "
    f"the other side, or inside ± the margin (no effect), {NOT_REPRODUCED}; otherwise "
    f"{NOT_MEASURABLE}, and *seeds needed* says how many seeds a side would reach that "
    f"decision at {POWER:.0%} power with the spread seen here (in brackets: the range the "
    "spread's own 95% interval allows). A threshold claim is read against its threshold, a "
    "null claim by equivalence to zero. A correlation is computed within each seed over the "
    "model settings, its interval over the seeds."
)
NEEDED_COLUMN = "seeds needed (on this profile's spread)"
SEED_RULE = f"fewer than {MIN_SEEDS} seeds a side"  # the reason the seed rule leaves it open


class SettingsPooled(ValueError):
    """Per-seed values with a repeated seed: different model settings pooled as if seeds."""


def judge(low: float, high: float, sign: int, n: Sequence[int]) -> tuple[str, str]:
    """(verdict, reason) for a claimed difference of this sign (+1 positive, -1 negative)
    from its interval [low, high] and the independent seeds of each side."""
    if n and min(n) < MIN_SEEDS:
        return NOT_MEASURABLE, SEED_RULE
    if math.isnan(low) or math.isnan(high):
        return NOT_MEASURABLE, "no interval: no spread, or too few values"
    if low <= 0 <= high:
        return NOT_MEASURABLE, "the interval holds both outcomes"
    return (REPRODUCED if (low > 0) == (sign > 0) else NOT_REPRODUCED), ""


def judged(params: Mapping, profile: str) -> bool:
    """Whether a run profile's numbers may decide a paper's claim (``profiles.<name>.judged``,
    default false): the kit refuses a verdict from any other profile, so no code compares a
    profile's name. Read by the report alone: it changes what the report may say, never what a
    run computes."""
    value = params["profiles"][profile].get("judged", False)
    if not isinstance(value, bool):
        raise ValueError(
            f"profiles.{profile}.judged: expected true or false (may this profile's runs "
            f"decide a paper's claim?), got {value!r}"
        )
    return value


def judged_profile(profile: str) -> bool:
    """:func:`judged` for a profile of the params.yaml here (false where there is none;
    pdelab.report.profiles reads them, parsed once per content: a report asks per claim)."""
    found = profiles_here()
    return profile in found and judged({"profiles": found}, profile)


def change_effect(low: float, high: float, n: Sequence[int]) -> str:
    """Does a change move a metric either way? "changes accuracy" when the interval excludes
    zero with enough seeds, else not measurable here."""
    verdict, _ = judge(low, high, +1, n)
    return "changes accuracy" if verdict in DECIDED else NOT_MEASURABLE


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------


def per_seed(values: pd.Series) -> pd.Series:
    """The values of one side, one per seed (NaN dropped); a repeated seed is refused."""
    values = values.dropna()
    repeated = values.index[values.index.duplicated()].unique().tolist()
    if repeated:
        raise SettingsPooled(
            f"seed(s) {repeated} appear more than once: these are different model settings, "
            "not seeds; compare one setting at a time"
        )
    return values.astype(float)


@dataclass(frozen=True)
class Interval:
    """Our measure of a claimed effect: the estimate and its interval, in ``unit``, over ``n``
    independent seeds per side (what the n count is named by ``counts``)."""

    estimate: float
    low: float
    high: float
    n: tuple[int, ...]
    unit: str = "points"
    counts: str = "seeds"
    needed: int | None = None  # seeds a side that would resolve the claimed effect
    no_effect: bool = False  # the paper prints no effect to size the seeds needed by
    needed_note: str = ""  # said instead of a seed count, where none can be sized
    needed_range: tuple[int, int] | None = None  # seeds needed at each end of the spread's CI
    measured: Estimate | None = None  # the test behind it, so a level can be re-read
    claimed: Claimed | None = None  # what the claim asserts (kind, effect, margin)
    level: float = 1 - ALPHA  # the interval's confidence
    pairs: tuple[tuple[str, Interval], ...] = ()  # all_pairs: every pair the claim needs

    def at(self, alpha: float) -> tuple[Interval, str, str]:
        """(interval, verdict, reason) re-read at level ``1 - alpha``: a claim of several pairs
        (:func:`all_pairs`) from every pair, one effect from its test."""
        if self.pairs:
            parts = [pair.at(alpha) for _, pair in self.pairs]
            return all_pairs(parts, [name for name, _ in self.pairs])
        if self.measured is None or self.claimed is None:
            raise ValueError("an interval made by hand carries no test to re-read")
        return _judged(self.measured, self.claimed, alpha, self.unit, self.counts)

    def p_values(self) -> tuple[float, float]:
        """(p of the claim shown, p of it refuted): the smallest alphas at which the rule's
        interval shows each. All pairs of an all-pairs claim must show it (an
        intersection-union test: the largest p of its pairs); any pair refutes it (Bonferroni
        over the pairs). NaN where no test stands behind the interval."""
        if self.pairs:
            each = [pair.p_values() for _, pair in self.pairs]
            shown = max(p for p, _ in each)
            return shown, min(1.0, len(each) * min(q for _, q in each))
        if self.measured is None or self.claimed is None:
            return math.nan, math.nan
        return decide.p_values(self.measured, self.claimed)

    def test_text(self) -> str:
        if self.pairs:
            tests = sorted({pair.test_text() for _, pair in self.pairs})
            return f"{', '.join(tests)}, every one of {len(self.pairs)} pairs"
        return self.measured.test if self.measured else ""

    def margin_text(self) -> str:
        c = self.claimed if not self.pairs else self.pairs[0][1].claimed
        if c is None:
            return ""
        if c.kind == "threshold":
            return f"threshold {c.threshold:+g}"
        if c.kind == "null":
            return f"±{c.margin:.3g} (no effect)"
        if math.isnan(c.effect):
            return "sign (the paper gives no size)"
        return f"±{c.margin:.3g}" + (" per pair" if self.pairs else "")

    def text(self) -> str:
        if math.isnan(self.estimate):
            return "n/a"
        ci = "no interval" if math.isnan(self.low) else f"[{self.low:+.2f}, {self.high:+.2f}]"
        return f"{self.estimate:+.2f} {ci} {self.unit}"

    def n_text(self) -> str:
        return " vs ".join(str(k) for k in self.n) + f" {self.counts}"

    def needed_text(self) -> str:
        if self.needed_note:
            return self.needed_note
        if self.no_effect:
            return "n/a (the paper prints no effect)"
        if self.needed is None:
            return "n/a (no spread measured)"
        per = "a side"
        if self.needed > SEEDS_CAP:
            return f"more than {SEEDS_CAP} {per}"
        if self.needed_range and self.needed_range != (self.needed, self.needed):
            low, high = self.needed_range
            high_text = f"more than {SEEDS_CAP}" if high > SEEDS_CAP else str(high)
            return f"{self.needed} {per} ({low} to {high_text} on the spread's 95% interval)"
        return f"{self.needed} {per}"


def _judged(
    est: Estimate, claimed: Claimed, alpha: float, unit: str, counts: str = "seeds"
) -> tuple[Interval, str, str]:
    """(interval at 1 - alpha, verdict, reason) of one effect, with the seeds needed for the
    decision it waits for where it is undecided."""
    verdict, reason = decide.outcome(est, claimed, alpha)
    low, high = est.interval(alpha)
    needed = decide.seeds_needed(est, claimed, alpha) if verdict == NOT_MEASURABLE else None
    interval = Interval(
        est.shown(),
        low,
        high,
        est.n,
        unit,
        counts,
        needed=needed[0] if needed else None,
        no_effect=claimed.kind == "effect" and math.isnan(claimed.effect),
        needed_range=needed[1:] if needed else None,
        measured=est,
        claimed=claimed,
        level=1 - alpha,
    )
    return interval, verdict, reason


def difference(
    a: pd.Series,
    b: pd.Series | None,
    sign: int,
    claimed: float,
    unit: str = "points",
    scale: float = 100.0,
    *,
    margin: float | None = None,
    threshold: float | None = None,
) -> tuple[Interval, str, str]:
    """(interval, verdict, reason) of a claimed difference mean(a) - mean(b) (b None: mean(a)
    against zero), from per-seed values (:func:`per_seed`), paired where both arms hold the
    same seeds (:func:`pdelab.report.decide.estimate`). ``sign``: +1 or -1 for the claimed
    direction, 0 for a claim of no effect; ``claimed``: the paper's effect in ``unit``, with
    ``margin`` (default: half of it, :func:`pdelab.report.decide.claimed_effect`); or a
    ``threshold`` the claim says the effect passes. Values are multiplied by ``scale``
    (fractions to points). Judged at the raw level; the report re-reads every claim at the
    level Holm's adjustment gives it (:func:`adjust`)."""
    a = per_seed(a) * scale
    b = None if b is None else per_seed(b) * scale
    claim = decide.claimed_effect(sign, claimed, unit, margin, threshold)
    return _judged(decide.estimate(a, b), claim, ALPHA, unit)


NO_CORRELATION_NEEDED = "n/a (no seed count shows no correlation)"


def correlation(
    x: pd.Series,
    y: pd.Series,
    sign: int,
    claimed: float,
    settings: str = "settings",
    *,
    margin: float | None = None,
) -> tuple[Interval, str, str]:
    """(interval, verdict, reason) of a claimed correlation of this sign (0: no correlation,
    which an interval can never show) between x and y, both indexed by (setting, seed).

    Two models of one setting differ only by their seed, so they are not independent points:
    r is computed within each seed over the settings, and the interval is a t interval over
    the seeds of Fisher's z, so the seed rule applies as to any difference. ``claimed`` is the
    paper's correlation (NaN if it prints none), which sizes the seeds needed with the spread
    of z over this profile's seeds. A "no correlation" claim (``sign`` 0) is reproduced by
    equivalence: its interval inside ± ``margin`` (in r); one that excludes zero refutes it.
    A pair indexed otherwise is refused."""
    if not isinstance(x.index, pd.MultiIndex) or list(x.index.names)[-1] != "seed":
        raise SettingsPooled(
            "a correlation takes values indexed by (setting, seed): models pooled over seeds "
            "and settings are not independent points"
        )
    both = pd.concat([x.rename("x"), y.rename("y")], axis=1).dropna()
    repeated = both.index[both.index.duplicated()].unique().tolist()
    if repeated:
        raise SettingsPooled(f"(setting, seed) {repeated} appear more than once: not seeds")
    per = {}
    for seed, block in both.groupby(level="seed", sort=True):
        if len(block) >= 3 and block["x"].std() > 0 and block["y"].std() > 0:
            per[seed] = float(block["x"].corr(block["y"]))
    n_settings = int(both.index.droplevel("seed").nunique())
    counts = f"seeds (r over {n_settings} {settings} in each)"
    note = NO_CORRELATION_NEEDED if sign == 0 else ""
    if not per:
        return (
            Interval(math.nan, math.nan, math.nan, (0,), "r", counts, needed_note=note),
            NOT_MEASURABLE,
            "too few settings with spread in any seed",
        )
    z = pd.Series({s: math.atanh(max(min(r, 0.999999), -0.999999)) for s, r in per.items()})
    unit = "r"
    claim = decide.claimed_effect(sign, claimed, unit, margin)
    return _judged(decide.fisher_estimate(z), claim, ALPHA, unit, counts)


Judged = tuple[Interval | None, str, str]  # (interval, verdict, reason)

NOT_RUN = "not run in this profile"  # a table cell whose runs this profile did not train


def not_run(profile: str) -> str:
    """Why a run verdict waits for another profile: this one trained none of its runs."""
    return f"not run in the {profile} profile"


def not_run_verdict(profile: str) -> Judged:
    """The (interval, verdict, reason) of a claim whose runs this profile did not train: no
    interval, and the paper profile needed."""
    return None, NEEDS_PAPER, not_run(profile)


def mean_text(values: pd.Series) -> str:
    """The mean of a claim's per-seed values as the audits print it beside the claim (two
    decimals), or "no runs" when there are none."""
    return fmt(float(values.mean())) if len(values) else "no runs"


def all_pairs(parts: Sequence[Judged], names: Sequence[str] = ()) -> Judged:
    """One verdict for a claim that needs every pair at once (best of N, an ordering A > B > C,
    a gain at every position or task): reproduced only when every pair is (shown: the pair
    nearest zero), not reproduced when any pair is decided the other way (shown: that pair),
    in sign only when every pair is at least that; otherwise not measurable here (shown: the
    first undecided pair, with the seeds that pair needs). The interval keeps every pair, so
    the report can re-read the claim at its adjusted level (:meth:`Interval.at`). With
    ``names`` (one per pair), a verdict of several pairs names the pair shown."""
    if not parts:
        return None, NOT_MEASURABLE, "no pair to compare"
    given = bool(names)
    names = list(names) or [f"pair {i + 1}" for i in range(len(parts))]
    kept = tuple((name, p[0]) for name, p in zip(names, parts, strict=True) if p[0] is not None)
    whole = len(kept) == len(parts) and all(
        iv.pairs or (iv.measured is not None and iv.claimed is not None) for _, iv in kept
    )

    def shown(at: int, verdict: str, reason: str) -> Judged:
        interval = parts[at][0]
        if interval is not None and whole and len(parts) > 1:
            interval = replace(interval, pairs=kept)
        if given and len(parts) > 1:
            reason = "; ".join(x for x in (f"least decided pair {names[at]}", reason) if x)
        return interval, verdict, reason

    verdicts = [p[1] for p in parts]
    if NOT_REPRODUCED in verdicts:
        at = verdicts.index(NOT_REPRODUCED)
        return shown(at, NOT_REPRODUCED, parts[at][2] or "a pair is decided the other way")
    if SIGN_ONLY in verdicts and all(v in (REPRODUCED, SIGN_ONLY) for v in verdicts):
        at = verdicts.index(SIGN_ONLY)
        return shown(at, SIGN_ONLY, parts[at][2])
    if all(v == REPRODUCED for v in verdicts):  # shown: the pair nearest zero
        at = min(range(len(parts)), key=lambda i: min(abs(parts[i][0].low), abs(parts[i][0].high)))
        return shown(at, REPRODUCED, "")
    open_ = [i for i, v in enumerate(verdicts) if v not in DECIDED]

    def seeds(i: int) -> float:  # the least decided pair needs the most seeds (unsized: most)
        interval = parts[i][0]
        needed = interval.needed if interval is not None else None
        return math.inf if needed is None else needed

    at = max(open_, key=seeds)
    reason = parts[at][2]
    if len(open_) > 1:
        reason = "; ".join(
            x for x in (f"{len(open_)} of {len(parts)} pairs undecided", reason) if x
        )
    return shown(at, NOT_MEASURABLE, reason)


def ordering(
    paper_means: dict[str, float],
    ours: dict[str, pd.Series],
    unit: str = "points",
    scale: float = 1.0,
) -> tuple[Interval, str, str, str]:
    """The paper's ordering of its rows (by its means, highest first) against ours, pair by
    adjacent pair, each pair's claimed effect the paper's own gap: (interval, verdict, reason,
    our pairs in words). One verdict for the whole ordering, as :func:`all_pairs` gives it."""
    order = sorted(paper_means, key=lambda r: -paper_means[r])
    pairs, words = [], []
    for a, b in zip(order, order[1:], strict=False):
        claimed = paper_means[a] - paper_means[b]
        interval, verdict, reason = difference(ours[a], ours[b], +1, claimed, unit, scale)
        pairs.append((interval, verdict, reason))
        words.append(f"{a} − {b} {interval.text()}")
    names = [f"{a} − {b}" for a, b in zip(order, order[1:], strict=False)]
    interval, verdict, reason = all_pairs(pairs, names)
    return interval, verdict, reason, "; ".join(words)


# --------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One reasonable reading of something the paper leaves undefined (which norm, which
    padding, which split), what it gives, and the finding's verdict under it."""

    name: str
    result: str
    verdict: str

    def text(self) -> str:
        return f"{self.name}: {self.result} ({self.verdict})"


READINGS_SEPARATOR = " || "  # between readings in one table cell; name | result | verdict


def readings_cell(readings: Sequence[Reading]) -> str:
    """Readings as one cell of a CSV a paper's checks write (:func:`readings_of` reads it)."""
    return READINGS_SEPARATOR.join(f"{r.name} | {r.result} | {r.verdict}" for r in readings)


def readings_of(cell: str) -> tuple[Reading, ...]:
    """The readings one cell holds (none for an empty cell)."""
    if not isinstance(cell, str) or not cell:
        return ()
    return tuple(Reading(*part.split(" | ")) for part in cell.split(READINGS_SEPARATOR))


def agreed(readings: Sequence[Reading]) -> str:
    """The verdict every reading gives, or *ambiguous as printed* where they disagree."""
    verdicts = {r.verdict for r in readings}
    return verdicts.pop() if len(verdicts) == 1 else AMBIGUOUS


# A name of pdelab's own, not the paper's: an identifier with an underscore (a variant id such
# as pde_s4, a task such as imdb_wordpiece) or a file name (fna_imdb.csv).
INTERNAL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)+|\S+\.(csv|parquet|json|yaml)")
FIGURE = re.compile(r"\bFig(?:s|ure)?\b")  # a figure's location: it has no words to quote


def _check_shown_text(claim: Claim) -> None:
    """Refuse a claim whose table cells would show pdelab's internals instead of the paper:
    a claim named by an internal name, a file of ours given as where the paper says it, or no
    quote of the paper's words where the location is not a figure."""
    name = claim.claim.strip()
    if INTERNAL_NAME.fullmatch(name) or name.endswith(".csv"):
        raise ValueError(
            f"claim {name!r}: an internal name (a variant id, task id or file name) stands as "
            "the claim; name it in the paper's words, e.g. what the paper's row or table says "
            '("Table I: FNA beats the Transformer on IMDb")'
        )
    files = re.findall(r"\S+\.(?:csv|parquet)\b", claim.where)
    if files:
        raise ValueError(
            f"claim {name!r}: where {claim.where!r} names pdelab's file(s) {files}; give the "
            'paper\'s location ("Table I", "Sec. 4.2", "Fig. 5a")'
        )
    if not claim.quote.strip() and not FIGURE.search(claim.where):
        raise ValueError(
            f"claim {name!r} ({claim.where}): no quote of the paper's words; quote the "
            "sentence or caption the claim rests on (only a figure, a where that cites a "
            '"Fig.", may have none)'
        )


@dataclass(frozen=True)
class Claim:
    """One statement of a paper and our verdict on it.

    ``profile`` None: a finding that holds in any profile (no trained model involved); else the
    profile whose runs the verdict rests on. A run verdict of reproduced or not reproduced
    needs the ``interval`` it came from (:func:`difference`, :func:`correlation`), and one that
    decides: the check is made here, so no paper can print a verdict its numbers do not carry.
    Its cells speak the paper's language: no internal name as the claim, no file of ours as
    where, and the paper's words quoted unless it cites a figure (:func:`_check_shown_text`)."""

    claim: str
    where: str  # the paper's location: "Abstract", "Table 2", "Sec. 4.2", "Fig. 5a"
    quote: str  # the paper's words ("" for a figure, which has none)
    paper: str  # the paper's number(s), as printed
    ours: str  # our measure, in words
    verdict: str
    profile: str | None
    interval: Interval | None = None
    reason: str = ""
    headline: bool = True  # a claim of the abstract, conclusion or a main table/figure
    extra: dict[str, str] = field(default_factory=dict)
    readings: tuple[Reading, ...] = ()  # each reading of what the paper leaves undefined
    stand_in: bool = False  # a run verdict made on a stand-in of the paper's data
    judged: bool = False  # the profile may be judged (params.yaml: profiles.<name>.judged)
    own_code: bool = False  # a check of pdelab's implementation, not a finding on the paper
    raw_level: float | None = None  # the level before Holm's adjustment (:func:`adjust`)

    def __post_init__(self) -> None:
        allowed = FINDING_VERDICTS if self.profile is None else RUN_VERDICTS
        if self.verdict not in allowed:
            raise ValueError(
                f"claim {self.claim!r}: verdict {self.verdict!r} is not one of {allowed}"
            )
        if self.readings and self.verdict != agreed(self.readings):
            raise ValueError(
                f"claim {self.claim!r}: {self.verdict!r} where its readings give "
                f"{agreed(self.readings)!r} ({'; '.join(r.text() for r in self.readings)})"
            )
        if self.verdict == AMBIGUOUS and not self.readings:
            raise ValueError(f"claim {self.claim!r}: {AMBIGUOUS!r} names no readings")
        if self.profile is not None and self.verdict in DECIDED:
            if not self.judged:
                raise ValueError(
                    f"claim {self.claim!r}: {self.verdict!r} from the {self.profile} profile, "
                    f"which is not judged (params.yaml: profiles.{self.profile}.judged is not "
                    "true): its runs check the pipeline and decide no claim"
                )
            if self.interval is None:
                raise ValueError(f"claim {self.claim!r}: {self.verdict!r} with no interval")
            if self.interval.pairs or self.interval.measured is not None:
                decided = self.interval.at(1 - self.interval.level)[1]
                cannot = decided != self.verdict
            else:  # an interval made by hand: it must at least lie on one side of zero
                decided = judge(self.interval.low, self.interval.high, +1, self.interval.n)[0]
                cannot = decided not in DECIDED
            pooled = self.interval.unit == "r" and not self.interval.counts.startswith("seeds")
            if cannot or pooled:
                raise ValueError(
                    f"claim {self.claim!r}: {self.verdict!r} from an interval that cannot "
                    f"decide it ({self.interval.text()}, n {self.interval.n_text()}, "
                    f"{self.interval.level:.4g} level: {decided})"
                )
        _check_shown_text(self)

    @property
    def coverage(self) -> str:
        """decided (a verdict or a finding either way), undecided (not measurable here,
        ambiguous as printed), needs the paper profile, or not testable."""
        if self.verdict == NO_EXPERIMENT:
            return "not testable"
        if self.verdict == NEEDS_PAPER:
            return "needs the paper profile"
        return "decided" if self.verdict in SETTLED else "undecided"

    def verdict_text(self) -> str:
        return f"{self.verdict} ({self.reason})" if self.reason else self.verdict

    def ours_text(self) -> str:
        """Our measure, marked when it was made on a stand-in of the paper's data."""
        return f"{self.ours} {STAND_IN_MARK}" if self.stand_in else self.ours

    def found_text(self) -> str:
        """What we find, with each reading's result where the claim declares readings."""
        if not self.readings:
            return self.ours
        readings = "; ".join(r.text() for r in self.readings)
        return f"{self.ours} Readings: {readings}." if self.ours else f"Readings: {readings}."


def measured(
    profile: str,
    claim: str,
    where: str,
    quote: str,
    paper: str,
    ours: str,
    judged: Judged,
    headline: bool = True,
) -> Claim:
    """A verdict of this profile's runs from what difference, correlation or all_pairs gave
    (or ``(None, NEEDS_PAPER, reason)`` for a claim this profile cannot judge)."""
    interval, verdict, reason = judged
    may_judge = judged_profile(profile)
    if verdict in DECIDED and not may_judge:
        verdict, reason = NEEDS_PAPER, not_judged(profile, verdict)
    return Claim(
        claim, where, quote, paper, ours, verdict, profile, interval, reason, headline,
        judged=may_judge,
    )  # fmt: skip


def not_judged(profile: str, reading: str) -> str:
    """Why a run verdict waits for a judged profile, with what this profile's interval reads."""
    return (
        f"the {profile} profile is not judged (its runs check the pipeline); its interval "
        f"alone reads {reading}"
    )


def finding(
    claim: str,
    where: str,
    quote: str,
    paper: str,
    ours: str,
    verdict: str,
    reason: str = "",
    headline: bool = True,
    readings: Sequence[Reading] = (),
    own_code: bool = False,
) -> Claim:
    """A claim judged without training: it holds in any profile. With ``readings``, the
    verdict must be the one they agree on (:func:`agreed`). ``own_code``: a check of pdelab's
    implementation (shown apart, never counted as a finding about the paper)."""
    return Claim(
        claim,
        where,
        quote,
        paper,
        ours,
        verdict,
        None,
        reason=reason,
        headline=headline,
        readings=tuple(readings),
        own_code=own_code,
    )


def adjust(claims: Sequence[Claim], alpha: float = ALPHA) -> list[Claim]:
    """One paper's run verdicts re-read at the levels Holm's step-down gives them, so that
    together they err with probability at most ``alpha``. Each judged run claim with a test
    behind its interval brings two hypotheses to the family: that its effect is absent (shown
    wrong: *reproduced* or *in sign only*) and that it is present beyond the margin (shown
    wrong: *not reproduced*). A claim is read at the level of the hypothesis Holm rejects, else
    it is not measurable here, shown at the level its claim would have needed. Seeds needed are
    sized at the family's strictest level (alpha / size), what a first decision must clear."""
    tested = {
        i: c.interval.p_values()
        for i, c in enumerate(claims)
        if c.profile is not None and c.judged and c.interval is not None
    }
    members = [i for i, p in tested.items() if not math.isnan(p[0])]
    pvalues = [tested[i] for i in members]
    ranked = decide.holm([p for pair in pvalues for p in pair], alpha)
    out = list(claims)
    strictest = alpha / max(2 * len(members), 1)
    for k, i in enumerate(members):
        c = claims[i]
        raw = 1 - c.interval.level
        (shown_level, shown), (refuted_level, refuted) = ranked[2 * k], ranked[2 * k + 1]
        interval, verdict, reason = c.interval.at(shown_level)
        if shown and verdict in (REPRODUCED, SIGN_ONLY):
            pass
        elif refuted and c.interval.at(refuted_level)[1] == NOT_REPRODUCED:
            interval, verdict, reason = c.interval.at(refuted_level)
        else:
            verdict = NOT_MEASURABLE
        if c.verdict in DECIDED and verdict not in DECIDED:
            reason = (
                f"{c.verdict} at the raw {1 - raw:.0%} level, not at Holm's adjusted "
                f"{interval.level:.2%}" + (f": {reason}" if reason and reason != c.reason else "")
            )
        if verdict == NOT_MEASURABLE:
            sized = c.interval.at(strictest)[0]
            interval = replace(interval, needed=sized.needed, needed_range=sized.needed_range)
        out[i] = replace(c, interval=interval, verdict=verdict, reason=reason, raw_level=raw)
    return out


STAND_IN_MARK = "[stand-in]"
STAND_IN_LEGEND = (
    f"{STAND_IN_MARK}: made on a stand-in of the paper's data (named in the notes); such a "
    "number checks the pipeline and is not comparable with the paper's."
)


def mark_stand_ins(
    claims: Sequence[Claim], stand_ins: Mapping[str, str], tasks: Sequence[str]
) -> list[Claim]:
    """Each run-based cell marked when a stand-in made it: a run claim with a number of ours
    (an interval, or a figure in the cell, whatever its verdict) that names a stand-in task,
    or names none of the paper's ``tasks`` (an average over them) while any of them ran on a
    stand-in. Findings, and claims with no number of ours, are left alone."""
    if not stand_ins:
        return list(claims)

    def named(claim: Claim) -> set[str]:
        text = f"{claim.claim} {claim.ours}"
        return {t for t in tasks if re.search(rf"\b{re.escape(t)}\b", text)}

    out = []
    for c in claims:
        measured_here = c.interval is not None or any(ch.isdigit() for ch in c.ours)
        ran = c.profile is not None and c.verdict != NO_EXPERIMENT and measured_here
        tasks_named = named(c) if ran else set()
        on = ran and (bool(tasks_named & set(stand_ins)) if tasks_named else True)
        out.append(replace(c, stand_in=on) if on else c)
    return out


def coverage_line(claims: Sequence[Claim]) -> str:
    """'N claims: D decided (...); U undecided (...); P need the paper profile; T unsupported':
    an undecided claim is never counted with the decided ones, a check of our own code never
    as a claim, and a conclusion the paper draws without any experiment is unsupported."""
    claims = [c for c in claims if not c.own_code]
    kinds = Counter(c.coverage for c in claims)

    def split(kind: str) -> str:
        verdicts = Counter(c.verdict for c in claims if c.coverage == kind)
        text = ", ".join(f"{k} {v}" for v, k in verdicts.most_common())
        return f"{kinds[kind]} {kind}" + (f" ({text})" if text else "")

    return (
        f"Coverage: {len(claims)} claims: {split('decided')}; {split('undecided')}; "
        f"{kinds['needs the paper profile']} need the paper profile; "
        f"{kinds['not testable']} unsupported (the paper has no experiment for them)."
    )


FINDING_COLUMNS = ["claim", "where", "the paper's words", "paper", "we find", "verdict"]
RUN_COLUMNS = [
    "claim",
    "where",
    "paper",
    "ours",
    "n",
    "test",
    "margin",
    "level (raw → Holm)",
    "interval",
    "verdict",
    NEEDED_COLUMN,
]


def level_text(claim: Claim) -> str:
    """The interval's confidence, raw then after Holm's adjustment: '95% → 99.55%'."""
    if claim.interval is None:
        return ""
    if claim.raw_level is None:
        return f"{claim.interval.level:.0%}"
    return f"{1 - claim.raw_level:.0%} → {claim.interval.level:.2%}"


SEED_RULE_OVERRIDES = f"the interval excludes zero, but {SEED_RULE}: the seed rule decides"
OUR_READING = "our reading"


def verdict_cell(claim: Claim) -> str:
    """The verdict and its reason. A verdict that rests on the one reading the claim declares
    of what the paper leaves unspecified says "(our reading)"; an interval that excludes zero
    beside *not measurable here* says that the seed rule, not the interval, decides."""
    reason = claim.reason
    iv = claim.interval
    if (
        claim.verdict == NOT_MEASURABLE
        and iv is not None
        and not math.isnan(iv.low)
        and (iv.low > 0 or iv.high < 0)
        and min(iv.n) < MIN_SEEDS
    ):
        reason = (
            reason.replace(SEED_RULE, SEED_RULE_OVERRIDES)
            if SEED_RULE in reason
            else "; ".join(x for x in (reason, SEED_RULE_OVERRIDES) if x)
        )
    verdict = f"{claim.verdict} ({OUR_READING})" if len(claim.readings) == 1 else claim.verdict
    return f"{verdict} ({reason})" if reason else verdict


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_table(claims: Sequence[Claim], findings: bool) -> str:
    """The Markdown table of findings (any profile) or of run verdicts."""
    if findings:
        rows = [
            [c.claim, c.where, c.quote, c.paper, c.found_text(), verdict_cell(c)] for c in claims
        ]
        columns = FINDING_COLUMNS
    else:
        rows = [
            [
                c.claim,
                c.where,
                c.paper,
                c.ours_text(),
                c.interval.n_text() if c.interval else "",
                c.interval.test_text() if c.interval else "",
                c.interval.margin_text() if c.interval else "",
                level_text(c),
                c.interval.text() if c.interval else "",
                verdict_cell(c),
                c.interval.needed_text()
                if c.interval and c.verdict in (NOT_MEASURABLE, NEEDS_PAPER)
                else "",
            ]
            for c in claims
        ]
        columns = RUN_COLUMNS
    rows = [[_cell(str(x)) for x in r] for r in rows]
    return tabulate(rows, headers=columns, tablefmt="github", disable_numparse=True)


def render(
    title: str,
    claims: Sequence[Claim],
    profile_note: str,
    notes: Sequence[str] = (),
    stand_ins: Mapping[str, str] | None = None,
    tasks: Sequence[str] = (),
) -> list[str]:
    """A paper's claims section of REPORT.md: its coverage, the findings that hold in any
    profile, then the verdicts of this profile's runs (with the rule and the profile), each
    made on a stand-in marked (``stand_ins``: task -> what stands in; ``tasks``: the paper's
    tasks in this profile, :func:`mark_stand_ins`)."""
    claims = adjust(mark_stand_ins(claims, stand_ins or {}, tasks))
    found = [c for c in claims if c.profile is None and not c.own_code]
    checks = [c for c in claims if c.own_code]
    runs = [c for c in claims if c.profile is not None and not c.own_code]
    lines = [f"## {title}: the claims audited", "", coverage_line(claims), ""]
    if found:
        lines += [
            "**Findings that hold in any profile** (the paper's text, its theory computed, "
            "its released code read: no verdict here rests on a trained model; a cell that "
            "also quotes this profile's trained models names them as such):",
            "",
            claims_table(found, findings=True),
            "",
        ]
    if checks:
        lines += [
            "**Checks of pdelab's own implementation** (they test our code against the "
            "paper's definitions; not findings about the paper, and not counted above):",
            "",
            claims_table(checks, findings=True),
            "",
        ]
    if runs:
        lines += [
            f"**Verdicts of this profile's runs.** {profile_note} {RULE}",
            "",
            claims_table(runs, findings=False),
            "",
            *([STAND_IN_LEGEND, ""] if any(c.stand_in for c in runs) else []),
        ]
    return lines + [n for note in notes for n in (note, "")]
