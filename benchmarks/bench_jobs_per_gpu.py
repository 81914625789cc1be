"""Jobs per GPU: the steps per second of k copies of one small training job sharing a GPU,
against one job alone (what pdelab.runtime.gpu_slots packs where the memory fits).

    python benchmarks/bench_jobs_per_gpu.py --device cuda --copies 1 2 4 8
    python benchmarks/bench_jobs_per_gpu.py --device cpu --copies 1 2 --steps 5   # the script

Each copy is a process of its own (as the workflow's jobs are) running pdelab.training.step's
train_step on synthetic batches of one model (``--only``, default the first model of the run
profile's FNA IMDb jobs, a small job of the paper profile) at its profile's size; all copies
start together (a barrier), and each reports its steps per second over the timed steps. The
table gives, per k, the total steps per second over the one-copy rate: above 1 where sharing
the GPU does more work an hour, k where the copies do not slow each other at all. With
``nvidia-cuda-mps-control`` running, the copies share the GPU through MPS; otherwise the
driver time-slices them (the line says which).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from dataclasses import replace

import numpy as np
import torch

from pdelab.plan import compile_check
from pdelab.plan.shapes import synthetic_session
from pdelab.spec.config import PARAMS_FILE, load_params
from pdelab.training.session import executed
from pdelab.training.step import train_step


def copy_of_job(args: argparse.Namespace, barrier, results, rank: int) -> None:
    """One job: build, warm up, wait for every copy, time ``args.steps`` steps."""
    torch.set_num_threads(1)
    one = compile_check.select(load_params(PARAMS_FILE), args.profile, [args.only])[0]
    run, shape = one.model.run, one.model.shape
    if args.shrink:
        run, shape = compile_check.shrunk(one.model)
    run = replace(run, device=args.device, train=replace(run.train, precision=args.precision))
    batch = run.train.batch_size
    total = args.warmup + args.steps
    s = synthetic_session(run, shape, batch, total, torch.device(args.device), total)
    s = executed(s, replace(s.execution, compile=args.compile))
    s.model.train()
    for k in range(args.warmup):
        train_step(s, np.arange(k * batch, (k + 1) * batch))
    if s.device.type == "cuda":
        torch.cuda.synchronize()
    barrier.wait()
    start = time.perf_counter()
    for k in range(args.warmup, total):
        train_step(s, np.arange(k * batch, (k + 1) * batch))
    if s.device.type == "cuda":
        torch.cuda.synchronize()
    results.put((rank, args.steps / (time.perf_counter() - start)))


def measure(args: argparse.Namespace, copies: int) -> list[float]:
    context = mp.get_context("spawn")
    barrier, results = context.Barrier(copies), context.Queue()
    procs = [
        context.Process(target=copy_of_job, args=(args, barrier, results, r)) for r in range(copies)
    ]
    for p in procs:
        p.start()
    rates = [results.get(timeout=args.timeout)[1] for _ in procs]
    for p in procs:
        p.join()
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="paper")
    parser.add_argument("--only", default="imdb_wordpiece/fna")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--compile", default="off")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--shrink", action="store_true", help="compile_check's CPU sizes")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    mps = shutil.which("nvidia-cuda-mps-control") and os.path.exists(
        os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    )
    print(f"{args.only} on {args.device}: {'MPS' if mps else 'time-sliced'}")
    rows, alone = [], None
    for k in args.copies:
        rates = measure(args, k)
        total = sum(rates)
        alone = alone or total / k
        rows.append({"copies": k, "steps_per_s": total, "per_copy": rates, "gain": total / alone})
        print(f"k = {k}: {total:8.2f} steps/s in all, x{total / alone:.2f} of one job alone")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
