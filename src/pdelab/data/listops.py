"""ListOps (Nangia & Bowman 2018) as generated for the Long Range Arena.

The generator follows LRA's algorithm: below ``max_depth`` a node becomes an operator with
probability ``value_p`` (LRA's VALUE_P = 0.25; despite its name it is the probability of an
*operator*, so leaves occur with probability 0.75) taking 2..max_args arguments, otherwise a
digit 0-9. Trees are drawn until ``n_train + n_val + n_test`` distinct ones have a length
(tokens without parentheses) strictly between ``min_length`` and ``max_length``. Unlike LRA,
which splits a Python set (its order changes with the hash seed), the split order here is the
order of generation, so a seed fixes the data byte for byte.

Files are written in the LRA release format (``basic_{train,val,test}.tsv`` with columns
``Source`` and ``Target``), and ``prepare`` reads that format, so the released files drop in.
"""

from __future__ import annotations

import csv
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data.errors import ArchiveLayoutError, SourceNotFoundError
from pdelab.data.progress import Progress
from pdelab.data.sources import Sources
from pdelab.data.store import RESERVED, SPLITS, write_prepared

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VOCAB = (*RESERVED, *(str(d) for d in range(10)), *OPERATORS, END)
TOKEN_ID = {tok: i for i, tok in enumerate(VOCAB)}
NUM_CLASSES = 10

Tree = int | tuple[str, tuple["Tree", ...]]
LAYOUT = "basic_{train,val,test}.tsv (the LRA release's listops-1000 folder)"


@dataclass(frozen=True)
class ListOpsSpec:
    """Data parameters; ``source`` is "generate" or a folder holding the LRA release's TSVs."""

    sources: ClassVar[Sources] = Sources(made=("generate",), layout=LAYOUT)

    source: str = "generate"
    n_train: int = 96_000
    n_val: int = 2_000
    n_test: int = 2_000
    min_length: int = 500
    max_length: int = 2_000
    max_depth: int = 10
    max_args: int = 10
    value_p: float = 0.25
    seed: int = 0

    def check(self) -> None:
        """Settings the generator can meet (ValueError naming the key): lengths strictly
        between min_length and max_length that a tree of max_depth and max_args can have, so
        the data job never draws trees without end."""
        if self.max_depth < 1 or self.max_args < 2:
            key = "max_depth" if self.max_depth < 1 else "max_args"
            low = 1 if key == "max_depth" else 2
            raise ValueError(f"{key}: must be at least {low}, got {getattr(self, key)}")
        longest = 1
        for _ in range(self.max_depth - 1):
            longest = 2 + self.max_args * longest
        if self.min_length + 1 > min(self.max_length - 1, longest):
            raise ValueError(
                f"min_length: sequences are drawn with min_length < length < max_length, and "
                f"min_length = {self.min_length}, max_length = {self.max_length} with trees of "
                f"at most {longest} tokens (max_depth {self.max_depth}, max_args "
                f"{self.max_args}) leave no length; lower min_length or raise max_length"
            )


LRA = ListOpsSpec()  # the defaults are LRA's listops-1000 settings


def stand_in(spec: ListOpsSpec) -> str:
    """The sentence naming how generated data differ from LRA's ListOps ("" for the release's
    files, or for the generator at every LRA setting): a shorter or shallower ListOps is a
    different task, and its numbers must not read as LRA's."""
    if spec.source != "generate":
        return ""
    lengths = f"{spec.min_length + 1}-{spec.max_length - 1}"
    lra_lengths = f"{LRA.min_length + 1:,}-{LRA.max_length - 1:,}"
    changed = [
        (f"sequences of {lengths} tokens", f"{lra_lengths}")
        if (spec.min_length, spec.max_length) != (LRA.min_length, LRA.max_length)
        else None,
        (f"depth up to {spec.max_depth}", str(LRA.max_depth))
        if spec.max_depth != LRA.max_depth
        else None,
        (f"up to {spec.max_args} arguments", str(LRA.max_args))
        if spec.max_args != LRA.max_args
        else None,
        (f"operator probability {spec.value_p}", str(LRA.value_p))
        if spec.value_p != LRA.value_p
        else None,
        (
            f"{spec.n_train:,}/{spec.n_val:,}/{spec.n_test:,} train/val/test items",
            f"{LRA.n_train:,}/{LRA.n_val:,}/{LRA.n_test:,}",
        )
        if (spec.n_train, spec.n_val, spec.n_test) != (LRA.n_train, LRA.n_val, LRA.n_test)
        else None,
    ]
    shown = [f"{ours} (LRA: {lra})" for ours, lra in (c for c in changed if c)]
    if not shown:
        return ""
    return "LRA's ListOps generator at a smaller setting stands in for LRA's ListOps: " + (
        ", ".join(shown)
    )


def generate_tree(rng: random.Random, spec: ListOpsSpec, depth: int = 1) -> tuple[Tree, int]:
    """One random expression and its length in tokens (operator, arguments and ']')."""
    if depth < spec.max_depth and rng.random() <= spec.value_p:
        args, length = [], 2
        for _ in range(rng.randint(2, spec.max_args)):
            sub, sub_length = generate_tree(rng, spec, depth + 1)
            args.append(sub)
            length += sub_length
        return (rng.choice(OPERATORS), tuple(args)), length
    return rng.randrange(10), 1


