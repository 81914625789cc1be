"""The prepared translation pairs as a training job reads them: the special tokens, one split's
padded arrays (:class:`PairSplit`) and their checked load (:func:`load_pairs`).

Kept apart from the data module (translation.py: the spec, tokens, vocabularies and
``prepare``), so that a job that reads the arrays imports this and store.py, and no edit to how
the data is fetched or prepared is part of its code. Storage: translation.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pdelab.data.store import map_checked

LANGUAGES = {"src": "en", "tgt": "de"}
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIALS))


@dataclass
class PairSplit:
    """One split of a prepared translation task: padded ids and lengths of both sides."""

    src: np.ndarray
    src_lengths: np.ndarray
    tgt: np.ndarray
    tgt_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.src_lengths)


def load_pairs(
    data_dir: Path | str,
    split: str,
    verify: bool = False,
    manifest: dict[str, Any] | None = None,
) -> PairSplit:
    """Memory-map one split after checking its files' sizes (with verify, their sha256)."""
    data_dir = Path(data_dir)
    names = [f"{split}.{name}.npy" for name in ("src", "src_lengths", "tgt", "tgt_lengths")]
    return PairSplit(**map_checked(data_dir, names, verify, manifest))
