"""Table 10's gains: every variant trains on the baseline's seeds (a seed fixes the data order
and the initialisation of both), so each gain's interval is the paired t interval over the
seeds; a variant on other seeds takes Welch's."""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from pdelab.papers.diffusion_positions.tables import seeds_frame
from pdelab.report.decide import PAIRED, WELCH

BASELINE = [0.30, 0.50, 0.70]  # seeds 0, 1, 2 differ widely; each moves both arms alike
AFTER_EMBEDDING = [0.40, 0.62, 0.81]
AFTER_MLP = [0.35, 0.36, 0.41]  # trained on seeds 5, 6, 7: no partner


def summary() -> pd.DataFrame:
    arms = {
        "baseline": (BASELINE, [0, 1, 2]),
        "after_embedding": (AFTER_EMBEDDING, [0, 1, 2]),
        "after_mlp": (AFTER_MLP, [5, 6, 7]),
    }
    return pd.DataFrame(
        {"task": "listops", "variant": variant, "seed": seed, "status": "ok", "test_acc": acc}
        for variant, (accs, seeds) in arms.items()
        for acc, seed in zip(accs, seeds, strict=True)
    )


def seeds_table() -> pd.DataFrame:
    study = {
        "tasks": ["listops"],
        "variants": ["baseline", "after_embedding", "after_mlp"],
        "paper_table": "diffusion_seeds_listops.csv",
    }
    return seeds_frame(summary(), study).set_index("variant")


def test_a_gain_over_shared_seeds_is_the_paired_interval() -> None:
    row = seeds_table().loc["after_embedding"]
    paired = stats.ttest_rel(AFTER_EMBEDDING, BASELINE).confidence_interval(0.95)
    welch = stats.ttest_ind(AFTER_EMBEDDING, BASELINE, equal_var=False).confidence_interval(0.95)
    assert math.isclose(row["95% CI low"], paired.low, abs_tol=1e-9)
    assert math.isclose(row["95% CI high"], paired.high, abs_tol=1e-9)
    assert row["95% CI low"] > 0 > welch.low  # pairing shows the gain Welch's hides
    assert row["test"] == PAIRED


def test_a_gain_over_other_seeds_is_welchs_and_the_baseline_has_none() -> None:
    table = seeds_table()
    welch = stats.ttest_ind(AFTER_MLP, BASELINE, equal_var=False).confidence_interval(0.95)
    assert math.isclose(table.loc["after_mlp", "95% CI low"], welch.low, abs_tol=1e-9)
    assert math.isclose(table.loc["after_mlp", "95% CI high"], welch.high, abs_tol=1e-9)
    assert table.loc["after_mlp", "test"] == WELCH
    assert table.loc["baseline", "test"] == "" and math.isnan(table.loc["baseline", "95% CI low"])
