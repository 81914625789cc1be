"""The ablation table's interval: an ablation and its reference train on the same seeds (one
data order and initialisation per seed), so their difference takes the paired t interval over
the seeds; where the seeds differ, Welch's. The test is named beside the interval."""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from pdelab.papers.fractional_attention.tables import ablation_frame
from pdelab.report.decide import PAIRED, WELCH

REFERENCE = [80.0, 70.0, 60.0]  # percent, seeds 0, 1, 2
ABLATED = [81.5, 71.0, 62.0]
STUDY = {
    "tasks": ["imdb_wordpiece"],
    "ablations": {"zero_diagonal": {"reference": "fna_qk", "ablated": "fna_qk_zd"}},
    "variants": ["fna_qk", "fna_qk_zd"],
}


def summary(ablated_seeds: list[int]) -> pd.DataFrame:
    arms = {"fna_qk": (REFERENCE, [0, 1, 2]), "fna_qk_zd": (ABLATED, ablated_seeds)}
    return pd.DataFrame(
        {"task": "imdb_wordpiece", "variant": v, "seed": s, "status": "ok", "test_acc": a / 100}
        for v, (accs, seeds) in arms.items()
        for a, s in zip(accs, seeds, strict=True)
    )


def test_an_ablation_on_the_references_seeds_is_paired() -> None:
    row = ablation_frame(summary([0, 1, 2]), STUDY).iloc[0]
    paired = stats.ttest_rel(ABLATED, REFERENCE).confidence_interval(0.95)
    welch = stats.ttest_ind(ABLATED, REFERENCE, equal_var=False).confidence_interval(0.95)
    assert math.isclose(row["low"], paired.low, abs_tol=1e-9)
    assert math.isclose(row["high"], paired.high, abs_tol=1e-9)
    assert row["low"] > 0 > welch.low  # unpaired, the seeds' common spread hides the change
    assert row["test"] == PAIRED
    assert row["Δ ablated − reference [95% CI]"].endswith(f"({PAIRED})")


def test_an_ablation_on_other_seeds_takes_welchs_interval() -> None:
    row = ablation_frame(summary([3, 4, 5]), STUDY).iloc[0]
    welch = stats.ttest_ind(ABLATED, REFERENCE, equal_var=False).confidence_interval(0.95)
    assert math.isclose(row["low"], welch.low, abs_tol=1e-9)
    assert math.isclose(row["high"], welch.high, abs_tol=1e-9)
    assert row["test"] == WELCH and row["Δ ablated − reference [95% CI]"].endswith("(Welch t)")
