"""Translation: sentence-pair batches, the encoder-decoder, the teacher-forced loss, and the BLEU
a run records.

:class:`PairBatches` serves the padded arrays of pdelab.data.translation through the trainer's
split interface (``len``, ``lengths``, ``batch``): the model reads the source, its mask and the
target less its last token, and the labels are the target less its <bos>.

Loss: cross-entropy of each next target token over the real target tokens. With
``include_pad`` (``train.loss_includes_pad``) the <pad> targets after <eos> are scored too, as
a ``CrossEntropyLoss()`` without ``ignore_index`` does; the model then also learns to predict
padding after the sentence. Validation and test losses are always per real target token, so
their perplexity means the same whichever loss trained the model.

What a run records (BLEU x 100, on the tokenizer's lowercased tokens; pdelab.training.bleu):

* :func:`teacher_forced_bleu`, a metric published translation tables have used (computed in
  an official training script's validation): at every target position the argmax of the
  teacher-forced logits, over the batch's padded length (so whatever the model predicts where
  the target is padding counts), tokens containing "<" dropped from prediction and target
  (that script's special-token filter, which also drops a literal "<"), NLTK's sentence BLEU
  per sentence, 0 for a sentence left empty. That script averages per-batch means, which
  weighs its last, smaller batch more; ours is the mean over sentences, in batches of the
  run's size in split order (so the padding is as there);
* :func:`greedy_bleu`: corpus BLEU of greedy decoding against the references, an unknown
  reference word matching nothing (pdelab.training.bleu.UNMATCHABLE);
* the copy-the-source baseline (pdelab.training.bleu.copy_source_bleu) on the same split;
* :func:`decoder_causality`: pdelab.training.causality's probe on the decoder, source fixed, so a
  mechanism that lets a target position read a later one is flagged, as for language models.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.data.pairs import PAD_ID, PairSplit, load_pairs
from pdelab.data.store import SPLITS
from pdelab.models.attention import runs_as_cuda
from pdelab.models.factory import layer_options
from pdelab.models.seq2seq import DECODE_MARGIN, Seq2Seq, greedy
from pdelab.spec.config import RunSpec
from pdelab.training.bleu import as_reference, copy_source_bleu, corpus_bleu, decode, sentence_bleu
from pdelab.training.causality import probe_causality, verdict
from pdelab.training.language_model import probe_positions
from pdelab.training.strategy import (
    HISTORY_COLUMNS,
    Batches,
    Loss,
    Strategy,
    Trained,
    batches,
    widened,
)

# result.parquet's columns of a translation run (BLEU x 100), after the common ones
RESULT_COLUMNS = ("val_tf_bleu", "test_tf_bleu", "test_bleu", "test_copy_bleu")
# metrics.parquet adds the teacher-forced mean sentence BLEU x 100
TRANSLATION_HISTORY_COLUMNS = (*HISTORY_COLUMNS, "val_tf_bleu")


class PairBatches:
    """One split of sentence pairs as the trainer batches it."""

    def __init__(self, pairs: PairSplit) -> None:
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def lengths(self) -> np.ndarray:
        """The longer side of each pair (for batches of similar length)."""
        return np.maximum(self.pairs.src_lengths, self.pairs.tgt_lengths)

    def batch(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """src (B, S) int64 and src_mask, tgt (B, T-1) the decoder's input and labels (B, T-1)
        its next tokens, each cut to the batch's longest sentence."""
        p = self.pairs
        src = np.asarray(p.src[index], dtype=np.int64)[:, : int(p.src_lengths[index].max())]
        tgt = np.asarray(p.tgt[index], dtype=np.int64)[:, : int(p.tgt_lengths[index].max())]
        return {"src": src, "src_mask": src != PAD_ID, "tgt": tgt[:, :-1], "labels": tgt[:, 1:]}


def on_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, Tensor]:
    return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}


def token_loss(logits: Tensor, labels: Tensor, include_pad: bool) -> Loss:
    """(mean cross-entropy, correct, real targets): the mean over real target tokens, or over
    every position with ``include_pad``; correct predictions count real targets only. The
    counts stay on the device (no host sync in a step)."""
    real = labels != PAD_ID
    ignore = -100 if include_pad else PAD_ID  # -100: no label is ignored
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=ignore)
    correct = ((logits.argmax(-1) == labels) & real).sum()
    return loss, correct, real.sum()


