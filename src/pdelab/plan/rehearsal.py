"""Rehearse a run profile's training on CPU before it meets a GPU: every distinct model of the
profile, built at its real sequence length, width, depth and heads, takes two optimizer steps
of the trainer's own step on synthetic batches of its task's format.

    python -m pdelab.plan.rehearsal --profile paper [--batch 1] [--only 'retrieval/*'] [--jobs 2]

Why: a paper profile's jobs run on a GPU for hours; a shape error, a loss that is NaN from the
first step, or a parameter that never receives a gradient (a branch the forward pass skips,
trained as dead weight) should fail here in minutes, naming the job, not in a queue. Each
model is run once per distinct spec (two variants that resolve to the same model and steps
share one rehearsal), and a step is :func:`pdelab.training.train.train_step` itself: the task kind's
loss, AdamW, gradient clipping and the schedule, on a batch from :mod:`pdelab.plan.shapes` in the
trainer's format at the longest length, so the rehearsal's shapes are the paper's (only the
batch is smaller: the per-example computation is the same at any batch size). A model fails
on an exception, a non-finite loss, gradient or weight, or a trainable parameter whose
``.grad`` is None after a backward pass (:data:`UNUSED_IN_TRAINING` names the legitimate
ones, each with its reason). The steps run in fp32: bf16 autocast and ``torch.compile`` are
the GPU's settings, not rehearsed unless ``--precision bf16`` asks for autocast. On a GPU,
``--device cuda --precision bf16`` rehearses the CUDA path itself: FlexAttention, the fused
SDPA kernels and bf16 autocast, as a paper profile trains (benchmarks/gpu_check.sh).

Cost. Batch 1: the paper's T = 4000 tasks take the math attention path on CPU (attention
dropout rules out the fused kernels), whose (heads, T, T) maps hold about 13 GB for the
retrieval model's two towers at batch 1, twice that at batch 2. ``--jobs`` (default: one per
core) runs models in worker processes of one torch thread each, since on a shared machine a
second thread of one process mostly waits for the first; the costliest start first, and one
starts beside others only while the estimated memory of all (:meth:`Model.memory`) fits. A
worker that dies (killed for memory) costs its models one more try, alone. ``--shard k/n``
rehearses the k-th of n shares (dealt out by cost), for n machines or CI jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pdelab.plan.shapes import TaskShape, synthetic_session, task_shape
from pdelab.spec.config import PARAMS_FILE, RunSpec, active_profile, load_params
from pdelab.spec.run_sheet import validate
from pdelab.training.train import train_step

STEPS = 2  # the first step moves every weight; the second runs on the moved weights
# train keys that change neither the model nor its first steps: the batch is the rehearsal's
# own, epochs and patience only end a run, precision is the GPU's (torch.compile is a profile's
# way of running steps, not a train key: pdelab.training.compiled)
NOT_REHEARSED = ("batch_size", "epochs", "patience", "precision")
# (task/variant pattern, parameter-name pattern) -> why that parameter legitimately gets no
# gradient in training; anything else without one fails the rehearsal
UNUSED_IN_TRAINING: dict[tuple[str, str], str] = {}
# Memory a step holds, for parallel rehearsals: a layer of the math attention path with dropout
# keeps about three (heads, T, T) maps for its backward (the scores' softmax, the dropout mask,
# the dropped probabilities); measured: 12.9 GB for the two towers of 4 layers at T = 4000.
MAPS_PER_LAYER = 3
BASE_MEMORY = 2**30  # the interpreter, torch and the batch


@dataclass(frozen=True)
class Model:
    """One distinct model of a run profile: its run spec, its task's shapes, and the other
    variants of the task that resolve to the same model and steps."""

    run: RunSpec
    shape: TaskShape
    same: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.run.task}/{self.run.variant}"

    def length(self) -> int:
        """Tokens per sequence of a step (translation: the target's)."""
        return self.shape.sequence_length(self.run)

    def keys(self) -> str:
        """The spec keys that shape the model and its steps, as a failure names them."""
        m, d = self.run.model, self.run.diffusion
        keys: dict[str, Any] = {"kind": self.shape.kind, "T": self.length()}
        keys |= {"source_T": self.shape.src_max_length, "pairs": self.shape.pairs}
        keys |= {"dim": m.dim, "layers": m.layers, "heads": m.heads, "mlp_dim": m.mlp_dim}
        keys |= {"attention": m.attention, "attention_options": m.attention_options}
        keys |= {"block": m.block, "block_options": m.block_options, "patch": m.patch}
        keys |= {"smoothing": m.smoothing, "norm": m.norm, "pooling": m.pooling}
        keys |= {"dropout": m.dropout, "attention_dropout": m.attention_dropout}
        if d.sites:
            keys |= {"sites": list(d.sites), "strides": list(d.strides), "alpha": d.alpha}
        shown = {k: v for k, v in keys.items() if v or k in ("dropout", "attention_dropout")}
        return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in shown.items())

    def tokens(self) -> int:
        """Tokens an encoder layer sees (a patch counts as one)."""
        return self.length() // max(1, self.run.model.patch) ** 2

    def cost(self) -> float:
        """A rough step cost (attention's T^2 and the per-token matrix products), to start the
        longest models first when rehearsals run in parallel."""
        m, t = self.run.model, self.tokens()
        towers = 2 if self.shape.pairs else 1
        return towers * m.layers * (m.heads * t * t + t * m.dim * (4 * m.dim + 2 * m.mlp_dim))

    def memory(self, batch_size: int = 1) -> float:
        """Bytes a step may hold, roughly: MAPS_PER_LAYER fp32 (heads, T, T) attention maps per
        layer, and weights, gradients and AdamW's two moments (over for the kernels that never
        materialize the maps: it only keeps parallel rehearsals apart)."""
        m, t = self.run.model, self.tokens()
        towers = 2 if self.shape.pairs else 1
        maps = batch_size * towers * m.layers * m.heads * t * t * 4 * MAPS_PER_LAYER
        vocab = len(self.shape.vocab) + len(self.shape.tgt_vocab)
        stacks = 2 if self.shape.kind == "translation" else 1
        weights = 2 * vocab * m.dim + stacks * m.layers * (4 * m.dim + 2 * m.mlp_dim) * m.dim
        return maps + 16 * weights + BASE_MEMORY


