"""A task's shapes at a run profile, known before its data exists: what the cost plan counts
and the rehearsal runs.

A training job's cost is fixed by its spec and by a few facts of its data: the vocabulary, the
classes, the longest sequence (batches are padded to their longest member) and the number of
training examples. Where the data is prepared (``data/<profile>/prepared/<task>``) these come
from its manifest. Where it is not (the paper profile before its first download), they come
from the data parameters in params.yaml and the task's format (the byte, pixel and ListOps
vocabularies are fixed by the format); the few numbers only the files know are named as
assumptions in :attr:`TaskShape.assumed`, so every plan line says what it rests on.

Every batch is taken at the longest length: a random batch of 32 or more nearly always holds
one sequence at the cap, so this is what a step costs, and what its memory peaks at.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pdelab.data.listops import NUM_CLASSES as LISTOPS_CLASSES
from pdelab.data.listops import VOCAB as LISTOPS_VOCAB
from pdelab.data.pairs import SPECIALS
from pdelab.data.store import BYTE_VOCAB, MANIFEST, PIXEL_VOCAB, RESERVED
from pdelab.spec import task_kinds
from pdelab.spec.config import RunSpec, data_dir
from pdelab.spec.data import data_spec
from pdelab.training import job
from pdelab.training.session import Session, assemble

# WikiText-103's training split, in words (Merity et al. 2016, Table 1); WordPiece cuts a word
# into about 1.3 pieces on English Wikipedia (an assumption until the data is prepared)
WIKITEXT103_TRAIN_WORDS = 103_227_021
WORDPIECES_PER_WORD = 1.3
# Multi30K task 1 (the training split at min_freq 1, the simple tokenizer of translation.py):
# sizes assumed until the data is prepared, as the manifest then records them
MULTI30K_ASSUMED = {"src_vocab": 10_000, "tgt_vocab": 18_000, "src_max": 42, "tgt_max": 46}


@dataclass(frozen=True)
class TaskShape:
    """What a model and a step of one task depend on in its data."""

    task: str
    kind: str  # classification | lm | translation
    vocab: tuple[str, ...]  # the token list (translation: the source side's)
    num_classes: int
    max_length: int  # longest example in tokens (translation: longest target)
    n_train: int  # training examples (lm: documents' tokens; see train_items)
    pairs: bool = False  # LRA's document pairs: two sequences per example
    tgt_vocab: tuple[str, ...] = ()  # translation only
    src_max_length: int = 0  # translation only
    source: str = "manifest"  # "manifest" (prepared data) or "params" (declared)
    assumed: tuple[str, ...] = field(default=())  # numbers only the files would give

    def manifest(self) -> dict[str, Any]:
        """The manifest keys the model builders read (pdelab.models.factory), at these shapes."""
        base: dict[str, Any] = {"task": self.task, "kind": self.kind}
        if self.kind == "translation":
            split = {"src_max_length": self.src_max_length, "tgt_max_length": self.max_length}
            return base | {
                "src_vocab": list(self.vocab),
                "tgt_vocab": list(self.tgt_vocab),
                "specials": list(SPECIALS),
                "num_classes": 0,
                "splits": {"train": split},
            }
        split = {"max_length": self.max_length, "examples": self.n_train}
        return base | {
            "vocab": list(self.vocab),
            "num_classes": self.num_classes,
            "pairs": self.pairs,
            "splits": {"train": split},
        }

    def train_items(self, run: RunSpec) -> int:
        """Training examples per epoch as the trainer batches them (lm: windows of seq_len)."""
        if self.kind == "lm":
            return math.ceil(self.n_train / run.train.seq_len)
        return self.n_train

    def sequence_length(self, run: RunSpec) -> int:
        """Tokens the model reads per sequence of a full batch (lm: a window)."""
        return run.train.seq_len if self.kind == "lm" else self.max_length

    def steps_per_epoch(self, run: RunSpec) -> int:
        return math.ceil(self.train_items(run) / run.train.batch_size)


def _placeholder_vocab(size: int, first: tuple[str, ...] = RESERVED) -> tuple[str, ...]:
    """A vocabulary of ``size`` tokens led by the reserved ones (a learned tokenizer's size is
    declared; which pieces it holds does not change a model's shapes)."""
    return (*first, *(f"<piece{i}>" for i in range(size - len(first))))


def from_manifest(task: str, manifest: dict[str, Any]) -> TaskShape:
    """A prepared task's shapes, from its manifest."""
    kind = manifest.get("kind") or "classification"
    splits = manifest["splits"]
    if kind == "translation":
        return TaskShape(
            task,
            kind,
            tuple(manifest["src_vocab"]),
            0,
            max(s["tgt_max_length"] for s in splits.values()),
            splits["train"]["examples"],
            tgt_vocab=tuple(manifest["tgt_vocab"]),
            src_max_length=max(s["src_max_length"] for s in splits.values()),
        )
    train = splits["train"]
    n_train = manifest["tokens"]["train"] if kind == "lm" else train["examples"]
    return TaskShape(
        task,
        kind,
        tuple(manifest["vocab"]),
        int(manifest.get("num_classes") or 0),
        max(s["max_length"] for s in splits.values()),
        int(n_train),
        pairs=bool(manifest.get("pairs")),
    )


def declared(params: dict[str, Any], profile: str, task: str) -> TaskShape:
    """A task's shapes from its data parameters and format, before its data exists."""
    spec = data_spec(params, profile, task)
    text_classes = {"imdb_wordpiece": 2, "ag_news": 4, "sst2": 2}
    if task == "listops":
        return TaskShape(
            task,
            "classification",
            LISTOPS_VOCAB,
            LISTOPS_CLASSES,
            spec.max_length,
            spec.n_train,
            source="params",
        )
    if task in ("imdb_bytes_lra", "imdb_bytes", "retrieval"):
        return TaskShape(
            task,
            "classification",
            BYTE_VOCAB,
            2,
            spec.max_length,
            spec.n_train,
            pairs=task == "retrieval",
            source="params",
        )
    if task in ("image", "fashion_mnist32"):  # 32 x 32 pixels, one token each
        return TaskShape(
            task, "classification", PIXEL_VOCAB, 10, 32 * 32, spec.n_train, source="params"
        )
    if task == "pathfinder":
        side = 32 if spec.difficulty.startswith("curv") else int(spec.difficulty[5:7])
        n_train = round(spec.n * (1 - spec.val_fraction - spec.test_fraction))
        return TaskShape(
            task, "classification", PIXEL_VOCAB, 2, side * side, n_train, source="params"
        )
    if task in text_classes:
        return TaskShape(
            task,
            "classification",
            _placeholder_vocab(spec.vocab_size),
            text_classes[task],
            spec.max_length,
            spec.n_train,
            source="params",
        )
    if task == "wikitext":
        pieces = WIKITEXT103_TRAIN_WORDS * WORDPIECES_PER_WORD * spec.train_fraction
        return TaskShape(
            task,
            "lm",
            _placeholder_vocab(spec.vocab_size),
            0,
            0,
            int(pieces),
            source="params",
            assumed=(f"{WORDPIECES_PER_WORD} WordPiece pieces per WikiText-103 word",),
        )
    if task == "multi30k":
        a = MULTI30K_ASSUMED
        return TaskShape(
            task,
            "translation",
            _placeholder_vocab(a["src_vocab"], SPECIALS),
            0,
            a["tgt_max"],
            spec.n_train,
            tgt_vocab=_placeholder_vocab(a["tgt_vocab"], SPECIALS),
            src_max_length=a["src_max"],
            source="params",
            assumed=(
                f"Multi30K vocabularies of {a['src_vocab']:,} (en) and {a['tgt_vocab']:,} "
                f"(de) tokens, sentences of at most {a['src_max']} and {a['tgt_max']}",
            ),
        )
    raise ValueError(f"task {task!r}: no declared shapes; prepare its data first")


def task_shape(params: dict[str, Any], profile: str, task: str) -> TaskShape:
    """The prepared manifest's shapes where the data exists, else the declared ones."""
    path = Path(data_dir(profile, task)) / MANIFEST
    if path.exists():
        return from_manifest(task, json.loads(path.read_text()))
    return declared(params, profile, task)


def synthetic_batch(
    shape: TaskShape, run: RunSpec, batch_size: int, seed: int = 0
) -> tuple[dict[str, Tensor], Tensor]:
    """(inputs, labels) of one batch in the trainer's format, every sequence at the longest
    length, tokens drawn uniformly from the non-reserved vocabulary."""
    rng = np.random.default_rng(seed)

    def ids(length: int, vocab: int, first: int = len(RESERVED)) -> Tensor:
        return torch.from_numpy(rng.integers(first, vocab, (batch_size, length)))

    if shape.kind == "translation":
        specials = len(SPECIALS)
        tgt = ids(shape.max_length, len(shape.tgt_vocab), specials)
        src = ids(shape.src_max_length, len(shape.vocab), specials)
        inputs = {"src": src, "src_mask": torch.ones_like(src, dtype=torch.bool)}
        return inputs | {"tgt": tgt[:, :-1]}, tgt[:, 1:]
    if shape.kind == "lm":
        return {"ids": ids(run.train.seq_len + 1, len(shape.vocab))}, torch.zeros(batch_size)
    tokens = ids(shape.max_length, len(shape.vocab))
    inputs = {"ids": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool)}
    if shape.pairs:
        second = ids(shape.max_length, len(shape.vocab))
        inputs |= {"ids2": second, "mask2": torch.ones_like(second, dtype=torch.bool)}
    labels = torch.from_numpy(rng.integers(0, shape.num_classes, batch_size))
    return inputs, labels


