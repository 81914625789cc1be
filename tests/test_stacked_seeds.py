"""Stacked seeds (pdelab.training.stacked_seeds): with dropout off, in float64, K seeds trained in
one vmapped step equal their K separate runs (AdamW, clip_grad_norm_ and the schedule each run
builds) to 1e-10, for a variant of every stackable family; a seed whose loss is not finite keeps
its state; each seed's state unstacks into its own run's objects, which go on as its run; with
dropout on, each seed keeps its run's keep rate and loss distribution; what cannot be stacked
is refused, with the reason."""

from __future__ import annotations

import copy
import functools
import os
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.func import vmap

from conftest import ROOT
from pdelab.data.store import PIXEL_VOCAB, Split
from pdelab.data.translation import SPECIALS
from pdelab.models.attention import SDPAKernel
from pdelab.models.factory import build_model
from pdelab.spec import task_kinds
from pdelab.spec.config import load_params, resolve
from pdelab.spec.plugins import import_mechanisms
from pdelab.training.job import seed_everything
from pdelab.training.micro_batch import Execution
from pdelab.training.session import Session, assemble, executed
from pdelab.training.stacked_seeds import (
    FAMILIES,
    NotStackable,
    SeedSums,
    StackedSeeds,
    discover_families,
    families_of,
    seed_steps,
    stack_batch,
)
from pdelab.training.strategy import batches, to_device

import_mechanisms()  # each paper declares its family beside its kernels
discover_families()

SEEDS = (0, 1, 2)
ITEMS, BATCH, STEPS = 30, 6, 5  # one epoch of 5 steps
SEQ_LEN = 12  # a language model's window
CLIP = 0.05  # below every seed's gradient norm: each seed's own clipping decides its step
VOCAB = ["<pad>", "<cls>", *(f"w{i}" for i in range(14))]
CPU = torch.device("cpu")

# a variant of each stackable family (and of each task kind a stacked loss exists for)
FAMILY_CASES = {
    "torch layers": [("listops", "baseline")],
    "transformer backbone": [
        ("retrieval", "baseline"),
        ("wikitext", "baseline"),
        ("image", "patch_vit"),
    ],
    "softmax attention": [("listops", "baseline")],
    "diffusion sites": [("listops", "in_attention"), ("listops", "multiscale_layer_diffusion")],
    "released smoothing": [("wikitext", "released_causal")],
    "continuous-time attention": [("listops", "pde_s2"), ("wikitext", "pde_longformer_causal")],
    "fractional attention": [("listops", "fna_op"), ("listops", "fna_dp_qk")],
    "linear diffusion block": [("listops", "ldn")],
}
CASES = sorted({case for cases in FAMILY_CASES.values() for case in cases})


@functools.cache
def params_yaml() -> dict[str, Any]:
    return load_params(ROOT / "params.yaml")


@pytest.fixture(autouse=True)
def float64() -> Iterator[None]:
    """float64, and deterministic kernels as pdelab.training.session.build sets them on a CPU;
    one thread (these tensors are tiny, and a second thread on a busy machine waits on the
    first)."""
    previous = (
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_num_threads(),
    )
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield
    torch.set_default_dtype(previous[0])
    torch.use_deterministic_algorithms(previous[1])
    torch.set_num_threads(previous[2])


