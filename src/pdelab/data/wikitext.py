"""Causal language modelling on WikiText-103 (Continuous-Time Attention, Appendix B.3.2).

Real data: the pinned ``wikitext-103-v1.zip`` (Merity et al. 2017), whose
``wikitext-103/wiki.{train,valid,test}.tokens`` hold Wikipedia articles one paragraph per line.
An article starts at a top-level heading line `` = Title = `` (exactly one ``=`` on each side;
`` = = Section = = `` lines are sections inside it) and runs to the next one; one example is
one article: its non-blank lines, heading included, stripped and joined by newlines. The paper
trains on 3% of the training set (Table 8): ``train_fraction`` of the training articles, a
seeded sample kept in file order; validation and test keep all their articles unless
``n_val_docs`` / ``n_test_docs`` ask for a seeded subset.

``source``: "download", the zip, a folder holding ``wikitext-103/``, or "standin". ``fetch``
copies the three ``.tokens`` files into ``raw_dir/wikitext-103``; the stand-in is written in
the same format, and ``prepare`` reads only that format.

Stand-in: real English prose that ships with CPython, see :data:`STAND_IN`. Each of the 79 help
topics of ``pydoc_data.topics`` (about 465 KB of the Python reference manual) becomes one
article: its title as the `` = Title = `` line, its reStructuredText section titles as
`` = = Section = = `` lines, each paragraph on one line. A seeded permutation of the topics
puts STANDIN_HELD_OUT of them into validation, as many into test, and the rest into training.

Storage: each example is one article's full WordPiece ids (ragged, never windowed here: the
trainer cuts documents into windows of seq_len + 1 tokens itself), labels all 0 and
``num_classes`` 0; the manifest has ``kind: lm`` and ``tokens`` (token count per split). The
WordPiece tokenizer (tokenizer.py, standing in for the paper's bert-base-uncased) is trained on
the training articles alone; WikiText's own ``<unk>`` markers map to its ``<unk>``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data import tokenizer
from pdelab.data.release import copy_files, locate_release
from pdelab.data.sources import Sources
from pdelab.data.store import subset, write_prepared

STAND_IN = (
    "the Python reference manual text that ships with CPython (pydoc_data.topics) stands in "
    "for WikiText-103: one article per help topic (79), split by a seeded permutation into "
    "training, validation and test articles"
)
EXPECTED = "wikitext-103/wiki.{train,valid,test}.tokens (the wikitext-103-v1.zip layout)"
FILES = {"train": "wiki.train.tokens", "val": "wiki.valid.tokens", "test": "wiki.test.tokens"}
STANDIN_HELD_OUT = 8
_UNDERLINE = {"*": 1, "=": 2, "-": 3}  # reStructuredText title levels in pydoc_data


@dataclass(frozen=True)
class WikiTextSpec:
    """Data parameters; the defaults are the paper's (3% of the training articles)."""

    sources: ClassVar[Sources] = Sources(downloads=("wikitext103",), layout=EXPECTED)

    source: str = "download"
    train_fraction: float = 0.03  # of the training articles (1.0: all)
    n_val_docs: int = 0  # validation articles, a seeded subset (0: all)
    n_test_docs: int = 0  # test articles, a seeded subset (0: all)
    max_doc_tokens: int = 0  # cut longer articles (0: keep them whole)
    vocab_size: int = 30_522  # bert-base-uncased's
    seed: int = 0


# --------------------------------------------------------------------------------------------
# The wiki.*.tokens format
# --------------------------------------------------------------------------------------------


def is_title(line: str) -> bool:
    """True for a top-level heading `` = Title = `` (not `` = = Section = = ``)."""
    s = line.strip()
    return len(s) > 4 and s.startswith("= ") and s.endswith(" =") and s[2] != "=" and s[-3] != "="


def iter_articles(path: Path) -> Iterator[str]:
    """The articles of a ``wiki.*.tokens`` file, in order (text before the first title, if
    any, is an article of its own)."""
    lines: list[str] = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if is_title(raw) and lines:
                yield "\n".join(lines)
                lines = []
            if line:
                lines.append(line)
    if lines:
        yield "\n".join(lines)


def count_articles(path: Path) -> int:
    return sum(1 for _ in iter_articles(path))


