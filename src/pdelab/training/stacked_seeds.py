"""Several seeds of one run trained in one process, one step for all of them: K models of one
architecture stacked (``torch.func.stack_module_state``), their K losses and gradients in one
vmapped call (``functional_call`` under ``vmap(grad_and_value)``), then K clippings and K AdamW
steps as a few operations on (K, N) tensors. Why: a small job leaves most of a GPU idle and
spends most of a CPU step in Python; K seeds stacked share that cost.

What a seed trains is its own separate run's:

- its model is built as pdelab.training.session.build builds that seed's (``seed_everything``,
  then the factory), and stacked as it is: :meth:`StackedSeeds.from_sessions`;
- its batches are its own: its indices come from its own permutation (``rng([seed, epoch])``,
  :func:`seed_steps`), so each step takes (K, B, ...) inputs (:func:`stack_batch`), the K
  batches padded to the longest of them (padding is masked wherever a model reads it, so a
  seed's outputs are those of its own batch);
- its clipping is ``clip_grad_norm_``'s over its own parameters, its step is
  ``torch.optim.AdamW``'s with its own hyperparameters and state, at the learning rate of its
  own schedule (:func:`adamw_`, op for op torch's single-tensor path);
- a non-finite loss leaves that seed's weights, moments and step count as they were (what
  ``train_step`` does before the run ends as "diverged"); the other seeds go on.

With dropout off, in float64 on a CPU, each seed's parameters after every step equal its separate
run's to rounding (tests/test_stacked_seeds.py checks 1e-10 over 5 steps, for every family).

Dropout differs, by design: ``vmap(..., randomness="different")`` draws every seed's masks in
one draw of the process's global generator over the stacked (K, ...) shape. Each seed's masks
are independent Bernoulli(1 - p) draws, as in its own run, but not the draws its own run makes
(those come from its own generator, seeded with its seed and advanced by its initialisation),
and they depend on which seeds share the group, and on the padding to the group's longest
batch. With dropout on, a stacked seed is another sample of the same training process: its
statistics are its run's (tested: the keep rate of every seed, and the distribution of the
training loss), its numbers are not. A group's resume needs the global generator's state
(pdelab.training.checkpoint.rng_state), saved once for the group.

A model stacks only if every module in it belongs to a registered stackable family
(:data:`FAMILIES`): a module's forward may read no tensor on the host (``.item()``, ``bool(t)``,
a learned width that sizes a tensor), which vmap cannot batch. Some families stack through
another path of the same computation (the reference path beside a fast one); each family says
which and why. A module of no family, or of a refused one, is refused with the reason.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from torch.optim.lr_scheduler import LambdaLR
from torch.optim.optimizer import _get_scalar_dtype

from pdelab.spec import task_kinds
from pdelab.spec.registry import Registry
from pdelab.training.precision import autocast
from pdelab.training.strategy import Batches, Strategy, batches

CLIP_EPS = 1e-6  # what clip_grad_norm_ adds to the total norm before dividing by it


class NotStackable(ValueError):
    """These seeds cannot be trained stacked; the message says why and what to do instead."""


def qualified(cls: type) -> str:
    """A class's "module.QualName", how :class:`Family` names the classes it holds."""
    return f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------------------------
# Which models stack: families of module classes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Module classes that stack alike: the path the stacked forward runs for them and why it
    is the separate run's computation, or, refused, why they cannot be stacked."""

    name: str
    classes: tuple[str, ...]  # qualified names ("module.QualName") of the module classes
    how: str  # the stacked path and why it is the run's; or why the family is refused
    prepare: Callable[[nn.Module], None] | None = None  # switches a module to that path
    stackable: bool = True


FAMILIES: Registry[Family] = Registry("stackable family")
PAPERS = "pdelab.papers."  # whose modules may declare a STACKED_FAMILY


