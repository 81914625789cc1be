"""Datasets, one module per task family, each with a Spec, ``fetch`` and ``prepare``.

``fetch`` fills ``data/{profile}/raw/{task}`` (by generating, copying or downloading) and
``prepare`` turns it into ``data/{profile}/prepared/{task}`` (see store.py). Both run as DVC
stages (dvc.yaml), which Snakemake calls; ``python -m pdelab.data`` is their command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pdelab.data import (
    fashion_mnist,
    image,
    listops,
    pathfinder_task,
    retrieval,
    text,
    textcls,
    translation,
    wikitext,
)
from pdelab.data.sources import TaskStatus, task_status
from pdelab.registry import Registry


@dataclass(frozen=True)
class TaskData:
    """A task's data module (with ``fetch`` and ``prepare``) and its spec class."""

    module: ModuleType
    spec_class: type


TASK_DATA: Registry[TaskData] = Registry("task")
TASK_DATA.register("listops")(TaskData(listops, listops.ListOpsSpec))
TASK_DATA.register("imdb_bytes_lra")(TaskData(text, text.TextSpec))
TASK_DATA.register("retrieval")(TaskData(retrieval, retrieval.RetrievalSpec))
TASK_DATA.register("pathfinder")(TaskData(pathfinder_task, pathfinder_task.PathfinderSpec))
TASK_DATA.register("image")(TaskData(image, image.ImageSpec))
# Continuous-Time Attention: WordPiece classification, byte-level IMDb at 2,048, causal LM.
TASK_DATA.register("imdb_wordpiece")(TaskData(textcls, textcls.ImdbSpec))
TASK_DATA.register("ag_news")(TaskData(textcls, textcls.AgNewsSpec))
TASK_DATA.register("sst2")(TaskData(textcls, textcls.Sst2Spec))
TASK_DATA.register("imdb_bytes")(TaskData(text, text.ImdbBytesSpec))
TASK_DATA.register("wikitext")(TaskData(wikitext, wikitext.WikiTextSpec))
# Fractional Neural Attention: Multi30K En-De (Table II); Fashion-MNIST at 32x32, the offline
# stand-in for its ViT's CIFAR-10.
TASK_DATA.register("multi30k")(TaskData(translation, translation.Multi30kSpec))
TASK_DATA.register("fashion_mnist32")(TaskData(fashion_mnist, fashion_mnist.FashionMnistSpec))


def data_spec(params: dict[str, Any], profile: str, task: str) -> Any:
    """The task's data spec for a profile, rejecting unknown keys (names the key)."""
    from pdelab.config import ConfigError, build

    family = TASK_DATA.get(task)
    try:
        values = params["data"][profile][task]
    except (KeyError, TypeError):
        raise ConfigError(
            f"data.{profile}.{task}: missing; add the task's data parameters"
        ) from None
    spec = build(family.spec_class, values or {}, f"data.{profile}.{task}")
    if hasattr(spec, "check"):  # a spec's own check of its keys together: "key: what is wrong"
        try:
            spec.check()
        except ValueError as err:
            raise ConfigError(f"data.{profile}.{task}.{err}") from None
    return spec


def check_data_spec(params: dict[str, Any], profile: str, task: str) -> None:
    data_spec(params, profile, task)


def raw_dir(profile: str, task: str) -> Path:
    return Path("data") / profile / "raw" / task


def data_status(params: dict[str, Any], profile: str, tasks: list[str]) -> list[TaskStatus]:
    """Where each task's data of a run profile stands (pdelab.data.sources), from its data
    parameters and the disk, never the network."""
    return [task_status(data_spec(params, profile, task), profile, task) for task in tasks]
