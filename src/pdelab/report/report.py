"""results/REPORT.md: which profile made the results, each study's table and figure, the runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from pdelab.report.claims import claims_table
from pdelab.report.pde_audit import audit_section
from pdelab.report.tables import PROFILE_NOTES
from pdelab.tracking import git_commit, tracking_uri


def extra_section(results: Path, name: str, title: str, intro: str) -> list[str]:
    """A report section showing figures/{name}.png and tables/{name}.md, if they were built."""
    table = results / "tables" / f"{name}.md"
    if not table.exists():
        return []
    return [
        f"## {title}",
        "",
        intro,
        "",
        f"![{name}](figures/{name}.png)",
        "",
        table.read_text(),
        "",
    ]


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
            table["causality"].fillna("").astype(str).str.startswith("leaks")
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


def write_report(
    summary: pd.DataFrame,
    studies: dict[str, Any],
    profile: str,
    results: Path,
    out: Path,
    runs: dict[str, set] | None = None,
) -> None:
    """runs: each study's (task, variant, seed) keys, so claims use their study's runs."""
    note = PROFILE_NOTES.get(profile, f"profile {profile}")
    lines = [
        "# pdelab report",
        "",
        f"Made by the **{profile}** profile ({note}), from {len(summary)} runs at commit "
        f"`{git_commit()}`. Diverged runs: {int((summary['status'] == 'diverged').sum())}.",
        "",
    ]
    claims = claims_table(summary, studies, runs)
    if len(claims):
        lines += [
            "## Where to add PDE diffusion: the paper's claims",
            "",
            f"Each claim, the paper's number, ours ({profile} profile), a 95% Welch interval "
            "over seeds and a verdict: reproduced (the interval lies on the claimed side of "
            "zero), not reproduced (on the other side), inconclusive (it contains zero, or too "
            "few seeds). Accuracy differences in points; overheads in percent."
            + (
                " At the smoke scale these verdicts check the pipeline; they say nothing about "
                "the paper."
                if profile == "smoke"
                else ""
            ),
            "",
            tabulate(claims, headers="keys", tablefmt="github", showindex=False, floatfmt="+.2f"),
            "",
        ]
    lines += audit_section(summary, studies, profile, runs)
    for name in studies:
        table = (results / "tables" / f"{name}.md").read_text()
        lines += [
            f"## {name}",
            "",
            table,
            f"![{name}](figures/{name}.png)",
            "",
            *(
                [f"![{name} heatmap](figures/{name}_heatmap.png)", ""]
                if studies[name].get("kind", "accuracy") == "accuracy"
                else []
            ),
            f"Files: [tables/{name}.md](tables/{name}.md), [tables/{name}.tex]"
            f"(tables/{name}.tex), [figures/{name}.png](figures/{name}.png).",
            "",
        ]
    lines += extra_section(
        results,
        "theory",
        "Theory checks (Layer I)",
        "Properties of the diffusion operator itself, computed exactly (no training): spectrum, "
        "contraction, energy, frequency response, and whether the common replicate-padded "
        "strided Laplacian stays non-expansive.",
    )
    lines += extra_section(
        results,
        "diagnostics",
        "Diagnostics the paper left unmeasured",
        "Roughness E(Z) at each insertion point and the diffusion-attention commutator "
        "||[S, A](X)||_F (exact, the paper's linearized form, and the exact first-order term) "
        "of every trained model, per layer, and their correlation with each variant's accuracy "
        "change from the baseline.",
    )
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
    out.write_text("\n".join(lines))
