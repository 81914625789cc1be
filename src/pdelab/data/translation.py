"""English-to-German translation: Multi30K (FNA's Table II), or gettext catalogues offline.

Real data: Multi30K task 1 (Elliott et al. 2016), the three WMT16 archives that the official
code reads through torchtext (pinned in :data:`pdelab.data.catalogue.PINNED`, keys
``multi30k_{train,val,test}``): ``train``, ``val`` and ``test`` (the 2016 Flickr test set)
as line-aligned ``.en`` / ``.de`` text files, 29,000 / 1,014 / 1,000 sentence pairs.

``source``: "download", a folder holding the six files ``{train,val,test}.{en,de}`` or the
three archives under their own names (training.tar.gz, validation.tar.gz,
mmt16_task1_test.tar.gz: checked against the pins), or "standin". The fetch
(translation_fetch.py, which the data job alone imports: a job that reads the prepared arrays
imports this module, and not the downloader) writes the six files into ``raw_dir/multi30k``
(trailing blank lines dropped: the training and validation files end with one) and ``prepare``
reads only them; the stand-in is written the same way. A job that only reads the prepared
arrays needs pairs.py alone (the specials, :class:`PairSplit` and :func:`load_pairs`, which
this module also offers).

Tokens: the official code splits with spaCy's ``en_core_web_sm`` / ``de_core_news_sm``
tokenizers and lowercases. Those are model downloads, so here a dependency-free rule stands in
(:func:`words`): lowercase, then every run of letters/digits/underscores is a token and every
other non-space character a token of its own (spaCy keeps e.g. "n't" and "z.B." whole, and
splits some words this rule keeps). One vocabulary per language, from the training split only,
as the official code builds them: SPECIALS first (``<pad>`` 0, so padding is the store's
PAD_ID, then ``<unk>``, ``<bos>``, ``<eos>``; the official code numbers them <sos> 0, <eos> 1,
<unk> 2, <pad> 3), then every token seen at least ``min_freq`` times (the official code: 1),
most frequent first, ties in alphabetical order so that every build is identical. Every
sentence is wrapped in ``<bos>`` ... ``<eos>``, source and target alike, as the official code
does. On the real data this gives 9,783 English and 17,915 German vocabulary entries.

Stand-in: pairs from the German message catalogues of pinned Debian packages
(translation_fetch.catalogue_pairs: msgid -> msgstr of
``usr/share/locale/de/LC_MESSAGES/*.mo``), split by a seeded permutation into ``n_val``
validation, ``n_test`` test and the rest training pairs. See :data:`STAND_IN` and
translation_fetch.keep_pair for what is kept: 2,203 pairs of PACKAGES, about 8
English words each (Multi30K's captions: about 12). The packages come from ``apt-get
download`` (debian.py); package files got by hand can be put into ``raw_dir/../downloads``
under their apt names, where they are verified and used.

Storage (``out_dir``): per split ``{split}.src.npy`` and ``{split}.tgt.npy`` (N, longest) token
ids padded with 0, and ``{split}.src_lengths.npy`` / ``{split}.tgt_lengths.npy`` (N,) lengths
with ``<bos>`` and ``<eos>``; ``manifest.json`` holds both vocabularies, their sizes, the
specials and per-split statistics, and a ``content_hash`` over all files, as store.py's does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar
from urllib.parse import urlparse

import numpy as np

from pdelab.data.catalogue import DEBIAN, PINNED
from pdelab.data.pairs import (  # what a job that reads the prepared pairs needs
    BOS_ID,
    EOS_ID,
    LANGUAGES,
    PAD_ID,
    SPECIALS,
    UNK_ID,
)
from pdelab.data.pairs import PairSplit as PairSplit  # offered here too
from pdelab.data.pairs import load_pairs as load_pairs
from pdelab.data.sources import Sources
from pdelab.data.store import (
    SPLITS,
    content_hash,
    sha256_file,
    subset,
    write_manifest,
)

ARCHIVES = {"train": "multi30k_train", "val": "multi30k_val", "test": "multi30k_test"}
EXPECTED = "{train,val,test}.{en,de} (line-aligned, the Multi30K task-1 archives' files)"
# the archives under their upstream names, as a folder given as source may hold them
UPSTREAM = {s: PurePosixPath(urlparse(PINNED[k].url).path).name for s, k in ARCHIVES.items()}
TOKENIZER_NOTE = (
    "lowercased and split into runs of letters/digits and single punctuation characters "
    "(spaCy's en_core_web_sm / de_core_news_sm tokenizers, which the paper used, are model "
    "downloads)"
)
# The stand-in's packages (pinned in catalogue.DEBIAN): their German catalogues hold short
# descriptive sentences (widget properties, settings). Chosen over git's and PostgreSQL's
# larger catalogues because they are Architecture: all (one pin for every machine) and rarely
# replaced in Debian's point releases, which would make a pinned version vanish.
PACKAGES = ("libgtk-3-common", "libgtk2.0-common", "gsettings-desktop-schemas")
MIN_WORDS, MAX_WORDS = 3, 30
STAND_IN = (
    "English-German message pairs from the German gettext catalogues of Debian packages "
    "(GNOME's toolkit and settings) stand in for Multi30K's image captions: msgid -> msgstr, "
    "without iso_* catalogues, format strings, markup, multi-line and untranslated messages "
    f"and identical pairs, accelerators stripped, {MIN_WORDS}-{MAX_WORDS} words on both sides, "
    "one pair per English sentence"
)


@dataclass(frozen=True)
class Multi30kSpec:
    """Data parameters; the defaults are the paper's (every Multi30K sentence pair)."""

    sources: ClassVar[Sources] = Sources(
        downloads=tuple(ARCHIVES.values()),
        layout=f"{EXPECTED}, or the archives {', '.join(UPSTREAM.values())}",
        archive=False,
        standin_packages=True,
        fetched_by="pdelab.data.translation_fetch",
    )

    source: str = "download"
    n_train: int = 29_000
    n_val: int = 1_014
    n_test: int = 1_000
    min_freq: int = 1  # tokens seen fewer times in training become <unk>
    packages: tuple[str, ...] = PACKAGES  # the stand-in only: Debian packages read (in order)
    seed: int = 0


