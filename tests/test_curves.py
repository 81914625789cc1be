"""Learning curves: every run's epochs collected once (a repeated variant given the trained
run's copy), and per study a figure of the validation metric against epoch, mean and range
over seeds per variant."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pdelab.report.curves import band, collect, curves_figure, metric_of


def run_folder(root: Path, task: str, variant: str, seed: int, accs: list[float]) -> Path:
    folder = root / task / variant / f"seed{seed}"
    folder.mkdir(parents=True)
    pd.DataFrame(
        {
            "task": task,
            "variant": variant,
            "seed": seed,
            "epoch": range(1, len(accs) + 1),
            "val_acc": accs,
            "val_ppl": float("nan"),  # a classifier has none
        }
    ).to_parquet(folder / "metrics.parquet")
    return folder


def test_curves_collect_every_epoch_and_copy_shared_runs(tmp_path: Path) -> None:
    folders = [
        run_folder(tmp_path, "listops", "baseline", 0, [0.2, 0.3, 0.4]),
        run_folder(tmp_path, "listops", "baseline", 1, [0.1, 0.3, 0.6]),
        run_folder(tmp_path, "listops", "pde", 0, [0.2, 0.2, 0.2]),
    ]
    same = {("listops", "baseline_T256", 0): "baseline"}
    curves = collect(folders, tmp_path / "curves.parquet", same)
    assert len(curves) == 9 + 3 and pd.read_parquet(tmp_path / "curves.parquet").shape == (
        curves.shape
    )
    copy = curves[curves["variant"] == "baseline_T256"]
    assert copy["val_acc"].tolist() == [0.2, 0.3, 0.4]
    assert metric_of(curves) == ("val_acc", "validation accuracy")
    base = band(curves[curves["variant"] == "baseline"], "val_acc")
    assert base.loc[3, "mean"] == 0.5 and (base.loc[3, "low"], base.loc[3, "high"]) == (0.4, 0.6)
    assert base["n"].tolist() == [2, 2, 2]


def test_each_study_gets_a_curves_figure(tmp_path: Path) -> None:
    folders = [
        run_folder(tmp_path, "listops", "baseline", 0, [0.2, 0.3]),
        run_folder(tmp_path, "imdb", "baseline", 0, [0.5, 0.7]),
    ]
    curves = collect(folders, tmp_path / "curves.parquet")
    out = tmp_path / "study_curves.png"
    curves_figure(curves, ["listops", "imdb"], ["baseline"], "A study", "smoke", out)
    assert out.stat().st_size > 10_000
    empty = tmp_path / "empty.png"
    curves_figure(curves.iloc[0:0], ["listops"], ["baseline"], "No runs", "smoke", empty)
    assert empty.stat().st_size > 0
