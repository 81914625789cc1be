"""The lines a build ends with: how many runs it trained and how many it reused, their compute
time, and where the results are (REPORT.md, the HTML report, MLflow).

A run was trained by this build when its record's end stamp (run.json's ``tracking.end_ms``)
is not older than the build's start; its compute time is that record's start-to-end time. A
run folder without a record was not trained (its job failed, or was never reached).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def duration(ms: int) -> str:
    """``1 h 02 min``, ``3 min 05 s`` or ``12 s``."""
    seconds = round(ms / 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def build_summary(
    run_dirs: Iterable[Path | str], since_ms: int, tracking: str, failed_log: str | None = None
) -> list[str]:
    """The summary of a build that started at ``since_ms`` over these run folders;
    ``tracking``: where MLflow's store is; ``failed_log``: Snakemake's log when jobs failed."""
    trained = reused = missing = 0
    compute_ms = 0
    for folder in map(Path, run_dirs):
        try:
            stamps = json.loads((folder / "run.json").read_text()).get("tracking") or {}
        except (OSError, ValueError):
            missing += 1
            continue
        end = int(stamps.get("end_ms") or 0)
        if end >= since_ms:
            trained += 1
            compute_ms += end - int(stamps.get("start_ms") or end)
        else:
            reused += 1
    runs = f"{trained} run(s) trained in this build ({duration(compute_ms)} of training)"
    runs += f", {reused} reused from earlier builds"
    runs += f", {missing} not trained (failed or not reached)" if missing else ""
    lines = ["", "Build summary:", f"  {runs}."]
    if failed_log:
        lines.append(f"  Some jobs failed: their errors are above; Snakemake's log: {failed_log}")
    lines += [
        "  Report: results/REPORT.md (HTML: `snakemake --report report.zip`, then "
        "report/report.html inside it).",
        f"  MLflow: `pdelab mlflow` (store {tracking}).",
    ]
    return lines
