"""Word-level text classification of Continuous-Time Attention (Appendix B): IMDb, AG News, SST-2.

One module, three tasks, one spec class each (their defaults are the paper's sizes):

* ``imdb_wordpiece`` (:class:`ImdbSpec`): Maas et al. 2011, binary (neg=0, pos=1), read from the
  ``aclImdb/{train,test}/{pos,neg}`` layout of the pinned ``aclImdb_v1.tar.gz`` (as the
  byte-level ``imdb_bytes_lra`` task does; the reviews' ``<br />`` tags are kept, as in the usual
  loaders). The paper: 25k/25k with 10% of the training reviews held out for validation.
* ``ag_news`` (:class:`AgNewsSpec`): Zhang et al. 2015, 4 classes (World, Sports, Business,
  Sci/Tech = 0..3), the CSVs torchtext reads (rows ``"class 1-4","title","description"``;
  text = title + " " + description, as torchtext joins them). The paper's "108k/12k" is the
  120,000 training articles less a 10% validation carve-out; the test set is the 7,600 test
  articles.
* ``sst2`` (:class:`Sst2Spec`): GLUE's SST-2 (``SST-2/{train,dev}.tsv``, header
  ``sentence\\tlabel``), binary. GLUE publishes no test labels, so our test set is GLUE's dev
  set (872 sentences) and validation is a seeded slice of the training file. The paper's
  6,920/872/1,821 are the sentence-level SST-2 splits, which GLUE does not ship (its training
  file holds 67,349 phrases); the paper profile uses every GLUE training phrase but 872.

For every task, validation is a seeded slice of the training file (never the test set), the
tokenizer (tokenizer.py: an uncased WordPiece vocabulary standing in for bert-base-uncased's)
is trained on the training split alone, and texts are cut at ``max_length`` tokens (the paper
gives none; 512 is bert-base-uncased's limit). A text with no tokens becomes one ``<unk>``.

``source``: "download" (the pinned files), a folder holding the data (or the archive for IMDb
and SST-2), or "standin". ``fetch`` copies the real files into ``raw_dir`` in their own format,
the stand-in is written in that format too, and ``prepare`` reads only that format.

Stand-ins (no labelled sentiment or news corpus ships in any package here): synthetic texts
whose background words are drawn, with their real frequencies, from the 2,000 most frequent
words of CPython's own reference documentation (``pydoc_data.topics``); words from per-class
lists (sentiment adjectives; world/sports/business/tech news words, none of them in the
background) are planted one in each of as many equal stretches of the text, and the label is
the class planted most often (a strict majority), so the label is learnable but needs the whole
sequence (the design of text.py's stand-in). :data:`STAND_IN` says what each one is.
"""

from __future__ import annotations

import csv
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data import text, tokenizer
from pdelab.data.catalogue import PINNED
from pdelab.data.download import fetch as fetch_file
from pdelab.data.errors import ArchiveLayoutError, SourceNotFoundError
from pdelab.data.release import copy_files, find_dir, locate_release
from pdelab.data.sources import Sources
from pdelab.data.store import split_train_val, subset, write_prepared