def discover_families() -> Registry[Family]:
    """Register the families the loaded paper modules declare: a paper's mechanism module
    sets ``STACKED_FAMILY = {"name", "classes", "how", "prepare"}`` beside its classes and
    imports nothing of this module, so that an edit here is no part of its runs' code."""
    for name, module in list(sys.modules.items()):
        declared = getattr(module, "STACKED_FAMILY", None) if name.startswith(PAPERS) else None
        if declared is not None and declared["name"] not in FAMILIES:
            classes = tuple(qualified(c) for c in declared["classes"])
            how, prepare = declared["how"], declared.get("prepare")
            register_family(Family(declared["name"], classes, how, prepare))
    return FAMILIES


def register_family(family: Family) -> Family:
    """Add a family: the core's below; each paper declares its own beside its modules
    (:func:`discover_families`), once checked under vmap."""
    return FAMILIES.register(family.name)(family)


def backbone(module: nn.Module) -> None:
    """Refuse activation checkpointing (a run that needs it to fit its card is no small job);
    an unpadded encoder passes its all-real mask on instead of checking it with
    ``torch._assert_async``, which has no vmap rule (a mask of real tokens masks nothing)."""
    if getattr(module, "unpadded", False):
        module.unpadded = False
    if getattr(module, "checkpointed", False):
        raise NotStackable(
            f"{qualified(type(module))} recomputes its blocks (activation checkpointing, "
            "Execution.checkpoint_blocks): a run that needs it to fit is no small job; train "
            "these seeds separately"
        )


def diffusion_reference(module: nn.Module) -> None:
    """The Diffusion layer's autograd reference in place of its fast step."""
    module.fast, module.compile_step = False, False


TORCH = "torch.nn.modules"
TRANSFORMER = "pdelab.models.transformer"

register_family(
    Family(
        "torch layers",
        (
            f"{TORCH}.linear.Linear",
            f"{TORCH}.linear.Identity",
            f"{TORCH}.normalization.LayerNorm",
            f"{TORCH}.sparse.Embedding",
            f"{TORCH}.dropout.Dropout",
            f"{TORCH}.activation.GELU",
            f"{TORCH}.container.Sequential",
            f"{TORCH}.container.ModuleList",
            f"{TORCH}.container.ModuleDict",
            "torch.nn.utils.parametrize.ParametrizationList",
            "torch.nn.utils.parametrize.ParametrizedLinear",
            "torch.nn.utils.parametrizations._Orthogonal",
        ),
        "functions of their parameters alone; Dropout draws under vmap's "
        'randomness="different" (see the module docstring)',
    )
)
register_family(
    Family(
        "transformer backbone",
        tuple(
            f"{TRANSFORMER}.{name}"
            for name in (
                "Classifier",
                "PairClassifier",
                "LanguageModel",
                "Encoder",
                "Block",
                "SelfAttention",
                "PatchEmbedding",
            )
        ),
        "branches on shapes only; an unpadded encoder (images) checks its all-real mask with "
        "torch._assert_async, which has no vmap rule: the stacked forward passes that mask "
        "on, which masks nothing; activation checkpointing is refused (a run that needs it to "
        "fit is no small job)",
        backbone,
    )
)
register_family(
    Family(
        "softmax attention",
        ("pdelab.models.attention.SDPAKernel", "pdelab.models.attention.ReferenceKernel"),
        "functions of their inputs alone (the mask is followed as given, never read)",
    )
)
register_family(
    Family(
        "diffusion sites",
        ("pdelab.models.diffusion.Diffusion",),
        "the fast step is an autograd.Function without a vmap rule: the stacked forward "
        "runs the layer's autograd reference, the same step (tests/test_diffusion.py)",
        diffusion_reference,
    )
)
register_family(
    Family(
        "released smoothing",
        ("pdelab.models.smoothing.ReleasedSmoothing",),
        "functions of their parameters alone",
    )
)
register_family(
    Family(
        "compiled model",
        ("torch._dynamo.eval_frame.OptimizedModule",),
        "a model wrapped in torch.compile is traced for one set of parameters: "
        "build the seeds uncompiled (the profile's compile: off) to stack them",
        stackable=False,
    )
)
register_family(
    Family(
        "translation",
        tuple(
            f"pdelab.models.seq2seq.{name}"
            for name in ("Seq2Seq", "Decoder", "DecoderBlock", "CrossAttention")
        ),
        "the encoder-decoder is not checked under vmap and translation's loss_items reads "
        "the host: train its seeds separately",
        stackable=False,
    )
)