def data_of(
    kind: str, pairs: bool = False, pixels: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, splits) of a tiny task of the kind, sequences of unequal lengths (but
    images), so the seeds' batches differ in length and stacking pads them."""
    rng = np.random.default_rng(0)

    def ragged(low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
        lengths = rng.integers(low, high + 1, ITEMS)
        tokens = rng.integers(2, len(VOCAB), int(lengths.sum()))
        return tokens, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    if pixels:  # 4 x 4 images, never padded
        offsets = np.arange(0, 16 * ITEMS + 1, 16)
        split = Split(rng.integers(2, 258, 16 * ITEMS), offsets, rng.integers(0, 3, ITEMS))
        manifest = {"vocab": list(PIXEL_VOCAB), "num_classes": 3, "pairs": False}
        return manifest | {"splits": {"train": {"max_length": 16}}}, {"train": split}
    if kind == "lm":
        split = Split(*ragged(2, SEQ_LEN + 1), np.zeros(ITEMS, dtype=np.int64))
        return {"kind": "lm", "vocab": VOCAB}, {"train": split}
    second = ragged(3, 16) if pairs else (None, None)
    split = Split(*ragged(3, 16), rng.integers(0, 3, ITEMS), *second)
    manifest = {"vocab": VOCAB, "num_classes": 3, "pairs": pairs}
    return manifest | {"splits": {"train": {"max_length": 16}}}, {"train": split}


def tiny_run(task: str, variant: str, seed: int, dropout: float = 0.0) -> Any:
    """A small float64 CPU run of the variant: lr 1e-3 (AdamW scales a rounding difference of
    a gradient near 0 by up to lr / eps), weight decay on, every seed's gradient clipped."""
    run = resolve(params_yaml(), task, variant, seed, "smoke")
    model = replace(run.model, dim=16, heads=2, layers=2, mlp_dim=32)
    model = replace(model, dropout=dropout, attention_dropout=dropout)
    if "window" in model.attention_options:  # a band narrower than the sequences
        model = replace(model, attention_options=model.attention_options | {"window": 4})
    train = replace(run.train, batch_size=BATCH, warmup_steps=2, epochs=1, lr=1e-3)
    train = replace(train, weight_decay=0.1, grad_clip=CLIP, precision="fp32", seq_len=SEQ_LEN)
    return replace(run, device="cpu", model=model, train=train)


def session(task: str, variant: str, seed: int, dropout: float = 0.0) -> Session:
    """The seed's run as pdelab.training.session.build assembles it: seeded, then its model,
    AdamW and schedule."""
    run = tiny_run(task, variant, seed, dropout)
    kind = task_kinds.declared(task).name
    manifest, data = data_of(kind, task == "retrieval", task == "image")
    strategy = task_kinds.TASK_KINDS.get(kind).strategy()
    seed_everything(seed)
    return assemble(run, Path(os.devnull), CPU, manifest, strategy, data, STEPS)


def separate_step(s: Session, index: np.ndarray) -> tuple[float, int, int]:
    """One step of a separate run, as pdelab.training.train.train_step takes a whole batch."""
    s.model.train()
    inputs, labels = to_device(s.data["train"], index, CPU)
    loss, correct, items = s.task_kind.loss(s.model, inputs, labels, False)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(s.model.parameters(), s.run.train.grad_clip)
    s.optimizer.step()
    s.schedule.step()
    return float(loss), int(correct), int(items)


def largest_difference(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def optimizer_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference of two AdamW state dicts' moments; their steps, learning rates
    and every other group entry must be equal."""
    assert a["param_groups"][0].keys() == b["param_groups"][0].keys()
    for key, value in a["param_groups"][0].items():
        other = b["param_groups"][0][key]
        if isinstance(value, float):
            assert value == pytest.approx(other, rel=1e-15), key
        else:
            assert value == other, key
    assert a["state"].keys() == b["state"].keys()
    worst = 0.0
    for i, state in a["state"].items():
        assert state["step"].dtype == b["state"][i]["step"].dtype
        assert float(state["step"]) == float(b["state"][i]["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            worst = max(worst, float((state[key] - b["state"][i][key]).abs().max()))
    return worst


def stacked_of(task: str, variant: str, dropout: float = 0.0) -> tuple[StackedSeeds, Any]:
    """The seeds stacked, built as their runs build them, and their training split."""
    sessions = [session(task, variant, seed, dropout) for seed in SEEDS]
    return StackedSeeds.from_sessions(sessions), sessions[0].data["train"]


def test_every_stackable_family_has_a_case() -> None:
    stackable = {n for n in FAMILIES if FAMILIES.get(n).stackable}
    assert stackable == set(FAMILY_CASES)
    refused = {n for n in FAMILIES if not FAMILIES.get(n).stackable}
    assert refused == set(REFUSED)


@pytest.mark.parametrize(("task", "variant"), CASES)
def test_stacked_seeds_train_each_seed_s_separate_run(task: str, variant: str) -> None:
    separate = [session(task, variant, seed) for seed in SEEDS]
    stacked, split = stacked_of(task, variant)
    listed = {family for family, cases in FAMILY_CASES.items() if (task, variant) in cases}
    assert listed <= {f.name for f in families_of(separate[0].model)}  # it holds its families
    assert stacked.seeds == len(SEEDS) and stacked.steps == 0
    start = [s.model.state_dict() for s in separate]
    start = [{k: v.clone() for k, v in state.items()} for state in start]
    sums, separate_sums = SeedSums(len(SEEDS), CPU), np.zeros((len(SEEDS), 3))
    for step, indices in enumerate(seed_steps(SEEDS, 1, ITEMS, BATCH)):
        lengths = {int(split.lengths()[index].max()) for index in indices}
        result = stacked.step(*stack_batch(split, indices, CPU))
        sums.add(result)
        assert result.finite.all()
        if step == 0:  # every seed clipped, by its own norm
            assert (result.grad_norm > CLIP).all() and len(set(result.grad_norm.tolist())) == 3
        for k, s in enumerate(separate):
            loss, correct, items = separate_step(s, indices[k])
            separate_sums[k] += (loss * items, correct, items)  # as train_epoch sums them
            assert float(result.loss[k]) == pytest.approx(loss, rel=1e-12, abs=1e-12)
            assert (int(result.correct[k]), int(result.items[k])) == (correct, items)
            state = stacked.unstack(k)
            assert largest_difference(state.model, s.model.state_dict()) < 1e-10, (step, k)
        assert stacked.lrs() == [s.schedule.get_last_lr()[0] for s in separate]
    assert stacked.steps == STEPS and (len(lengths) > 1 or task == "image")  # padded
    for k, s in enumerate(separate):
        assert largest_difference(start[k], s.model.state_dict()) > 1e-4  # the steps trained
        state = stacked.unstack(k)
        assert optimizer_difference(state.optimizer, s.optimizer.state_dict()) < 1e-10
        assert state.schedule == s.schedule.state_dict()
    assert stacked.diverged() == [False] * len(SEEDS)
    for (loss_sum, correct, items), own in zip(sums.read(), separate_sums, strict=True):
        assert (correct, items) == (int(own[1]), int(own[2]))  # each seed's epoch record
        assert loss_sum == pytest.approx(own[0], rel=1e-12)


def test_an_unstacked_seed_goes_on_as_its_run_and_a_resumed_run_stacks() -> None:
    """2 separate steps, stacked for 2, unstacked into the runs' own objects for the last:
    the same parameters and AdamW state as 5 separate steps."""
    steps = list(seed_steps(SEEDS, 1, ITEMS, BATCH))
    separate = [session("listops", "after_embedding", seed) for seed in SEEDS]
    mixed = [session("listops", "after_embedding", seed) for seed in SEEDS]
    for indices in steps[:2]:
        for s, index in zip(mixed, indices, strict=True):
            separate_step(s, index)
    stacked = StackedSeeds.from_sessions(mixed)  # a resumed group: AdamW state and schedule
    assert stacked.steps == 2 and stacked.seed_steps.tolist() == [2, 2, 2]
    split = mixed[0].data["train"]
    for indices in steps[2:4]:
        stacked.step(*stack_batch(split, indices, CPU))
    for k, s in enumerate(mixed):
        stacked.load_into(k, s.model, s.optimizer, s.schedule)
        separate_step(s, steps[4][k])
    for indices in steps:
        for s, index in zip(separate, indices, strict=True):
            separate_step(s, index)
    for s, t in zip(mixed, separate, strict=True):
        assert largest_difference(s.model.state_dict(), t.model.state_dict()) < 1e-10
        assert optimizer_difference(s.optimizer.state_dict(), t.optimizer.state_dict()) < 1e-10
        assert s.schedule.state_dict() == t.schedule.state_dict()


def test_a_seed_whose_loss_is_not_finite_keeps_its_state_and_the_others_go_on() -> None:
    """As train_step: no update on a non-finite loss (the run ends as diverged)."""
    steps = list(seed_steps(SEEDS, 1, ITEMS, BATCH))
    separate = [session("listops", "baseline", seed) for seed in SEEDS]
    stacked, split = stacked_of("listops", "baseline")
    stacked.step(*stack_batch(split, steps[0], CPU))
    stacked.params["head.2.bias"][1].fill_(float("inf"))  # seed 1's logits: inf - inf
    before = stacked.unstack(1)
    result = stacked.step(*stack_batch(split, steps[1], CPU))
    assert result.finite.tolist() == [True, False, True]
    assert stacked.diverged() == [False, True, False]
    after = stacked.unstack(1)
    for key, value in before.model.items():
        torch.testing.assert_close(after.model[key], value, rtol=0, atol=0, equal_nan=True)
    assert optimizer_difference(after.optimizer, before.optimizer) == 0
    assert after.schedule == before.schedule and after.schedule["last_epoch"] == 1
    for k in (0, 2):
        for indices in steps[:2]:
            separate_step(separate[k], indices[k])
        state = stacked.unstack(k)
        assert largest_difference(state.model, separate[k].model.state_dict()) < 1e-10
        assert state.schedule["last_epoch"] == 2


def test_each_seed_takes_its_own_run_s_batches_padded_to_the_longest() -> None:
    split = data_of("classification", False)[1]["train"]
    steps = list(seed_steps(SEEDS, 3, ITEMS, BATCH))
    for k, seed in enumerate(SEEDS):  # pdelab.training.train.train_epoch's order
        order = np.random.default_rng([seed, 3]).permutation(ITEMS)
        expected = batches(ITEMS, BATCH, order)
        assert [step[k].tolist() for step in steps] == [b.tolist() for b in expected]
    inputs, labels = stack_batch(split, steps[0], CPU)
    longest = max(int(split.lengths()[index].max()) for index in steps[0])
    assert inputs["ids"].shape == (len(SEEDS), BATCH, longest) and labels.shape == (3, BATCH)
    for k, index in enumerate(steps[0]):
        own, own_labels = to_device(split, index, CPU)
        width = own["ids"].shape[1]
        assert torch.equal(inputs["ids"][k, :, :width], own["ids"])
        assert torch.equal(inputs["mask"][k, :, :width], own["mask"])
        assert not inputs["mask"][k, :, width:].any() and not inputs["ids"][k, :, width:].any()
        assert torch.equal(labels[k], own_labels)


# --------------------------------------------------------------------------------------------
# Dropout: each seed's masks are not its run's draws; their statistics are its run's
# --------------------------------------------------------------------------------------------

P = 0.3


def test_every_seed_drops_at_the_run_s_rate_and_independently() -> None:
    """Under vmap(randomness="different"), nn.Dropout and the SDPA kernel's attention dropout
    keep each seed's entries at rate 1 - p, with masks of their own per seed."""
    torch.manual_seed(0)
    x = torch.ones(len(SEEDS), 64, 32, 32)
    dropped = vmap(nn.Dropout(P), randomness="different")(x)
    kept = (dropped != 0).double().mean(dim=(1, 2, 3))
    n = x[0].numel()
    assert ((kept - (1 - P)).abs() < 5 * (P * (1 - P) / n) ** 0.5).all(), kept
    assert not torch.equal(dropped[0], dropped[1])
    kernel = SDPAKernel(heads=2, head_dim=4, dropout=P).train()
    q = torch.zeros(len(SEEDS), 8, 2, 64, 4)  # uniform weights over 64 keys
    mask = torch.ones(len(SEEDS), 8, 64, dtype=torch.bool)
    out = vmap(kernel, in_dims=(0, 0, 0, 0, None), randomness="different")(q, q, q + 1, mask, False)
    kept = out.mean(dim=(1, 2, 3, 4)) * (1 - P)  # each key's weight 1/64, kept / (1 - p)
    n = 8 * 2 * 64 * 64
    assert ((kept - (1 - P)).abs() < 5 * (P * (1 - P) / n) ** 0.5).all(), kept
    assert not torch.equal(out[0], out[1])


def test_seeds_of_equal_weights_on_equal_batches_draw_their_own_masks() -> None:
    """Three copies of one seed on one batch: the same losses in evaluation mode, three
    different ones in training (each its own dropout draw, not one mask shared)."""
    twins = StackedSeeds.from_sessions([session("listops", "baseline", 0, P) for _ in SEEDS])
    split = data_of("classification")[1]["train"]
    inputs, labels = stack_batch(split, [np.arange(BATCH)] * len(SEEDS), CPU)
    evaluated = twins.losses(inputs, labels, train=False).loss.tolist()
    assert evaluated == [evaluated[0]] * len(SEEDS)
    trained = twins.losses(inputs, labels).loss.tolist()
    assert len(set(trained)) == len(SEEDS)


def same_distribution(ours: Tensor, theirs: list[float], what: str) -> None:
    """Two samples of one quantity agree in mean (within 5 standard errors) and spread."""
    mean, spread = statistics.fmean(theirs), statistics.stdev(theirs)
    error = (spread**2 / len(theirs) + float(ours.var()) / len(ours)) ** 0.5
    assert abs(float(ours.mean()) - mean) < 5 * error, (what, float(ours.mean()), mean)
    assert 0.65 < float(ours.std()) / spread < 1.5, (what, float(ours.std()), spread)


def test_with_dropout_each_seed_s_loss_and_gradient_have_its_run_s_distribution() -> None:
    """The training loss and gradient norm of fixed weights on a fixed batch, drawn 100 times
    per seed: stacked (one generator for all seeds) and separate (each its own) agree in mean
    and spread. What a step does with them is the same function (the tests above), so the
    runs' training is the same process, sample for sample."""
    draws = 100
    sessions = [session("listops", "baseline", seed, dropout=P) for seed in SEEDS]
    stacked = StackedSeeds.from_sessions(sessions)
    split = sessions[0].data["train"]
    indices = next(seed_steps(SEEDS, 1, ITEMS, BATCH))
    inputs, labels = stack_batch(split, indices, CPU)
    torch.manual_seed(123)
    stacked.base.train()
    losses, norms = [], []
    for _ in range(draws):
        grads, (loss, _) = stacked.gradient(stacked.params, stacked.buffers, inputs, labels)
        flat = torch.cat([g.reshape(len(SEEDS), -1) for g in grads.values()], dim=1)
        losses.append(loss)
        norms.append(torch.linalg.vector_norm(flat, dim=1))
    stacked_losses, stacked_norms = torch.stack(losses), torch.stack(norms)
    assert stacked_losses.std(0).min() > 0  # dropout draws
    for k, s in enumerate(sessions):
        s.model.train()
        own_inputs, own_labels = to_device(split, indices[k], CPU)
        own_losses, own_norms = [], []
        for _ in range(draws):
            s.model.zero_grad(set_to_none=True)
            loss = s.task_kind.loss(s.model, own_inputs, own_labels, False)[0]
            loss.backward()
            own_losses.append(float(loss))
            own_norms.append(float(nn.utils.clip_grad_norm_(s.model.parameters(), float("inf"))))
        same_distribution(stacked_losses[:, k], own_losses, f"seed {k}'s loss")
        same_distribution(stacked_norms[:, k], own_norms, f"seed {k}'s gradient norm")
    # in evaluation mode the losses are the runs' own, stacked or not
    still = stacked.losses(inputs, labels, train=False).loss
    for k, s in enumerate(sessions):
        s.model.eval()
        own_inputs, own_labels = to_device(split, indices[k], CPU)
        with torch.no_grad():
            own = float(s.task_kind.loss(s.model, own_inputs, own_labels, False)[0])
        assert float(still[k]) == pytest.approx(own, rel=1e-12)


# --------------------------------------------------------------------------------------------
# What cannot be stacked
# --------------------------------------------------------------------------------------------


class HostBranch(nn.Module):
    """A module whose forward branches on a tensor's value: vmap cannot batch it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale if bool(x.sum() > 0) else x


def translation_model() -> nn.Module:
    run = resolve(params_yaml(), "multi30k", "baseline", 0, "smoke")
    manifest = {
        "kind": "translation",
        "src_vocab": [*SPECIALS, "s0", "s1"],
        "tgt_vocab": [*SPECIALS, "t0", "t1"],
        "specials": list(SPECIALS),
        "splits": {"train": {"src_max_length": 9, "tgt_max_length": 10}},
    }
    return build_model(replace(run, device="cpu"), manifest)


REFUSED = {  # each refused family: a model of it, and what its message must say
    "compiled model": (lambda: torch.compile(nn.Linear(2, 2)), "uncompiled"),
    "translation": (translation_model, "not checked under vmap"),
}


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_refused_family_is_refused_with_its_reason(family: str) -> None:
    make, words = REFUSED[family]
    with pytest.raises(NotStackable, match=rf"\({family}\): .*{words}"):
        families_of(make())


def test_a_module_of_no_family_is_refused_and_could_not_be_stacked() -> None:
    model = nn.Sequential(nn.Linear(3, 3), HostBranch())
    with pytest.raises(NotStackable, match=r"test_stacked_seeds\.HostBranch is in no stackable"):
        families_of(model)
    stacked = torch.func.stack_module_state([model, copy.deepcopy(model)])[0]
    call = vmap(lambda p, x: torch.func.functional_call(model, p, (x,)))
    with pytest.raises(RuntimeError, match="data-dependent control flow"):
        call(stacked, torch.ones(2, 3))


# the paths a family leaves for another under vmap, and that the left one cannot be vmapped
LEFT_PATHS = [
    ("transformer backbone", "image", "patch_vit"),  # torch._assert_async of the mask
    ("diffusion sites", "listops", "after_embedding"),  # DiffusionStepFunction
    ("fractional attention", "listops", "fna"),  # bool(mask.all()) on a CPU
    ("linear diffusion block", "listops", "ldn"),  # float(sigma) on a CPU
]


@pytest.mark.parametrize(("family", "task", "variant"), LEFT_PATHS)
def test_a_family_s_fast_path_cannot_be_vmapped_its_stacked_path_can(
    family: str, task: str, variant: str
) -> None:
    stacked, split = stacked_of(task, variant)
    inputs, labels = stack_batch(split, next(seed_steps(SEEDS, 1, ITEMS, BATCH)), CPU)
    fast, _ = stacked_of(task, variant)
    fast.base = copy.deepcopy(session(task, variant, 0).model).to("meta")  # unprepared
    with pytest.raises(RuntimeError):
        fast.step(inputs, labels)
    assert stacked.step(inputs, labels).finite.all()


def test_what_a_group_cannot_share_is_refused() -> None:
    sessions = [session("listops", "baseline", seed) for seed in SEEDS]
    other = session("listops", "after_embedding", 3)
    with pytest.raises(NotStackable, match="seed 3's model is not of seed 0's architecture"):
        StackedSeeds.from_sessions([*sessions, other])
    with pytest.raises(NotStackable, match="micro-batches"):
        StackedSeeds.from_sessions([executed(sessions[0], Execution(micro_batch=2))])
    checkpointed = executed(session("listops", "baseline", 0), Execution(checkpoint_blocks=True))
    with pytest.raises(NotStackable, match="activation checkpointing"):
        StackedSeeds.from_sessions([checkpointed])
    sessions[1].schedule.step()
    with pytest.raises(NotStackable, match="from the same step"):
        StackedSeeds.from_sessions(sessions[1:])


def test_a_task_kind_not_checked_under_vmap_is_refused() -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    with pytest.raises(NotStackable, match="task kind 'translation' is not checked under vmap"):
        StackedSeeds([model], [optimizer], [schedule], [1.0], "translation")


def test_the_stacked_forward_without_gradients_takes_no_step() -> None:
    """:meth:`StackedSeeds.losses` (validation, statistics) leaves every seed's state."""
    stacked, split = stacked_of("listops", "baseline")
    before = stacked.flat.clone()
    inputs, labels = stack_batch(split, next(seed_steps(SEEDS, 1, ITEMS, BATCH)), CPU)
    result = stacked.losses(inputs, labels, train=False)
    assert torch.equal(stacked.flat, before) and stacked.steps == 0
    assert result.loss.shape == (len(SEEDS),) and bool((result.loss > 0).all())
    assert result.items.tolist() == [BATCH] * len(SEEDS)
