"""Do the diagnostics explain the position results? Each variant's roughness and commutator
against its test-accuracy change from the baseline, as Pearson and Spearman correlations over
(task, variant) models, each with a 95% Fisher-z interval: with n = 7 models a correlation of
0.7 is compatible with anything from about -0.1 to 0.95."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

LEVEL = 0.95

FEATURES = {
    "roughness_mean": "mean roughness over all points (variant's model)",
    "roughness_scalefree_mean": "mean scale-free roughness (variant's model)",
    "commutator_exact_rel": "mean relative exact commutator over layers, alpha = 0.1",
    "commutator_linear_rel": "mean linearized (Eq. 13) relative commutator, alpha = 0.1",
    "site_roughness_baseline": "baseline's roughness at the variant's insertion points (Thm 4.7)",
}


def accuracy_deltas(summary: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Per (task, variant): mean test accuracy of the ok runs minus the baseline's (same task)."""
    ok = summary[summary["status"] == "ok"]
    acc = ok.groupby(["task", "variant"], as_index=False)["test_acc"].mean()
    base = acc[acc["variant"] == baseline].set_index("task")["test_acc"]
    acc["delta_acc"] = acc["test_acc"] - acc["task"].map(base)
    return acc[acc["variant"] != baseline]


def variant_features(diag: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """One row per (task, variant) with the FEATURES, seeds averaged."""
    per_layer = diag.drop_duplicates(["task", "variant", "seed", "layer"])
    keys = ["task", "variant"]
    feats = diag.groupby(keys).agg(
        roughness_mean=("roughness", "mean"),
        roughness_scalefree_mean=("roughness_scalefree", "mean"),
    )
    comm = per_layer.groupby(keys).agg(
        commutator_exact_rel=("commutator_exact_ref_rel", "mean"),
        commutator_linear_rel=("commutator_linear_ref_rel", "mean"),
    )
    feats = feats.join(comm).reset_index()
    base = diag[diag["variant"] == baseline].groupby(["task", "layer", "point"])["roughness"].mean()
    site_rough = []
    for task, variant in zip(feats["task"], feats["variant"], strict=True):
        rows = diag[(diag["task"] == task) & (diag["variant"] == variant) & diag["site_active"]]
        values = [
            base.get((task, j, p), np.nan)
            for j, p in zip(rows["layer"], rows["point"], strict=True)
        ]
        site_rough.append(float(np.mean(values)) if values else np.nan)
    feats["site_roughness_baseline"] = site_rough
    return feats


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def fisher_interval(r: float, n: int, rank: bool = False) -> tuple[float, float]:
    """95% interval of a correlation r over n independent points by Fisher's z; a rank
    (Spearman) correlation takes Bonett and Wright's variance (1 + r^2 / 2) / (n - 3). NaN when
    r is NaN or n <= 3 (no interval)."""
    if math.isnan(r) or n <= 3:
        return math.nan, math.nan
    var = (1 + r * r / 2 if rank else 1.0) / (n - 3)
    z = math.atanh(max(min(r, 1 - 1e-12), -1 + 1e-12))
    half = float(stats.norm.ppf(0.5 + LEVEL / 2)) * math.sqrt(var)
    return math.tanh(z - half), math.tanh(z + half)


def _interval_text(low: float, high: float) -> str:
    return "n/a" if math.isnan(low) else f"[{low:+.2f}, {high:+.2f}]"


def _ranks(x: np.ndarray) -> np.ndarray:
    return pd.Series(x).rank().to_numpy()


def correlations(
    diag: pd.DataFrame, summary: pd.DataFrame, baseline: str = "baseline"
) -> pd.DataFrame:
    """Pearson and Spearman of each FEATURE against the accuracy change from the baseline,
    over (task, variant) points (seeds averaged), per task and pooled over tasks ("all"), each
    with its 95% Fisher-z interval; NaN when n < 3 (no interval when n <= 3)."""
    data = variant_features(diag, baseline).merge(
        accuracy_deltas(summary, baseline), on=["task", "variant"]
    )
    scopes = [("all", data)] + [(t, data[data["task"] == t]) for t in sorted(data["task"].unique())]
    rows = []
    for scope, frame in scopes:
        for feature, meaning in FEATURES.items():
            both = frame[[feature, "delta_acc"]].dropna()
            x, y = both[feature].to_numpy(float), both["delta_acc"].to_numpy(float)
            pearson = _corr(x, y)
            spearman = _corr(_ranks(x), _ranks(y)) if len(x) else float("nan")
            p_low, p_high = fisher_interval(pearson, len(both))
            s_low, s_high = fisher_interval(spearman, len(both), rank=True)
            rows.append(
                {
                    "scope": scope,
                    "feature": feature,
                    "n": len(both),
                    "pearson": pearson,
                    "pearson 95% CI": _interval_text(p_low, p_high),
                    "spearman": spearman,
                    "spearman 95% CI": _interval_text(s_low, s_high),
                    "meaning": meaning,
                }
            )
    return pd.DataFrame(rows)
