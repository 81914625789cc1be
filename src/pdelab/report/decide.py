"""How a measured effect decides a paper's claim: the test (paired where seeds are shared), the
outcome at a level (equivalence for *reproduced*), Holm's adjustment across a paper's claims,
and the seeds a decision would need.

One rule makes every decision: the two-sided ``1 - alpha`` t interval of the effect, read
against the claim (:func:`outcome`). Its p-value is the smallest alpha at which that same rule
decides (:func:`p_value`, by bisection over the rule itself), so the levels Holm assigns and the
intervals shown can never disagree.

The outcomes of a claimed effect ``e`` with margin ``m``, in this order:

* *reproduced*: the interval lies inside ``[e - m, e + m]`` (equivalence: two one-sided tests);
* *reproduced in sign only*: wholly on the claimed side of zero, not inside the band;
* *not reproduced*: wholly on the other side of zero, or inside ``[-m, m]`` (no effect, shown by
  equivalence to zero);
* otherwise *not measurable here*.

A threshold claim ("over 2 points") is read against its threshold; a null claim ("no
correlation", "falls to chance") by equivalence to zero: reproduced inside ``[-m, m]``, not
reproduced wholly beyond it, so it can be confirmed, not only refuted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd

ALPHA = 0.05  # each paper's family-wise error rate
POWER = 0.8
SEEDS_CAP = 1000
MIN_SEEDS = 3  # independent seeds a side below which no interval is trusted to decide
MARGIN_SHARE = 0.5  # the default margin: half the paper's claimed effect
NULL_MARGINS = {"points": 1.0, "r": 0.2}  # a null claim's default margin, per unit

REPRODUCED = "reproduced"
SIGN_ONLY = "reproduced in sign only"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURABLE = "not measurable here"
OUTCOMES = (REPRODUCED, SIGN_ONLY, NOT_REPRODUCED)  # what a decided claim reads

PAIRED = "paired t"
WELCH = "Welch t"
ONE_SAMPLE = "one-sample t"


@dataclass(frozen=True)
class Estimate:
    """A measured effect on its test scale: estimate, standard error and degrees of freedom,
    over ``n`` independent seeds per side, by ``test``. ``fisher``: the scale is Fisher's z
    and intervals are shown as r. ``sd``/``sd_df``: the per-seed spread that sizes seeds
    needed (of the paired differences, or pooled over both arms), with its degrees of
    freedom; ``arms``: 2 where each of two independent arms needs that many seeds."""

    estimate: float
    se: float
    df: float
    n: tuple[int, ...]
    test: str
    sd: float = math.nan
    sd_df: float = math.nan
    arms: int = 1
    fisher: bool = False

    def interval(self, alpha: float) -> tuple[float, float]:
        """The two-sided ``1 - alpha`` interval on the shown scale (r where ``fisher``)."""
        from scipy import stats

        if not self.decidable():
            return math.nan, math.nan
        half = float(stats.t.ppf(1 - alpha / 2, self.df)) * self.se
        low, high = self.estimate - half, self.estimate + half
        return (math.tanh(low), math.tanh(high)) if self.fisher else (low, high)

    def shown(self) -> float:
        return math.tanh(self.estimate) if self.fisher else self.estimate

    def decidable(self) -> bool:
        return not any(math.isnan(v) for v in (self.se, self.df)) and self.se > 0


def _values(x: pd.Series) -> pd.Series:
    return x.dropna().astype(float)


def estimate(a: pd.Series, b: pd.Series | None) -> Estimate:
    """The effect mean(a) - mean(b) (b None: mean(a) against zero) from per-seed values
    indexed by seed: paired (scipy's ``ttest_rel``) where both arms hold the same seeds, since
    a seed shares the data order and initialisation stream across variants; Welch's unpaired
    interval (``ttest_ind``, unequal variances) otherwise. No interval (NaN) when a side has
    fewer than two values or no spread."""
    a = _values(a)
    if b is None:
        return _one_sample(a, ONE_SAMPLE, (len(a),))
    b = _values(b)
    n = (len(a), len(b))
    if len(a) and set(a.index) == set(b.index):
        d = a - b.reindex(a.index)
        return _one_sample(d, PAIRED, n)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    va = float(a.var(ddof=1)) if len(a) > 1 else math.nan
    vb = float(b.var(ddof=1)) if len(b) > 1 else math.nan
    if math.isnan(va) or math.isnan(vb) or (a.nunique() == 1 and b.nunique() == 1):
        return Estimate(diff, math.nan, math.nan, n, WELCH, arms=2)
    sa, sb = va / len(a), vb / len(b)
    se = math.sqrt(sa + sb)
    df = (sa + sb) ** 2 / (sa**2 / (len(a) - 1) + sb**2 / (len(b) - 1))
    sd = math.sqrt((va + vb) / 2)
    return Estimate(diff, se, df, n, WELCH, sd, len(a) + len(b) - 2, arms=2)


def _one_sample(d: pd.Series, test: str, n: tuple[int, ...]) -> Estimate:
    mean = float(d.mean()) if len(d) else math.nan
    if len(d) < 2 or no_spread(d):  # no interval from a spread that is rounding alone
        return Estimate(mean, math.nan, math.nan, n, test)
    sd = float(d.std(ddof=1))
    return Estimate(mean, sd / math.sqrt(len(d)), len(d) - 1, n, test, sd, len(d) - 1)


def no_spread(d: pd.Series) -> bool:
    """Values equal up to float rounding (differences of equal steps: 0.31 - 0.30 and
    0.33 - 0.32), whose float variance is not 0 but says nothing of seeds."""
    return float(d.max() - d.min()) <= 1e-9 * max(1.0, float(d.abs().max()))


def fisher_estimate(z: pd.Series) -> Estimate:
    """A correlation over seeds: the one-sample t of each seed's Fisher z, shown as r."""
    values = _values(z)
    return replace(_one_sample(values, "t over seeds of Fisher's z", (len(values),)), fisher=True)


@dataclass(frozen=True)
class Claimed:
    """What a claim asserts about an effect. ``kind``: "effect" (of ``sign``, the paper's size
    ``effect`` within ``margin``; a NaN effect is a claim of sign alone), "threshold" (beyond
    ``threshold`` on the side of ``sign``) or "null" (zero within ``margin``)."""

    kind: str
    sign: int = 1
    effect: float = math.nan
    margin: float = math.nan
    threshold: float = 0.0

    def band(self) -> tuple[float, float] | None:
        """The equivalence band that reproduces the claim (None for a claim of sign alone)."""
        if self.kind == "null":
            return -self.margin, self.margin
        if self.kind == "effect" and not math.isnan(self.effect):
            return self.effect - self.margin, self.effect + self.margin
        return None


def claimed_effect(
    sign: int,
    effect: float,
    unit: str = "points",
    margin: float | None = None,
    threshold: float | None = None,
) -> Claimed:
    """A claim with its documented default margin: half the paper's effect, or
    ``NULL_MARGINS[unit]`` for a null claim (``sign`` 0) or an effect the paper does not size.
    A null claim in a unit with no default must declare its margin."""
    if threshold is not None:
        return Claimed("threshold", sign, effect, math.nan, float(threshold))
    if margin is None:
        if sign != 0 and not math.isnan(effect) and effect != 0:
            margin = MARGIN_SHARE * abs(effect)
        elif unit in NULL_MARGINS:
            margin = NULL_MARGINS[unit]
        elif sign == 0:
            raise ValueError(
                f"a null claim in {unit!r} needs its margin: pass margin= (defaults exist for "
                f"{', '.join(NULL_MARGINS)})"
            )
        else:
            margin = math.nan
    if not math.isnan(margin) and margin <= 0:
        raise ValueError(f"margin {margin} must be positive")
    return Claimed("null" if sign == 0 else "effect", sign, effect, float(margin))


def _inside(low: float, high: float, band: tuple[float, float] | None) -> bool:
    return band is not None and not math.isnan(band[0]) and band[0] <= low and high <= band[1]


def _readings(low: float, high: float, claim: Claimed) -> list[tuple[str, bool, str]]:
    """Each outcome the interval [low, high] may show of the claim, in the order the rule
    reads them, as (outcome, shown, reason); the last is the undecided one, always shown."""
    m = claim.margin
    if claim.kind == "null":
        return [
            (REPRODUCED, _inside(low, high, claim.band()), f"inside [-{m:g}, +{m:g}]: no effect"),
            (NOT_REPRODUCED, low > m or high < -m, f"wholly beyond ±{m:g}: an effect"),
            (NOT_MEASURABLE, True, f"the interval reaches both inside and beyond ±{m:g}"),
        ]
    s = 1 if claim.sign >= 0 else -1
    claimed_side = low > 0 if s > 0 else high < 0
    if claim.kind == "threshold":
        t = claim.threshold
        return [
            (REPRODUCED, low > t if s > 0 else high < t, f"beyond the claimed {t:+g}"),
            (NOT_REPRODUCED, high < t if s > 0 else low > t, f"short of the claimed {t:+g}"),
            (SIGN_ONLY, claimed_side, f"on the claimed side of zero, not surely beyond {t:+g}"),
            (NOT_MEASURABLE, True, f"the interval holds both zero and {t:+g}"),
        ]
    band = claim.band()
    e = claim.effect
    unsized = "on the claimed side (the paper gives no size)"  # its claim is the sign alone
    return [
        (REPRODUCED, band is None and claimed_side, unsized),
        (REPRODUCED, _inside(low, high, band), f"inside the paper's {e:+g} ± {m:g}"),
        (SIGN_ONLY, claimed_side, f"on the claimed side, outside {e:+g} ± {m:g}"),
        (NOT_REPRODUCED, high < 0 if s > 0 else low > 0, "on the other side of zero"),
        (NOT_REPRODUCED, _inside(low, high, (-m, m)), f"inside ±{m:g}: no effect"),
        (NOT_MEASURABLE, True, "the interval holds both outcomes"),
    ]


def _undecidable(est: Estimate, alpha: float) -> str:
    """Why no interval of this estimate can decide anything ("" where one can)."""
    if est.n and min(est.n) < MIN_SEEDS:
        return f"fewer than {MIN_SEEDS} seeds a side"
    if math.isnan(est.interval(alpha)[0]):
        return "no interval: no spread, or too few values"
    return ""


def outcome(est: Estimate, claim: Claimed, alpha: float) -> tuple[str, str]:
    """(outcome, reason) of the claim from the effect's ``1 - alpha`` interval."""
    why = _undecidable(est, alpha)
    if why:
        return NOT_MEASURABLE, why
    low, high = est.interval(alpha)
    return next((o, reason) for o, shown, reason in _readings(low, high, claim) if shown)


def _positive(est: Estimate, claim: Claimed, alpha: float) -> bool:
    """The interval shows the claim: inside its band, or wholly on its side (of zero, or of
    its threshold)."""
    return outcome(est, claim, alpha)[0] in (REPRODUCED, SIGN_ONLY)


def _refuted(est: Estimate, claim: Claimed, alpha: float) -> bool:
    """The interval shows the claim wrong, whatever it reads first: wholly on the other side
    of zero (of the threshold; beyond the margin for a null claim), or inside the no-effect
    band."""
    if _undecidable(est, alpha):
        return False
    low, high = est.interval(alpha)
    return any(o == NOT_REPRODUCED and shown for o, shown, _ in _readings(low, high, claim))


def _smallest_alpha(shows: Callable[[float], bool]) -> float:
    """The smallest alpha at which ``shows`` holds (1.0 if none): the interval narrows as alpha
    grows, so what it shows once it keeps showing."""
    top = 1 - 1e-12
    if not shows(top):
        return 1.0
    lo, hi = 0.0, top
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if shows(mid) else (mid, hi)
    return hi


def p_values(est: Estimate, claim: Claimed) -> tuple[float, float]:
    """(p of the claim shown, p of the claim refuted): the smallest alpha at which the rule's
    interval shows each. Each is a valid p-value for its own null (the claim's effect absent;
    the claim's effect present beyond the margin), so Holm may rank them together."""
    return (
        _smallest_alpha(lambda a: _positive(est, claim, a)),
        _smallest_alpha(lambda a: _refuted(est, claim, a)),
    )


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[tuple[float, bool]]:
    """Holm's step-down over one paper's claims: per claim, (its adjusted level, whether it
    is decided). Ranked by p, the k-th smallest is tested at alpha / (K - k); the first that
    fails stops the rest, which keep the level they would have needed."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out: list[tuple[float, bool]] = [(alpha, False)] * len(p_values)
    going = True
    for rank, i in enumerate(order):
        level = alpha / (len(p_values) - rank)
        going = going and p_values[i] <= level
        out[i] = (level, going)
    return out


def seeds_needed(
    est: Estimate, claim: Claimed, alpha: float, power: float = POWER
) -> tuple[int, int, int] | None:
    """Seeds a side at which the decision this claim waits for comes out with ``power``:
    *reproduced* by equivalence inside its band (the true effect the paper's), or, for a claim
    of sign or threshold alone, the interval clearing zero or the threshold. Returned with the
    range its spread allows: (n, low, high), the spread's own 95% interval (chi-square) read
    at each end: from two seeds the spread is known to within x0.5 to x6.3. None where the
    claim is unsized or no spread was measured."""
    from scipy import stats

    if math.isnan(est.sd) or est.sd <= 0 or math.isnan(est.sd_df):
        return None
    if claim.kind == "threshold":
        distance = abs(claim.effect - claim.threshold) if not math.isnan(claim.effect) else math.nan
        tails = 1
    elif claim.band() is not None and not math.isnan(claim.margin):
        distance, tails = claim.margin, 2  # |error| + half-width within the margin
    else:
        distance, tails = abs(claim.effect), 1
    if math.isnan(distance) or distance == 0:
        return None
    if est.fisher:  # the band's half-width on Fisher's z scale, near the claimed r
        centre = claim.effect if not math.isnan(claim.effect) else 0.0
        edge = min(abs(centre) + distance, 0.999999)
        distance = math.atanh(edge) - math.atanh(abs(centre))

    def clears(n: int, sd: float) -> bool:
        df = est.arms * (n - 1)
        crit = float(stats.t.ppf(1 - alpha / 2, df))
        miss = float(stats.t.ppf(1 - (1 - power) / tails, df))
        return (crit + miss) * sd * math.sqrt(est.arms / n) <= distance

    def needed(sd: float) -> int:
        """The smallest n that clears (SEEDS_CAP + 1 if none): both quantiles and the
        standard error shrink as n grows, so a bisection finds what a scan would."""
        if not clears(SEEDS_CAP, sd):
            return SEEDS_CAP + 1
        low, high = 1, SEEDS_CAP  # low never clears (n = 1 has no spread); high does
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if clears(mid, sd) else (mid, high)
        return high

    q_low, q_high = (float(stats.chi2.ppf(q, est.sd_df)) for q in (0.975, 0.025))
    low_sd = est.sd * math.sqrt(est.sd_df / q_low)
    high_sd = est.sd * math.sqrt(est.sd_df / q_high)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return needed(est.sd), needed(low_sd), needed(high_sd)