def families_of(model: nn.Module) -> list[Family]:
    """The families of every module in ``model``; :class:`NotStackable` naming each module of
    no family or of a refused one, with the reason."""
    discover_families()
    by_class = {c: FAMILIES.get(n) for n in FAMILIES for c in FAMILIES.get(n).classes}
    found: dict[str, Family] = {}
    problems: dict[str, str] = {}
    for module in model.modules():
        name = qualified(type(module))
        family = by_class.get(name)
        if family is None:
            problems[name] = (
                f"{name} is in no stackable family: a module stacks once checked to read no "
                "tensor on the host in its forward (pdelab.training.stacked_seeds."
                "register_family)"
            )
        elif not family.stackable:
            problems[name] = f"{name} ({family.name}): {family.how}"
        else:
            found[family.name] = family
    if problems:
        lines = "\n  ".join(problems.values())
        raise NotStackable(f"these seeds cannot be trained stacked:\n  {lines}")
    return list(found.values())


def stacked_forward_model(model: nn.Module) -> nn.Module:
    """A parameter-free copy of ``model`` (on the meta device) on the paths its families
    stack through: the module ``functional_call`` runs with each seed's parameters."""
    families = families_of(model)
    base = copy.deepcopy(model).to("meta")
    for module in list(base.modules()):
        for family in families:
            if family.prepare is not None and qualified(type(module)) in family.classes:
                family.prepare(module)
    return base


# --------------------------------------------------------------------------------------------
# Task kinds: their strategy's own loss, checked under vmap
# --------------------------------------------------------------------------------------------

# the task kinds whose strategy's loss reads nothing on the host (its counts stay tensors), so
# vmap maps it over the seeds as it is (tests/test_stacked_seeds.py trains each)
STACKED_TASK_KINDS = ("classification", "lm")


def stacked_strategy(task_kind: str) -> Strategy:
    """The task kind's strategy, whose loss each seed's batch is scored by;
    :class:`NotStackable` for a kind not checked under vmap."""
    if task_kind not in STACKED_TASK_KINDS:
        raise NotStackable(
            f"task kind {task_kind!r} is not checked under vmap (stacked: "
            f"{', '.join(STACKED_TASK_KINDS)}): train its seeds separately"
        )
    return task_kinds.TASK_KINDS.get(task_kind).strategy()


# --------------------------------------------------------------------------------------------
# Batches: each seed's own, stacked
# --------------------------------------------------------------------------------------------


def seed_steps(
    seeds: Sequence[int], epoch: int, items: int, batch_size: int
) -> Iterator[list[np.ndarray]]:
    """Per step of the epoch, each seed's batch indices, in the order its own run takes them
    (pdelab.training.train.train_epoch: ``rng([seed, epoch])``'s permutation, in batches)."""
    orders = [np.random.default_rng([seed, epoch]).permutation(items) for seed in seeds]
    per_seed = [batches(items, batch_size, order) for order in orders]
    yield from (list(step) for step in zip(*per_seed, strict=True))