def translation_loss(
    model: nn.Module, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool = False
) -> Loss:
    """:func:`token_loss` of the teacher-forced logits of one batch. Without padding in the
    loss, the head (vocabulary-sized, the step's largest layer) runs at the real target
    positions only, about a third of a batch padded to its longest sentence: the same loss
    and gradients as :func:`token_loss` of every position's logits (the reference; a test
    holds them equal)."""
    on_host = not torch.compiler.is_compiling() and not runs_as_cuda(labels)
    if include_pad or not on_host:
        # every position's logits: picking the real ones is a host sync on a GPU (their
        # count decides the shape) and a graph break when compiled
        return token_loss(widened(model(**inputs)), labels, include_pad)
    real = labels != PAD_ID
    logits = widened(model.head(model.decoder_states(**inputs)[real]))  # (real tokens, V)
    return token_loss(logits[None], labels[real][None], include_pad=False)


def official_tokens(ids: Sequence[int], vocab: Sequence[str]) -> list[str]:
    """Every position's token but those containing "<" (the official code's filter)."""
    return [t for t in (vocab[int(i)] for i in ids) if "<" not in t]


def teacher_forced_bleu(
    predictions: np.ndarray, labels: np.ndarray, vocab: Sequence[str]
) -> list[float]:
    """Per sentence (rows of (B, T) argmax predictions and labels), NLTK's sentence BLEU of
    the filtered predicted tokens against the filtered target, 0 when either is empty."""
    scores = []
    for predicted, target in zip(predictions, labels, strict=True):
        hyp, ref = official_tokens(predicted, vocab), official_tokens(target, vocab)
        scores.append(sentence_bleu(hyp, [ref]) if hyp and ref else 0.0)
    return scores


@torch.no_grad()
def evaluate(
    model: nn.Module,
    split: PairBatches,
    batch_size: int,
    device: torch.device,
    vocab: Sequence[str],
) -> dict[str, float]:
    """Teacher-forced loss, token accuracy and perplexity per real target token, and the mean
    teacher-forced sentence BLEU x 100 (:func:`teacher_forced_bleu`), in one pass."""
    model.eval()
    loss_sum, correct, items, bleu = 0.0, 0, 0, []
    for index in batches(len(split), batch_size):
        inputs = on_device(split.batch(index), device)
        labels = inputs.pop("labels")
        logits = model(**inputs).float()
        loss, right, n = token_loss(logits, labels, include_pad=False)
        loss_sum, correct, items = (
            loss_sum + loss.item() * int(n),
            correct + int(right),
            items + int(n),
        )
        bleu += teacher_forced_bleu(logits.argmax(-1).cpu().numpy(), labels.cpu().numpy(), vocab)
    mean = loss_sum / items
    return {
        "loss": mean,
        "acc": correct / items,
        "ppl": math.exp(mean) if math.isfinite(mean) else math.nan,
        "tf_bleu": 100 * float(np.mean(bleu)),
    }


@torch.no_grad()
def translate(
    model: nn.Module, split: PairBatches, batch_size: int, device: torch.device
) -> list[np.ndarray]:
    """Greedy translations of every source sentence (target ids, <eos>-terminated), decoded
    in batches of similar source length."""
    model.eval()
    order = np.argsort(split.pairs.src_lengths, kind="stable")
    out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(split)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = on_device(split.batch(index), device)
        decoded = greedy(model, batch["src"], batch["src_mask"]).cpu().numpy()
        for i, row in zip(index, decoded, strict=True):
            out[i] = row
    return out


def greedy_bleu(
    model: nn.Module,
    split: PairBatches,
    batch_size: int,
    device: torch.device,
    vocab: Sequence[str],
) -> float:
    """Corpus BLEU x 100 of greedy decoding against the split's references."""
    hypotheses = [decode(row, vocab) for row in translate(model, split, batch_size, device)]
    references = [[as_reference(decode(row, vocab))] for row in split.pairs.tgt]
    return 100 * corpus_bleu(hypotheses, references)


def copy_baseline(split: PairBatches, manifest: dict[str, Any]) -> float:
    """The split's copy-the-source corpus BLEU x 100."""
    p = split.pairs
    return copy_source_bleu(p.src, p.tgt, manifest["src_vocab"], manifest["tgt_vocab"])


