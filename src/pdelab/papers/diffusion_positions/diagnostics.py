"""Roughness and the diffusion-attention commutator, measured in trained models.

where-to-add-pde-diffusion explains its position results with two quantities it never measures
("we do not directly measure commutator norms in this work"): the Dirichlet energy E(Z_j) at an
insertion point (Theorem 4.7: inserting S_alpha after f_j moves the output by at most
alpha * sqrt(2 E(Z_j)) times the downstream Lipschitz product) and the commutator
[S_alpha, A](X) = S(A(X)) - A(S(X)) of diffusion with attention (Prop. 4.8, Eq. 13, App. B.5).
This module measures both on a fixed batch, the first N examples of the validation split, of
each trained run: diagnostics_measures defines the quantities, diagnostics_model reads them
from a model's own forward, diagnostics_stats relates them to accuracy and diagnostics_report
writes the figure and the correlation table.

CLI: ``measure RUN_DIRS... --out X.parquet`` (optionally also --png/--table, as one step) and
``summarize PARTS... --summary S --png P --table T`` on the measured parquet files.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from pdelab.data.store import load_split
from pdelab.papers.diffusion_positions.diagnostics_model import diagnose_model
from pdelab.papers.diffusion_positions.diagnostics_report import write_outputs
from pdelab.records.atomic import atomic_path
from pdelab.records.run import check_run
from pdelab.training.trained import load_trained


def load_run(run_dir: Path, data_dir: Path | None = None) -> tuple[dict, nn.Module, Path]:
    """(run.json record, the model at its best-validation weights, the data folder), each
    checked to be the run's (pdelab.training.trained)."""
    trained = load_trained(run_dir, "cpu", data_dir)
    return trained.record, trained.model, trained.data_dir


def diagnose_run(
    run_dir: Path, n_examples: int = 64, data_dir: Path | None = None, split: str = "val"
) -> pd.DataFrame:
    """diagnose_model on the first ``n_examples`` of the split (the first documents of a pair
    task), with the run's task, variant, seed, norm and diffusion sites in front."""
    record, model, data = load_run(run_dir, data_dir)
    spec = record["spec"]
    examples = load_split(data, split)
    batch = examples.batch(np.arange(min(n_examples, len(examples))))
    diag = diagnose_model(model, torch.from_numpy(batch["ids"]), torch.from_numpy(batch["mask"]))
    front = {
        "task": spec["task"],
        "variant": spec["variant"],
        "seed": int(spec["seed"]),
        "norm": spec["model"]["norm"],
        "sites": ",".join(spec["diffusion"]["sites"]),
        "split": split,
    }
    for pos, (key, value) in enumerate(front.items()):
        diag.insert(pos, key, value)
    return diag


def summary_from_runs(run_dirs: Sequence[Path]) -> pd.DataFrame:
    """task, variant, seed, status, test_acc from each run.json's result."""
    keys = ["task", "variant", "seed", "status", "test_acc"]
    rows = []
    for run_dir in run_dirs:
        result = check_run(Path(run_dir)).get("result") or {}
        if all(k in result for k in keys):
            rows.append({k: result[k] for k in keys})
    return pd.DataFrame(rows, columns=keys)


def read_summary(path: Path) -> pd.DataFrame:
    """The runs' summary from a .csv or a parquet file."""
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def measure(args: argparse.Namespace) -> None:
    """Diagnose each run into one parquet file; with --png/--table also summarize at once."""
    frames = []
    for run_dir in args.run_dirs:
        try:
            frames.append(diagnose_run(run_dir, args.n_examples, args.data_dir, args.split))
        except FileNotFoundError as err:  # a diverged run has no best.pt: skip, say so
            warnings.warn(f"skipping {run_dir}: {err}", stacklevel=1)
    if not frames:
        sys.exit("no run could be diagnosed")
    diag = pd.concat(frames, ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        diag.to_parquet(tmp, index=False)
    print(f"wrote {len(diag)} rows to {args.out}", file=sys.stderr)
    if args.png or args.table:
        runs = args.summary is None
        summary = summary_from_runs(args.run_dirs) if runs else read_summary(args.summary)
        write_outputs(diag, summary, args.png, args.table, args.baseline)


def summarize(args: argparse.Namespace) -> None:
    """The figure and correlation table from measured parts (one parquet per task)."""
    diag = pd.concat([pd.read_parquet(p) for p in args.parts], ignore_index=True)
    write_outputs(diag, read_summary(args.summary), args.png, args.table, args.baseline)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.papers.diffusion_positions.diagnostics",
        description="Roughness and diffusion-attention commutators of trained runs.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("measure", help="diagnose trained runs into a parquet file")
    m.add_argument("run_dirs", nargs="+", type=Path, help="folders with run.json, best.pt")
    m.add_argument("--out", type=Path, default=Path("diagnostics.parquet"))
    m.add_argument("--n-examples", type=int, default=64)
    m.add_argument("--split", default="val")
    m.add_argument("--data-dir", type=Path, help="prepared data (default: the run's)")
    m.add_argument(
        "--summary",
        type=Path,
        help="parquet/csv: task, variant, seed, status, "
        "test_acc (default: the runs' own run.json results)",
    )
    s = commands.add_parser("summarize", help="figure and table from measured parquet files")
    s.add_argument("parts", nargs="+", type=Path, help="parquet files written by measure")
    s.add_argument(
        "--summary",
        type=Path,
        required=True,
        help="parquet/csv: task, variant, seed, status, test_acc",
    )
    for sub in (m, s):
        sub.add_argument("--png", type=Path, help="also write the figure here")
        sub.add_argument("--table", type=Path, help="also write the correlation table here")
        sub.add_argument("--baseline", default="baseline")
    args = parser.parse_args(argv)
    (measure if args.command == "measure" else summarize)(args)


if __name__ == "__main__":
    main()
