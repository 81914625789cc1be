"""Every paper's mechanism on the same LRA tasks: a table none of the papers has.

Not a paper: a study kind, ``mechanisms``, over variants the papers' packages define (diffusion
after the embedding, PDE-evolved attention in its leak-free form, fractional attention, the
LDN block), each trained with the task's model, optimiser, schedule, epochs and seeds. It reads
the summary of runs and, for step time and memory, its rule's timing of every mechanism in one
process (rules.smk), so it imports no paper's code. What it shows and why: README.md.
"""

from collections.abc import Iterable
from typing import Any

from pdelab.spec.plugins import Paper, register

STUDY_KEYS: dict[str, dict[str, Any]] = {
    "rows": {
        "type": "object",
        "description": "the table's row label -> our variant, in the table's order",
        "additionalProperties": {"type": "string"},
    },
}


# step time and memory of a task's mechanisms, timed interleaved in one process (rules.smk)
TIMING_FILE = "mechanisms/timing_{task}.parquet"


def study_inputs(name: str, study: dict[str, Any]) -> list[str]:
    """The timing of each task the study runs (in this profile)."""
    return [TIMING_FILE.format(task=task) for task in study["tasks"]]


def named_variants(study: dict[str, Any]) -> list[str]:
    """The variants the study's rows name."""
    return list(study.get("rows", {}).values())


def table_variants(study: dict[str, Any]) -> list[str]:
    """The table has the baseline's row and one per entry of its rows."""
    return [study.get("baseline", "baseline"), *study["rows"].values()]


def timing_variants(studies: Iterable[Any], task: str) -> list[str]:
    """The variants the mechanisms studies among ``studies`` run on a task, baselines first:
    what the mechanisms_timing rule times."""
    found = []
    for study in (s for s in studies if s.kind == "mechanisms"):
        runs = {r.variant for r in study.runs if r.task == task}
        rows = [study.baseline or "baseline", *study["rows"].values()]
        found += [v for v in rows if v in runs]
    return list(dict.fromkeys(found))


def timing_baseline(studies: Iterable[Any]) -> str:
    """The one baseline of the mechanisms studies, which their timing is over."""
    names = {s.baseline or "baseline" for s in studies if s.kind == "mechanisms"}
    if len(names) != 1:
        raise ValueError(f"the mechanisms studies name different baselines: {names}")
    return names.pop()


PAPER = register(
    Paper(
        name="mechanisms",
        title="Every paper's mechanism on the same LRA tasks",
        study_kinds=("mechanisms",),
        study_keys=STUDY_KEYS,
        named_variants=named_variants,
        table_variants=table_variants,
        study_inputs=study_inputs,
    )
)
