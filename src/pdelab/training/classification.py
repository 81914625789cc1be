"""Classification: labelled sequences (or LRA's document pairs), cross-entropy per example,
accuracy selects the best epoch."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.models.factory import check_patches, encoder_options
from pdelab.models.transformer import Classifier, PairClassifier
from pdelab.spec.config import RunSpec
from pdelab.training.strategy import Loss, Strategy, widened


class Classification(Strategy):
    """One label per example; the token splits of pdelab.data.store as they are."""

    def build_model(self, run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
        """A classifier, or LRA's two-tower model for document pairs; with model.patch, over
        the patches of a square image."""
        m = run.model
        options = encoder_options(run, manifest)
        max_len = max(s["max_length"] for s in manifest["splits"].values())
        if m.patch:
            check_patches(run, manifest, max_len)
            max_len //= m.patch**2
        model = PairClassifier if manifest.get("pairs") else Classifier
        return model(
            manifest["num_classes"],
            pooling=m.pooling,
            max_len=max_len + (m.pooling == "cls"),
            **options,
        )

    def loss(
        self, model: nn.Module, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool
    ) -> Loss:
        """Cross-entropy of the logits in float32 at least (:func:`widened`); the correct
        predictions stay on the device (no host sync in a step)."""
        logits = model(**inputs)
        correct = (logits.argmax(-1) == labels).sum()
        return F.cross_entropy(widened(logits), labels), correct, len(labels)

    def score(self, val: dict[str, float]) -> float:
        """Validation accuracy."""
        return val["acc"]


STRATEGY = Classification()
