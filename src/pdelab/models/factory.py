"""The network a run trains, chosen by its data: one place that maps (RunSpec, manifest) to a model.

The trainer, the tests and the diagnostics all build models here, so a run's spec means the
same network everywhere. Attention kernels and encoder blocks are looked up by name; papers
register theirs when their mechanism modules are imported, which :func:`build_model` does
first, so a spec may name any paper's kernel or block without the caller importing that paper.
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from pdelab.config import RunSpec
from pdelab.models.transformer import Classifier, LanguageModel, PairClassifier
from pdelab.papers import import_mechanisms


def is_language_model(manifest: dict[str, Any]) -> bool:
    """Language-model data (documents, next-token targets) rather than labelled examples."""
    return manifest.get("kind") == "lm"


def check_patches(run: RunSpec, manifest: dict[str, Any], length: int) -> None:
    """model.patch needs square images of pixel tokens whose side the patch divides."""
    pixel_vocab = ["<pad>", "<cls>", *(str(v) for v in range(256))]
    side = math.isqrt(length)
    if manifest["vocab"] != pixel_vocab or side * side != length or side % run.model.patch:
        raise ValueError(
            f"task {run.task}: model.patch = {run.model.patch} needs square images of pixel "
            f"tokens whose side it divides (the image tasks); this task has "
            f"{len(manifest['vocab'])} token types and sequences of {length}. Set model.patch: 0"
        )


def build_model(run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
    """A causal language model, a classifier, or LRA's two-tower model for document pairs.

    The vocabulary, classes and longest sequence come from the prepared data's manifest, so
    the model always fits the data it is trained on.
    """
    import_mechanisms()  # paper kernels register themselves on import
    m = run.model
    common = dict(
        vocab_size=len(manifest["vocab"]),
        dim=m.dim,
        layers=m.layers,
        heads=m.heads,
        mlp_dim=m.mlp_dim,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        norm=m.norm,
        attention=m.attention,
        attention_options=m.attention_options,
        smoothing=m.smoothing,
        diffusion=run.diffusion,
        patch=m.patch,
        block=m.block,
        block_options=m.block_options,
    )
    if is_language_model(manifest):
        if m.patch:
            raise ValueError(f"{run.task}: model.patch applies to images, not language models")
        return LanguageModel(max_len=run.train.seq_len, **common)
    max_len = max(s["max_length"] for s in manifest["splits"].values())
    if m.patch:
        check_patches(run, manifest, max_len)
        max_len //= m.patch**2
    model = PairClassifier if manifest.get("pairs") else Classifier
    return model(
        manifest["num_classes"],
        pooling=m.pooling,
        max_len=max_len + (m.pooling == "cls"),
        **common,
    )


__all__ = ["build_model", "is_language_model"]