@torch.no_grad()
def decoder_causality(
    model: nn.Module, split: PairBatches, vocab_size: int, n_sentences: int = 2, tol: float = 1e-9
) -> dict[str, Any]:
    """result.parquet's probe columns for the decoder: every target token after t changed,
    the logits at positions <= t must not move. A float64 CPU copy in eval mode reads the
    first ``n_sentences`` pairs whose target is the longest, so no target position is
    padding."""
    probe_model = copy.deepcopy(model).to("cpu", torch.float64).eval()
    lengths = split.pairs.tgt_lengths
    index = np.flatnonzero(lengths == lengths.max())[:n_sentences]
    batch = on_device(split.batch(index), torch.device("cpu"))
    src, mask, tgt = batch["src"], batch["src_mask"], batch["tgt"]
    report = probe_causality(
        lambda ids: probe_model(src, mask, ids),
        tgt,
        positions=probe_positions(tgt.shape[1]),
        tol=tol,
        vocab_size=vocab_size,
    )
    return {"causality": verdict(report).value, "max_leak": report.max_leak}


def build_seq2seq(run: RunSpec, manifest: dict[str, Any]) -> Seq2Seq:
    """The encoder-decoder for a translation manifest (the options it refuses are refused by
    the task kind's check, pdelab.spec.task_kinds)."""
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
        **layer_options(run.model),
    )


class Translation(Strategy):
    """Sentence pairs for an encoder-decoder: the teacher-forced loss per real target token,
    the lowest validation loss selects the best epoch, and the test adds BLEU and the
    decoder's causality probe."""

    history_columns = TRANSLATION_HISTORY_COLUMNS
    result_columns = RESULT_COLUMNS

    def load_data(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, Batches]:
        """Each split's sentence pairs, batched by :class:`PairBatches`."""
        return {s: PairBatches(load_pairs(run.data_dir, s, manifest=manifest)) for s in SPLITS}

    def build_model(self, run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
        return build_seq2seq(run, manifest)

    def loss(
        self, model: nn.Module, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool
    ) -> Loss:
        """:func:`translation_loss`."""
        return translation_loss(model, inputs, labels, include_pad)

    def token_caps(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, int]:
        """The longest source, and target less its last token (the decoder's input and
        labels are the target shifted by one)."""
        splits = manifest["splits"].values()
        src = max(s["src_max_length"] for s in splits)
        tgt = max(s["tgt_max_length"] for s in splits) - 1
        return {"src": src, "src_mask": src, "tgt": tgt, "labels": tgt}

    def loss_items(self, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool) -> int:
        """The real target tokens; with ``include_pad``, every target position."""
        return labels.numel() if include_pad else int((labels != PAD_ID).sum().item())

    def evaluate(
        self,
        model: nn.Module,
        split: Batches,
        batch_size: int,
        device: torch.device,
        manifest: dict[str, Any],
    ) -> dict[str, float]:
        """:func:`evaluate`, BLEU on the target vocabulary."""
        return evaluate(model, pairs(split), batch_size, device, manifest["tgt_vocab"])

    def history_extras(self, val: dict[str, float]) -> dict[str, float]:
        return {"val_tf_bleu": val["tf_bleu"]}

    def untested(self, data: dict[str, Batches], manifest: dict[str, Any]) -> dict[str, Any]:
        """NaN BLEU, but the copy-the-source baseline, which needs no model."""
        return dict.fromkeys(RESULT_COLUMNS, math.nan) | {
            "test_copy_bleu": copy_baseline(pairs(data["test"]), manifest)
        }

    def test_metrics(self, s: Trained, test: dict[str, Any]) -> dict[str, Any]:
        """The teacher-forced mean sentence BLEU (a published metric) on the validation and
        test splits, greedy corpus BLEU on the test split (all x 100; none if the run
        diverged) and the decoder's causality probe."""
        vocab = s.manifest["tgt_vocab"]
        test_split = pairs(s.data["test"])
        scores = decoder_causality(s.model, test_split, len(vocab))
        scores["test_tf_bleu"] = test.pop("tf_bleu", math.nan)
        if s.ok:
            scores["val_tf_bleu"] = s.validate("val")["tf_bleu"]
            batch_size = s.run.train.batch_size
            scores["test_bleu"] = greedy_bleu(s.model, test_split, batch_size, s.device, vocab)
        return test | scores


def pairs(split: Batches) -> PairBatches:
    """A translation split as :meth:`Translation.load_data` gave it."""
    return cast(PairBatches, split)


STRATEGY = Translation()
