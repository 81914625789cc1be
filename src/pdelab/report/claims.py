"""The claims kit: every paper's audit is a list of :class:`Claim`, judged by one rule and
rendered by one function.

A claim is the paper's statement (its words and where they are), our measure, and a verdict
from one vocabulary. Two kinds, shown in two sections:

* a *finding* holds in any profile: the paper's own inconsistencies, theory checked by
  computation, the released code read against the text (``profile=None``);
* a *verdict of this profile's runs* rests on trained models, so it says nothing beyond the
  profile that made them (``profile`` names it).

The rule for a measured difference (:func:`judge`): a 95% interval over independent seeds
that lies on the claimed side of zero reproduces the claim, on the other side does not; an
interval holding both outcomes, no interval at all (zero spread, too few values), or fewer
than ``MIN_SEEDS`` seeds a side is "not measurable here". Model settings are never seeds: an
:class:`Interval` takes per-seed values indexed by seed and refuses a repeated seed, which is
what pooling settings makes. A correlation obeys the same rule: it is computed within each
seed over the settings, and its interval runs over the seeds (:func:`correlation`). Where a
claim stays undecided, :func:`seeds_needed` says how many seeds a side would resolve the
paper's claimed effect at 80% power, given the spread this profile's runs showed.

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

from pdelab.report.stats import (
    LEVEL,
    POWER,
    SEEDS_CAP,
    seeds_needed,
    welch_interval,
)
from pdelab.report.verdicts import fmt

# --------------------------------------------------------------------------------------------
# One vocabulary
# --------------------------------------------------------------------------------------------

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURABLE = "not measurable here"
NEEDS_PAPER = "needs the paper profile"
NO_EXPERIMENT = "the paper has no experiment for this claim"
# findings that hold in any profile
HOLDS = "holds"
FAILS = "fails"
CONSISTENT = "consistent as printed"
INCONSISTENT = "inconsistent as printed"
AMBIGUOUS = "ambiguous as printed"  # the readings of what the paper leaves open disagree

DECIDED = (REPRODUCED, NOT_REPRODUCED)
RUN_VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_MEASURABLE, NEEDS_PAPER, NO_EXPERIMENT)
FINDING_VERDICTS = (HOLDS, FAILS, CONSISTENT, INCONSISTENT, AMBIGUOUS, NO_EXPERIMENT)
SETTLED = (*DECIDED, HOLDS, FAILS, CONSISTENT, INCONSISTENT)  # what the coverage calls decided

MIN_SEEDS = 3  # independent seeds a side below which no interval is trusted to decide

RULE = (
    f"A verdict needs a {LEVEL:.0%} interval over independent seeds (at least {MIN_SEEDS} a "
    "side; model settings never count as seeds) that lies wholly on one side of zero: on the "
    f"claimed side it is {REPRODUCED}, on the other {NOT_REPRODUCED}. Otherwise it is "
    f"{NOT_MEASURABLE}, and *seeds needed* says how many seeds a side would resolve the "
    f"paper's claimed effect at {POWER:.0%} power with the spread seen here. A correlation "
    "is computed within each seed over the model settings, its interval over the seeds."
)
NEEDED_COLUMN = "seeds needed (on this profile's spread)"


class SettingsPooled(ValueError):
    """Per-seed values with a repeated seed: different model settings pooled as if seeds."""


def judge(low: float, high: float, sign: int, n: Sequence[int]) -> tuple[str, str]:
    """(verdict, reason) for a claimed difference of this sign (+1 positive, -1 negative)
    from its interval [low, high] and the independent seeds of each side."""
    if n and min(n) < MIN_SEEDS:
        return NOT_MEASURABLE, f"fewer than {MIN_SEEDS} seeds a side"
    if math.isnan(low) or math.isnan(high):
        return NOT_MEASURABLE, "no interval: no spread, or too few values"
    if low <= 0 <= high:
        return NOT_MEASURABLE, "the interval holds both outcomes"
    return (REPRODUCED if (low > 0) == (sign > 0) else NOT_REPRODUCED), ""


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
        return f"{self.needed} {per}"


def difference(
    a: pd.Series,
    b: pd.Series | None,
    sign: int,
    claimed: float,
    unit: str = "points",
    scale: float = 100.0,
) -> tuple[Interval, str, str]:
    """(interval, verdict, reason) of a claimed difference mean(a) - mean(b) (b None: mean(a)
    against zero) of this sign, from per-seed values (:func:`per_seed`); ``claimed`` is the
    paper's effect in ``unit``, which sizes the seeds needed. Values are multiplied by
    ``scale`` (fractions to points)."""
    a = per_seed(a) * scale
    b = None if b is None else per_seed(b) * scale
    estimate, low, high = welch_interval(a, b)
    n = (len(a),) if b is None else (len(a), len(b))
    verdict, reason = judge(low, high, sign, n)
    needed = None
    if verdict not in DECIDED:
        spread = [s.var(ddof=1) for s in (a, b) if s is not None and len(s) > 1]
        sd = math.sqrt(sum(spread) / len(spread)) if spread else math.nan
        needed = seeds_needed(claimed, sd, samples=len(n))
    interval = Interval(estimate, low, high, n, unit, needed=needed, no_effect=math.isnan(claimed))
    return interval, verdict, reason


NO_CORRELATION_NEEDED = "n/a (no seed count shows no correlation)"


def correlation(
    x: pd.Series, y: pd.Series, sign: int, claimed: float, settings: str = "settings"
) -> tuple[Interval, str, str]:
    """(interval, verdict, reason) of a claimed correlation of this sign (0: no correlation,
    which an interval can never show) between x and y, both indexed by (setting, seed).

    Two models of one setting differ only by their seed, so they are not independent points:
    r is computed within each seed over the settings, and the interval is a t interval over
    the seeds of Fisher's z, so the seed rule applies as to any difference. ``claimed`` is the
    paper's correlation (NaN if it prints none), which sizes the seeds needed with the spread
    of z over this profile's seeds. A "no correlation" claim is not measurable here unless the
    interval excludes zero, which refutes it. A pair indexed otherwise is refused."""
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
    mean_z, low_z, high_z = welch_interval(z, None)
    estimate, low, high = (math.tanh(v) for v in (mean_z, low_z, high_z))
    n = (len(z),)
    if sign == 0:
        decided, why = judge(low, high, +1, n)
        if decided in DECIDED:
            verdict, reason = NOT_REPRODUCED, ""
        elif why == "the interval holds both outcomes":
            verdict, reason = NOT_MEASURABLE, "an interval holding zero is not no correlation"
        else:
            verdict, reason = NOT_MEASURABLE, why
    else:
        verdict, reason = judge(low, high, sign, n)
    needed = None
    if verdict not in DECIDED and sign != 0:
        sd = float(z.std(ddof=1)) if len(z) > 1 else math.nan
        if (math.isnan(sd) or sd == 0) and n_settings > 3:
            sd = 1 / math.sqrt(n_settings - 3)  # Fisher's z alone, before any seed spread
        effect = math.atanh(claimed) if not math.isnan(claimed) else math.nan
        needed = seeds_needed(effect, sd, samples=1)
    interval = Interval(
        estimate,
        low,
        high,
        n,
        "r",
        counts,
        needed,
        no_effect=math.isnan(claimed) and sign != 0,
        needed_note=note,
    )
    return interval, verdict, reason


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
    """One verdict for a claim that needs every pair at once (an ordering A > B > C, a gain at
    every position): reproduced only when every pair is (shown: the pair nearest zero), not
    reproduced when any pair is decided the other way (shown: that pair), otherwise not
    measurable here (shown: the first undecided pair, with the most seeds any one needs).
    With ``names`` (one per pair), an undecided or reversed verdict of several pairs names
    the pair shown."""
    if not parts:
        return None, NOT_MEASURABLE, "no pair to compare"

    def shown(at: int, reason: str) -> str:
        if not names or len(parts) < 2:
            return reason
        return "; ".join(x for x in (f"least decided pair {names[at]}", reason) if x)

    against = [i for i, p in enumerate(parts) if p[1] == NOT_REPRODUCED]
    if against:
        at = against[0]
        reason = parts[at][2] or "a pair is decided the other way"
        return parts[at][0], NOT_REPRODUCED, shown(at, reason)
    if all(p[1] == REPRODUCED for p in parts):
        closest = min(parts, key=lambda p: min(abs(p[0].low), abs(p[0].high)))
        return closest[0], REPRODUCED, ""
    open_ = [i for i, p in enumerate(parts) if p[1] not in DECIDED]
    needs = [parts[i][0].needed for i in open_ if parts[i][0] and parts[i][0].needed is not None]
    at = open_[0]
    first = parts[at][0]
    interval = replace(first, needed=max(needs)) if first is not None and needs else first
    reason = parts[at][2]
    if len(open_) > 1:
        reason = "; ".join(
            x for x in (f"{len(open_)} of {len(parts)} pairs undecided", reason) if x
        )
    return interval, NOT_MEASURABLE, shown(at, reason)


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


@dataclass(frozen=True)
class Claim:
    """One statement of a paper and our verdict on it.

    ``profile`` None: a finding that holds in any profile (no trained model involved); else the
    profile whose runs the verdict rests on. A run verdict of reproduced or not reproduced
    needs the ``interval`` it came from (:func:`difference`, :func:`correlation`), and one that
    decides: the check is made here, so no paper can print a verdict its numbers do not carry."""

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
            if self.interval is None:
                raise ValueError(f"claim {self.claim!r}: {self.verdict!r} with no interval")
            decided, _ = judge(self.interval.low, self.interval.high, +1, self.interval.n)
            pooled = self.interval.unit == "r" and not self.interval.counts.startswith("seeds")
            if decided not in DECIDED or pooled:
                raise ValueError(
                    f"claim {self.claim!r}: {self.verdict!r} from an interval that cannot "
                    f"decide it ({self.interval.text()}, n {self.interval.n_text()})"
                )

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
    return Claim(claim, where, quote, paper, ours, verdict, profile, interval, reason, headline)


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
) -> Claim:
    """A claim judged without training: it holds in any profile. With ``readings``, the
    verdict must be the one they agree on (:func:`agreed`)."""
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
    )


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
    """'N claims: D decided (...); U undecided (...); P need the paper profile; T not
    testable': an undecided claim is never counted with the decided ones."""
    kinds = Counter(c.coverage for c in claims)

    def split(kind: str) -> str:
        verdicts = Counter(c.verdict for c in claims if c.coverage == kind)
        text = ", ".join(f"{k} {v}" for v, k in verdicts.most_common())
        return f"{kinds[kind]} {kind}" + (f" ({text})" if text else "")

    return (
        f"Coverage: {len(claims)} claims: {split('decided')}; {split('undecided')}; "
        f"{kinds['needs the paper profile']} need the paper profile; "
        f"{kinds['not testable']} not testable (the paper has no experiment for them)."
    )


FINDING_COLUMNS = ["claim", "where", "the paper's words", "paper", "we find", "verdict"]
RUN_COLUMNS = [
    "claim",
    "where",
    "paper",
    "ours",
    "n",
    "95% interval",
    "verdict",
    NEEDED_COLUMN,
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_table(claims: Sequence[Claim], findings: bool) -> str:
    """The Markdown table of findings (any profile) or of run verdicts."""
    if findings:
        rows = [
            [c.claim, c.where, c.quote, c.paper, c.found_text(), c.verdict_text()] for c in claims
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
                c.interval.text() if c.interval else "",
                c.verdict_text(),
                c.interval.needed_text() if c.interval and c.verdict == NOT_MEASURABLE else "",
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
    claims = mark_stand_ins(claims, stand_ins or {}, tasks)
    found = [c for c in claims if c.profile is None]
    runs = [c for c in claims if c.profile is not None]
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
    if runs:
        lines += [
            f"**Verdicts of this profile's runs.** {profile_note} {RULE}",
            "",
            claims_table(runs, findings=False),
            "",
            *([STAND_IN_LEGEND, ""] if any(c.stand_in for c in runs) else []),
        ]
    return lines + [n for note in notes for n in (note, "")]