@dataclass
class Outcome:
    """What one model's rehearsal found."""

    model: Model
    parameters: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    failure: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure

    def line(self) -> str:
        """The model's one line of the report."""
        m = self.model
        towers = "x2" if m.shape.pairs else ""
        status = "ok  " if self.ok else "FAIL"
        line = (
            f"{status} {m.name:<44} params {self.parameters:>11,}  T {m.length():>5}{towers:<2}"
            f"  {self.seconds:7.1f} s"
        )
        if m.same:
            line += f"  (also {', '.join(m.same)})"
        return line


def model_key(run: RunSpec) -> str:
    """The spec of a model and its first steps: two runs with equal keys rehearse the same."""
    spec = run.to_dict() | {"variant": "", "seed": 0}
    spec["train"] = {k: v for k, v in spec["train"].items() if k not in NOT_REHEARSED}
    return json.dumps(spec, sort_keys=True)


def plan(
    params: dict[str, Any], profile: str, only: Sequence[str] = (), shard: tuple[int, int] = (0, 1)
) -> tuple[list[Model], int]:
    """The distinct models of the profile's run sheet (patterns in ``only`` match
    "task/variant"; ``shard`` (k, n): the k-th of n shares, 0-based) and how many (task,
    variant) pairs rehearse another's model (the run sheet's repeated runs among them)."""
    distinct: dict[str, Model] = {}
    shapes: dict[str, TaskShape] = {}
    shared = 0
    for run in validate(params, profile):
        name = f"{run.task}/{run.variant}"
        if only and not any(fnmatch.fnmatchcase(name, p) for p in only):
            continue
        key = model_key(run)
        if key in distinct:
            first = distinct[key]
            if run.variant != first.run.variant and run.variant not in first.same:
                distinct[key] = replace(first, same=(*first.same, run.variant))
                shared += 1
            continue
        if run.task not in shapes:
            shapes[run.task] = task_shape(params, profile, run.task)
        distinct[key] = Model(run, shapes[run.task])
    k, n = shard
    models = list(distinct.values())
    if n > 1:  # dealt out costliest first, so every shard gets its share of the long ones
        models = sorted(models, key=Model.cost, reverse=True)[k::n]
    return models, shared


