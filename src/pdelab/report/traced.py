"""Every number traceable: each study section of a paper's page ends with the runs behind its
table, one row per (task, variant): how many finished (n), their seeds, the commit and the data
version they were trained from, and a link that opens their MLflow runs table filtered to them.
In the page's HTML each number of the study's tables links to its row (:class:`TracedCells`),
so a reader goes from a number to its runs in one click.

A cell's (task, variant) is read from its row and its column's name (a row of ``listops`` under
``ours after_mlp (%)``, or a row of ``after_mlp`` under ``listops ours``); the paper's columns
and the cells naming a task or variant lead nowhere. The MLflow link needs the experiment's id,
which the store rule records (results/mlflow/experiments.json); without it the row gives the
filter to paste into the experiment's search box."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tabulate import tabulate

from pdelab.report.history import UI
from pdelab.report.page import anchor
from pdelab.spec.studies import Study
from pdelab.tracking.log import experiment_name, runs_url, study_filter

NO_VALUE = "n/a"


def runs_heading(study: str) -> str:
    return f"The runs behind {study}"


def row_anchor(study: str, task: str, variant: str) -> str:
    return anchor(f"runs {study} {task} {variant}")


def experiment_ids(results: Path) -> dict[str, str]:
    """Experiment name -> id, as the store rule recorded them (empty when it has not run)."""
    store = results / "mlflow" / "experiments.json"
    if not store.is_file():
        return {}
    return dict(json.loads(store.read_text()).get("experiments", {}))


def mlflow_cell(study: str, task: str, variant: str, profile: str, ids: Mapping[str, str]) -> str:
    """A link to the MLflow runs of (task, variant) in this study, or the filter to paste."""
    search = f"tags.variant = '{variant}' and {study_filter(study)}"
    name = experiment_name(task, profile)
    if name in ids:
        return f"[runs]({runs_url(UI, [ids[name]], search)})"
    return f"``{search}`` in `{name}`"


def values(runs: pd.DataFrame, column: str, width: int | None = None) -> str:
    """The distinct values of a column of these runs, each cut to ``width``."""
    if column not in runs:
        return NO_VALUE
    found = sorted({str(v)[:width] for v in runs[column].dropna() if str(v)})
    return ", ".join(found) or NO_VALUE


def runs_section(
    study: Study, runs: pd.DataFrame, profile: str, ids: Mapping[str, str]
) -> list[str]:
    """A study's runs, one row per (task, variant) that has any, under :func:`runs_heading`."""
    rows = []
    for task in study.tasks:
        for variant in study.variants:
            mine = runs[(runs["task"] == task) & (runs["variant"] == variant)]
            if mine.empty:
                continue
            finished = mine[mine["status"] == "ok"] if "status" in mine else mine
            seeds = ", ".join(str(s) for s in sorted(mine["seed"]))
            other = len(mine) - len(finished)
            rows.append(
                [
                    task,
                    variant,
                    str(len(finished)),
                    seeds + (f" ({other} not finished)" if other else ""),
                    values(mine, "git_commit"),
                    values(mine, "data_hash", 12),
                    mlflow_cell(study.name, task, variant, profile, ids),
                ]
            )
    if not rows:
        return []
    header = ["task", "variant", "n", "seeds", "commit", "data version", "MLflow"]
    return [
        f"### {runs_heading(study.name)}",
        "",
        "Each number of the table above links here, to the runs it is made from: n finished "
        "runs, their seeds, the commit and the data version (content hash) they were trained "
        "from, and their MLflow runs.",
        "",
        tabulate(rows, headers=header, tablefmt="github", disable_numparse=True),
        "",
    ]


def tokens(text: str) -> set[str]:
    return set(re.findall(r"[\w.\-]+", text))


@dataclass(frozen=True)
class TracedCells:
    """The cell links of a paper's page: each study's numbers to their row of its runs."""

    studies: Mapping[str, Study]
    trained: Mapping[str, set[tuple[str, str]]]  # study -> the (task, variant) that have runs

    def row_id(self, section: str, header: list[str], row: list[str]) -> str | None:
        for name in self.studies:
            if section == runs_heading(name) and len(row) > 1:
                return row_anchor(name, row[0], row[1])
        return None

    def cell_href(self, section: str, header: list[str], row: list[str], column: int) -> str | None:
        study = self.studies.get(section)
        if study is None or column >= len(header) or not re.search(r"\d", row[column]):
            return None
        name = header[column]
        cells = set(row)
        if "paper" in tokens(name) or row[column] in (*study.tasks, *study.variants):
            return None
        task = self.pick(study.tasks, cells, name)
        variant = self.pick(study.variants, cells, name)
        if (task, variant) not in self.trained.get(section, set()):
            return None
        return f"#{row_anchor(section, task, variant)}"

    @staticmethod
    def pick(names: tuple[str, ...], cells: set[str], column: str) -> str | None:
        """The one of ``names`` the row names, else the one its column names, else the only."""
        found = [n for n in names if n in cells] or [n for n in names if n in tokens(column)]
        if len(found) == 1:
            return found[0]
        return names[0] if len(names) == 1 else None
