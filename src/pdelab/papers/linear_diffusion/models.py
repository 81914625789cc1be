"""What every LDN-study run trained: its terms, its parameters and its FLOPs, counted.

A study's table sees results/summary.parquet, which holds outcomes. An ablation's row is the
terms its model has (K, D, F, learned or fixed steps) and Table 1's columns are parameters and
FLOPs, so both come from each run's own record (run.json's resolved spec), whatever its variant
is called. FLOPs are counted, not estimated: one forward pass of the longest test example
through the model built from the spec, under torch.utils.flop_counter.FlopCounterMode
(theory.counted_flops: matrix products and attention, on SDPA's math backend so that the
counter sees it; elementwise maps such as softplus or the Gaussian decay are not counted, for
any model). MACs = FLOPs / 2, the unit of the paper's "GMac".

For an image run the table also needs the LDN at the comparison ViT's own width (the paper's
Table 1 compares models of one width: LDN-Base has fewer parameters than ViT-Base): the runs
``--reference-dim TASK/VARIANT=DIM`` names are counted again at that width, untrained.

``python -m pdelab.papers.linear_diffusion.models --out results/ldn/models.parquet KEY=DIR ...``
with KEY = task/variant/seed and DIR its run folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from pdelab.data.store import load_manifest, load_split
from pdelab.models.factory import build_model
from pdelab.papers.linear_diffusion.options import BLOCK, DEFAULTS
from pdelab.papers.linear_diffusion.theory import counted_flops
from pdelab.records.run import check_run, write_parquet
from pdelab.spec.config import RunSpec
from pdelab.spec.plugins import import_mechanisms


def terms(spec: dict[str, Any]) -> dict[str, Any]:
    """The LDN terms a spec's model has (all False for another block) and its steps' rule."""
    model = spec["model"]
    ldn = model.get("block", "transformer") == BLOCK
    options = {**DEFAULTS, **(model.get("block_options") or {})} if ldn else {}
    return {
        "block": model.get("block", "transformer"),
        "K": bool(ldn and options["diffusion"]),
        "D": bool(ldn and options["attention"]),
        "F": bool(ldn and options["local"]),
        "learn_dt": bool(ldn and options["learn_dt"]),
        "terms": label(options) if ldn else "Transformer",
    }


def label(options: dict[str, Any]) -> str:
    """K + D + F, K + F, ..., with ", fixed δt" when the steps are not learned."""
    on = [n for n, key in (("K", "diffusion"), ("D", "attention"), ("F", "local")) if options[key]]
    return " + ".join(on) + ("" if options["learn_dt"] else ", fixed δt")


def longest_example(run: RunSpec) -> dict[str, torch.Tensor]:
    """The model inputs of the test example with the most tokens (one example, unpadded)."""
    split = load_split(run.data_dir, "test")
    index = np.array([int(np.argmax(split.lengths()))])
    arrays = {k: torch.from_numpy(v) for k, v in split.batch(index).items()}
    arrays.pop("labels")
    return arrays


def count(run: RunSpec, inputs: dict[str, torch.Tensor]) -> tuple[int, int]:
    """(parameters, FLOPs of one forward pass on ``inputs``) of the model the spec builds."""
    torch.manual_seed(0)
    model = build_model(run, load_manifest(run.data_dir)).eval()
    return sum(p.numel() for p in model.parameters()), counted_flops(model, **inputs)


def model_row(run: RunSpec, inputs: dict[str, torch.Tensor], reference_dim: int | None) -> dict:
    """One run's terms, size and cost; with ``reference_dim``, the same LDN at that width."""
    spec = json.loads(run.to_json())
    params, flops = count(run, inputs)
    row = terms(spec) | {
        "dim": run.model.dim,
        "layers": run.model.layers,
        "patch": run.model.patch,
        "tokens": int(next(iter(inputs.values())).shape[-1]),
        "parameters": params,
        "flops": flops,
        "macs": flops / 2,
        "reference_dim": math.nan,
        "reference_parameters": math.nan,
        "reference_macs": math.nan,
    }
    if reference_dim and run.model.block == BLOCK:
        narrow = dataclasses.replace(run, model=dataclasses.replace(run.model, dim=reference_dim))
        ref_params, ref_flops = count(narrow, inputs)
        row |= {
            "reference_dim": reference_dim,
            "reference_parameters": ref_params,
            "reference_macs": ref_flops / 2,
        }
    return row


def collect(runs: dict[str, Path], reference_dims: dict[str, int]) -> pd.DataFrame:
    """One row per run key: task, variant, seed, the variant that was trained, its model;
    ``reference_dims``: task/variant -> the width to count it at again."""
    import_mechanisms()
    rows, cache = [], {}
    for key, folder in runs.items():
        task, variant, seed = key.split("/")
        record = check_run(folder)
        run = RunSpec.from_dict(record["spec"])
        body = run.to_json()
        if body not in cache:  # seeds of one variant build the same model
            width = reference_dims.get(f"{task}/{run.variant}")
            cache[body] = model_row(run, longest_example(run), width)
        rows.append(
            {"task": task, "variant": variant, "seed": int(seed), "trained_as": run.variant}
            | cache[body]
        )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="task/variant/seed=run folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--reference-dim",
        action="append",
        default=[],
        help="TASK/VARIANT=DIM: count this LDN again at this width (the ViT's)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = {k: Path(d) for k, d in (pair.split("=", 1) for pair in args.runs)}
    dims = {t: int(d) for t, d in (pair.split("=", 1) for pair in args.reference_dim)}
    frame = collect(runs, dims)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet(frame, args.out)


if __name__ == "__main__":
    main()