def exempt(model: Model, parameter: str) -> bool:
    """Whether the parameter is named in :data:`UNUSED_IN_TRAINING` for this model."""
    return any(
        fnmatch.fnmatchcase(model.name, job) and fnmatch.fnmatchcase(parameter, name)
        for job, name in UNUSED_IN_TRAINING
    )


def named(names: list[str], limit: int = 6) -> str:
    """The first few names of a list, and how many more."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def gradient_problems(model: Model, network: nn.Module) -> list[str]:
    """Trainable parameters without a gradient (not exempted), and non-finite gradients."""
    missing, nonfinite = [], []
    for name, p in network.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            if not exempt(model, name):
                missing.append(name)
        elif not bool(torch.isfinite(p.grad).all()):
            nonfinite.append(name)
    problems = []
    if missing:
        problems.append(f"{len(missing)} trainable parameters got no gradient: {named(missing)}")
    if nonfinite:
        problems.append(f"non-finite gradients in {len(nonfinite)} parameters: {named(nonfinite)}")
    return problems


def where(error: BaseException) -> str:
    """The innermost frame of the project's code that the error passed through."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f"{os.sep}pdelab{os.sep}" in f.filename] or frames
    if not ours:
        return ""
    f = ours[-1]
    return f" (at {Path(f.filename).name}:{f.lineno} in {f.name})"


