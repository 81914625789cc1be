"""results/REPORT.md: which profile made the results, each paper's claims, each study's table
and figure, each paper's appendix, and every run. Papers are looped over, never named here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tabulate import tabulate

from pdelab.atomic import write_text
from pdelab.papers import Paper
from pdelab.report.context import ReportContext
from pdelab.report.tables import PROFILE_NOTES
from pdelab.tracking import git_commit, tracking_uri
from pdelab.verdicts import Causality

RUN_COLUMNS = [
    "task",
    "variant",
    "seed",
    "status",
    "test_acc",
    "test_ppl",
    "causality",
    "best_val_acc",
    "best_epoch",
    "epochs_run",
    "median_step_s",
    "peak_memory_mb",
    "device",
]


def runs_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The Runs table. test_ppl and causality appear only when some run has them (older
    summaries predate them); a leaky run's perplexity is labelled, never shown bare."""

    def has_values(column: str) -> bool:
        values = summary[column].dropna()
        return bool((values.astype(str) != "").any())

    present = [
        c
        for c in RUN_COLUMNS
        if c in summary and (c not in ("test_ppl", "causality") or has_values(c))
    ]
    table = summary[present].copy()
    if "test_ppl" in table:
        leaks = (
            table["causality"].map(lambda v: Causality.parse(v) is Causality.LEAKS)
            if "causality" in table
            else pd.Series(False, index=table.index)
        )
        table["test_ppl"] = [
            "" if pd.isna(p) else f"{p:.4f} (leaks)" if leak else f"{p:.4f}"
            for p, leak in zip(table["test_ppl"], leaks, strict=True)
        ]
    if "causality" in table:
        table["causality"] = table["causality"].fillna("")
    return table


def write_report(ctx: ReportContext, papers: list[Paper], out: Path) -> None:
    """REPORT.md from the profile's runs; papers: the active ones, in params.yaml order."""
    summary, profile = ctx.summary, ctx.profile
    note = PROFILE_NOTES.get(profile, f"profile {profile}")
    lines = [
        "# pdelab report",
        "",
        f"Made by the **{profile}** profile ({note}), from {len(summary)} runs at commit "
        f"`{git_commit()}`. Diverged runs: {int((summary['status'] == 'diverged').sum())}.",
        "",
    ]
    modules = [paper.report_module() for paper in papers]
    for module in modules:
        lines += module.claims(ctx)
    heatmaps = {kind for paper in papers for kind in paper.heatmap_kinds}
    for name, cfg in ctx.studies.items():
        table = (ctx.results / "tables" / f"{name}.md").read_text()
        lines += [
            f"## {name}",
            "",
            table,
            f"![{name}](figures/{name}.png)",
            "",
            *(
                [f"![{name} heatmap](figures/{name}_heatmap.png)", ""]
                if cfg.get("kind", "accuracy") in heatmaps
                else []
            ),
            f"Files: [tables/{name}.md](tables/{name}.md), [tables/{name}.tex]"
            f"(tables/{name}.tex), [figures/{name}.png](figures/{name}.png).",
            "",
        ]
    for module in modules:
        lines += module.appendix(ctx)
    lm_note = (
        " test_ppl: language models' test perplexity, marked (leaks) where the causality probe "
        "found the model reading future tokens: not a result."
        if "test_ppl" in summary and summary["test_ppl"].notna().any()
        else ""
    )
    lines += [
        "## Runs",
        "",
        "Every run, from `results/summary.parquet` (median step time in seconds; peak memory "
        f"in MB, CUDA max-allocated on a GPU, process resident set on CPU).{lm_note}",
        "",
        tabulate(
            runs_table(summary), headers="keys", tablefmt="github", showindex=False, floatfmt=".4f"
        ),
        "",
        "## Browse the runs",
        "",
        f"Every run is logged to MLflow at `{tracking_uri()}`:",
        "",
        "```",
        "mlflow ui --backend-store-uri sqlite:///results/mlflow/mlflow.db",
        "```",
        "",
    ]
    write_text(out, "\n".join(lines))
