"""Task kinds: what a task's data asks the trainer to optimise, evaluate and record.

A task kind (classification, "lm" for causal language modelling, translation, or one a paper
adds) is registered here by name, as a :class:`TaskKind`, with the data modules whose tasks are
of that kind (``data``: the module in ``pdelab.spec.data.TASK_DATA`` that prepares a task's data
decides what the task is, and writes the task kind into the prepared manifest, which a job
checks against this declaration); its option check, which reads only a resolved spec, so that
params.yaml's validation can run it on every run before any job starts (:func:`check`; a job
runs it again before it loads its data), and the module of its torch strategy (``STRATEGY``:
loading, model, loss, evaluation, test metrics, history columns; see
``pdelab.training.strategy``), imported only when a job asks for it. This module imports no
torch: params.yaml is validated when the Snakefile is parsed.

The word "kind" alone also names a study's kind in this project; here it is always the task
kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pdelab.spec.data import TASK_DATA
from pdelab.spec.fields import ConfigError
from pdelab.spec.model import DiffusionSpec, ModelSpec
from pdelab.spec.registry import Registry

DEFAULT = "classification"  # a manifest without ``kind`` holds labelled examples


class RunSpec(Protocol):
    """What a task kind's check reads of a run (a pdelab.spec.config.RunSpec, which calls the
    check as it resolves the run, so this module cannot import it)."""

    task: str
    model: ModelSpec
    train: Any  # pdelab.spec.config.TrainSpec
    diffusion: DiffusionSpec


# (run, origin) -> None, or ConfigError naming the key; origin maps "section.key" to the
# params.yaml layer that set it, empty where unknown (the message then names the key alone)
Check = Callable[[RunSpec, Mapping[str, str]], None]


@dataclass(frozen=True)
class TaskKind:
    """One task kind: its torch-free option check and where its strategy lives."""

    name: str
    check: Check
    module: str  # the module whose STRATEGY trains this task kind (imports torch)
    data: tuple[str, ...] = ()  # the data modules (pdelab.data.*) whose tasks are of this kind

    def strategy(self) -> Any:
        """The task kind's strategy (a pdelab.training.strategy.Strategy, which imports
        torch, so not named here), importing its module on first use."""
        return importlib.import_module(self.module).STRATEGY


TASK_KINDS: Registry[TaskKind] = Registry("task kind")


def register(name: str, check: Check, module: str, data: tuple[str, ...] = ()) -> TaskKind:
    """Add a task kind (a paper may add its own beside the built-in three); ``data``: the data
    modules whose tasks are of this kind (a task of no listed module is a classification)."""
    return TASK_KINDS.register(name)(TaskKind(name, check, module, data))


def key(origin: Mapping[str, str], name: str) -> str:
    """Where params.yaml set ``name`` ("section.key"), for an error that names the layer."""
    return origin.get(name, name)


def refuse(run: RunSpec, origin: Mapping[str, str], unused: Mapping[str, Any], why: str) -> None:
    """ConfigError naming the first set option among ``unused`` ("section.key": value)."""
    for name, value in unused.items():
        if value:
            raise ConfigError(
                f"{run.task}: {key(origin, name)} = {value!r} {why}; leave it unset for this task"
            )


def check_pad_loss(run: RunSpec, origin: Mapping[str, str], task_kind: str) -> None:
    """train.loss_includes_pad scores <pad> targets, which only translation targets have."""
    if run.train.loss_includes_pad:
        raise ConfigError(
            f"{run.task}: {key(origin, 'train.loss_includes_pad')} applies to translation tasks "
            f"only; this task's data is of task kind {task_kind!r}. Leave it false"
        )


def check_classification(run: RunSpec, origin: Mapping[str, str]) -> None:
    """Labelled examples: every model option applies (model.patch is checked against the data
    when the model is built, as it needs the images' size)."""
    check_pad_loss(run, origin, "classification")


def check_language_model(run: RunSpec, origin: Mapping[str, str]) -> None:
    """Documents cut into windows of train.seq_len + 1 tokens; no image patches."""
    check_pad_loss(run, origin, "lm")
    if run.model.patch:
        raise ConfigError(
            f"{run.task}: {key(origin, 'model.patch')} applies to images, not language models"
        )
    if run.train.seq_len < 1:
        raise ConfigError(
            f"{run.task}: {key(origin, 'train.seq_len')} = {run.train.seq_len}: a "
            "language-modelling task needs train.seq_len >= 1 (tokens per training window); "
            "set it in params.yaml"
        )


def check_translation(run: RunSpec, origin: Mapping[str, str]) -> None:
    """The encoder-decoder refuses the mechanisms that act along the token axis of one sequence
    (diffusion sites, smoothing, another encoder block) and image patches: in the decoder a
    two-sided stencil would read later target tokens."""
    m = run.model
    unused = {
        "diffusion.sites": list(run.diffusion.sites),
        "model.smoothing": m.smoothing,
        "model.patch": m.patch,
        "model.block": "" if m.block == "transformer" else m.block,
    }
    refuse(run, origin, unused, "does not apply to the encoder-decoder of a translation task")


register("classification", check_classification, "pdelab.training.classification")
register("lm", check_language_model, "pdelab.training.language_model", ("pdelab.data.wikitext",))
register(
    "translation", check_translation, "pdelab.training.translation", ("pdelab.data.translation",)
)


def declared(task: str) -> TaskKind:
    """The task kind of a task: the one registered for the data module that prepares its data
    (pdelab.spec.data.TASK_DATA), classification where none is."""
    module = TASK_DATA.get(task).qualified  # named, not imported: a job never runs it
    kinds = [TASK_KINDS.get(name) for name in TASK_KINDS if module in TASK_KINDS.get(name).data]
    return kinds[0] if kinds else TASK_KINDS.get(DEFAULT)


def check(run: RunSpec, origin: Mapping[str, str] | None = None) -> None:
    """Run the options of a resolved spec past its task's kind (ConfigError names the key)."""
    declared(run.task).check(run, origin or {})


def of_data(task: str, manifest: Mapping[str, Any]) -> TaskKind:
    """The task kind of prepared data: the manifest's ``kind``, which must be the one
    registered for the task's data module (data prepared by other code, or another task's
    data under this task's name, would be trained and scored as the wrong task kind)."""
    recorded = str(manifest.get("kind", DEFAULT))
    expected = declared(task).name
    if recorded != expected:
        raise ValueError(
            f"{task}: the prepared data's manifest says task kind {recorded!r}, but its data "
            f"module makes it a task of kind {expected!r}; prepare the data again "
            f"(python -m pdelab.data build {task} --profile ...) or point data_dir at this "
            "task's data"
        )
    return TASK_KINDS.get(recorded)


def import_strategies() -> None:
    """Import every registered task kind's strategy (for a job, before its imports are timed
    as done, and for the warm server, which forks jobs with them loaded)."""
    for name in TASK_KINDS:
        TASK_KINDS.get(name).strategy()


__all__ = [
    "TASK_KINDS",
    "TaskKind",
    "check",
    "declared",
    "import_strategies",
    "of_data",
    "register",
]
