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

from pdelab.config import ModelSpec, RunSpec
from pdelab.data.store import PIXEL_VOCAB
from pdelab.models.seq2seq import DECODE_MARGIN, Seq2Seq
from pdelab.models.transformer import Classifier, LanguageModel, PairClassifier
from pdelab.papers import import_mechanisms

TASK_KINDS = ("classification", "lm", "translation")


def is_language_model(manifest: dict[str, Any]) -> bool:
    """Language-model data (documents, next-token targets) rather than labelled examples."""
    return manifest.get("kind") == "lm"


def is_translation(manifest: dict[str, Any]) -> bool:
    """Sentence pairs (source and target vocabularies) for an encoder-decoder."""
    return manifest.get("kind") == "translation"


def task_kind(manifest: dict[str, Any]) -> str:
    """The task's kind, "lm", "translation" or "classification": what the trainer optimises
    and records."""
    kind = manifest.get("kind", "classification")
    if kind not in TASK_KINDS:
        raise ValueError(f"manifest kind {kind!r} is not one of {TASK_KINDS}")
    return kind


def build_translation(run: RunSpec, manifest: dict[str, Any]) -> Seq2Seq:
    """The encoder-decoder for a translation manifest; the mechanisms that act along the token
    axis of one sequence (diffusion sites, smoothing, another encoder block) and image patches
    are refused: in the decoder a two-sided stencil would read later target tokens."""
    m = run.model
    unused = {
        "diffusion.sites": list(run.diffusion.sites),
        "model.smoothing": m.smoothing,
        "model.patch": m.patch,
        "model.block": "" if m.block == "transformer" else m.block,
    }
    for key, value in unused.items():
        if value:
            raise ValueError(
                f"{run.task}: {key} = {value!r} does not apply to the encoder-decoder of a "
                "translation task; leave it unset for this task"
            )
    splits = manifest["splits"].values()
    src_max = max(s["src_max_length"] for s in splits)
    tgt_max = max(max(s["tgt_max_length"] for s in splits), src_max + DECODE_MARGIN + 1)
    specials = manifest["specials"]
    return Seq2Seq(
        src_vocab_size=len(manifest["src_vocab"]),
        tgt_vocab_size=len(manifest["tgt_vocab"]),
        src_max_len=src_max,
        tgt_max_len=tgt_max,
        bos_id=specials.index("<bos>"),
        eos_id=specials.index("<eos>"),
        **layer_options(m),
    )


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


def build_model(run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
    """A causal language model, an encoder-decoder for translation, a classifier, or LRA's
    two-tower model for document pairs.

    The vocabulary, classes and longest sequence come from the prepared data's manifest, so
    the model always fits the data it is trained on.
    """
    import_mechanisms()  # paper kernels register themselves on import
    if is_translation(manifest):
        return build_translation(run, manifest)
    m = run.model
    common = dict(
        vocab_size=len(manifest["vocab"]),
        **layer_options(m),
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


__all__ = ["build_model", "is_language_model", "is_translation", "task_kind"]