def stack_batch(
    split: Batches, indices: Sequence[np.ndarray], device: torch.device
) -> tuple[dict[str, Tensor], Tensor]:
    """(inputs, labels) of K batches, one per seed, each array (K, B, ...): sequences padded
    to the longest of the K batches with 0 (PAD_ID for tokens, False for masks)."""
    parts = [split.batch(index) for index in indices]
    stacked = {}
    for key in parts[0]:
        arrays = [part[key] for part in parts]
        if arrays[0].ndim >= 2:
            longest = max(a.shape[1] for a in arrays)
            arrays = [np.pad(a, [(0, 0), (0, longest - a.shape[1])]) for a in arrays]
        stacked[key] = torch.from_numpy(np.stack(arrays)).to(device)
    return stacked, stacked.pop("labels")


# --------------------------------------------------------------------------------------------
# Clipping and AdamW on K seeds' flat parameters (K, N)
# --------------------------------------------------------------------------------------------


def clip_per_seed_(grads: Tensor, max_norm: Tensor) -> Tensor:
    """``clip_grad_norm_`` on each row of ``grads`` (K, N), a seed's whole gradient, with its
    own ``max_norm`` (K, 1); returns each seed's total norm before clipping (K,)."""
    total = torch.linalg.vector_norm(grads, 2, dim=1, keepdim=True)
    grads.mul_(torch.clamp(max_norm / (total + CLIP_EPS), max=1.0))
    return total[:, 0]


@dataclass(frozen=True)
class AdamWScalars:
    """Each seed's AdamW scalars as (K, 1) tensors, as torch.optim.AdamW's single-tensor path
    computes them in Python for a step: ``decay`` 1 - lr wd, ``step_size`` lr / (1 - beta1^t),
    ``bias2_sqrt`` sqrt(1 - beta2^t), and the constants 1 - beta1, beta2, 1 - beta2 and eps
    (the differences taken in Python too)."""

    decay: Tensor
    step_size: Tensor
    bias2_sqrt: Tensor
    one_minus_beta1: Tensor
    beta2: Tensor
    one_minus_beta2: Tensor
    eps: Tensor


def adamw_(
    params: Tensor,
    grads: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    update: Tensor,
    s: AdamWScalars,
) -> None:
    """torch.optim.AdamW's step (its single-tensor path, op for op) on K seeds' flat
    parameters (K, N), each row with its own scalars; a row whose ``update`` (K,) is False
    keeps its parameters and moments exactly (weight decay 1, lerp weight 0, step size 0)."""
    keep = update[:, None]
    grads = torch.where(keep, grads, 0.0)
    params.mul_(torch.where(keep, s.decay, 1.0))
    exp_avg.lerp_(grads, torch.where(keep, s.one_minus_beta1, 0.0))
    second = torch.where(keep, s.one_minus_beta2, 0.0)
    exp_avg_sq.mul_(torch.where(keep, s.beta2, 1.0)).addcmul_(second * grads, grads)
    denom = (exp_avg_sq.sqrt() / s.bias2_sqrt).add_(s.eps)
    params.sub_(exp_avg.div(denom).mul_(torch.where(keep, s.step_size, 0.0)))


@dataclass(frozen=True)
class SeedOptimizer:
    """One seed's AdamW, clipping and schedule, read from the objects its run built
    (pdelab.training.session.assemble)."""

    lr: float  # the schedule's base learning rate
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    grad_clip: float
    factor: Callable[[int], float]  # the schedule's factor of lr after a number of steps

    @classmethod
    def of(cls, optimizer: torch.optim.Optimizer, schedule: Any, grad_clip: float) -> SeedOptimizer:
        if type(optimizer) is not torch.optim.AdamW or len(optimizer.param_groups) != 1:
            raise NotStackable("stacked seeds step torch.optim.AdamW with one parameter group")
        group = optimizer.param_groups[0]
        odd = {k: group[k] for k in ("amsgrad", "maximize") if group.get(k)}
        if odd or not group.get("decoupled_weight_decay", True):
            raise NotStackable(f"stacked seeds step plain AdamW, not with {odd or 'coupled decay'}")
        if type(schedule) is not LambdaLR or len(schedule.lr_lambdas) != 1:
            raise NotStackable("stacked seeds follow a LambdaLR schedule of one group")
        beta1, beta2 = (float(b) for b in group["betas"])
        return cls(
            float(schedule.base_lrs[0]),
            (beta1, beta2),
            float(group["eps"]),
            float(group["weight_decay"]),
            float(grad_clip),
            schedule.lr_lambdas[0],
        )

    def lr_at(self, steps: int) -> float:
        """The learning rate after ``steps`` steps, as LambdaLR sets it."""
        return self.lr * self.factor(steps)