# --------------------------------------------------------------------------------------------
# Tokens and vocabularies
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """The tokens of ``text``: lowercased, runs of word characters and single other marks."""
    return _TOKEN.findall(text.lower())


def build_vocab(sentences: Iterable[Sequence[str]], min_freq: int) -> list[str]:
    """SPECIALS, then the tokens seen at least ``min_freq`` times, most frequent first (ties
    alphabetical)."""
    if min_freq < 1:
        raise ValueError(f"translation: min_freq must be at least 1, got {min_freq}")
    counts = Counter(token for sentence in sentences for token in sentence)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [*SPECIALS, *(t for t, n in ranked if n >= min_freq and t not in SPECIALS)]


def encode(
    sentences: Sequence[Sequence[str]], vocab: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(ids (N, longest) padded with PAD_ID, lengths (N,)): each sentence as <bos> ... <eos>."""
    index = {token: i for i, token in enumerate(vocab)}
    lengths = np.array([len(s) + 2 for s in sentences], dtype=np.int64)
    dtype = np.uint16 if len(vocab) <= 1 << 16 else np.int32
    ids = np.full((len(sentences), int(lengths.max(initial=2))), PAD_ID, dtype=dtype)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence) + 2] = [
            BOS_ID,
            *(index.get(token, UNK_ID) for token in sentence),
            EOS_ID,
        ]
    return ids, lengths


# --------------------------------------------------------------------------------------------
# Text files
# --------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, split at "\\n" only (a sentence may hold other line
    separators such as U+2028, which str.splitlines would split at)."""
    text = path.read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def read_pairs(root: Path, split: str) -> tuple[list[str], list[str]]:
    """The source and target sentences of a split, checked to be line-aligned and non-empty."""
    sides = []
    for language in LANGUAGES.values():
        path = root / f"{split}.{language}"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; expected {EXPECTED}")
        lines = read_lines(path)
        empty = next((i for i, line in enumerate(lines, start=1) if not line.strip()), None)
        if empty is not None:
            raise ValueError(f"{path}:{empty}: empty sentence; every line must hold one")
        sides.append(lines)
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"{root}: {split}.en has {len(sides[0])} lines but {split}.de {len(sides[1])}; "
            "the two files must be line-aligned translations"
        )
    return sides[0], sides[1]


# --------------------------------------------------------------------------------------------
# Prepare and load
# --------------------------------------------------------------------------------------------


def prepare(spec: Multi30kSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Padded <bos> ... <eos> ids of both languages per split; the vocabularies come from the
    training split (seeded subsets of ``n_*`` pairs when fewer than a split holds)."""
    root = raw_dir / "multi30k"
    rng = np.random.default_rng(spec.seed)
    wanted = {"train": spec.n_train, "val": spec.n_val, "test": spec.n_test}
    tokens: dict[str, dict[str, list[list[str]]]] = {}
    available = {}
    for split in SPLITS:
        src, tgt = read_pairs(root, split)
        available[split] = len(src)
        chosen = subset(len(src), wanted[split], rng, f"multi30k {split}")
        tokens[split] = {
            "src": [words(src[i]) for i in chosen],
            "tgt": [words(tgt[i]) for i in chosen],
        }
    vocabs = {side: build_vocab(tokens["train"][side], spec.min_freq) for side in LANGUAGES}
    out_dir.mkdir(parents=True, exist_ok=True)
    files, stats = {}, {}
    for split in SPLITS:
        stats[split] = {"examples": len(tokens[split]["src"]), "available": available[split]}
        for side in LANGUAGES:
            ids, lengths = encode(tokens[split][side], vocabs[side])
            for name, array in ((side, ids), (f"{side}_lengths", lengths)):
                path = out_dir / f"{split}.{name}.npy"
                np.save(path, array, allow_pickle=False)
                files[path.name] = sha256_file(path)
            stats[split][f"{side}_max_length"] = int(lengths.max(initial=0))
            stats[split][f"{side}_mean_length"] = round(float(lengths.mean()), 2)
            stats[split][f"{side}_unk"] = int((ids == UNK_ID).sum())
        stats[split]["max_length"] = max(
            stats[split]["src_max_length"], stats[split]["tgt_max_length"]
        )
    manifest: dict[str, Any] = {
        "content_hash": content_hash(files),
        "files": files,
        "splits": stats,
        "task": "multi30k",
        "kind": "translation",
        "num_classes": 0,
        "languages": dict(LANGUAGES),
        "specials": list(SPECIALS),
        "src_vocab": vocabs["src"],
        "tgt_vocab": vocabs["tgt"],
        "vocab_sizes": {side: len(vocab) for side, vocab in vocabs.items()},
        "min_freq": spec.min_freq,
        "tokenizer_note": TOKENIZER_NOTE,
    }
    if spec.source == "standin":
        manifest["stand_in"] = STAND_IN
        manifest["source_packages"] = [
            {"name": p, "version": DEBIAN[p].version} for p in spec.packages
        ]
    return write_manifest(out_dir, manifest)
