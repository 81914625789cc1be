"""Datasets, one module per task family, each with a Spec, ``fetch`` and ``prepare``.

``fetch`` fills ``data/{profile}/raw/{task}`` (by generating, copying or downloading) and
``prepare`` turns it into ``data/{profile}/prepared/{task}`` (see store.py). Both run as DVC
stages (dvc.yaml), which Snakemake calls; ``python -m pdelab.data`` is their command line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any

from pdelab.spec.registry import Registry


@dataclass(frozen=True)
class TaskData:
    """A task's data module (with ``fetch`` and ``prepare``) and its spec class, both named and
    imported on first use: a training job imports ``pdelab.data.store`` (and so this package)
    but none of the families, the downloader or the stand-ins, which are no part of its code."""

    module_name: str  # in this package
    spec_name: str

    @property
    def qualified(self) -> str:
        """The data module's full name, known without importing it."""
        return f"pdelab.data.{self.module_name}"

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(self.qualified)

    @property
    def spec_class(self) -> type:
        return getattr(self.module, self.spec_name)


TASK_DATA: Registry[TaskData] = Registry("task")
TASK_DATA.register("listops")(TaskData("listops", "ListOpsSpec"))
TASK_DATA.register("imdb_bytes_lra")(TaskData("text", "TextSpec"))
TASK_DATA.register("retrieval")(TaskData("retrieval", "RetrievalSpec"))
TASK_DATA.register("pathfinder")(TaskData("pathfinder_task", "PathfinderSpec"))
TASK_DATA.register("image")(TaskData("image", "ImageSpec"))
# Continuous-Time Attention: WordPiece classification, byte-level IMDb at 2,048, causal LM.
TASK_DATA.register("imdb_wordpiece")(TaskData("textcls", "ImdbSpec"))
TASK_DATA.register("ag_news")(TaskData("textcls", "AgNewsSpec"))
TASK_DATA.register("sst2")(TaskData("textcls", "Sst2Spec"))
TASK_DATA.register("imdb_bytes")(TaskData("text", "ImdbBytesSpec"))
TASK_DATA.register("wikitext")(TaskData("wikitext", "WikiTextSpec"))
# Fractional Neural Attention: Multi30K En-De (Table II); Fashion-MNIST at 32x32, the offline
# stand-in for its ViT's CIFAR-10.
TASK_DATA.register("multi30k")(TaskData("translation", "Multi30kSpec"))
TASK_DATA.register("fashion_mnist32")(TaskData("fashion_mnist", "FashionMnistSpec"))


def data_spec(params: dict[str, Any], profile: str, task: str) -> Any:
    """The task's data spec for a profile, rejecting unknown keys (names the key)."""
    from pdelab.spec.config import ConfigError, build

    family = TASK_DATA.get(task)
    try:
        values = params["data"][profile][task]
    except (KeyError, TypeError):
        raise ConfigError(
            f"data.{profile}.{task}: missing; add the task's data parameters"
        ) from None
    spec = build(family.spec_class, values or {}, f"data.{profile}.{task}")
    try:
        check_values(spec)
        if hasattr(spec, "check"):  # a spec's own check of its keys together
            spec.check()
    except ValueError as err:  # "key: what is wrong"
        raise ConfigError(f"data.{profile}.{task}.{err}") from None
    return spec


AT_LEAST_ONE = ("n", "max_length", "topics", "topic_words", "vocab_size", "min_freq")
# The tokens the WordPiece tokenizer reserves (pdelab.data.tokenizer.SPECIALS: <pad>, <cls>,
# <unk>; a test pins the two together): a vocabulary of no more holds no word piece, and the
# data job would stop only after fetching its corpus.
TOKENIZER_SPECIALS = ("<pad>", "<cls>", "<unk>")
# keys with a higher floor than AT_LEAST_ONE's, with why
AT_LEAST = {
    "vocab_size": (
        len(TOKENIZER_SPECIALS) + 1,
        f"more than the {len(TOKENIZER_SPECIALS)} special tokens the tokenizer reserves "
        f"({', '.join(TOKENIZER_SPECIALS)}); e.g. 500",
    )
}


def check_values(spec: Any) -> None:
    """What every data spec's keys mean, whichever task's (ValueError "key: ..."): counts and
    lengths are not negative (AT_LEAST_ONE at least 1), a ``*_fraction`` is in (0, 1] and the
    held-out fractions leave a training split, a probability (``p_*``, ``*_p``) is in [0, 1]."""
    held_out = 0.0
    for f in fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if f.name in AT_LEAST and value < AT_LEAST[f.name][0]:
            low, why = AT_LEAST[f.name]
            raise ValueError(f"{f.name}: must be at least {low}, {why}; got {value}")
        if isinstance(value, int) and value < (1 if f.name in AT_LEAST_ONE else 0):
            low = 1 if f.name in AT_LEAST_ONE else 0
            raise ValueError(f"{f.name}: must be at least {low}, got {value}")
        if f.name.endswith("_fraction"):
            if not 0 < value <= 1:
                raise ValueError(f"{f.name}: a fraction in (0, 1], got {value}")
            held_out += value if f.name != "train_fraction" else 0.0
            if held_out >= 1:
                raise ValueError(
                    f"{f.name}: the held-out fractions sum to {held_out:g}, leaving no "
                    "training split; keep their sum below 1"
                )
        if (f.name.startswith("p_") or f.name.endswith("_p")) and not 0 <= value <= 1:
            raise ValueError(f"{f.name}: a probability in [0, 1], got {value}")


def check_data_spec(params: dict[str, Any], profile: str, task: str) -> None:
    data_spec(params, profile, task)


def raw_dir(profile: str, task: str) -> Path:
    return Path("data") / profile / "raw" / task