LABELS = {
    "imdb": ("neg", "pos"),
    "ag_news": ("World", "Sports", "Business", "Sci/Tech"),
    "sst2": ("negative", "positive"),
}
RAW = {"imdb": "aclImdb", "ag_news": "ag_news_csv", "sst2": "SST-2"}
EXPECTED = {
    "imdb": text.EXPECTED,
    "ag_news": 'ag_news_csv/{train,test}.csv (rows "class 1-4","title","description")',
    "sst2": "SST-2/{train,dev}.tsv (header 'sentence\\tlabel', the GLUE SST-2.zip layout)",
}
_BACKGROUND = (
    "English words drawn with their frequencies in CPython's reference documentation "
    "(pydoc_data.topics)"
)
STAND_IN = {
    "imdb": (
        f"a synthetic word-level sentiment task stands in for IMDb: reviews of {_BACKGROUND} "
        "with 3, 5 or 7 words from two lists of sentiment adjectives planted across the whole "
        "review, labelled by the polarity planted more often"
    ),
    "ag_news": (
        f"a synthetic 4-class topic task stands in for AG News: a title and one or two "
        f"sentences of {_BACKGROUND} with 3 or 5 words from four lists of World, Sports, "
        "Business and Sci/Tech news words planted across them, labelled by the topic planted "
        "most often"
    ),
    "sst2": (
        f"a synthetic sentence-level sentiment task stands in for SST-2: single sentences of "
        f"10 to 30 {_BACKGROUND} with 1 or 3 sentiment adjectives planted across the sentence, "
        "labelled by the polarity planted more often"
    ),
}
# Planted words per class, in LABELS order.
SENTIMENT = (
    (  # negative
        "awful", "terrible", "boring", "dreadful", "tedious", "clumsy",
        "lifeless", "mediocre", "pointless", "forgettable", "annoying", "disappointing",
    ),
    (  # positive
        "excellent", "wonderful", "superb", "brilliant", "delightful", "charming",
        "moving", "masterful", "gripping", "stunning", "enjoyable", "memorable",
    ),
)  # fmt: skip
TOPICS = (
    (  # World
        "minister", "parliament", "election", "troops", "embassy", "rebels",
        "diplomats", "ceasefire", "refugees", "summit", "militants", "president",
    ),
    (  # Sports
        "coach", "playoff", "striker", "tournament", "championship", "quarterback",
        "olympic", "goalkeeper", "innings", "league", "stadium", "medal",
    ),
    (  # Business
        "shares", "profit", "investors", "earnings", "merger", "stocks",
        "quarterly", "revenue", "dividend", "retailer", "inflation", "bankruptcy",
    ),
    (  # Sci/Tech
        "software", "internet", "researchers", "spacecraft", "computer", "wireless",
        "scientists", "microsoft", "broadband", "nasa", "genome", "telescope",
    ),
)  # fmt: skip
N_BACKGROUND = 2000


@dataclass(frozen=True)
class TextClsSpec:
    """Data parameters shared by the three tasks (subclassed per dataset, below)."""

    dataset: ClassVar[str] = ""  # the key of the tables below
    task: ClassVar[str] = ""  # the task name the manifest records
    sources: ClassVar[Sources] = Sources()

    source: str = "download"
    n_train: int = 0
    n_val: int = 0
    n_test: int = 0
    max_length: int = 512
    vocab_size: int = 30_522  # bert-base-uncased's
    seed: int = 0


@dataclass(frozen=True)
class ImdbSpec(TextClsSpec):
    """IMDb: 25,000 training reviews (10% held out for validation) and 25,000 test reviews."""

    dataset: ClassVar[str] = "imdb"
    task: ClassVar[str] = "imdb_wordpiece"
    sources: ClassVar[Sources] = Sources(downloads=("imdb",), layout=EXPECTED["imdb"])

    n_train: int = 22_500
    n_val: int = 2_500
    n_test: int = 25_000


@dataclass(frozen=True)
class AgNewsSpec(TextClsSpec):
    """AG News: 120,000 training articles (10% held out for validation), 7,600 test ones."""

    dataset: ClassVar[str] = "ag_news"
    task: ClassVar[str] = "ag_news"
    sources: ClassVar[Sources] = Sources(
        downloads=("ag_news_train", "ag_news_test"), layout=EXPECTED["ag_news"], archive=False
    )

    n_train: int = 108_000
    n_val: int = 12_000
    n_test: int = 7_600


@dataclass(frozen=True)
class Sst2Spec(TextClsSpec):
    """SST-2 from GLUE: 67,349 training phrases (872 held out), GLUE's dev set as test."""

    dataset: ClassVar[str] = "sst2"
    task: ClassVar[str] = "sst2"
    sources: ClassVar[Sources] = Sources(downloads=("sst2",), layout=EXPECTED["sst2"])

    n_train: int = 66_477
    n_val: int = 872
    n_test: int = 872


