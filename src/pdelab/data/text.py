"""Byte-level text classification on IMDb (Maas et al. 2011), as in the Long Range Arena.

Task ``imdb_bytes_lra`` (LRA's Text task) is this module with :class:`TextSpec`.

LRA reads the reviews through tfds ``imdb_reviews`` (each file's bytes, stripped of surrounding
whitespace) and feeds their bytes to a byte encoder, truncated to ``max_length`` (the paper:
4,000). Here byte b is token b + 2 (after RESERVED) and labels are pos=1, neg=0. LRA trains on
the 25,000 training reviews and validates on the test set; we keep the test set for testing
only and validate on a seeded slice of ``n_val`` training reviews (2,500, leaving 22,500).

``source``: "download" (the pinned aclImdb_v1.tar.gz), that archive or a folder holding
``aclImdb/`` (the archive's layout), or "standin". ``fetch`` copies ``aclImdb/{train,test}/
{pos,neg}`` into raw_dir, the stand-in is written in that layout too, and ``prepare`` reads it.
Task ``imdb_bytes`` (Continuous-Time Attention's character-level IMDb) is this module with
:class:`ImdbBytesSpec`, whose only difference is its default length of 2,048 bytes.

Stand-in (no labelled text corpus ships in a package here): see :data:`STAND_IN`. Reviews are
pseudo-sentences of random lowercase pseudo-words filling a seeded budget of ``max_length / 2``
(at least PLANTED_BYTES, room for the planted words) to ``max_length`` bytes (so never
truncated; about 0.85 of it is used). 3, 5 or 7 words from
two seeded lists of 8 "sentiment" pseudo-words are planted, one in each of as many equal
stretches of the review, and the label is the polarity planted more often (by 1 to 7), so the
answer needs the whole sequence.

The helpers below :func:`prepare` (byte tokens, locating real data, seeded subsets) are shared
with the other LRA task modules.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data.errors import ArchiveLayoutError
from pdelab.data.release import locate_release
from pdelab.data.sources import Sources
from pdelab.data.store import BYTE_VOCAB, byte_tokens, split_train_val, subset, write_prepared

STAND_IN = (
    "a synthetic byte-level sentiment task stands in for IMDb: pseudo-sentences of random "
    "lowercase pseudo-words with 3, 5 or 7 words of two sentiment polarities planted across "
    "the whole review, labelled by the polarity planted more often"
)
EXPECTED = "aclImdb/{train,test}/{pos,neg}/*.txt (the aclImdb_v1.tar.gz layout)"
N_NEUTRAL, N_POLAR = 400, 8
WORD_LETTERS = (2, 8)  # shortest and longest pseudo-word
PLANTED_BYTES = 7 * (WORD_LETTERS[1] + 2)  # the most the planted words can take


@dataclass(frozen=True)
class TextSpec:
    """Data parameters; the defaults are the paper's (all 25,000 + 25,000 real reviews)."""

    task: ClassVar[str] = "imdb_bytes_lra"  # the task name the manifest records
    sources: ClassVar[Sources] = Sources(downloads=("imdb",), layout=EXPECTED)

    source: str = "download"
    n_train: int = 22_500
    n_val: int = 2_500
    n_test: int = 25_000
    max_length: int = 4_000
    seed: int = 0


@dataclass(frozen=True)
class ImdbBytesSpec(TextSpec):
    """The same byte-level IMDb as task ``imdb_bytes_lra``, cut at 2,048 bytes (Continuous-Time
    Attention, Table 2); that paper does not give its split, so LRA's is kept."""

    task: ClassVar[str] = "imdb_bytes"

    max_length: int = 2_048


def pseudo_words(rng: np.random.Generator, n: int, lo: int = 2, hi: int = 8) -> list[str]:
    """``n`` distinct random lowercase words of ``lo``..``hi`` letters, in drawn order."""
    words: dict[str, None] = {}
    while len(words) < n:
        letters = rng.integers(ord("a"), ord("z") + 1, int(rng.integers(lo, hi + 1)))
        words.setdefault(bytes(letters.astype(np.uint8)).decode(), None)
    return list(words)


def pseudo_text(rng: np.random.Generator, words: list[str]) -> str:
    """``words`` as sentences of 5-14 words ending in '.'; at most sum(len(w) + 2) bytes."""
    sentences, i = [], 0
    while i < len(words):
        n = int(rng.integers(5, 15))
        sentences.append(" ".join(words[i : i + n]) + ".")
        i += n
    return " ".join(sentences)