@dataclass
class Scored:
    """Each seed's scores of its batch, (K,) device tensors: mean loss, correct predictions
    and items, what a task kind's loss gives per batch."""

    loss: Tensor
    correct: Tensor
    items: Tensor


@dataclass
class StepResult:
    """One stacked step, every field a (K,) device tensor: mean loss, correct predictions and
    items (what ``train_step`` returns per seed), whether the loss was finite (a seed whose
    loss was not took no step, and its run is diverged), and the gradient's norm before
    clipping."""

    loss: Tensor
    correct: Tensor
    items: Tensor
    finite: Tensor
    grad_norm: Tensor


class SeedSums:
    """Each seed's running (mean loss x items, correct, items) over an epoch's steps, (K,)
    tensors on the device, so adding a step reads nothing back; :meth:`read` is the one host
    sync. As train_epoch sums a run's steps (float64 loss sums), a step that was not finite
    for a seed adds nothing to its sums (its run ends there, as "diverged")."""

    def __init__(self, seeds: int, device: torch.device) -> None:
        self.loss_sum = torch.zeros(seeds, dtype=torch.float64, device=device)
        self.correct = torch.zeros(seeds, dtype=torch.int64, device=device)
        self.items = torch.zeros(seeds, dtype=torch.int64, device=device)

    def add(self, step: StepResult) -> None:
        ok = step.finite
        self.loss_sum += torch.where(ok, step.loss.detach().double() * step.items, 0.0)
        self.correct += torch.where(ok, step.correct, 0)
        self.items += torch.where(ok, step.items, 0)

    def read(self) -> list[tuple[float, int, int]]:
        """Per seed (loss sum, correct, items) as Python numbers: one transfer."""
        sums = torch.stack([self.loss_sum, self.correct.double(), self.items.double()])
        return [(loss, int(right), int(n)) for loss, right, n in sums.T.tolist()]


@dataclass
class SeedState:
    """One seed's state as its separate run holds it: ``model.state_dict()``,
    ``optimizer.state_dict()`` (torch.optim.AdamW's format) and ``schedule.state_dict()``."""

    model: dict[str, Tensor]
    optimizer: dict[str, Any]
    schedule: dict[str, Any]


# --------------------------------------------------------------------------------------------
# The stacked seeds
# --------------------------------------------------------------------------------------------