class SyntheticSplit:
    """A training split of synthetic batches (pdelab.training.strategy.Batches): the batch
    of items ``i * b`` to ``(i + 1) * b - 1`` is :func:`synthetic_batch` with seed ``i``, so
    each step sees new tokens and labels."""

    def __init__(self, shape: TaskShape, run: RunSpec, batch_size: int, steps: int) -> None:
        self.shape, self.run, self.batch_size, self.steps = shape, run, batch_size, steps

    def __len__(self) -> int:
        return self.batch_size * self.steps

    def lengths(self) -> np.ndarray:
        return np.full(len(self), self.shape.sequence_length(self.run))

    def batch(self, index: np.ndarray) -> dict[str, np.ndarray]:
        seed = int(index[0]) // self.batch_size
        inputs, labels = synthetic_batch(self.shape, self.run, len(index), seed)
        return {k: v.numpy() for k, v in inputs.items()} | {"labels": labels.numpy()}


def synthetic_session(
    run: RunSpec,
    shape: TaskShape,
    batch_size: int,
    steps: int,
    device: torch.device,
    steps_per_epoch: int,
) -> Session:
    """The trainer's session (pdelab.training.session.assemble, seeded as the trainer seeds)
    on ``steps`` synthetic batches of ``batch_size``, its schedule that of ``steps_per_epoch``:
    for pdelab.training.train.train_step without the data."""
    manifest = shape.manifest()
    strategy = task_kinds.of_data(run.task, manifest).strategy()
    data = {"train": SyntheticSplit(shape, run, batch_size, steps)}
    job.seed_everything(run.seed)
    return assemble(run, Path(os.devnull), device, manifest, strategy, data, steps_per_epoch)
