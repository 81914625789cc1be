"""A run in training: its parts (data, model, optimizer, schedule), built once by
:func:`build`, and its typed resumable state, handed from step to step by pdelab.training.train.

The task kind's strategy loads the data and (through pdelab.models.factory) builds the model;
everything else is the same for every task kind. The state is saved in every checkpoint as a
plain dict (:class:`RunState`, through ``asdict``), so ``weights_only`` loading accepts it and
checkpoints written before it was typed resume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import nn

from pdelab.data.store import verified_manifest
from pdelab.models.factory import build_model
from pdelab.models.transformer import checkpoint_blocks
from pdelab.spec import task_kinds
from pdelab.spec.config import RunSpec
from pdelab.training import compiled, job
from pdelab.training.checkpoint import StopOnSigterm
from pdelab.training.distributed import World
from pdelab.training.gpu_usage import GpuUsage
from pdelab.training.micro_batch import Execution
from pdelab.training.precision import autocast
from pdelab.training.strategy import Batches, Strategy


def warmup_cosine(warmup: int, total: int) -> Any:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


class Partial(TypedDict):
    """An epoch stopped mid-way (SIGTERM): the next step and the running sums so far."""

    step: int
    loss_sum: float
    correct: int
    seen: int


@dataclass
class RunState:
    """The resumable part of a run, saved in every checkpoint as a plain dict (asdict), so
    ``weights_only`` loading accepts it and checkpoints written before it existed resume."""

    epoch: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best_val: float = -math.inf  # the task kind's selection score (pdelab.spec.task_kinds)
    best_epoch: int = 0
    bad_epochs: int = 0
    step_times: list[float] = field(default_factory=list)
    status: str = "ok"
    run_id: str | None = None
    start_ms: int | None = None  # wall clock (ms) of the first start: MLflow's run start
    epoch_end_ms: list[int] = field(default_factory=list)  # each epoch's metrics' timestamp
    partial: Partial | None = None  # stopped mid-epoch: the next epoch's progress

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any]) -> RunState:
        """A checkpoint's state; keys it lacks (an older checkpoint) keep their defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


@dataclass
class Session:
    """Everything one run trains with, handed from step to step, so each step is a short
    function of it. ``state`` is the resumable part, saved whole in every checkpoint."""

    run: RunSpec
    out: Path
    device: torch.device
    manifest: dict[str, Any]
    task_kind: Strategy
    data: dict[str, Batches]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    state: RunState = field(default_factory=RunState)
    execution: Execution = field(default_factory=Execution)  # micro-batches: not the spec
    world: World = field(default_factory=World)  # processes sharing each batch
    resumed: bool = False
    stop: StopOnSigterm = field(default_factory=StopOnSigterm)
    # wall-clock stamps (s) of this process: built, first_step, last_test_batch
    timing: dict[str, float] = field(default_factory=dict)
    # the task kind's loss as a step computes it: eager, or compiled (pdelab.training.compiled)
    forward_loss: compiled.LossFn | None = None
    gpu_usage: GpuUsage = field(default_factory=lambda: GpuUsage(None))  # sampled on a GPU

    def __post_init__(self) -> None:
        self.forward_loss = self.forward_loss or self.task_kind.loss

    @property
    def ok(self) -> bool:
        """Not diverged."""
        return self.state.status == "ok"

    def training(self) -> bool:
        """Epochs left, no divergence, and validation still improving within the patience."""
        s, tc = self.state, self.run.train
        return s.epoch < tc.epochs and self.ok and s.bad_epochs < tc.patience

    def validate(self, split: str) -> dict[str, float]:
        """The task kind's evaluation of a split (loss, accuracy and its own metrics)."""
        with autocast(self.device, self.run.train.precision):  # bf16: pdelab.training.precision
            return self.task_kind.evaluate(
                self.model, self.data[split], self.run.train.batch_size, self.device, self.manifest
            )


def build(
    run: RunSpec, out: Path, execution: Execution | None = None, world: World | None = None
) -> Session:
    """Data, model, optimizer and schedule, seeded before the model's weights are drawn so a
    seed fixes the initialisation; deterministic kernels on CPU make a resume exact.
    ``execution``: micro-batches and block checkpointing (pdelab.training.micro_batch); ``world``:
    the processes computing each batch (pdelab.training.distributed), each on its own GPU."""
    world = world or World()
    device = job.pick_device(run.device, run.profile)
    if device.type == "cuda" and not world.alone:  # the rank's GPU (distributed.join)
        device = torch.device("cuda", torch.cuda.current_device())
    manifest = verified_manifest(run.data_dir)  # the bytes it records are the bytes it reads
    strategy = task_kinds.of_data(run.task, manifest).strategy()
    data = strategy.load_data(run, manifest)
    job.seed_everything(run.seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    steps_per_epoch = math.ceil(len(data["train"]) / run.train.batch_size)
    session = assemble(run, out, device, manifest, strategy, data, steps_per_epoch)
    session.world = world
    return executed(session, execution or Execution())


def executed(session: Session, execution: Execution) -> Session:
    """The session computing its steps as ``execution`` says (its optimiser steps, schedule
    and results are the same: pdelab.training.micro_batch); compile ``auto`` is decided here,
    for this device and the plan's price of the step, and recorded as decided."""
    steps = session.run.train.epochs * math.ceil(
        len(session.data["train"]) / session.run.train.batch_size
    )
    mode = compiled.resolved_mode(
        execution.compile,
        session.device,
        compiled.planned_step_s(session.run, steps, session.device),
    )
    session.execution = replace(execution, compile=mode)
    session.forward_loss = compiled.forward_loss(session.task_kind.loss, mode)
    checkpoint_blocks(session.model, execution.checkpoint_blocks)
    return session


def assemble(
    run: RunSpec,
    out: Path,
    device: torch.device,
    manifest: dict[str, Any],
    strategy: Strategy,
    data: dict[str, Batches],
    steps_per_epoch: int,
) -> Session:
    """The model, its AdamW and its warm-up-cosine schedule over ``steps_per_epoch`` x
    epochs, around data already loaded (the caller seeds first): what the trainer runs, and
    what the rehearsal and the cost plan run on synthetic batches (pdelab.plan.shapes)."""
    tc = run.train
    model = build_model(run, manifest).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(tc.warmup_steps, tc.epochs * steps_per_epoch)
    )
    return Session(run, out, device, manifest, strategy, data, model, optimizer, schedule)