class StackedSeeds:
    """K seeds of one architecture trained in step: parameters, AdamW moments and step counts
    stacked, one vmapped gradient per step. Build it from each seed's model, optimizer and
    schedule as its own run built them (:meth:`from_sessions`); after steps, :meth:`unstack`
    gives each seed's state to write as its own run's records and checkpoints."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedules: Sequence[LambdaLR],
        grad_clips: Sequence[float],
        task_kind: str,
        precision: str = "fp32",
    ) -> None:
        if not models or not len(models) == len(optimizers) == len(schedules) == len(grad_clips):
            raise NotStackable("one model, optimizer, schedule and grad_clip per seed")
        check_same_architecture(models)
        self.strategy = stacked_strategy(task_kind)
        self.base = stacked_forward_model(models[0])
        self.precision = precision
        self.seeds = len(models)
        self.hyper = [
            SeedOptimizer.of(o, s, c)
            for o, s, c in zip(optimizers, schedules, grad_clips, strict=True)
        ]
        self.steps = same_progress(schedules)  # steps the group has taken (host)
        self.names = [n for n, _ in models[0].named_parameters()]  # the optimizer's order
        for model, optimizer in zip(models, optimizers, strict=True):
            check_optimizer_order(model, optimizer)
        params, self.buffers = stack_module_state(list(models))
        first = params[self.names[0]]
        self.device, self.dtype = first.device, first.dtype
        if any(p.dtype != self.dtype or p.device != self.device for p in params.values()):
            raise NotStackable("stacked seeds hold parameters of one dtype on one device")
        self.shapes = [tuple(params[n].shape[1:]) for n in self.names]
        self.sizes = [int(np.prod(shape, dtype=np.int64)) for shape in self.shapes]
        self.flat = torch.cat([params[n].detach().reshape(self.seeds, -1) for n in self.names], 1)
        self.params = self.views(self.flat)
        self.exp_avg = self.stacked_moment(optimizers, "exp_avg")
        self.exp_avg_sq = self.stacked_moment(optimizers, "exp_avg_sq")
        self.seed_steps = torch.tensor(  # each seed's AdamW step count
            [int(optimizer_steps(o)) for o in optimizers], device=self.device
        )
        self.state_keys = state_dict_names(models[0])
        self.templates = [  # the state dicts' other entries, as each seed's run holds them
            (o.state_dict()["param_groups"][0], s.state_dict())
            for o, s in zip(optimizers, schedules, strict=True)
        ]
        self.max_norm = self.per_seed([h.grad_clip for h in self.hyper])
        self.one_minus_beta1 = self.per_seed([1 - h.betas[0] for h in self.hyper])
        self.beta2 = self.per_seed([h.betas[1] for h in self.hyper])
        self.one_minus_beta2 = self.per_seed([1 - h.betas[1] for h in self.hyper])
        self.eps = self.per_seed([h.eps for h in self.hyper])
        # each seed's (gradients, (loss, (correct, items))), its dropout drawn on its own
        self.gradient = vmap(grad_and_value(self.seed_loss, has_aux=True), randomness="different")
        self.scores = vmap(self.seed_loss, randomness="different")

    @classmethod
    def from_sessions(cls, sessions: Sequence[Any]) -> StackedSeeds:
        """The seeds of pdelab.training.session.Session objects, each built by ``build`` as its
        own run (one process, whole batches, one task and architecture)."""
        first = sessions[0]
        for s in sessions:
            if not s.world.alone:
                raise NotStackable("stacked seeds run in one process (no torchrun)")
            if s.execution.micro(s.run.train.batch_size) < s.run.train.batch_size:
                raise NotStackable("stacked seeds take whole batches, not micro-batches")
            if (s.run.task, s.run.train.batch_size) != (first.run.task, first.run.train.batch_size):
                raise NotStackable("stacked seeds share one task and batch size")
        kind = task_kinds.of_data(first.run.task, first.manifest).name
        return cls(
            [s.model for s in sessions],
            [s.optimizer for s in sessions],
            [s.schedule for s in sessions],
            [s.run.train.grad_clip for s in sessions],
            kind,
            first.run.train.precision,
        )

    # -- construction helpers -----------------------------------------------------------------

    def per_seed(self, values: Sequence[float]) -> Tensor:
        """(K, 1) on the device, in the parameters' dtype."""
        return torch.tensor(values, dtype=self.dtype, device=self.device)[:, None]

    def views(self, flat: Tensor) -> dict[str, Tensor]:
        """Each parameter's (K, *shape) view into a flat (K, N) tensor."""
        parts = flat.split(self.sizes, dim=1)
        return {
            n: part.view(self.seeds, *shape)
            for n, part, shape in zip(self.names, parts, self.shapes, strict=True)
        }

    def stacked_moment(self, optimizers: Sequence[torch.optim.Optimizer], key: str) -> Tensor:
        """A moment of every seed's AdamW state, flat (K, N); zeros where it has not stepped."""
        rows = []
        for optimizer in optimizers:
            params = optimizer.param_groups[0]["params"]
            if not optimizer.state:
                rows.append(torch.zeros_like(self.flat[0]))
                continue
            rows.append(torch.cat([optimizer.state[p][key].reshape(-1) for p in params]))
        return torch.stack(rows).to(self.device, self.dtype)

    # -- the step ---------------------------------------------------------------------------

    def seed_loss(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        inputs: dict[str, Tensor],
        labels: Tensor,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One seed's loss of its batch under its parameters (vmap maps it over the seeds)."""

        def forward(*args: Any, **kwargs: Any) -> Tensor:
            return functional_call(self.base, (params, buffers), args, kwargs)

        with autocast(self.device, self.precision):  # bf16: pdelab.training.precision
            loss, correct, items = self.strategy.loss(forward, inputs, labels, False)
        return loss, (torch.as_tensor(correct), torch.as_tensor(items))

    def scalars(self) -> AdamWScalars:
        """This step's AdamW scalars per seed, computed in Python as torch.optim.AdamW does
        (the step count is the group's: a seed that fell behind takes no step)."""
        t = self.steps + 1
        rows = []
        for h in self.hyper:
            lr = h.lr_at(self.steps)
            beta1, beta2 = h.betas
            rows.append([1 - lr * h.weight_decay, lr / (1 - beta1**t), (1 - beta2**t) ** 0.5])
        host = torch.tensor(rows, dtype=self.dtype)
        if self.device.type == "cuda":  # no wait for the queue: a pinned, asynchronous copy
            host = host.pin_memory()
        decay, step_size, bias2 = host.to(self.device, non_blocking=True).T[..., None]
        constants = self.one_minus_beta1, self.beta2, self.one_minus_beta2, self.eps
        return AdamWScalars(decay, step_size, bias2, *constants)

    def losses(self, inputs: dict[str, Tensor], labels: Tensor, train: bool = True) -> Scored:
        """Each seed's scores of its batch, without gradients or a step: in training mode
        dropout draws as in :meth:`step`; in evaluation mode, a validation batch's."""
        self.base.train(train)
        with torch.no_grad():
            loss, (correct, items) = self.scores(self.params, self.buffers, inputs, labels)
        return Scored(loss, correct, items)

    def step(self, inputs: dict[str, Tensor], labels: Tensor) -> StepResult:
        """One step of every seed on its own batch (inputs and labels (K, B, ...),
        :func:`stack_batch`): gradients in one vmapped call, then clipping and AdamW per seed;
        a seed whose loss is not finite keeps its state. Reads nothing on the host."""
        self.base.train()
        scalars = self.scalars()
        grads, (loss, (correct, items)) = self.gradient(self.params, self.buffers, inputs, labels)
        flat = torch.cat([grads[n].reshape(self.seeds, -1) for n in self.names], dim=1)
        finite = torch.isfinite(loss)
        norm = clip_per_seed_(flat, self.max_norm)
        adamw_(self.flat, flat, self.exp_avg, self.exp_avg_sq, finite, scalars)
        self.seed_steps += finite
        self.steps += 1
        return StepResult(loss.detach(), correct, items, finite, norm)

    # -- each seed's state ------------------------------------------------------------------

    def lrs(self) -> list[float]:
        """Each seed's learning rate for its next step (``schedule.get_last_lr()[0]``)."""
        return [h.lr_at(self.steps) for h in self.hyper]

    def diverged(self) -> list[bool]:
        """Which seeds met a non-finite loss (their runs end there). Reads the device."""
        return [int(n) < self.steps for n in self.seed_steps.tolist()]

    def unstack(self, k: int) -> SeedState:
        """Seed ``k``'s model, optimizer and schedule state dicts, as its separate run would
        hold them now: what its checkpoint and best.pt are written from. Reads the device."""
        taken = int(self.seed_steps[k])
        model = {}
        for key, (kind, name) in self.state_keys.items():
            stacked = self.params[name] if kind == "param" else self.buffers[name]
            model[key] = stacked[k].detach().clone()
        state: dict[int, dict[str, Tensor]] = {}
        if taken:
            avg, avg_sq = self.views(self.exp_avg), self.views(self.exp_avg_sq)
            for i, name in enumerate(self.names):
                state[i] = {
                    "step": torch.tensor(float(taken), dtype=_get_scalar_dtype()),
                    "exp_avg": avg[name][k].clone(),
                    "exp_avg_sq": avg_sq[name][k].clone(),
                }
        group_template, schedule_template = self.templates[k]
        lr = self.hyper[k].lr_at(taken)
        group = dict(group_template, lr=lr, params=list(range(len(self.names))))
        schedule = dict(schedule_template, last_epoch=taken, _step_count=taken + 1, _last_lr=[lr])
        return SeedState(model, {"state": state, "param_groups": [group]}, schedule)

    def load_into(
        self,
        k: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        schedule: LambdaLR | None = None,
    ) -> None:
        """Seed ``k``'s state into its own run's objects (to validate, test or checkpoint it
        with the trainer's code)."""
        state = self.unstack(k)
        model.load_state_dict(state.model)
        if optimizer is not None:
            optimizer.load_state_dict(state.optimizer)
        if schedule is not None:
            schedule.load_state_dict(state.schedule)


def check_same_architecture(models: Sequence[nn.Module]) -> None:
    """Every seed's model has the first's classes, parameter names and shapes."""

    def signature(model: nn.Module) -> list[tuple[str, str, tuple[int, ...]]]:
        tensors = [*model.named_parameters(), *model.named_buffers()]
        shapes = [(name, "", tuple(t.shape)) for name, t in tensors]
        return [(n, qualified(type(m)), ()) for n, m in model.named_modules()] + shapes

    first = signature(models[0])
    for k, model in enumerate(models[1:], 1):
        if signature(model) != first:
            raise NotStackable(f"seed {k}'s model is not of seed 0's architecture")


def check_optimizer_order(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The optimizer steps the model's parameters in ``model.parameters()`` order (its state
    dict numbers them so)."""
    if [id(p) for p in optimizer.param_groups[0]["params"]] != [id(p) for p in model.parameters()]:
        raise NotStackable("each optimizer must hold its model's parameters, in their order")


def same_progress(schedules: Sequence[LambdaLR]) -> int:
    """The steps every seed has taken (a resumed group's, or 0): the same for all."""
    taken = {s.last_epoch for s in schedules}
    if len(taken) != 1:
        raise NotStackable(f"stacked seeds start from the same step, not from {sorted(taken)}")
    return taken.pop()


def optimizer_steps(optimizer: torch.optim.Optimizer) -> float:
    """The steps an AdamW has taken (0 before its first)."""
    first = optimizer.param_groups[0]["params"][0]
    return float(optimizer.state[first]["step"]) if first in optimizer.state else 0.0


def state_dict_names(model: nn.Module) -> dict[str, tuple[str, str]]:
    """Each ``state_dict`` key -> ("param" | "buffer", the name it is stacked under): a tied
    tensor appears under several keys but is stacked once."""
    owner = {id(t): ("param", n) for n, t in model.named_parameters()}
    owner |= {id(t): ("buffer", n) for n, t in model.named_buffers()}
    return {key: owner[id(t)] for key, t in model.state_dict(keep_vars=True).items()}


__all__ = [
    "FAMILIES",
    "discover_families",
    "STACKED_TASK_KINDS",
    "Family",
    "NotStackable",
    "Scored",
    "SeedOptimizer",
    "SeedState",
    "SeedSums",
    "StackedSeeds",
    "StepResult",
    "adamw_",
    "clip_per_seed_",
    "families_of",
    "register_family",
    "seed_steps",
    "stack_batch",
    "stacked_forward_model",
]
