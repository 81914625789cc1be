"""Writes tests/golden/summary.parquet: a fixed, synthetic summary of every run that
tests/golden/params.yaml's studies need (seeded, so rerunning gives the same file).

It exercises what the tables and REPORT.md must render: finished, diverged and missing
runs, language models the probe finds causal or leaking, stand-in data and timings. The
expected outputs beside it were written from this summary by the report before the papers
layout (then changed only by the renamed IMDb tasks); test_golden.py checks that today's report
still writes them byte for byte.

It also writes tests/golden/cost/listops.parquet, a fixed interleaved step timing (as
pdelab.plan.step_timing writes it) whose overheads read "reproduced" (tight, near
the paper's), "not measurable here" (an interval wider than the effect) and "not reproduced".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pdelab.plan.step_timing import INTERVAL, NOT_MEASURED, summarize
from pdelab.spec.config import load_params, resolve
from pdelab.spec.run_sheet import run_sheet

HERE = Path(__file__).parent
LM_TASKS = {"wikitext"}
STAND_INS = {
    "imdb_bytes_lra": "synthetic byte-level reviews stand in for IMDb",
    "image": "digits stand in",
}


def row(params: dict, task: str, variant: str, seed: int, rng: np.random.Generator) -> dict:
    spec = resolve(params, task, variant, seed, "smoke")
    diverged = rng.random() < 0.05
    lm = task in LM_TASKS
    two_sided = spec.model.attention_options.get("causal_form") == "two_sided"
    leaks = lm and (two_sided or variant == "released")
    ppl = float(rng.uniform(2, 5) if leaks else rng.uniform(150, 300))
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "profile": "smoke",
        "status": "diverged" if diverged else "ok",
        "test_acc": np.nan if diverged or lm else float(rng.uniform(0.2, 0.9)),
        "test_loss": np.nan if diverged else float(np.log(ppl) if lm else rng.uniform(0.5, 2)),
        "test_ppl": np.nan if diverged or not lm else ppl,
        "causality": "" if not lm or diverged else "leaks future tokens" if leaks else "causal",
        "max_leak": np.nan if not lm or diverged else float(rng.uniform(0.1, 1) if leaks else 0),
        "best_val_acc": np.nan if lm else float(rng.uniform(0.2, 0.9)),
        "best_epoch": int(rng.integers(1, 4)),
        "epochs_run": 3,
        "median_step_s": float(rng.uniform(0.01, 0.05)),
        "peak_memory_mb": float(rng.uniform(400, 600)),
        "memory_kind": "cpu_max_rss",
        "device": "cpu",
        "parameters": int(rng.integers(10_000, 200_000)),
        "data_hash": f"{task}-hash",
        "stand_in": STAND_INS.get(task, ""),
        "resumed": False,
        "mlflow_run_id": f"run-{task}-{variant}-{seed}",
    }


# variant -> (true step-time ratio over the baseline, relative noise of one step)
COST = {
    "baseline": (1.0, 0.0),
    "after_embedding": (1.05, 0.005),
    "after_mlp": (1.03, 0.1),
    "multiscale_after_embedding": (1.40, 0.01),
}


def cost_timing(repeats: int = 30) -> pd.DataFrame:
    """A fixed timing of the cost study's variants on ListOps, with its measurement columns."""
    rng = np.random.default_rng(1)
    base = 0.02 * (1 + 0.3 * rng.random(repeats))  # batches differ in length
    times = {
        variant: list(base * ratio * (1 + noise * rng.standard_normal(repeats)))
        for variant, (ratio, noise) in COST.items()
    }
    frame = summarize(times, "baseline")
    frame.insert(0, "task", "listops")
    return frame.assign(
        profile="smoke",
        device="cpu",
        device_name="cpu (golden fixture)",
        threads=1,
        torch_version="2.13.0+cpu",
        repeats=repeats,
        warmup=5,
        batches=8,
        batch_size=32,
        interval=INTERVAL,
        memory_measured_as=NOT_MEASURED,
    )


def write_cost_timing() -> None:
    (HERE / "cost").mkdir(exist_ok=True)
    cost_timing().to_parquet(HERE / "cost" / "listops.parquet", index=False)


def main() -> None:
    params = load_params(HERE / "params.yaml")
    rng = np.random.default_rng(0)
    rows = [row(params, r.task, r.variant, r.seed, rng) for r in run_sheet(params, "smoke")]
    summary = pd.DataFrame(rows).sort_values(["task", "variant", "seed"])
    summary = summary.drop(summary.index[7])  # one run missing
    summary.to_parquet(HERE / "summary.parquet", index=False)
    write_cost_timing()


if __name__ == "__main__":
    main()
