"""Byte-level document retrieval on the ACL Anthology Network (AAN), as in the Long Range Arena.

Each example is a pair of papers, label 1 when one cites the other. LRA's release holds
``new_aan_pairs.{train,eval,test}.tsv`` (147,086 / 18,090 / 17,437 pairs) with rows ``label
<TAB> id1 <TAB> id2 <TAB> text1 <TAB> text2``, no header and no quoting. LRA byte-encodes each
text field as it stands in the file (the fields look like Python bytes literals, ``b'...'``;
LRA does not decode them, and neither do we) and truncates each document to ``max_length``
(the paper: 4,000). Byte b is token b + 2; the pairs are stored as (sequences, labels,
second_sequences).

``source``: "download" (``lra_release.gz``, about 7.7 GB and not pinned by checksum, so it
also needs ``allow_unpinned: true``), that archive or a folder holding the three TSVs (e.g.
``lra_release/lra_release/tsv_data``), or "standin". ``fetch`` copies the TSVs into raw_dir,
the stand-in is written as such TSVs, and ``prepare`` reads them. With fewer pairs asked for
than a file holds, a seeded sample (in file order) is kept.

Stand-in: see :func:`stand_in`. There are ``topics`` topics (8 by default); each has
``topic_words`` topic pseudo-words (30), and a document draws every word from its topic's
words with probability ``p_topic`` (0.25), otherwise from 400 shared background words, filling
a budget of ``max_length / 2`` to ``max_length`` bytes (so it is never truncated). Exactly half
the pairs of each split share a topic (label 1); the others have two different topics (label
0). Fewer topics with fewer, more frequent words make documents of ~100 bytes whose topic a
small model can tell apart within seconds of training (the smoke profile).
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
from pdelab.data.store import BYTE_VOCAB, SPLITS, byte_tokens, write_prepared
from pdelab.data.store import subset as pick
from pdelab.data.text import pseudo_text, pseudo_words

FILES = {"train": "train", "val": "eval", "test": "test"}  # our split -> LRA's file infix
EXPECTED = "new_aan_pairs.{train,eval,test}.tsv (LRA release: lra_release/.../tsv_data)"
N_BACKGROUND = 400


@dataclass(frozen=True)
class RetrievalSpec:
    """Data parameters; the defaults are the paper's (every pair of the LRA release)."""

    sources: ClassVar[Sources] = Sources(downloads=("lra_release",), layout=EXPECTED)

    source: str = "download"
    n_train: int = 147_086
    n_val: int = 18_090
    n_test: int = 17_437
    max_length: int = 4_000
    allow_unpinned: bool = False
    # the stand-in only: topics, pseudo-words per topic, chance that a word is a topic word
    topics: int = 8
    topic_words: int = 30
    p_topic: float = 0.25
    seed: int = 0


def stand_in(spec: RetrievalSpec) -> str:
    """The sentence naming the stand-in a spec builds (stored in the manifest)."""
    return (
        "a synthetic byte-level pair task stands in for AAN retrieval: documents of "
        f"pseudo-words drawn from {spec.topics} topic-specific word distributions, labelled 1 "
        "when both documents of a pair share a topic (half the pairs) and 0 otherwise"
    )


STAND_IN = stand_in(RetrievalSpec())  # the default stand-in's


def tsv_name(split: str) -> str:
    return f"new_aan_pairs.{FILES[split]}.tsv"


def _document(
    rng: np.random.Generator, spec: RetrievalSpec, lexicon: list[str], topic: int, length: int
) -> str:
    background, start = lexicon[:N_BACKGROUND], N_BACKGROUND + topic * spec.topic_words
    topical = lexicon[start : start + spec.topic_words]
    words: list[str] = []
    budget = length
    while True:
        pool = topical if rng.random() < spec.p_topic else background
        word = pool[rng.integers(len(pool))]
        if budget < len(word) + 2:  # pseudo_text needs at most len + 2 bytes a word
            return pseudo_text(rng, words)
        words.append(word)
        budget -= len(word) + 2