def read_articles(path: Path, chosen: np.ndarray | None = None) -> list[str]:
    """All articles, or those at the (sorted) indices ``chosen``, streaming the file."""
    if chosen is None:
        return list(iter_articles(path))
    wanted, out = set(int(i) for i in chosen), []
    for i, article in enumerate(iter_articles(path)):
        if i in wanted:
            out.append(article)
    return out


def heading(title: str, level: int) -> str:
    marks = " ".join("=" * level)
    return f" {marks} {title} {marks} "


def topic_lines(key: str, body: str) -> list[str]:
    """One pydoc topic as WikiText lines: a title line, section lines and paragraph lines."""
    lines, title = [], key
    for block in re.split(r"\n\s*\n", body.strip()):
        rows = [r.strip() for r in block.splitlines() if r.strip()]
        underline = rows[-1] if len(rows) == 2 else ""
        level = _UNDERLINE.get(underline[:1], 0) if set(underline) == {underline[:1]} else 0
        if level and len(underline) >= 3:
            if level == 1 and not lines:
                title = rows[0]
                continue
            lines.append(heading(rows[0], max(level, 2)))
        else:
            paragraph = " ".join(rows)
            if is_title(paragraph):  # never start a new article inside one
                paragraph = f"( {paragraph} )"
            lines.append(f" {paragraph} ")
    return [heading(title, 1), *lines]


def write_standin(spec: WikiTextSpec, dest: Path) -> None:
    """The pydoc topics as ``dest/wiki.{train,valid,test}.tokens``, split by a seeded
    permutation of the topics (each split's articles in alphabetical order of topic)."""
    from pydoc_data.topics import topics

    keys = sorted(topics)
    order = np.random.default_rng(spec.seed).permutation(len(keys))
    held = STANDIN_HELD_OUT
    parts = {"val": order[:held], "test": order[held : 2 * held], "train": order[2 * held :]}
    dest.mkdir(parents=True)
    for split, index in parts.items():
        with open(dest / FILES[split], "w", encoding="utf-8") as f:
            for i in np.sort(index):
                f.write(" \n")
                for line in topic_lines(keys[i], topics[keys[i]]):
                    f.write(f"{line}\n \n")


def fetch(spec: WikiTextSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/wikitext-103`` with the three ``.tokens`` files (real or stand-in)."""
    dest = raw_dir / "wikitext-103"
    shutil.rmtree(dest, ignore_errors=True)
    if spec.source == "standin":
        write_standin(spec, dest)
        return
    key = spec.sources.downloads[0]
    src = locate_release(spec.source, raw_dir, key, "wikitext-103", FILES["train"], EXPECTED)
    copy_files(src, dest, FILES.values(), EXPECTED)


def prepare(spec: WikiTextSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Whole articles as WordPiece ids per split; the tokenizer is fit on the train split."""
    if not 0 < spec.train_fraction <= 1:
        raise ValueError(f"wikitext: train_fraction must be in (0, 1], got {spec.train_fraction}")
    root = raw_dir / "wikitext-103"
    rng = np.random.default_rng(spec.seed)
    wanted = {"train": None, "val": spec.n_val_docs, "test": spec.n_test_docs}
    articles: dict[str, list[str]] = {}
    for split, n in wanted.items():
        path = root / FILES[split]
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; expected {EXPECTED}")
        available = count_articles(path)
        if split == "train":
            n = max(1, round(spec.train_fraction * available))
        chosen = subset(available, n or available, rng, f"wikitext {split} articles")
        articles[split] = read_articles(path, chosen)

    tok = tokenizer.train(articles["train"], spec.vocab_size)
    name = tokenizer.save(tok, out_dir)
    cut = spec.max_doc_tokens or None
    splits = {}
    for split, docs in articles.items():
        ids = tokenizer.encode(tok, docs, cut)
        splits[split] = (ids, np.zeros(len(ids), dtype=np.int64))
    info: dict[str, Any] = {
        "task": "wikitext",
        "kind": "lm",
        "tokens": {split: int(sum(len(s) for s in seqs)) for split, (seqs, _) in splits.items()},
        "train_fraction": spec.train_fraction,
        "tokenizer": name,
        "tokenizer_note": tokenizer.NOTE,
    }
    if spec.source == "standin":
        used = ", ".join(f"{len(articles[s])} {s}" for s in ("train", "val", "test"))
        info["stand_in"] = f"{STAND_IN} ({used} articles used)"
    vocab = tokenizer.vocab_of(tok)
    return write_prepared(out_dir, splits, vocab, 0, info, extra_files=[name])