def to_source(tree: Tree) -> str:
    """The LRA string form, with the parentheses of its left-nested pairs."""
    if isinstance(tree, int):
        return str(tree)
    op, args = tree
    text = f"( {op} {to_source(args[0])} )"
    for arg in args[1:]:
        text = f"( {text} {to_source(arg)} )"
    return f"( {text} {END} )"


def tokenize(source: str) -> list[str]:
    """LRA's tokenization: parentheses dropped, every other symbol (']' too) a token."""
    return [tok for tok in source.split() if tok not in ("(", ")")]


def evaluate(tokens: list[str]) -> int:
    """Value of a tokenized expression: MIN, MAX, MED (integer median), SM (sum mod 10)."""
    stack: list[list[Any]] = []
    for tok in tokens:
        if tok in OPERATORS:
            stack.append([tok])
        elif tok == END:
            op, *args = stack.pop()
            value = {
                "[MIN": min,
                "[MAX": max,
                "[MED": lambda a: int(np.median(a)),
                "[SM": lambda a: sum(a) % 10,
            }[op](args)
            if not stack:
                return value
            stack[-1].append(value)
        elif stack:
            stack[-1].append(int(tok))
        else:
            return int(tok)
    raise ValueError(f"unbalanced ListOps expression: {' '.join(tokens[:20])} ...")


def generate(spec: ListOpsSpec) -> dict[str, list[tuple[str, int]]]:
    """{split: [(source, target)]}: distinct trees with min_length < length < max_length.

    Reports its progress on stderr (the data job's log): at LRA's setting, drawing 100,000
    distinct trees of that length takes minutes."""
    rng = random.Random(spec.seed)
    wanted = spec.n_train + spec.n_val + spec.n_test
    examples: dict[str, int] = {}
    drawn = 0
    what = f"sequences of {spec.min_length + 1:,}-{spec.max_length - 1:,} tokens"
    with Progress("listops", wanted, what) as progress:
        while len(examples) < wanted:
            tree, length = generate_tree(rng, spec)
            drawn += 1
            if spec.min_length < length < spec.max_length:
                source = to_source(tree)
                if source not in examples:
                    examples[source] = evaluate(tokenize(source))
                    progress.update(note=f"{drawn:,} trees drawn")
    items = list(examples.items())
    bounds = np.cumsum([0, spec.n_train, spec.n_val, spec.n_test])
    return {s: items[bounds[i] : bounds[i + 1]] for i, s in enumerate(SPLITS)}


def write_tsv(rows: list[tuple[str, int]], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(rows)


def read_tsv(path: Path) -> list[tuple[str, int]]:
    """Rows of an LRA ListOps TSV; the header row is optional."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if rows and rows[0][:2] == ["Source", "Target"]:
        rows = rows[1:]
    try:
        return [(source, int(target)) for source, target in rows]
    except ValueError as err:
        raise ValueError(f"{path}: expected two columns Source<TAB>Target ({err})") from err


def fetch(spec: ListOpsSpec, raw_dir: Path) -> None:
    """Fill raw_dir with basic_{train,val,test}.tsv: generated, or copied from ``source``."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    if spec.source == "generate":
        for split, rows in generate(spec).items():
            write_tsv(rows, raw_dir / f"basic_{split}.tsv")
        return
    src = Path(spec.source).expanduser()
    if not src.is_dir():
        error = ArchiveLayoutError if src.exists() else SourceNotFoundError
        problem = "a file, not a folder" if src.exists() else "does not exist"
        raise error(
            f"listops source {spec.source!r}: {src} {problem}; expected a folder holding "
            f"{LAYOUT}, or source: generate"
        )
    for split in SPLITS:
        path = src / f"basic_{split}.tsv"
        if not path.exists():
            raise ArchiveLayoutError(
                f"listops source {spec.source!r}: {path} not found; expected a folder holding "
                f"{LAYOUT}, or source: generate"
            )
        shutil.copyfile(path, raw_dir / path.name)


def prepare(spec: ListOpsSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Tokenize the TSVs into the prepared store; returns the manifest. Reports its progress
    on stderr too: LRA's 100,000 sequences take most of a minute to tokenize."""
    rows = {split: read_tsv(raw_dir / f"basic_{split}.tsv") for split in SPLITS}
    splits = {}
    total = sum(map(len, rows.values()))
    with Progress("listops", total, "sequences", action="tokenizing") as progress:
        for split in SPLITS:
            sequences = []
            for source, _ in rows[split]:
                try:
                    sequences.append(np.array([TOKEN_ID[t] for t in tokenize(source)], np.int64))
                except KeyError as err:
                    raise ValueError(f"{split}: unknown ListOps token {err}") from err
                progress.update()
            splits[split] = (sequences, np.array([t for _, t in rows[split]], dtype=np.int64))
    named = stand_in(spec)
    info = {"task": "listops"} | ({"stand_in": named} if named else {})
    return write_prepared(out_dir, splits, VOCAB, NUM_CLASSES, info)
