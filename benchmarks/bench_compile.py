"""A training step compiled against the same step eager: one model per (task kind, mechanism
family) of a run profile, side by side in one process.

    python benchmarks/bench_compile.py --device cpu --threads 1          # shrunk models, CPU
    python benchmarks/bench_compile.py --device cuda --dim 256 --tokens 1024 --batch 32 \\
        --modes off default reduce-overhead                              # on a GPU

Each model (pdelab.plan.compile_check.select, at the sizes given: the mechanism, its options
and the task kind as the profile's) gets one session per mode, built from the same seed;
every step is pdelab.training.step.train_step itself on synthetic batches (bucketed when
compiled, as the trainer does). After --warmup untimed steps per session (the compiles), the
sessions of one model step in interleaved rounds (measure.interleaved_times); the table gives
each mode's median step and its median paired ratio to eager, with the quartiles. On a CPU,
Inductor's fusions save the memory traffic of elementwise work but no kernel launches; the
GPU ratios are the ones a plan may use (benchmarks/gpu_check.sh runs this there).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from measure import interleaved_times, paired_ratios  # benchmarks/measure.py

from pdelab.plan import compile_check
from pdelab.plan.shapes import synthetic_session
from pdelab.spec.config import PARAMS_FILE, load_params
from pdelab.training.session import Session, executed
from pdelab.training.step import train_step


def session(one: compile_check.Selected, size: compile_check.Shrink, mode: str, args) -> Session:
    run, shape = compile_check.shrunk(one.model, size)
    train = replace(run.train, batch_size=size.batch, precision=args.precision)
    run = replace(run, train=train, device=args.device)
    device = torch.device(args.device)
    steps = args.warmup + args.repeats
    s = synthetic_session(run, shape, size.batch, steps, device, steps)
    s.model.train()
    return executed(s, replace(s.execution, compile=mode))


def stepper(s: Session, batch: int, steps: int):
    """One training step per call, on the session's next batch (cycling)."""
    count = {"k": 0}

    def step() -> None:
        k = count["k"] % steps
        count["k"] += 1
        train_step(s, np.arange(k * batch, (k + 1) * batch))

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="paper")
    parser.add_argument("--only", action="append", default=[], help='"task/variant" patterns')
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--modes", nargs="+", default=["off", "default"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--dim", type=int, default=compile_check.SHRUNK.dim)
    parser.add_argument("--layers", type=int, default=compile_check.SHRUNK.layers)
    parser.add_argument("--tokens", type=int, default=compile_check.SHRUNK.tokens)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = replace(
        compile_check.SHRUNK,
        dim=args.dim,
        mlp_dim=2 * args.dim,
        layers=args.layers,
        tokens=args.tokens,
        batch=args.batch,
    )
    selected = compile_check.select(load_params(PARAMS_FILE), args.profile, args.only)
    rows = []
    print(f"{'model':<34} {'family':<36} " + " ".join(f"{m:>24}" for m in args.modes))
    for one in selected:
        try:
            sessions = {m: session(one, size, m, args) for m in args.modes}
            steps = args.warmup + args.repeats
            runs = {m: stepper(s, size.batch, steps) for m, s in sessions.items()}
            times = interleaved_times(runs, torch.device(args.device), args.repeats, args.warmup)
        except Exception as error:  # a mode that fails is a finding, not the end of the run
            print(f"{one.name:<34} {one.family:<36} error: {type(error).__name__}: {error}")
            rows.append({"model": one.name, "family": one.family, "error": str(error)})
            continue
        ratios = paired_ratios(times, args.modes[0])
        cells = []
        row = {"model": one.name, "kind": one.kind, "family": one.family}
        for m in args.modes:
            median = sorted(times[m])[len(times[m]) // 2]
            r, low, high = ratios[m]
            cells.append(f"{median * 1e3:8.2f} ms x{r:.2f} [{low:.2f},{high:.2f}]")
            row[m] = {"median_s": median, "ratio": r, "q1": low, "q3": high}
        rows.append(row)
        print(f"{one.name:<34} {one.family:<36} " + " ".join(f"{c:>24}" for c in cells))
        torch._dynamo.reset()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
