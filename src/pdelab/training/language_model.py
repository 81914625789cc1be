"""Causal language modelling (task kind "lm"): training windows, the loss over real tokens,
perplexity, and the leak check every result carries.

Documents are stored whole (pdelab.data.wikitext); :func:`windows` cuts each into windows of
``seq_len + 1`` tokens that overlap by one, so every token but a document's first is predicted
exactly once per epoch. A document's last window is shorter; batches pad it with PAD_ID, and
:func:`next_token_loss` ignores padded targets, so padding never enters the loss or the
perplexity. :func:`check_causality` runs pdelab.training.causality's perturbation probe on a trained
model, so every language-modelling result carries a verdict on whether it read the future;
:func:`causality_columns` gives that verdict as result.parquet stores it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.data.store import PAD_ID, Split
from pdelab.models.factory import encoder_options
from pdelab.models.transformer import LanguageModel
from pdelab.spec.config import RunSpec
from pdelab.training.causality import CausalityReport, probe_causality, verdict
from pdelab.training.strategy import Batches, Loss, Strategy, Trained, load_splits, widened


def windows(split: Split, seq_len: int) -> Split:
    """Every document of ``split`` as windows of at most ``seq_len + 1`` tokens."""
    if seq_len < 1:
        raise ValueError(
            f"train.seq_len = {seq_len}: a language-modelling task needs train.seq_len >= 1 "
            "(tokens per training window); set it in params.yaml"
        )
    pieces: list[np.ndarray] = []
    for doc in range(len(split)):
        start, end = int(split.offsets[doc]), int(split.offsets[doc + 1])
        pieces += [np.arange(s, min(s + seq_len + 1, end)) for s in range(start, end - 1, seq_len)]
    index = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    return Split(
        tokens=np.asarray(split.tokens)[index],
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        labels=np.zeros(len(pieces), dtype=np.int64),
    )


def next_token_loss(model: nn.Module, ids: Tensor) -> Loss:
    """(mean negative log-likelihood per real target token, correct predictions, real targets)
    of a padded batch of windows ids (B, L): inputs ids[:, :-1], targets ids[:, 1:]."""
    inputs, targets = ids[:, :-1], ids[:, 1:]
    logits = widened(model(inputs, inputs != PAD_ID))
    real = targets != PAD_ID
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)
    correct = ((logits.argmax(-1) == targets) & real).sum()
    return loss, correct, real.sum()  # on the device: read once per log interval


def probe_positions(t: int, n: int = 8) -> list[int]:
    """``n`` positions spread over [0, t - 2], both ends included."""
    return sorted({int(round(p)) for p in np.linspace(0, t - 2, n)})


@torch.no_grad()
def check_causality(
    model: nn.Module, split: Batches, vocab_size: int, n_sequences: int = 2, tol: float = 1e-9
) -> CausalityReport:
    """Perturb every token after t and compare the logits at positions <= t.

    Runs on a float64 CPU copy in eval mode, on the first ``n_sequences`` windows of ``split``
    at their longest length without padding, so a causal model moves by exactly zero (up to
    rounding far below ``tol``) and any leak of the mechanism shows.
    """
    probe_model = copy.deepcopy(model).to("cpu", torch.float64).eval()
    lengths = split.lengths()
    longest = int(lengths.max())
    index = np.flatnonzero(lengths == longest)[:n_sequences]
    ids = torch.from_numpy(split.batch(index)["ids"])[:, :-1]  # the model's inputs
    return probe_causality(
        lambda x: probe_model(x, None),
        ids,
        positions=probe_positions(ids.shape[1]),
        tol=tol,
        vocab_size=vocab_size,
    )


def causality_columns(model: nn.Module, split: Batches, vocab_size: int) -> dict[str, Any]:
    """result.parquet's probe columns: the verdict's word (a plain string, so the Parquet file
    holds exactly the words :class:`Causality` defines) and the largest leak measured."""
    report = check_causality(model, split, vocab_size)
    return {"causality": verdict(report).value, "max_leak": report.max_leak}


class LanguageModelling(Strategy):
    """Next-token prediction over windows of documents; the best epoch has the lowest
    validation loss, and the test adds the causality probe."""

    def load_data(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, Batches]:
        """Each split's documents as windows of train.seq_len + 1 tokens."""
        splits = load_splits(run, manifest)
        return {s: windows(split, run.train.seq_len) for s, split in splits.items()}

    def build_model(self, run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
        """A causal language model over windows of train.seq_len tokens."""
        return LanguageModel(max_len=run.train.seq_len, **encoder_options(run, manifest))

    def loss(
        self, model: nn.Module, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool
    ) -> Loss:
        """:func:`next_token_loss` (the labels of windows are placeholders)."""
        return next_token_loss(model, inputs["ids"])

    def token_caps(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, int]:
        """A window of train.seq_len + 1 tokens."""
        return {"ids": run.train.seq_len + 1}

    def loss_items(self, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool) -> int:
        """The real (non-padding) target tokens."""
        return int((inputs["ids"][:, 1:] != PAD_ID).sum().item())

    def evaluate(
        self,
        model: nn.Module,
        split: Batches,
        batch_size: int,
        device: torch.device,
        manifest: dict[str, Any],
    ) -> dict[str, float]:
        """Loss and accuracy per real target token, and perplexity."""
        out = super().evaluate(model, split, batch_size, device, manifest)
        out["ppl"] = math.exp(out["loss"])
        return out

    def test_metrics(self, s: Trained, test: dict[str, Any]) -> dict[str, Any]:
        """The causality probe's columns, so a leaky model's perplexity is flagged."""
        return test | causality_columns(s.model, s.data["test"], len(s.manifest["vocab"]))


STRATEGY = LanguageModelling()