def write_standin(spec: RetrievalSpec, raw_dir: Path) -> None:
    """The stand-in pairs as the three TSVs (label, id1, id2, text1, text2; no header)."""
    if spec.max_length < 64:
        raise ValueError(f"the retrieval stand-in needs max_length >= 64, got {spec.max_length}")
    if spec.topics < 2 or spec.topic_words < 1 or not 0 < spec.p_topic <= 1:
        raise ValueError(
            "the retrieval stand-in needs topics >= 2, topic_words >= 1 and 0 < p_topic <= 1, "
            f"got {spec.topics}, {spec.topic_words} and {spec.p_topic}"
        )
    rng = np.random.default_rng(spec.seed)
    lexicon = pseudo_words(rng, N_BACKGROUND + spec.topics * spec.topic_words)
    for split, n in zip(SPLITS, (spec.n_train, spec.n_val, spec.n_test), strict=True):
        rows = []
        for i, label in enumerate(rng.permutation(np.arange(n) % 2)):
            first = int(rng.integers(spec.topics))
            second = first if label else (first + int(rng.integers(1, spec.topics))) % spec.topics
            low, high = spec.max_length // 2, spec.max_length
            texts = [
                _document(rng, spec, lexicon, t, int(rng.integers(low, high)))
                for t in (first, second)
            ]
            rows.append(f"{label}\t{split}-{i}a\t{split}-{i}b\t{texts[0]}\t{texts[1]}\n")
        (raw_dir / tsv_name(split)).write_text("".join(rows))


def fetch(spec: RetrievalSpec, raw_dir: Path) -> None:
    """Fill raw_dir with the three TSVs: the stand-in, or copies of the real ones."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    if spec.source == "standin":
        write_standin(spec, raw_dir)
        return
    src = locate_release(
        spec.source,
        raw_dir,
        spec.sources.downloads[0],
        "tsv_data",
        tsv_name("train"),
        EXPECTED,
        allow_unpinned=spec.allow_unpinned,
    )
    for split in SPLITS:
        if not (src / tsv_name(split)).is_file():
            raise ArchiveLayoutError(f"{src / tsv_name(split)}: missing; expected {EXPECTED}")
        shutil.copyfile(src / tsv_name(split), raw_dir / tsv_name(split))


def read_pairs(path: Path, max_length: int) -> tuple[list, list, np.ndarray]:
    """(first documents' tokens, second documents' tokens, labels) of one TSV, in file order."""
    first, second, labels = [], [], []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip(b"\n").rstrip(b"\r")
            if not line.strip():
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise ValueError(
                    f"{path}:{lineno}: {len(fields)} tab-separated fields, expected 5 "
                    "(label, id1, id2, text1, text2)"
                )
            try:
                label = float(fields[0])
            except ValueError:
                label = -1.0
            if label not in (0.0, 1.0):
                raise ValueError(
                    f"{path}:{lineno}: label {fields[0][:20]!r} is not 0 or 1 (the AAN files "
                    "have no header row)"
                )
            labels.append(int(label))
            first.append(byte_tokens(fields[3], max_length))
            second.append(byte_tokens(fields[4], max_length))
    return first, second, np.array(labels, dtype=np.int64)


def prepare(spec: RetrievalSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Byte tokens of both documents of every pair, each truncated to ``max_length``."""
    rng = np.random.default_rng(spec.seed)
    splits = {}
    for split, n in zip(SPLITS, (spec.n_train, spec.n_val, spec.n_test), strict=True):
        first, second, labels = read_pairs(raw_dir / tsv_name(split), spec.max_length)
        index = pick(len(labels), n, rng, f"retrieval {split} ({tsv_name(split)})")
        splits[split] = ([first[i] for i in index], labels[index], [second[i] for i in index])
    info = {"task": "retrieval"}
    if spec.source == "standin":
        info["stand_in"] = stand_in(spec)
    return write_prepared(out_dir, splits, BYTE_VOCAB, 2, info)
