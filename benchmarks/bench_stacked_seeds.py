"""Stacked seeds vs sequential runs: K seeds' training steps as one vmapped step
(pdelab.training.stacked_seeds) against the same K seeds stepped one after another, as K
separate runs would (pdelab.training.train.train_step on a whole batch).

    python benchmarks/bench_stacked_seeds.py --device cpu --threads 1     # K = 1, 3, 5
    python benchmarks/bench_stacked_seeds.py --device cuda                # a lent GPU

Each seed's model, AdamW and schedule are built as its run builds them
(pdelab.training.session.assemble after seeding), on a synthetic task of ragged sequences of
--length tokens at most (a classification task, ListOps' format); every seed takes its own
batch (its own permutation), stacked ones padded to the longest of the K. One call is one step
of all K seeds, batch preparation included: ``stacked`` stacks the K batches and takes one
StackedSeeds.step; ``sequential`` takes K separate steps (to_device, loss, backward,
clip_grad_norm_, AdamW, schedule). The calls alternate in rounds (measure.interleaved_times,
both sets of seeds stepping through the same batches), and each round's sequential time over
its stacked time is paired; the table gives the median seconds per call and the median ratio
with its quartiles (> 1: stacked is faster).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from measure import interleaved_times, paired_ratios, sync  # benchmarks/measure.py
from torch import nn

from pdelab.data.store import Split
from pdelab.spec import task_kinds
from pdelab.spec.config import load_params, resolve
from pdelab.training.job import seed_everything
from pdelab.training.session import Session, assemble
from pdelab.training.stacked_seeds import StackedSeeds, seed_steps, stack_batch
from pdelab.training.strategy import to_device

ROOT = Path(__file__).resolve().parent.parent
VOCAB = ["<pad>", "<cls>", *(f"w{i}" for i in range(14))]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 3, 5], help="the K to compare")
    p.add_argument("--variant", default="baseline", help="a listops variant of params.yaml")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=64, help="the longest sequence")
    p.add_argument("--repeats", type=int, default=None, help="default 30 on CUDA, 15 on a CPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = p.parse_args(argv)
    args.repeats = args.repeats or (30 if args.device.startswith("cuda") else 15)
    return args


def task(args: argparse.Namespace, items: int) -> tuple[dict[str, Any], Split]:
    """A classification task of ``items`` ragged sequences, args.length tokens at most."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(args.length // 2, args.length + 1, items)
    tokens = rng.integers(2, len(VOCAB), int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    manifest = {"vocab": VOCAB, "num_classes": 10, "pairs": False}
    manifest |= {"splits": {"train": {"max_length": args.length}}}
    return manifest, Split(tokens, offsets, rng.integers(0, 10, items))


def sessions(args: argparse.Namespace, k: int, device: torch.device, steps: int) -> list[Session]:
    """K seeds' runs, each built as pdelab.training.session.build builds it."""
    params = load_params(ROOT / "params.yaml")
    manifest, split = task(args, args.batch_size * steps)
    strategy = task_kinds.TASK_KINDS.get("classification").strategy()
    out = []
    for seed in range(k):
        run = resolve(params, "listops", args.variant, seed, "smoke")
        model = replace(run.model, dim=args.dim, layers=args.layers, heads=args.heads)
        model = replace(model, mlp_dim=2 * args.dim, dropout=0.0, attention_dropout=0.0)
        train = replace(run.train, batch_size=args.batch_size, epochs=1, precision="fp32")
        run = replace(run, device=device.type, model=model, train=train)
        seed_everything(seed)
        data = {"train": split}
        out.append(assemble(run, Path(os.devnull), device, manifest, strategy, data, steps))
    for s in out:
        s.model.train()
    return out


def separate_step(s: Session, index: np.ndarray) -> torch.Tensor:
    """train_step's whole-batch path."""
    inputs, labels = to_device(s.data["train"], index, s.device)
    loss, _, _ = s.task_kind.loss(s.model, inputs, labels, False)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(s.model.parameters(), s.run.train.grad_clip)
    s.optimizer.step()
    s.schedule.step()
    return loss.detach()


def cycling(steps: list[list[np.ndarray]]) -> Callable[[], list[np.ndarray]]:
    """The epoch's steps, one per call, over and over."""
    position = [0]

    def next_step() -> list[np.ndarray]:
        position[0] = (position[0] + 1) % len(steps)
        return steps[position[0]]

    return next_step


def compare(args: argparse.Namespace, k: int, device: torch.device) -> dict[str, Any]:
    steps_per_epoch = 8
    seeds = list(range(k))
    steps = list(seed_steps(seeds, 1, args.batch_size * steps_per_epoch, args.batch_size))
    separate = sessions(args, k, device, steps_per_epoch)
    stacked = StackedSeeds.from_sessions(sessions(args, k, device, steps_per_epoch))
    split = separate[0].data["train"]
    next_sequential, next_stacked = cycling(steps), cycling(steps)

    def sequential() -> None:
        for s, index in zip(separate, next_sequential(), strict=True):
            separate_step(s, index)

    def together() -> None:
        stacked.step(*stack_batch(split, next_stacked(), device))

    runs = {"stacked": together, "sequential": sequential}
    times = interleaved_times(runs, device, args.repeats, args.warmup)
    sync(device)
    ratio, q1, q3 = paired_ratios(times, "stacked")["sequential"]
    median = {name: float(np.median(ts)) for name, ts in times.items()}
    return {
        "seeds": k,
        "stacked_s": median["stacked"],
        "sequential_s": median["sequential"],
        "stacked_per_seed_s": median["stacked"] / k,
        "ratio": ratio,
        "ratio_q1": q1,
        "ratio_q3": q3,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shape = f"dim {args.dim}, {args.layers} layers, batch {args.batch_size}, T <= {args.length}"
    print(f"{args.variant} on {device} ({shape}, {torch.get_num_threads()} threads)")
    print(f"{'K':>3} {'stacked':>11} {'sequential':>11} {'per seed':>11}  sequential/stacked")
    rows = []
    for k in args.seeds:
        row = compare(args, k, device)
        rows.append(row)
        print(
            f"{k:>3} {row['stacked_s'] * 1e3:>9.2f}ms {row['sequential_s'] * 1e3:>9.2f}ms "
            f"{row['stacked_per_seed_s'] * 1e3:>9.2f}ms  {row['ratio']:.2f} "
            f"[{row['ratio_q1']:.2f}, {row['ratio_q3']:.2f}]"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
