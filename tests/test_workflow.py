"""The Snakemake workflow on a tiny copy: builds, reruns only what a params change touches
(in params.yaml or in a paper's config.yaml)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT, BuiltTree, set_studies, sh, tiny_project  # noqa: F401 (re-exported)

pytestmark = pytest.mark.slow

PAPERS = Path("src/pdelab/papers")
POSITIONS = str(PAPERS / "diffusion_positions" / "config.yaml")  # the tiny studies' paper


def planned(cwd: Path) -> dict[str, list[str]]:
    """rule -> the wildcards of each job a dry run would execute."""
    return jobs_of(sh(["snakemake", "-n", "--cores", "1"], cwd).stdout)


def jobs_of(out: str, field: str = "wildcards") -> dict[str, list[str]]:
    """rule -> ``field`` (wildcards, reason, ...) of each job a dry run's output lists."""
    jobs: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            wc = re.search(rf"{field}: (.*)", block)
            jobs.setdefault(m.group(1), []).append(wc.group(1) if wc else "")
    return jobs


def pdelab_status(project: Path) -> list[str]:
    """`pdelab status` of the copy, with the copy's pdelab, as its jobs run."""
    env = os.environ | {"PYTHONPATH": str(project / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "status"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def project(tiny_built: BuiltTree, tmp_path_factory) -> Path:
    """A copy of the workflow with a tiny params.yaml, built (conftest's tiny_built: once per
    session)."""
    return tiny_built.copy(tmp_path_factory.mktemp("project"))


def edit_params(project: Path, change, file: str = "params.yaml") -> str:
    """Apply ``change`` to one params file of the copy (params.yaml or a paper's config.yaml);
    returns its text before."""
    path = project / file
    original = path.read_text()
    params = yaml.safe_load(original)
    change(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return original


def test_build_makes_tables_figure_report_and_mlflow_runs(project: Path) -> None:
    for rel in (
        "results/tables/positions.md",
        "results/tables/positions.tex",
        "results/figures/positions.png",
        "results/figures/positions_heatmap.png",
        "results/tables/cost.md",
        "results/figures/cost.png",
        "results/REPORT.md",
        "results/summary.parquet",
    ):
        assert (project / rel).stat().st_size > 0, rel
    report = (project / "results/REPORT.md").read_text()
    assert "smoke" in report and "not a reproduction" in report
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'results/mlflow/mlflow.db'}")
    exp = client.get_experiment_by_name("pdelab-listops-smoke")
    runs = client.search_runs([exp.experiment_id], "tags.seed != ''")  # not the parents
    assert len(runs) == 2 and all("val_acc" in r.data.metrics for r in runs)
    parents = client.search_runs([exp.experiment_id], "tags.`pdelab.parent` = 'true'")
    assert len(parents) == 2  # one per variant: its seed (n = 1) nested under it
    # the smoke profile tracks in batch: the jobs never logged, the sync did
    result = pd.read_parquet(project / "results/runs/smoke/listops/baseline/seed0/result.parquet")
    synced = json.loads((project / "results/mlflow/synced/pdelab-listops-smoke.json").read_text())
    assert result.iloc[0]["mlflow_run_id"] == ""
    assert {r["run_id"] for r in synced["runs"]} == {r.info.run_id for r in runs}
    check = sh([sys.executable, "-m", "pdelab.tracking", "check"], project)
    assert "pdelab-listops-smoke: 2/2 runs in MLflow" in check.stdout
    for run in runs:  # its data as a dataset input; its studies as tags
        assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["listops"]
        assert run.data.tags["study.positions"] == "1"
    report = client.get_experiment_by_name("pdelab-report-smoke")
    logged = {r.info.run_name for r in client.search_runs([report.experiment_id])}
    assert {"positions", "cost"} <= logged  # each study's tables and figures, once


@pytest.fixture(scope="module")
def report_dir(project: Path, tmp_path_factory) -> Path:
    """The `snakemake --report report.zip` (README, docs/results.md) of the built tree,
    unzipped: the folder holding report.html."""
    out = tmp_path_factory.mktemp("report")
    sh(["snakemake", "--report", "report.zip"], project)
    with zipfile.ZipFile(project / "report.zip") as archive:
        archive.extractall(out)
    (project / "report.zip").unlink()
    (page,) = out.glob("*/report.html")
    return page.parent


def test_snakemake_report_holds_every_table_and_figure(project: Path, report_dir: Path) -> None:
    """`snakemake --report` of the built tree: every table and figure the report consists of
    (pdelab.report outputs, apart from data frames) is in the archive, each table's HTML page
    beside it, and the stylesheet of the default Snakemake profile is in its report.html."""
    names = {p.name for p in report_dir.rglob("*") if p.is_file()}
    files = sh([sys.executable, "-m", "pdelab.report", "outputs"], project).stdout.split()
    shown = [f for f in files if f.endswith((".png", ".md", ".tex", ".csv"))]
    shown += [str(Path(f).with_suffix(".html")) for f in files if f.endswith(".md")]
    assert len(shown) > 8 and [f for f in shown if Path(f).name not in names] == []
    css = (project / "workflow/report/stylesheet.css").read_text()
    assert css in (report_dir / "report.html").read_text()


# --------------------------------------------------------------------------------------------
# The report in a browser: Snakemake's report is a single-page app with no address for a
# result, so a probe script appended to a copy of report.html does what a click on a result's
# eye button does (the report's own ButtonViewManager picks the view from the file's type),
# waits for the view and writes what it shows into the page, which Chromium dumps.
# --------------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)"
)
WINDOW = (1600, 1000)
PROBE = """<script>
(function () {
  const path = %s;
  const shown = (state) => document.body.setAttribute("data-shown", JSON.stringify(state));
  setTimeout(() => {
    const button = new ButtonViewManager(app).handleSelectedResult(path);
    if (!button.props.onClick) return shown({view: "download link"});
    button.props.onClick();
    let tries = 0;
    const look = () => {
      const frame = document.querySelector("#app iframe");
      const doc = frame && frame.contentDocument;
      const table = doc && doc.querySelector("table");
      const img = document.querySelector("#app div.grow img");
      const nav = document.querySelector("#app nav").getBoundingClientRect().width;
      if (img && img.complete) {
        const pane = img.closest("div.grow").getBoundingClientRect().width;
        return shown({view: "img", width: img.getBoundingClientRect().width, pane, nav});
      }
      if (table) {
        const header = [...table.querySelectorAll("th")].map((th) => th.textContent);
        const rows = table.querySelectorAll("tbody tr").length;
        const profile = doc.querySelector(".profile").textContent;
        const width = frame.getBoundingClientRect().width;
        const page = doc.documentElement;
        const overflow = page.scrollWidth - page.clientWidth;  // > 0: cut off at the right
        const text = doc.body.textContent.slice(0, 3000);
        return shown({view: "table", header, rows, profile, width, nav, overflow, text});
      }
      if (++tries < 200) return setTimeout(look, 100);
      shown({view: frame ? "frame without a table" : "nothing"});
    };
    setTimeout(look, 100);
  }, 200);
})();
</script>"""


def shown(report_dir: Path, result: str, shot: Path) -> dict:
    """What the report shows after a click on ``result``'s eye button (the probe's account,
    from Chromium's DOM), and its screenshot at ``shot``."""
    text = (report_dir / "report.html").read_text()
    probe = report_dir / f"probe-{Path(result).name}.html"  # beside report.html: data/ resolves
    end = text.rindex("</body>")  # the document's (a script holds the string too)
    probe.write_text(text[:end] + PROBE % json.dumps(result) + text[end:])
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu"]
    base += [f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=30000"]
    # the table's page is a file of its own: the probe may read the frame it is shown in
    base += ["--allow-file-access-from-files", f"--user-data-dir={shot.parent / 'profile'}"]
    subprocess.run(
        [*base, f"--screenshot={shot}", probe.as_uri()], capture_output=True, timeout=240
    )
    dom = subprocess.run(
        [*base, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=240
    )
    found = re.search(r'data-shown="([^"]*)"', dom.stdout)
    assert found, f"the probe reported nothing:\n{dom.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
def test_the_report_shows_a_table_inline(report_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    results = json.loads(
        re.search(r"var results = (\{.*?\});\n", (report_dir / "report.html").read_text()).group(1)
    )
    assert results["results/tables/positions.html"]["mime_type"] == "text/html"
    assert shown(report_dir, "results/tables/positions.md", tmp_path / "md.png") == {
        "view": "download link"  # why each table has its page
    }
    table = shown(report_dir, "results/tables/positions.html", tmp_path / "table.png")
    assert table["view"] == "table", table
    assert table["header"][0] == "variant" and "listops ours" in table["header"]
    assert table["rows"] == 2 and "smoke profile" in table["profile"]  # two variants
    assert table["width"] >= WINDOW[0] - table["nav"] - 30  # the frame fills the content pane
    # the screenshot shows it: the content pane right of the navigation holds dark text and
    # rules on white, not a blank frame
    shot = Image.open(tmp_path / "table.png").convert("L")
    pane = np.asarray(shot.crop((int(table["nav"]) + 20, 0, *WINDOW)))
    dark = float((pane < 128).mean())
    assert 0.002 < dark < 0.5 and int(pane.max()) - int(pane.min()) > 150, dark


@needs_chromium
def test_the_report_shows_each_papers_verdicts_inline(report_dir: Path, tmp_path: Path) -> None:
    """Each paper's claims are a page of the report, its verdict table shown inline; neither
    it nor a study's table is cut off at the right of a 1600 px window."""
    claims = shown(report_dir, "results/claims/diffusion_positions.html", tmp_path / "c.png")
    assert claims["view"] == "table", claims
    assert "the claims audited" in claims["text"] and "verdict" in claims["header"]
    assert claims["overflow"] <= 0, claims
    table = shown(report_dir, "results/tables/positions.html", tmp_path / "t.png")
    assert table["overflow"] <= 0, table
    report = shown(report_dir, "results/REPORT.html", tmp_path / "r.png")
    assert report["view"] == "table" and "pdelab report" in report["text"], report


@needs_chromium
def test_the_report_shows_a_figure_at_full_width(report_dir: Path, tmp_path: Path) -> None:
    figure = shown(report_dir, "results/figures/positions.png", tmp_path / "figure.png")
    assert figure["view"] == "img", figure
    assert figure["nav"] <= 24 * 16  # the stylesheet's widest navigation pane (24rem)
    # the figure fills the pane but for its padding (24 px) and a scroll bar
    assert figure["width"] >= 0.95 * figure["pane"], figure


def test_second_run_does_nothing(project: Path) -> None:
    assert planned(project) == {}


def test_task_parameter_change_reruns_that_task_and_the_report(project: Path) -> None:
    """An edit of the task in the shared tasks file: params.yaml is not the only input."""
    original = edit_params(
        project, lambda p: p["tasks"]["listops"]["train"].update(lr=2e-3), "tasks.yaml"
    )
    try:
        jobs = planned(project)
    finally:
        (project / "tasks.yaml").write_text(original)
    assert sorted(jobs) == [
        "aggregate",
        "all",
        "diagnose",
        "diagnostics",
        "heatmap",
        "learning",
        "mlflow_report",
        "mlflow_sync",
        "replicate",  # the task's first run (baseline, seed 0) is replicated
        "report",
        "study",
        "train",
    ]
    assert len(jobs["train"]) == 2 and all("task=listops" in w for w in jobs["train"])


def test_variant_change_reruns_only_that_variant(project: Path) -> None:
    def change(p):
        p["variants"]["after_embedding"]["diffusion"]["alpha"] = 0.2

    original = edit_params(project, change, POSITIONS)
    try:
        jobs = planned(project)
    finally:
        (project / POSITIONS).write_text(original)
    assert sorted(jobs) == [
        "aggregate",
        "all",
        "cost_timing",  # after_embedding is one of the cost study's timed variants
        "diagnose",
        "diagnostics",
        "heatmap",
        "learning",
        "mlflow_report",
        "mlflow_sync",
        "report",
        "study",
        "train",
    ]
    assert jobs["train"] == ["profile=smoke, task=listops, variant=after_embedding, seed=0"]


def test_an_edit_of_a_paper_no_study_runs_reruns_nothing(project: Path) -> None:
    """Another paper's config file is read too, but its runs are not in this run sheet."""
    fna = str(PAPERS / "fractional_attention" / "config.yaml")
    original = edit_params(
        project, lambda p: p["variants"]["fna"]["model"]["attention_options"].update(alpha=1.4), fna
    )
    try:
        jobs = planned(project)
    finally:
        (project / fna).write_text(original)
    assert jobs == {}


DOWNSTREAM = ["aggregate", "all", "diagnose", "diagnostics", "heatmap", "learning"]
DOWNSTREAM += ["mlflow_report", "mlflow_sync", "report", "study"]


def set_key(params: dict, key: str, value: float) -> None:
    """Set a dotted params.yaml key (the mappings on its way made where missing)."""
    *path, last = key.split(".")
    node = params
    for name in path:
        node = node.setdefault(name, {})
    node[last] = value


@pytest.mark.parametrize(
    ("key", "runs"),
    [
        ("profiles.smoke.tasks.listops.train.lr", ["after_embedding", "baseline"]),
        ("variants.after_embedding.train.lr", ["after_embedding"]),  # lr: no step timing reruns
    ],
)
def test_a_one_key_edit_plans_its_runs_in_short_lines(
    project: Path, key: str, runs: list[str]
) -> None:
    """After a one-key edit (in the paper's config file, which holds listops and its
    variants), `snakemake -n` plans exactly the runs it touches and what reads them, each run
    with a one-line reason (its plan file is newer), no spec JSON and no line over 300
    characters; `pdelab status` says what changed in those runs, from their records."""
    params = project / POSITIONS
    stat = params.stat()
    original = edit_params(project, lambda p: set_key(p, key, 0.02), POSITIONS)
    try:
        out = sh(["snakemake", "-n", "--cores", "1"], project)
        text = out.stdout + out.stderr
        said = pdelab_status(project)
    finally:
        params.write_text(original)
        os.utime(params, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    jobs, reasons = jobs_of(out.stdout), jobs_of(out.stdout, "reason")
    replicated = ["replicate"] if "baseline" in runs else []  # its run is replicated
    assert sorted(jobs) == sorted([*DOWNSTREAM, "train", *replicated])
    assert sorted(w.split("variant=")[1].split(",")[0] for w in jobs["train"]) == runs
    stamps = "results/stamps/smoke/listops/{}/seed0.json"
    assert sorted(reasons["train"]) == [f"Updated input files: {stamps.format(v)}" for v in runs]
    long = [line[:120] for line in text.splitlines() if len(line) > 300]
    assert not long, long
    assert "Params have changed" not in text and '{"' not in text and "{'" not in text
    changed = [line for line in said if "train.lr" in line]
    assert sorted(changed) == [f"listops {v} seed 0: train.lr: 0.001 -> 0.02" for v in runs]
    assert said[-1] == f"{len(runs)} of 2 runs would be trained again by `snakemake`"
    assert planned(project) == {}  # put back: the records hold the plan again


def test_switching_tracking_retrains_nothing(project: Path) -> None:
    original = edit_params(project, lambda p: p["profiles"]["smoke"].update(tracking="live"))
    try:
        jobs = planned(project)
    finally:
        (project / "params.yaml").write_text(original)
    assert jobs == {}


def test_a_job_put_on_two_gpus_retrains_nothing_and_runs_under_torchrun(project: Path) -> None:
    """The GPUs a job trains on are how it is computed, not what it is: a cost plan that puts
    every run on 2 GPUs (results/plan.json's ``gpus``), and a threshold in the run profile,
    leave nothing to do; the same job, forced, is launched as torchrun's 2 processes with 2
    CPUs (a CPU run profile: no GPU asked)."""
    runs = [("listops", v, 0) for v in ("baseline", "after_embedding")]
    rows = [{"task": t, "variant": v, "seed": s, "batch": 16, "gpus": 2} for t, v, s in runs]
    rows = [r | {"peak_bytes": 2**20, "gpu_hours": {"A100-80GB": 1.0}} for r in rows]
    plan = project / "results" / "plan.json"
    plan.write_text(json.dumps({"profile": "smoke", "card_gib": None, "cards": {}, "jobs": rows}))
    threshold = {"over_hours": 0.001, "max_gpus": 2}
    original = edit_params(project, lambda p: p["profiles"]["smoke"].update(multi_gpu=threshold))
    try:
        assert planned(project) == {}
        target = "results/runs/smoke/listops/baseline/seed0/run.json"
        out = sh(["snakemake", "-n", "--cores", "2", "--forcerun", target, target], project)
    finally:
        (project / "params.yaml").write_text(original)
        plan.unlink()
    said = " ".join(out.stdout.replace(" \\\n", " ").split())
    assert (
        "python -m pdelab.runtime.gpu_job 0 torchrun --standalone --nproc-per-node 2 "
        "-m pdelab.training.train" in said
    )
    assert "--threads 2 --no-progress" in said and "gpu=0" in said
    assert planned(project) == {}


def test_invalid_params_fail_before_any_job(project: Path) -> None:
    """The message names the file that holds the key (here a paper's) and the key."""
    original = edit_params(
        project,
        lambda p: p["variants"]["after_embedding"]["diffusion"].update(alpha=0.6),
        POSITIONS,
    )
    try:
        out = sh(["snakemake", "--cores", "1", "--forceall"], project, check=False)
    finally:
        (project / POSITIONS).write_text(original)
    assert out.returncode != 0
    assert f"invalid params: {POSITIONS}: variants.after_embedding.diffusion.alpha = 0.6" in (
        out.stdout + out.stderr
    )
    assert "rule train" not in out.stdout


def test_unknown_study_key_fails_before_any_job(tmp_path: Path) -> None:
    """The schema leaves a study's own keys to the paper of its kind, so pdelab.spec.run_sheet must
    stop Snakemake on a key no paper declares while it reads the workflow."""
    for name in ("Snakefile", "dvc.yaml", "tasks.yaml", "workflow", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    edit_params(tmp_path, lambda p: p["studies"]["cost"].update(timeing={"repeats": 50}), POSITIONS)
    out = sh(["snakemake", "-n", "--cores", "1"], tmp_path, check=False)
    assert out.returncode != 0
    log = out.stdout + out.stderr
    assert f"{POSITIONS}: studies.cost.timeing: unknown key for a study of kind 'cost'" in log
    assert "allowed keys: title, kind, tasks" in log and "rule train" not in log


def test_dvc_checkout_of_identical_data_does_not_retrain(project: Path) -> None:
    shutil.rmtree(project / "data" / "smoke")
    sh(["dvc", "checkout", "prepare@listops", "fetch@listops"], project)
    assert (project / "data/smoke/prepared/listops/manifest.json").exists()
    assert planned(project) == {}
    assert "changed" not in sh(["dvc", "status", "prepare@listops"], project).stdout


def test_truncated_data_stops_the_workflow_and_dvc_checkout_repairs_it(project: Path) -> None:
    """A half-copied prepared file: even a dry run stops, naming the file and the repair, and
    the repair it names restores the data without retraining anything."""
    target = project / "data/smoke/prepared/listops/train.tokens.npy"
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    out = sh(["snakemake", "-n", "--cores", "1"], project, check=False)
    log = out.stdout + out.stderr
    assert out.returncode != 0 and "corrupt prepared data" in log
    assert "train.tokens.npy has" in log and "truncated or replaced" in log
    assert "dvc checkout data/smoke/prepared/listops" in log
    sh(["dvc", "checkout", "--force", "data/smoke/prepared/listops"], project)
    assert planned(project) == {}


def _result_mtimes(project: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (project / "results/runs").rglob("result.parquet")}


def test_touched_data_code_retrains_nothing(project: Path) -> None:
    """A newer mtime with identical content (a checkout, an editor) is no change."""
    (project / "src/pdelab/data/store.py").touch()
    assert planned(project) == {}


def test_changed_data_retrains(project: Path) -> None:
    before = _result_mtimes(project)
    original = edit_params(project, lambda p: p["data"]["smoke"]["listops"].update(seed=7))
    try:
        run = sh(["snakemake", "--cores", "2"], project)
        out = run.stdout + run.stderr
        after = _result_mtimes(project)
    finally:
        (project / "params.yaml").write_text(original)
        sh(["snakemake", "--cores", "2"], project)  # leave the project as the other tests expect
    assert "rule train:" in out
    assert set(after) == set(before) and all(after[k] > before[k] for k in before)


def test_profile_must_match_the_one_dvc_reads(project: Path) -> None:
    out = sh(["snakemake", "-n", "--config", "profile=paper"], project, check=False)
    assert out.returncode != 0 and "Set `profile: paper` in params.yaml" in out.stdout + out.stderr


def test_an_override_the_other_jobs_would_not_see_is_refused(project: Path) -> None:
    """DVC and the data and report jobs read params.yaml: --config/--configfile would train one
    thing and prepare, check and report another, so the workflow refuses them before any job."""
    (project / "more.yaml").write_text("defaults: {train: {epochs: 5}}\n")
    for override in (["--config", "defaults={}"], ["--configfile", "more.yaml"]):
        out = sh(["snakemake", "-n", *override], project, check=False)
        text = " ".join((out.stdout + out.stderr).split())
        assert out.returncode != 0 and "is refused: DVC and the data, report" in text, text
        assert "Edit params.yaml instead" in text


def test_dvc_push_and_pull_through_a_local_remote(project: Path, tmp_path: Path) -> None:
    """Data shared through a remote comes back identical: nothing to rebuild or retrain."""
    sh(["dvc", "remote", "add", "-f", "-d", "shared", str(tmp_path / "remote")], project)
    stages = ["fetch@listops", "prepare@listops"]  # the tiny project builds ListOps only
    sh(["dvc", "push", *stages], project)
    assert any((tmp_path / "remote").rglob("*"))
    shutil.rmtree(project / "data")
    shutil.rmtree(project / ".dvc" / "cache")
    sh(["dvc", "pull", *stages], project)
    assert (project / "data/smoke/prepared/listops/manifest.json").exists()
    assert "up to date" in sh(["dvc", "status", *stages], project).stdout
    assert planned(project) == {}
