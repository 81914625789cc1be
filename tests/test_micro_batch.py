"""Exact gradient accumulation: a batch taken as micro-batches trains the same parameters as the
batch taken at once (float64, dropout off), for every task kind and a variant of each paper,
with padding of unequal lengths and a last, shorter window; a mean of micro-batch means does
not. And the micro-batch is no part of a run's identity."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import ROOT
from pdelab.data.store import PAD_ID, Split
from pdelab.data.translation import BOS_ID, EOS_ID, SPECIALS, PairSplit
from pdelab.records.run import identity
from pdelab.spec import task_kinds
from pdelab.spec.config import load_params, resolve
from pdelab.training import micro_batch
from pdelab.training.job import seed_everything
from pdelab.training.micro_batch import Execution, planned
from pdelab.training.session import Session, assemble, executed
from pdelab.training.train import train_step
from pdelab.training.translation import PairBatches

ITEMS, BATCH, STEPS = 20, 8, 3  # windows of 8, 8 and the epoch's last 4
VOCAB = ["<pad>", "<cls>", *(f"w{i}" for i in range(14))]
SEQ_LEN = 12
# (task, variant, loss_includes_pad): each task kind, pairs, and a variant of each paper
CASES = [
    ("listops", "after_embedding", False),  # where to add PDE diffusion: a diffusion site
    ("listops", "ldn", False),  # linear diffusion networks: the LDN block
    ("retrieval", "baseline", False),  # document pairs through two towers
    ("wikitext", "pde_s2_causal", False),  # continuous-time attention on a language model
    ("multi30k", "mt_fna", False),  # fractional neural attention in translation
    ("multi30k", "baseline", True),  # translation with the <pad> targets in the loss
]


@pytest.fixture(autouse=True)
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def ragged(rng: np.random.Generator, n: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences of unequal lengths in [low, high], tokens of the non-reserved vocabulary."""
    lengths = rng.integers(low, high + 1, n)
    tokens = rng.integers(2, len(VOCAB), int(lengths.sum()))
    return tokens, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def data_of(kind: str, pairs: bool, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, splits) of a tiny task of each kind, sequences of unequal lengths."""
    rng = np.random.default_rng(seed)
    if kind == "translation":
        src_len, tgt_len = rng.integers(2, 9, ITEMS), rng.integers(1, 8, ITEMS)
        src = np.full((ITEMS, 9), PAD_ID)
        tgt = np.full((ITEMS, 10), PAD_ID)
        for i in range(ITEMS):
            src[i, : src_len[i]] = rng.integers(len(SPECIALS), 9, src_len[i])
            body = rng.integers(len(SPECIALS), 10, tgt_len[i])
            tgt[i, : tgt_len[i] + 2] = [BOS_ID, *body, EOS_ID]
        split = PairSplit(src, src_len, tgt, tgt_len + 2)
        manifest = {
            "kind": "translation",
            "src_vocab": [*SPECIALS, *(f"s{i}" for i in range(5))],
            "tgt_vocab": [*SPECIALS, *(f"t{i}" for i in range(6))],
            "specials": list(SPECIALS),
            "splits": {"train": {"src_max_length": 9, "tgt_max_length": 10}},
        }
        return manifest, {"train": PairBatches(split)}
    if kind == "lm":  # windows of 2 to seq_len + 1 tokens, as a document's last one
        tokens, offsets = ragged(rng, ITEMS, 2, SEQ_LEN + 1)
        split = Split(tokens, offsets, np.zeros(ITEMS, dtype=np.int64))
        return {"kind": "lm", "vocab": VOCAB}, {"train": split}
    tokens, offsets = ragged(rng, ITEMS, 3, 16)
    second = ragged(rng, ITEMS, 3, 16) if pairs else (None, None)
    split = Split(tokens, offsets, rng.integers(0, 3, ITEMS), *second)
    manifest = {"vocab": VOCAB, "num_classes": 3, "pairs": pairs}
    return manifest | {"splits": {"train": {"max_length": 16}}}, {"train": split}


def session(task: str, variant: str, include_pad: bool, micro: int) -> Session:
    """A tiny float64 run of the task's kind, seeded as the trainer seeds, dropout off."""
    params = load_params(ROOT / "params.yaml")
    run = resolve(params, task, variant, 0, "smoke")
    model = replace(run.model, dim=16, heads=2, layers=2, mlp_dim=32, dropout=0.0)
    model = replace(model, attention_dropout=0.0)
    # AdamW moves a weight by about lr x g / (|g| + eps): a rounding difference of a gradient
    # near 0 is scaled by up to lr / eps, so lr 1e-3 (a paper's order) rather than smoke's 1e-2
    train = replace(run.train, batch_size=BATCH, warmup_steps=2, epochs=1, lr=1e-3)
    train = replace(train, loss_includes_pad=include_pad, precision="fp32", seq_len=SEQ_LEN)
    run = replace(run, device="cpu", model=model, train=train)
    kind = task_kinds.declared(task).name
    manifest, data = data_of(kind, task == "retrieval")
    strategy = task_kinds.TASK_KINDS.get(kind).strategy()
    seed_everything(run.seed)
    cpu = torch.device("cpu")
    s = assemble(run, Path(os.devnull), cpu, manifest, strategy, data, STEPS)
    return executed(s, Execution(micro_batch=micro))


