"""Do the diagnostics explain the position results? Each variant's roughness and commutator
against its test-accuracy change from the baseline, as Pearson and Spearman correlations.

Two models of one variant differ only by their seed, so they are not independent points, and
(task, variant) models are not seeds: each correlation is computed within each seed over the
models that seed trained, and its 95% interval runs over the seeds (the claims kit's
:func:`~pdelab.report.claims.correlation`, which refuses pooled input). No interval is drawn
from the number of models."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pdelab.report.claims import correlation

FEATURES = {
    "roughness_mean": "mean roughness over all points (variant's model)",
    "roughness_scalefree_mean": "mean scale-free roughness (variant's model)",
    "commutator_exact_rel": "mean relative exact commutator over layers, alpha = 0.1",
    "commutator_linear_rel": "mean linearized (Eq. 13) relative commutator, alpha = 0.1",
    "site_roughness_baseline": "baseline's roughness at the variant's insertion points (Thm 4.7)",
}
KEYS = ["task", "variant", "seed"]


def accuracy_deltas(summary: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Per (task, variant, seed): test accuracy of the ok run minus the baseline's of the same
    task and seed (a seed the baseline did not train gives NaN)."""
    ok = summary[summary["status"] == "ok"]
    acc = ok.groupby(KEYS, as_index=False)["test_acc"].mean()
    base = acc[acc["variant"] == baseline].set_index(["task", "seed"])["test_acc"]
    pairs = pd.MultiIndex.from_frame(acc[["task", "seed"]])
    acc["delta_acc"] = acc["test_acc"].to_numpy() - base.reindex(pairs).to_numpy()
    return acc[acc["variant"] != baseline]


def variant_features(diag: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """One row per (task, variant, seed) with the FEATURES of that seed's model."""
    per_layer = diag.drop_duplicates([*KEYS, "layer"])
    feats = diag.groupby(KEYS).agg(
        roughness_mean=("roughness", "mean"),
        roughness_scalefree_mean=("roughness_scalefree", "mean"),
    )
    comm = per_layer.groupby(KEYS).agg(
        commutator_exact_rel=("commutator_exact_ref_rel", "mean"),
        commutator_linear_rel=("commutator_linear_ref_rel", "mean"),
    )
    feats = feats.join(comm).reset_index()
    base = (
        diag[diag["variant"] == baseline]
        .groupby(["task", "seed", "layer", "point"])["roughness"]
        .mean()
    )
    site_rough = []
    for task, variant, seed in zip(feats["task"], feats["variant"], feats["seed"], strict=True):
        rows = diag[
            (diag["task"] == task)
            & (diag["variant"] == variant)
            & (diag["seed"] == seed)
            & diag["site_active"]
        ]
        values = [
            base.get((task, seed, j, p), np.nan)
            for j, p in zip(rows["layer"], rows["point"], strict=True)
        ]
        site_rough.append(float(np.mean(values)) if values else np.nan)
    feats["site_roughness_baseline"] = site_rough
    return feats


def _interval_text(low: float, high: float) -> str:
    return "n/a" if math.isnan(low) else f"[{low:+.2f}, {high:+.2f}]"


def _within_seed_ranks(values: pd.Series) -> pd.Series:
    """Ranks taken within each seed, so a Pearson r of them is that seed's Spearman r."""
    return values.groupby(level="seed").rank()


def correlations(
    diag: pd.DataFrame, summary: pd.DataFrame, baseline: str = "baseline", shown: bool = True
) -> pd.DataFrame:
    """Pearson and Spearman of each FEATURE against the accuracy change from the baseline, per
    task (over its variants) and over every task ("all": over its (task, variant) models),
    each computed within each seed, its mean and 95% interval over the seeds (Fisher's z, the
    kit's :func:`correlation`). A seed needs three models with spread to give an r; one seed
    gives an r and no interval. ``shown`` False: the interval's bounds as numbers
    (``pearson_low``, ...) rather than the table's text."""
    data = variant_features(diag, baseline).merge(accuracy_deltas(summary, baseline), on=KEYS)
    scopes = [("all", data, ["task", "variant"])] + [
        (t, data[data["task"] == t], ["variant"]) for t in sorted(data["task"].unique())
    ]
    rows = []
    for scope, frame, settings in scopes:
        indexed = frame.set_index([*settings, "seed"])
        models = int(indexed.index.droplevel("seed").nunique())
        for feature, meaning in FEATURES.items():
            both = indexed[[feature, "delta_acc"]].dropna()
            x, y = both[feature], both["delta_acc"]
            pearson = correlation(x, y, +1, math.nan, "models")[0]
            spearman = correlation(_within_seed_ranks(x), _within_seed_ranks(y), +1, math.nan)[0]
            seeds = 0 if math.isnan(pearson.estimate) else pearson.n[0]
            rows.append(
                {
                    "scope": scope,
                    "feature": feature,
                    "seeds": seeds,
                    "models per seed": models,
                    "pearson": pearson.estimate,
                    "pearson_low": pearson.low,
                    "pearson_high": pearson.high,
                    "spearman": spearman.estimate,
                    "spearman_low": spearman.low,
                    "spearman_high": spearman.high,
                    "meaning": meaning,
                }
            )
    return shown_correlations(pd.DataFrame(rows)) if shown else pd.DataFrame(rows)


def shown_correlations(numbers: pd.DataFrame) -> pd.DataFrame:
    """The correlations as the table prints them: each interval as one text cell."""
    shown = numbers.copy()
    for name in ("pearson", "spearman"):
        low, high = shown.pop(f"{name}_low"), shown.pop(f"{name}_high")
        cells = [_interval_text(a, b) for a, b in zip(low, high, strict=True)]
        shown.insert(shown.columns.get_loc(name) + 1, f"{name} 95% CI over seeds", cells)
    return shown