# --------------------------------------------------------------------------------------------
# Stand-ins
# --------------------------------------------------------------------------------------------


@cache
def background() -> tuple[tuple[str, ...], np.ndarray]:
    """The N_BACKGROUND most frequent words (of 2+ letters, or "a") of CPython's reference
    documentation, none of them a planted word, and their relative frequencies."""
    from pydoc_data.topics import topics

    corpus = " ".join(topics[key] for key in sorted(topics)).lower()
    counts = Counter(re.findall(r"[a-z]+", corpus))
    planted = {w for words in (*SENTIMENT, *TOPICS) for w in words}
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [w for w, _ in ranked if (len(w) > 1 or w == "a") and w not in planted]
    words = words[:N_BACKGROUND]
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return tuple(words), freq / freq.sum()


def planted_words(dataset: str) -> tuple[tuple[str, ...], ...]:
    """The planted words of each class of a dataset's stand-in, in label order."""
    return TOPICS if dataset == "ag_news" else SENTIMENT


def _words(
    rng: np.random.Generator, dataset: str, label: int, n_background: int, k: int
) -> list[str]:
    """``n_background`` background words with ``k`` planted ones, one per equal stretch; a
    strict majority of the planted words belongs to ``label``, the rest to other classes."""
    lexicon = planted_words(dataset)
    majority = int(rng.integers(k // 2 + 1, k + 1))
    others = [c for c in range(len(lexicon)) if c != label]
    classes = [label] * majority + [int(c) for c in rng.choice(others, k - majority)]
    planted = [lexicon[c][int(rng.integers(len(lexicon[c])))] for c in classes]
    rng.shuffle(planted)
    vocab, probs = background()
    words = [vocab[i] for i in rng.choice(len(vocab), n_background, p=probs)]
    bounds = np.linspace(0, n_background, k + 1).astype(int)
    for j in reversed(range(k)):
        words.insert(int(rng.integers(bounds[j], bounds[j + 1] + 1)), planted[j])
    return words


def _sentences(rng: np.random.Generator, words: list[str], lo: int, hi: int) -> str:
    """``words`` as capitalized sentences of ``lo``..``hi`` words, some with a comma."""
    out, i = [], 0
    while i < len(words):
        chunk = words[i : i + int(rng.integers(lo, hi + 1))]
        i += len(chunk)
        if len(chunk) > 6 and rng.random() < 0.3:
            cut = int(rng.integers(2, len(chunk) - 2))
            chunk = [*chunk[: cut - 1], chunk[cut - 1] + ",", *chunk[cut:]]
        out.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return " ".join(out)


def _imdb_doc(rng: np.random.Generator, label: int, max_length: int) -> str:
    # A quarter to three fifths of max_length words, so that the review's WordPiece tokens
    # (punctuation included) rarely exceed max_length and the planted words survive the cut.
    n = int(rng.integers(max_length // 4, (3 * max_length) // 5 + 1))
    k = int(rng.choice([3, 5, 7]))
    return _sentences(rng, _words(rng, "imdb", label, n - k, k), 5, 16)


def _sst2_doc(rng: np.random.Generator, label: int) -> str:
    n, k = int(rng.integers(10, 31)), int(rng.choice([1, 3]))
    return " ".join(_words(rng, "sst2", label, n - k, k)) + " "  # GLUE's style: lowercase


def _ag_news_doc(rng: np.random.Generator, label: int) -> tuple[str, str]:
    title_n, n_sentences = int(rng.integers(4, 9)), int(rng.integers(1, 3))
    body_n = sum(int(rng.integers(8, 21)) for _ in range(n_sentences))
    k = int(rng.choice([3, 5]))
    words = _words(rng, "ag_news", label, title_n + body_n - k, k)
    title = " ".join(w.capitalize() for w in words[:title_n])
    body = words[title_n:]
    return title, _sentences(rng, body, -(-len(body) // n_sentences), -(-len(body) // n_sentences))


def _labels(rng: np.random.Generator, n: int, classes: int) -> np.ndarray:
    return rng.permutation(np.arange(n) % classes)


def write_standin(spec: TextClsSpec, dest: Path) -> None:
    """The stand-in in the real format: aclImdb folders, AG News CSVs or SST-2 TSVs."""
    rng = np.random.default_rng(spec.seed)
    dataset, classes = spec.dataset, len(LABELS[spec.dataset])
    names = {"imdb": ("train", "test"), "ag_news": ("train", "test"), "sst2": ("train", "dev")}
    sizes = (spec.n_train + spec.n_val, spec.n_test)
    if dataset == "imdb" and spec.max_length < 32:
        raise ValueError(f"the imdb stand-in needs max_length >= 32, got {spec.max_length}")
    for split, n in zip(names[dataset], sizes, strict=True):
        labels = _labels(rng, n, classes)
        if dataset == "imdb":
            for polarity in ("neg", "pos"):
                (dest / split / polarity).mkdir(parents=True)
            for i, label in enumerate(labels):
                rating = int(rng.integers(7, 11)) if label else int(rng.integers(1, 5))
                path = dest / split / LABELS["imdb"][label] / f"{i}_{rating}.txt"
                path.write_text(_imdb_doc(rng, int(label), spec.max_length))
        elif dataset == "ag_news":
            dest.mkdir(parents=True, exist_ok=True)
            with open(dest / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
                for label in labels:
                    writer.writerow([int(label) + 1, *_ag_news_doc(rng, int(label))])
        else:
            dest.mkdir(parents=True, exist_ok=True)
            rows = [f"{_sst2_doc(rng, int(label))}\t{label}\n" for label in labels]
            (dest / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(rows))


# --------------------------------------------------------------------------------------------
# Real data
# --------------------------------------------------------------------------------------------


def _ag_news_files(source: str, raw_dir: Path) -> dict[str, Path]:
    """The two AG News CSVs: the pinned downloads, or those of a folder (taken as they are)."""
    if source == "download":
        cache_dir = raw_dir.parent / "downloads"
        keys = dict(zip(("train", "test"), AgNewsSpec.sources.downloads, strict=True))
        return {split: fetch_file(PINNED[key], cache_dir) for split, key in keys.items()}
    path = Path(source).expanduser()
    hint = (
        f"source {source!r}: expected {EXPECTED['ag_news']}; source must be 'standin', "
        "'download', or a folder holding train.csv and test.csv"
    )
    if not path.exists():
        raise SourceNotFoundError(f"{hint} ({path}: does not exist)")
    if not path.is_dir():
        raise ArchiveLayoutError(f"{hint} ({path}: a file, not a folder)")
    try:
        folder = path if (path / "train.csv").is_file() else find_dir(path, "ag_news_csv")
    except ArchiveLayoutError as err:
        raise ArchiveLayoutError(f"{hint} ({err})") from err
    files = {s: folder / f"{s}.csv" for s in ("train", "test")}
    for file in files.values():
        if not file.is_file():
            raise ArchiveLayoutError(f"{hint} ({file}: missing)")
    return files


def fetch(spec: TextClsSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/{aclImdb,ag_news_csv,SST-2}``: the stand-in or the real files."""
    dest = raw_dir / RAW[spec.dataset]
    shutil.rmtree(dest, ignore_errors=True)
    if spec.source == "standin":
        write_standin(spec, dest)
    elif spec.dataset == "imdb":
        text.copy_reviews(spec.source, raw_dir, dest)
    elif spec.dataset == "ag_news":
        files = _ag_news_files(spec.source, raw_dir)
        dest.mkdir(parents=True)
        for split, path in files.items():
            shutil.copyfile(path, dest / f"{split}.csv")
    else:
        key = spec.sources.downloads[0]
        src = locate_release(spec.source, raw_dir, key, "SST-2", "train.tsv", EXPECTED["sst2"])
        copy_files(src, dest, ("train.tsv", "dev.tsv"), EXPECTED["sst2"])


def read_imdb(root: Path, split: str) -> tuple[list[str], np.ndarray]:
    """Reviews (UTF-8, stripped) and labels, neg then pos, files sorted."""
    texts, labels = text.read_reviews(root, split)
    return [t.decode("utf-8", errors="replace") for t in texts], labels


def read_ag_news(root: Path, split: str) -> tuple[list[str], np.ndarray]:
    """title + " " + description of each row, and the class (1-4 in the file) minus one."""
    path = root / f"{split}.csv"
    texts, labels = [], []
    with open(path, newline="", encoding="utf-8") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if len(row) < 2 or row[0] not in ("1", "2", "3", "4"):
                raise ValueError(f'{path}:{line}: expected "class 1-4","title",... got {row}')
            texts.append(" ".join(row[1:]))
            labels.append(int(row[0]) - 1)
    return texts, np.array(labels, dtype=np.int64)


def read_sst2(root: Path, split: str) -> tuple[list[str], np.ndarray]:
    """Sentences and 0/1 labels of ``train.tsv`` or ``dev.tsv`` (header sentence, label)."""
    path = root / f"{split}.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != ["sentence", "label"]:
        raise ValueError(f"{path}: expected the header 'sentence\\tlabel'; is it GLUE's SST-2?")
    texts, labels = [], []
    for line, row in enumerate(lines[1:], start=2):
        sentence, _, label = row.rpartition("\t")
        if label not in ("0", "1"):
            raise ValueError(f"{path}:{line}: expected 'sentence<TAB>0 or 1', got {row!r}")
        texts.append(sentence)
        labels.append(int(label))
    return texts, np.array(labels, dtype=np.int64)


READERS = {
    "imdb": (read_imdb, "train", "test"),
    "ag_news": (read_ag_news, "train", "test"),
    "sst2": (read_sst2, "train", "dev"),
}


def prepare(spec: TextClsSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """WordPiece ids of train/val/test; val is a seeded slice of the training file and the
    tokenizer is trained on the train split alone (saved with the data, in its hash)."""
    dataset = spec.dataset
    read, train_name, test_name = READERS[dataset]
    root = raw_dir / RAW[dataset]
    train_texts, train_labels = read(root, train_name)
    test_texts, test_labels = read(root, test_name)
    rng = np.random.default_rng(spec.seed)
    index = split_train_val(len(train_texts), spec.n_train, spec.n_val, rng, dataset)
    test = subset(len(test_texts), spec.n_test, rng, f"{dataset} test")

    tok = tokenizer.train([train_texts[i] for i in index["train"]], spec.vocab_size)
    name = tokenizer.save(tok, out_dir)

    def ids(texts: list[str], chosen: np.ndarray) -> list[np.ndarray]:
        encoded = tokenizer.encode(tok, [texts[i] for i in chosen], spec.max_length)
        return [e if len(e) else np.array([tokenizer.UNK_ID], np.uint32) for e in encoded]

    splits = {s: (ids(train_texts, i), train_labels[i]) for s, i in index.items()}
    splits["test"] = (ids(test_texts, test), test_labels[test])
    info: dict[str, Any] = {
        "task": spec.task,
        "kind": "classification",
        "labels": list(LABELS[dataset]),
        "max_length": spec.max_length,
        "tokenizer": name,
        "tokenizer_note": tokenizer.NOTE,
    }
    if spec.source == "standin":
        info["stand_in"] = STAND_IN[dataset]
    vocab = tokenizer.vocab_of(tok)
    return write_prepared(out_dir, splits, vocab, len(LABELS[dataset]), info, extra_files=[name])