def _review(rng: np.random.Generator, lexicon: list[str], label: int, length: int) -> str:
    # polar[label]: the words of that polarity (0 negative, 1 positive)
    neutral, polar = lexicon[:N_NEUTRAL], (lexicon[N_NEUTRAL::2], lexicon[N_NEUTRAL + 1 :: 2])
    k = int(rng.choice([3, 5, 7]))
    major = int(rng.integers(k // 2 + 1, k + 1))
    planted = [polar[label if j < major else 1 - label][rng.integers(N_POLAR)] for j in range(k)]
    rng.shuffle(planted)
    budget = length - sum(len(w) + 2 for w in planted)
    words: list[str] = []
    while budget >= len(w := neutral[rng.integers(N_NEUTRAL)]) + 2:
        words.append(w)
        budget -= len(w) + 2
    bounds = np.linspace(0, len(words), k + 1).astype(int)
    for j in reversed(range(k)):  # one planted word in each of k equal stretches
        words.insert(int(rng.integers(bounds[j], bounds[j + 1] + 1)), planted[j])
    return pseudo_text(rng, words)


def write_standin(spec: TextSpec, root: Path) -> None:
    """The stand-in reviews as ``root/{train,test}/{pos,neg}/<i>_<rating>.txt``."""
    if spec.max_length < PLANTED_BYTES:
        raise ValueError(
            f"the text stand-in needs max_length >= {PLANTED_BYTES} (room for 7 planted words), "
            f"got {spec.max_length}"
        )
    rng = np.random.default_rng(spec.seed)
    lexicon = pseudo_words(rng, N_NEUTRAL + 2 * N_POLAR, *WORD_LETTERS)
    shortest = max(spec.max_length // 2, PLANTED_BYTES)
    for split, n in (("train", spec.n_train + spec.n_val), ("test", spec.n_test)):
        for polarity in ("neg", "pos"):
            (root / split / polarity).mkdir(parents=True)
        for i, label in enumerate(rng.permutation(np.arange(n) % 2)):
            length = int(rng.integers(shortest, spec.max_length + 1))
            name = f"{split}/{('neg', 'pos')[label]}/{i}_{(1, 10)[label]}.txt"
            (root / name).write_text(_review(rng, lexicon, int(label), length))


def fetch(spec: TextSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/aclImdb``: the stand-in, or the real reviews (train and test only)."""
    dest = raw_dir / "aclImdb"
    shutil.rmtree(dest, ignore_errors=True)
    if spec.source == "standin":
        write_standin(spec, dest)
        return
    copy_reviews(spec.source, raw_dir, dest)


def copy_reviews(source: str, raw_dir: Path, dest: Path) -> None:
    """Copy the real ``aclImdb/{train,test}/{pos,neg}`` named by ``source`` to ``dest``."""
    key = TextSpec.sources.downloads[0]
    src = locate_release(source, raw_dir, key, "aclImdb", "train/pos", EXPECTED)
    for folder in ("train/pos", "train/neg", "test/pos", "test/neg"):
        if not (src / folder).is_dir():
            raise ArchiveLayoutError(f"{src / folder}: missing; expected {EXPECTED}")
        shutil.copytree(src / folder, dest / folder)


def read_reviews(root: Path, split: str) -> tuple[list[bytes], np.ndarray]:
    """Texts (stripped bytes, as tfds reads them) and labels, neg then pos, files sorted."""
    texts, labels = [], []
    for label, polarity in enumerate(("neg", "pos")):
        files = sorted((root / split / polarity).glob("*.txt"))
        texts += [f.read_bytes().strip() for f in files]
        labels += [label] * len(files)
    if not texts:
        raise FileNotFoundError(f"{root / split}: no reviews; expected {EXPECTED}")
    return texts, np.array(labels, dtype=np.int64)


def prepare(spec: TextSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Byte tokens of train/val/test; val is a seeded slice of the training reviews."""
    rng = np.random.default_rng(spec.seed)
    train_texts, train_labels = read_reviews(raw_dir / "aclImdb", "train")
    test_texts, test_labels = read_reviews(raw_dir / "aclImdb", "test")
    index = split_train_val(len(train_texts), spec.n_train, spec.n_val, rng, spec.task)
    test = subset(len(test_texts), spec.n_test, rng, f"{spec.task} test")

    def tokens(texts: list[bytes], index: np.ndarray) -> list[np.ndarray]:
        return [byte_tokens(texts[i], spec.max_length) for i in index]

    splits = {split: (tokens(train_texts, i), train_labels[i]) for split, i in index.items()}
    splits["test"] = (tokens(test_texts, test), test_labels[test])
    info = {"task": spec.task} | ({"stand_in": STAND_IN} if spec.source == "standin" else {})
    return write_prepared(out_dir, splits, BYTE_VOCAB, 2, info)
