"""What every Fractional Neural Attention run trained, and its per-epoch history.

A study's table sees results/summary.parquet, which holds outcomes, not models. Fig 3's cells
are (layers, d, alpha or DP, Q = K or not) and Figs 6-7 are curves over epochs, so both are
read from each run's own records: run.json's resolved spec and metrics.parquet's epochs. A
table then says what the trained model was, whatever its variant is called, in either profile.

``python -m pdelab.papers.fractional_attention.runs --out-dir results KEY=DIR ...`` with KEY =
task/variant/seed and DIR its run folder (for a variant whose spec repeats another's, the
folder of the run that was trained) writes RUNS_FILE and CURVES_FILE under the out dir.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.papers.fractional_attention import CURVES_FILE, RUNS_FILE
from pdelab.papers.fractional_attention.options import DEFAULT_ALPHA, distance_scale
from pdelab.records.run import check_run, write_parquet

FNA_KERNELS = ("fna", "fna_reference")
CURVE_COLUMNS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc")


def model_row(spec: dict[str, Any]) -> dict[str, Any]:
    """The columns the tables group by: the backbone's shape and the kernel's options, with
    kappa as the number the kernel divides by (NaN for softmax kernels)."""
    model, train = spec["model"], spec["train"]
    options = model.get("attention_options") or {}
    head_dim = model["dim"] // model["heads"]
    fna = model["attention"] in FNA_KERNELS
    alpha = float(options.get("alpha", DEFAULT_ALPHA)) if fna else math.nan
    spherical = bool(options.get("spherical", False))
    rule = options.get("kappa", "text") if fna else ""
    kappa = distance_scale(rule, alpha, head_dim, model["heads"], spherical) if fna else math.nan
    return {
        "attention": model["attention"],
        "alpha": alpha,
        "kappa_rule": str(rule),
        "kappa": kappa,
        **{k: bool(options.get(k, False)) for k in ("orthogonal", "tied", "zero_diagonal")},
        "spherical": spherical,
        "laplace": bool(options.get("laplace", False)),
        **{k: model[k] for k in ("dim", "layers", "heads", "mlp_dim", "norm")},
        "patch": model.get("patch", 0),  # left out of a spec at its default
        "head_dim": head_dim,
        "pooling": model["pooling"],
        **{k: train[k] for k in ("lr", "batch_size", "epochs")},
    }


def parse_key(key: str) -> tuple[str, str, int]:
    task, variant, seed = key.split("/")
    return task, variant, int(seed)


def collect(runs: dict[str, Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run: its model and size; one row per run and epoch: its history)."""
    rows, curves = [], []
    for key, folder in runs.items():
        task, variant, seed = parse_key(key)
        record = check_run(folder)  # whose records, with the bytes they were written with
        identity = {"task": task, "variant": variant, "seed": seed}
        rows.append(
            identity
            | model_row(record["spec"])
            | {
                "parameters": record["result"].get("parameters", math.nan),
                "trained_as": record["spec"]["variant"],
            }
        )
        history = pd.read_parquet(folder / "metrics.parquet", columns=list(CURVE_COLUMNS))
        curves.append(history.assign(**identity))
    order = ["task", "variant", "seed"]
    curve_frame = (
        pd.concat(curves, ignore_index=True)
        if curves
        else pd.DataFrame(columns=[*order, *CURVE_COLUMNS])
    )
    return pd.DataFrame(rows), curve_frame[[*order, *CURVE_COLUMNS]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="task/variant/seed=run folder")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    runs = dict(pair.split("=", 1) for pair in args.runs)
    frame, curves = collect({key: Path(folder) for key, folder in runs.items()})
    for name, table in ((RUNS_FILE, frame), (CURVES_FILE, curves)):
        path = args.out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(table, path)


if __name__ == "__main__":
    main()
