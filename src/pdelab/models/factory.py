"""The network a run trains, chosen by its data: one place that maps (RunSpec, manifest) to a model.

The trainer, the tests and the diagnostics all build models here, so a run's spec means the
same network everywhere. The prepared data's task kind (pdelab.spec.task_kinds) picks the network:
each task kind's strategy builds its own from the settings below. Attention kernels and encoder
blocks are looked up by name; papers register theirs when their mechanism modules are
imported, which :func:`build_model` does first for the modules the run's spec names (and no
other: a run's code digest, pdelab.records.provenance, holds what its job executes), so a spec may
name any paper's kernel or block without the caller importing that paper.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from torch import nn

from pdelab.data.store import PIXEL_VOCAB
from pdelab.records import provenance
from pdelab.spec import task_kinds
from pdelab.spec.config import ModelSpec, RunSpec
from pdelab.spec.plugins import load_all


def layer_options(m: ModelSpec) -> dict[str, Any]:
    """The settings every layer stack takes (encoder, decoder) from a run's model spec."""
    return dict(
        dim=m.dim,
        layers=m.layers,
        heads=m.heads,
        mlp_dim=m.mlp_dim,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        norm=m.norm,
        attention=m.attention,
        attention_options=m.attention_options,
    )


def check_patches(run: RunSpec, manifest: dict[str, Any], length: int) -> None:
    """model.patch needs square images of pixel tokens whose side the patch divides."""
    side = math.isqrt(length)
    if manifest["vocab"] != list(PIXEL_VOCAB) or side * side != length or side % run.model.patch:
        raise ValueError(
            f"task {run.task}: model.patch = {run.model.patch} needs square images of pixel "
            f"tokens whose side it divides (the image tasks); this task has "
            f"{len(manifest['vocab'])} token types and sequences of {length}. Set model.patch: 0"
        )


def unpadded(manifest: dict[str, Any]) -> bool:
    """Whether every sequence of the task fills its length by the data's format: images of
    pixel tokens (each a square of side**2 pixels, never padded). Read from the manifest, so
    a model knows it when built and never asks a batch (a host sync in every step)."""
    return manifest.get("vocab") == list(PIXEL_VOCAB)


def encoder_options(run: RunSpec, manifest: dict[str, Any]) -> dict[str, Any]:
    """The settings of a one-sequence encoder (a classifier's, a language model's): the
    vocabulary, the layers, the mechanisms that act along its tokens, and whether its batches
    are never padded (:func:`unpadded`)."""
    m = run.model
    return dict(
        vocab_size=len(manifest["vocab"]),
        **layer_options(m),
        smoothing=m.smoothing,
        diffusion=run.diffusion,
        patch=m.patch,
        block=m.block,
        block_options=m.block_options,
        unpadded=unpadded(manifest),
    )


def build_model(run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
    """The network of the data's task kind: a classifier (LRA's two-tower model for document
    pairs), a causal language model, or an encoder-decoder for translation.

    The vocabulary, classes and longest sequence come from the prepared data's manifest, so
    the model always fits the data it is trained on. The task kind's option check runs here
    too, for a spec that did not come through pdelab.spec.config.resolve.
    """
    load_all()  # every paper's options (torch-free), for the check
    task_kind = task_kinds.of_data(run.task, manifest)
    task_kind.check(run, {})
    for module in provenance.mechanism_modules(run):  # only what this run's code digest holds
        importlib.import_module(module)  # a paper's kernel or block registers itself on import
    return task_kind.strategy().build_model(run, manifest)


__all__ = ["build_model", "check_patches", "encoder_options", "layer_options", "unpadded"]