def trained(task: str, variant: str, include_pad: bool, micro: int) -> tuple[Session, list]:
    """The session after :data:`STEPS` optimizer steps over one epoch, and each step's
    (loss, correct, items)."""
    s = session(task, variant, include_pad, micro)
    s.model.train()
    order = np.random.default_rng(1).permutation(ITEMS)
    steps = []
    for start in range(0, ITEMS, BATCH):
        stepped = train_step(s, order[start : start + BATCH])
        assert stepped is not None
        steps.append((float(stepped.loss), int(stepped.correct), int(stepped.items)))
    assert len(steps) == STEPS and s.schedule.last_epoch == STEPS  # optimizer steps only
    return s, steps


def largest_difference(a: Session, b: Session) -> float:
    pa, pb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    assert pa.keys() == pb.keys()
    return max(float((pa[k] - pb[k]).detach().abs().max()) for k in pa)


@pytest.mark.parametrize(("task", "variant", "include_pad"), CASES)
def test_micro_batches_train_the_full_batch_s_parameters(task, variant, include_pad) -> None:
    full, full_steps = trained(task, variant, include_pad, 0)
    assert next(full.model.parameters()).dtype == torch.float64
    moved = largest_difference(full, session(task, variant, include_pad, 0))
    assert moved > 1e-4  # the steps did train
    for micro in (3, 1):  # 8 = 3 + 3 + 2 and the last window 4 = 3 + 1; one at a time
        accumulated, steps = trained(task, variant, include_pad, micro)
        assert largest_difference(full, accumulated) < 1e-12, micro
        for step, step_full in zip(steps, full_steps, strict=True):
            assert step[1:] == step_full[1:]  # correct predictions, items
            assert step[0] == pytest.approx(step_full[0], rel=1e-12)  # loss per item


@pytest.mark.parametrize(("task", "variant", "include_pad"), CASES)
def test_a_mean_of_micro_batch_means_fails_the_same_check(
    task, variant, include_pad, monkeypatch
) -> None:
    full, _ = trained(task, variant, include_pad, 0)
    monkeypatch.setattr(micro_batch, "weight", lambda items, window, parts: 1 / parts)
    wrong, _ = trained(task, variant, include_pad, 3)
    assert largest_difference(full, wrong) > 1e-6


def test_block_checkpointing_changes_no_gradient() -> None:
    """Recomputed blocks (dropout on: its RNG state is preserved) give the same step."""
    runs = []
    for on in (False, True):
        s = session("listops", "after_embedding", False, 0)
        for module in s.model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.3
        s = executed(s, Execution(checkpoint_blocks=on))
        s.model.train()
        torch.manual_seed(5)
        train_step(s, np.arange(BATCH))
        runs.append(s)
    assert any(getattr(m, "checkpointed", False) for m in runs[1].model.modules())
    assert largest_difference(*runs) < 1e-12


def test_the_micro_batch_is_not_part_of_a_run_s_identity() -> None:
    full = session("listops", "baseline", False, 0)
    small = session("listops", "baseline", False, 2)
    assert small.execution.accumulation_steps(BATCH) == 4
    assert identity(full.run.to_dict(), "h") == identity(small.run.to_dict(), "h")
    assert "micro_batch" not in full.run.to_json()
    assert Execution(3).record(BATCH) == {
        "micro_batch": 3,
        "checkpoint_blocks": False,
        "compile": "off",
        "accumulation_steps": 3,
        "processes": 1,
    }
    # two processes take 4 examples of each window of 8: micro-batches of 3 and 1 each
    assert Execution(3).record(BATCH, 2) == {
        "micro_batch": 3,
        "checkpoint_blocks": False,
        "compile": "off",
        "accumulation_steps": 2,
        "processes": 2,
    }
    with pytest.raises(ValueError, match="micro_batch"):
        Execution(-1)


def test_a_job_takes_the_plan_s_micro_batch_for_its_card(params, tmp_path: Path) -> None:
    run = resolve(params, "listops", "baseline", 0, "smoke")
    job = {"task": "listops", "variant": "baseline", "seed": 0, "batch": run.train.batch_size}
    job |= {"micro_batch": 16, "checkpoint_blocks": True}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"profile": "smoke", "card_gib": 24.0, "jobs": [job]}))
    assert planned(run, 24.0, path) == Execution(16, True)
    assert planned(run, None, path) == Execution(16, True)  # the card the plan was made on
    assert planned(run, 40.0, path) is None  # planned for another card
    assert planned(replace(run, seed=1), 24.0, path) is None  # a run the plan lacks
    assert planned(run, 24.0, tmp_path / "absent.json") is None
