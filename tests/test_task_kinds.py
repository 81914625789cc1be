"""Task kinds: each registered one refuses the options it cannot train with (naming the key,
before any job starts), declares its history columns, and builds a model for a tiny manifest;
the data's declaration and the prepared manifest must agree; the resumable state round-trips
through a checkpoint's plain dict."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from dataclasses import asdict, replace
from typing import Any

import pytest
import torch

from pdelab.data.translation import SPECIALS
from pdelab.models.factory import build_model
from pdelab.spec import task_kinds
from pdelab.spec.config import ConfigError, resolve
from pdelab.spec.data import TASK_DATA
from pdelab.spec.task_kinds import TASK_KINDS
from pdelab.training.session import RunState
from pdelab.training.strategy import HISTORY_COLUMNS

KINDS = TASK_KINDS.names()
# per task kind: (section, key, value) of an option it refuses
REFUSED = {
    "classification": ("train", "loss_includes_pad", True),
    "lm": ("model", "patch", 2),
    "translation": ("diffusion", "sites", ["after_mlp"]),
}
VOCAB = ["<pad>", "<cls>", *(f"w{i}" for i in range(10))]
# a tiny prepared manifest per task kind (what pdelab.data's prepare writes, cut to the keys
# the models read)
MANIFESTS: dict[str, dict[str, Any]] = {
    "classification": {"vocab": VOCAB, "num_classes": 3, "splits": {"train": {"max_length": 9}}},
    "lm": {"kind": "lm", "vocab": VOCAB},
    "translation": {
        "kind": "translation",
        "src_vocab": [*SPECIALS, "a", "b"],
        "tgt_vocab": [*SPECIALS, "x", "y", "z"],
        "specials": list(SPECIALS),
        "splits": {"train": {"src_max_length": 6, "tgt_max_length": 7}},
    },
}


def task_of(kind: str, params: dict) -> str:
    """A task of params.yaml whose data declares this task kind."""
    return next(t for t in params["tasks"] if task_kinds.declared(t).name == kind)


def tiny(run):
    return replace(run, model=replace(run.model, dim=16, heads=2, layers=1, mlp_dim=32))


def test_every_declared_task_kind_is_registered() -> None:
    assert set(REFUSED) == set(KINDS) == set(MANIFESTS)
    for task in TASK_DATA:
        assert task_kinds.declared(task).name in TASK_KINDS, task
    assert task_kinds.declared("wikitext").name == "lm"
    assert task_kinds.declared("multi30k").name == "translation"
    assert task_kinds.declared("listops").name == "classification"


@pytest.mark.parametrize("kind", KINDS)
def test_the_check_refuses_an_option_naming_its_key(params, kind: str) -> None:
    section, key, value = REFUSED[kind]
    task = task_of(kind, params)
    edited = copy.deepcopy(params)
    edited["variants"]["baseline"] = {section: {key: value}}
    run = resolve(edited, task, "baseline", 0, "smoke")  # the spec itself is valid
    task_kinds.check(resolve(params, task, "baseline", 0, "smoke"))  # the task's own passes
    with pytest.raises(ConfigError, match=rf"{task}: {section}\.{key}\b"):
        task_kinds.check(run)
    where = f"variants.baseline.{section}.{key}"  # the layer that set it, when known
    with pytest.raises(ConfigError, match=rf"{task}: {where}\b"):
        task_kinds.check(run, {f"{section}.{key}": where})


def test_every_option_translation_refuses(params) -> None:
    run = resolve(params, "multi30k", "baseline", 0, "smoke")
    refused = {
        "model.smoothing": replace(run, model=replace(run.model, smoothing={"pde": "diffusion"})),
        "model.patch": replace(run, model=replace(run.model, patch=2)),
        "model.block": replace(run, model=replace(run.model, block="another")),
    }
    for key, spec in refused.items():
        with pytest.raises(ConfigError, match=rf"{key} = .* does not apply to the encoder"):
            task_kinds.check(spec)


def test_a_language_model_needs_a_window(params) -> None:
    run = resolve(params, "wikitext", "baseline", 0, "smoke")
    assert run.train.seq_len >= 1
    with pytest.raises(ConfigError, match=r"train\.seq_len = 0: a language-modelling task"):
        task_kinds.check(replace(run, train=replace(run.train, seq_len=0)))


@pytest.mark.parametrize("kind", KINDS)
def test_history_columns(kind: str) -> None:
    """Every task kind's metrics.parquet starts with the common columns, and each epoch's
    values of its own columns come from its validation."""
    strategy = TASK_KINDS.get(kind).strategy()
    columns = strategy.history_columns
    assert columns[: len(HISTORY_COLUMNS)] == HISTORY_COLUMNS
    assert len(set(columns)) == len(columns)
    val = {"loss": 1.0, "acc": 0.5, "ppl": math.e, "tf_bleu": 12.0}
    assert tuple(strategy.history_extras(val)) == columns[len(HISTORY_COLUMNS) :]
    assert set(strategy.result_columns).isdisjoint(columns[: len(HISTORY_COLUMNS)])


def test_translation_adds_its_bleu_columns() -> None:
    strategy = TASK_KINDS.get("translation").strategy()
    assert strategy.history_columns == (*HISTORY_COLUMNS, "val_tf_bleu")
    assert "test_bleu" in strategy.result_columns
    assert TASK_KINDS.get("classification").strategy().history_columns == HISTORY_COLUMNS


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_builds_for_a_tiny_manifest(params, kind: str) -> None:
    run = tiny(resolve(params, task_of(kind, params), "baseline", 0, "smoke"))
    torch.manual_seed(0)
    model = build_model(run, MANIFESTS[kind])
    assert isinstance(model, torch.nn.Module)
    assert sum(p.numel() for p in model.parameters()) > 0
    section, key, value = REFUSED[kind]  # refused at job start too, for a hand-made spec
    bad = replace(run, **{section: replace(getattr(run, section), **{key: value})})
    with pytest.raises(ConfigError, match=rf"{section}\.{key}"):
        build_model(bad, MANIFESTS[kind])


def test_the_manifest_must_agree_with_the_declaration(params) -> None:
    run = tiny(resolve(params, "wikitext", "baseline", 0, "smoke"))
    with pytest.raises(
        ValueError, match="manifest says task kind 'translation'.*a task of kind 'lm'"
    ):
        build_model(run, MANIFESTS["translation"])
    with pytest.raises(ValueError, match="manifest says task kind 'classification'"):
        task_kinds.of_data("wikitext", {"vocab": VOCAB})  # no kind: labelled examples
    assert task_kinds.of_data("multi30k", MANIFESTS["translation"]).name == "translation"


def test_the_checks_import_no_torch() -> None:
    """params.yaml is validated when the Snakefile is parsed: checking a run imports no torch."""
    code = (
        "import sys; from pdelab.spec import task_kinds; "
        "from pdelab.spec.config import load_params, resolve; "
        "task_kinds.check(resolve(load_params(), 'multi30k', 'baseline', 0, 'smoke')); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_state_round_trips_through_a_checkpoint_dict() -> None:
    state = RunState(epoch=2, history=[{"epoch": 1.0}], best_val=-0.5, best_epoch=1)
    state.partial = {"step": 3, "loss_sum": 1.5, "correct": 2, "seen": 9}
    saved = asdict(state)
    assert list(saved) == [
        "epoch",
        "history",
        "best_val",
        "best_epoch",
        "bad_epochs",
        "step_times",
        "status",
        "run_id",
        "start_ms",
        "epoch_end_ms",
        "partial",
    ]  # the keys checkpoints have always held, in their order
    assert RunState.from_checkpoint(saved) == state
    older = {k: v for k, v in saved.items() if k != "partial"}  # before mid-epoch stops
    assert RunState.from_checkpoint(older).partial is None