def steps_of(
    model: Model, run: RunSpec, batch_size: int, steps: int, out: Outcome, device: str = "cpu"
) -> str:
    """The trainer's session on synthetic batches (pdelab.plan.shapes.synthetic_session) and
    ``steps`` training steps; the failure found, or "" (losses and size go into ``out``)."""
    real_schedule = model.shape.steps_per_epoch(model.run)  # the real run's schedule
    session = synthetic_session(
        run, model.shape, batch_size, steps, torch.device(device), real_schedule
    )
    network = session.model
    out.parameters = sum(p.numel() for p in network.parameters())
    network.train()
    for step in range(1, steps + 1):
        stepped = train_step(session, np.arange((step - 1) * batch_size, step * batch_size))
        if not bool(stepped.finite):  # the rehearsal reads each step: it is not training
            return f"non-finite loss at step {step}"
        out.losses.append(float(stepped[0].detach()))
        problems = gradient_problems(model, network)
        if problems:
            return f"step {step}: " + "; ".join(problems)
    bad = [n for n, p in network.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        return f"non-finite weights after step {steps}: {named(bad)}"
    return ""


def rehearse(
    model: Model,
    batch_size: int = 1,
    steps: int = STEPS,
    precision: str = "fp32",
    device: str = "cpu",
) -> Outcome:
    """Two (``steps``) training steps of one model on ``device`` (default the CPU); never
    raises for the model's own errors, which the outcome names. Deterministic kernels where
    the profile trains on CPU, as the trainer sets them there."""
    train = replace(model.run.train, precision=precision)
    run = replace(model.run, device=device, train=train)
    out = Outcome(model)
    start = time.perf_counter()
    try:
        with deterministic(model.run.device == "cpu" and device == "cpu"):
            out.failure = steps_of(model, run, batch_size, steps, out, device)
    except Exception as error:  # any of the model's own errors is the finding
        out.failure = f"{type(error).__name__}: {error}{where(error)}"
    finally:
        out.seconds = time.perf_counter() - start
    return out


@contextlib.contextmanager
def deterministic(enabled: bool) -> Iterator[None]:
    """torch's deterministic kernels on or off inside, as before outside; untouched where they
    are as asked already (its first call imports the compiler stack: seconds)."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    if before == enabled:
        yield
        return
    torch.use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


def _init_worker(threads: int) -> None:
    """A worker's torch threads, set once: its models run one after another."""
    torch.set_num_threads(threads)


def rehearse_all(
    models: Sequence[Model],
    batch_size: int = 1,
    precision: str = "fp32",
    jobs: int = 1,
    threads: int = 1,
    memory: float = math.inf,
    device: str = "cpu",
) -> Iterator[Outcome]:
    """Each model's outcome as it is done: in this process with ``jobs`` 1, else in ``jobs``
    worker processes of ``threads`` torch threads each, the costliest models first, starting
    one beside others only while their :meth:`Model.memory` fits in ``memory`` bytes."""
    if jobs <= 1:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            for model in models:
                yield rehearse(model, batch_size, precision=precision, device=device)
        finally:
            torch.set_num_threads(before)
        return
    pending = sorted(models, key=Model.cost, reverse=True)
    alone: set[str] = set()  # models whose worker died beside others: once more, alone
    while pending:
        yield from _in_pool(pending, alone, batch_size, precision, jobs, threads, memory, device)


def _in_pool(
    pending: list[Model],
    alone: set[str],
    batch_size: int,
    precision: str,
    jobs: int,
    threads: int,
    memory: float,
    device: str = "cpu",
) -> Iterator[Outcome]:
    """Rehearse ``pending`` (taking each out as it starts) in one pool of worker processes
    until it is done or a worker dies; a model whose worker died goes back in front, to run
    alone, or fails if it ran alone already."""
    context = get_context("spawn")  # a forked child of a threaded torch may hang
    with ProcessPoolExecutor(jobs, context, _init_worker, (threads,)) as pool:
        running: dict[Future[Outcome], Model] = {}
        while pending or running:
            while len(running) < jobs:
                held = sum(m.memory(batch_size) for m in running.values())
                now = min(memory, held + 0.8 * available_memory())  # others' use counts too
                model = next_to_start(pending, list(running.values()), now, batch_size, alone)
                if model is None:
                    break
                pending.remove(model)
                try:
                    args = (model, batch_size, STEPS, precision, device)
                    running[pool.submit(rehearse, *args)] = model
                except BrokenProcessPool:  # a worker died: the running futures say whose
                    pending.insert(0, model)
                    if not running:
                        return
                    break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                done = wait(running).done  # every running one fails with it: all go back
            for future in done:
                model = running.pop(future)
                error = future.exception()
                if error is None:
                    yield future.result()
                elif isinstance(error, BrokenProcessPool) and model.name not in alone:
                    alone.add(model.name)
                    pending.insert(0, model)
                else:
                    yield worker_failed(model, error)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                return  # a new pool for the rest


def next_to_start(
    pending: Sequence[Model],
    running: Sequence[Model],
    memory: float,
    batch_size: int = 1,
    alone: Collection[str] = (),
) -> Model | None:
    """The first pending model whose :meth:`Model.memory` fits in ``memory`` beside the running
    ones' (any, when none runs: a model too large for the budget still runs, alone); a model
    named in ``alone`` starts only when none runs, and none starts beside it."""
    if not running:
        return pending[0] if pending else None
    if any(m.name in alone for m in running):
        return None
    room = memory - sum(m.memory(batch_size) for m in running)
    fits = (m for m in pending if m.name not in alone and m.memory(batch_size) <= room)
    return next(fits, None)


def worker_failed(model: Model, error: BaseException) -> Outcome:
    """The outcome of a model whose worker process failed: died with nothing beside it (killed
    for memory, or a crash in a kernel), or could not hand its outcome back."""
    why = f"its worker process failed ({type(error).__name__}: {error})"
    if isinstance(error, BrokenProcessPool):
        why += f"; it may need {model.memory() / 1e9:.0f} GB"
    return Outcome(model, failure=why)


def available_memory() -> float:
    """Bytes the system can still give (Linux: MemAvailable), or infinity where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return math.inf


def summary(outcomes: Sequence[Outcome], shared: int, wall_s: float) -> list[str]:
    """The report's end: counts, times, and every failure with the spec keys that matter."""
    failed = [o for o in outcomes if not o.ok]
    lines = [
        f"models {len(outcomes)} (and {shared} variants that share one of their models), "
        f"passed {len(outcomes) - len(failed)}, failed {len(failed)}; "
        f"total {wall_s:.0f} s wall, {sum(o.seconds for o in outcomes):.0f} s of rehearsals"
    ]
    for o in failed:
        lines += [f"FAILED {o.model.name}: {o.failure}", f"    {o.model.keys()}"]
    return lines


def parse_shard(text: str) -> tuple[int, int]:
    """ "k/n" (1-based k) -> (k - 1, n)."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"--shard takes k/n with 1 <= k <= n, not {text!r}")
    return int(k) - 1, int(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.plan.rehearsal",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", help="a run profile of params.yaml (default: its profile)")
    parser.add_argument("--params", default=str(PARAMS_FILE))
    parser.add_argument("--batch", type=int, default=1, help="examples per step (default 1)")
    parser.add_argument(
        "--only", action="append", default=[], help='"task/variant" patterns, e.g. "image/*"'
    )
    parser.add_argument(
        "--jobs", type=int, help="models rehearsed in parallel (default: one per core)"
    )
    parser.add_argument("--threads", type=int, help="torch threads per job (default: cores/jobs)")
    parser.add_argument(
        "--memory",
        type=float,
        help="GB the parallel jobs may hold together (default: 80%% of the memory available)",
    )
    parser.add_argument(
        "--shard",
        type=parse_shard,
        default=(0, 1),
        help="k/n: the k-th of n shares of the models (1-based), dealt out by cost",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: the steps under bf16 autocast (on a CPU about a fifth slower at T = 4000)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="cuda: the steps on the GPU, its kernels (FlexAttention, fused SDPA) and autocast",
    )
    args = parser.parse_args(argv)
    params = load_params(args.params)
    profile = active_profile(params, args.profile)
    models, shared = plan(params, profile, args.only, args.shard)
    if not models:
        print(f"no model of run profile {profile} matches {args.only}", file=sys.stderr)
        return 2
    cores = os.cpu_count() or 1
    jobs = max(1, min(args.jobs or cores, len(models)))
    threads = args.threads or max(1, cores // jobs)
    memory = args.memory * 1e9 if args.memory else 0.8 * available_memory()
    how = (
        f"bf16 autocast on {args.device}; torch.compile is not rehearsed"
        if args.precision == "bf16"
        else "fp32: bf16 autocast and torch.compile are not rehearsed here"
    )
    print(
        f"rehearsing {len(models)} distinct models of run profile {profile} on {args.device}, "
        f"{STEPS} training steps each at batch {args.batch}, {jobs} job(s) x {threads} "
        f"thread(s) within {memory / 1e9:.0f} GB of memory; {how}",
        flush=True,
    )
    start = time.perf_counter()
    outcomes = []
    every = rehearse_all(models, args.batch, args.precision, jobs, threads, memory, args.device)
    for outcome in every:
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
    wall = time.perf_counter() - start
    print("\n".join(summary(outcomes, shared, wall)), flush=True)
    return 1 if any(not o.ok for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
