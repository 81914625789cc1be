"""Where each task's data comes from and where a copy goes (pdelab.data.sources): the status
names the right params.yaml key, files, pins and layout for every task; a failed fetch prints
one summary and no traceback; the workflow stops before any job when a data job cannot
succeed; long generations report their progress. No test reaches the internet."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from pdelab import cli
from pdelab.data import listops, progress, sources
from pdelab.data.__main__ import main as data_main
from pdelab.data.catalogue import DEBIAN, PINNED
from pdelab.data.pathfinder import generate_pathfinder
from pdelab.data.sources import data_status
from pdelab.spec.config import load_params
from pdelab.spec.data import TASK_DATA
from tests.test_download import closed_port

PARAMS = load_params(ROOT / "params.yaml")

# Per task of the paper profile: the files "download" fetches (catalogue names) and a piece of
# the layout a folder of one's own must hold, as each module's fetch reads it.
PAPER = {
    "listops": ((), "basic_{train,val,test}.tsv"),
    "imdb_bytes_lra": (("aclImdb_v1.tar.gz",), "aclImdb/{train,test}/{pos,neg}/*.txt"),
    "retrieval": (("lra_release.gz",), "new_aan_pairs.{train,eval,test}.tsv"),
    "pathfinder": (("lra_release.gz",), "pathfinder32/curv_contour_length_14/{metadata,imgs}"),
    "image": (("cifar-10-python.tar.gz",), "cifar-10-batches-py/{data_batch_1..5,test_batch}"),
    "imdb_wordpiece": (("aclImdb_v1.tar.gz",), "aclImdb/{train,test}/{pos,neg}/*.txt"),
    "ag_news": (("ag_news_train.csv", "ag_news_test.csv"), "ag_news_csv/{train,test}.csv"),
    "sst2": (("SST-2.zip",), "SST-2/{train,dev}.tsv"),
    "imdb_bytes": (("aclImdb_v1.tar.gz",), "aclImdb/{train,test}/{pos,neg}/*.txt"),
    "wikitext": (("wikitext-103-v1.zip",), "wikitext-103/wiki.{train,valid,test}.tokens"),
    "multi30k": (
        (
            "multi30k_training.tar.gz",
            "multi30k_validation.tar.gz",
            "multi30k_mmt16_task1_test.tar.gz",
        ),
        "{train,val,test}.{en,de}",
    ),
    "fashion_mnist32": ((DEBIAN["dataset-fashion-mnist"].filename,), "t10k-labels-idx1-ubyte.gz"),
}


def with_data(profile: str, task: str, **values: object) -> dict:
    """PARAMS with ``data.<profile>.<task>`` updated."""
    params = json.loads(json.dumps(PARAMS))  # plain dicts, as YAML writes them
    params["data"][profile][task].update(values)
    return params


def status_of(params: dict, task: str) -> sources.TaskStatus:
    """The task's status in the paper run profile."""
    return data_status(params, "paper", [task])[0]


def flat(text: str) -> str:
    """The status with its wrapping undone, so a phrase can be looked for across lines."""
    return re.sub(r"\s+", " ", text)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Every test in an empty folder: nothing prepared or downloaded yet."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("task", list(PAPER))
def test_status_names_the_key_files_pins_and_layout_of_each_task(task: str) -> None:
    files, layout = PAPER[task]
    status = status_of(PARAMS, task)
    text = flat("\n".join(status.lines()))
    assert text.startswith(f"{task}: missing (no data/paper/prepared/{task}/manifest.json)")
    assert f"data.paper.{task}.source" in text and layout in text
    assert [d.filename for d, present in status.files] == list(files)
    assert not any(present for _, present in status.files)
    for name in files:
        where = rf"{re.escape(name)}( \([\d,]+ bytes\))?: not in data/paper/raw/downloads/"
        assert re.search(where, text), name
        key = next((k for k, s in PINNED.items() if s.filename == name), None)
        pinned = PINNED[key] if key else None
        if pinned is None:  # the Debian package
            assert DEBIAN["dataset-fashion-mnist"].sha256 in text and "apt-get download" in text
        elif pinned.sha256:
            assert f"sha256 {pinned.sha256}" in text and pinned.url in text
        elif pinned.md5:
            assert f"md5 {pinned.md5} (no sha256 pinned)" in text
        else:
            assert "unpinned" in text and "allow_unpinned: true" in text
    if files:  # a file put into the download folder is used by source "download"
        assert f"put {' and '.join(files)} into data/paper/raw/downloads/" in text
    # only the LRA release's tasks cannot be built as the paper profile sets them
    assert bool(status.problems) == (task in ("retrieval", "pathfinder"))


def test_the_status_reads_the_disk(in_tmp: Path) -> None:
    downloads = in_tmp / "data" / "paper" / "raw" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "aclImdb_v1.tar.gz").write_bytes(b"x")
    prepared = in_tmp / "data" / "paper" / "prepared" / "image"
    prepared.mkdir(parents=True)
    (prepared / "manifest.json").write_text("{}")
    imdb = status_of(PARAMS, "imdb_bytes")
    assert imdb.files[0][1] and not imdb.to_download and not imdb.prepared
    assert "aclImdb_v1.tar.gz (84,125,825 bytes): in data/paper/raw/downloads/" in imdb.lines()[2]
    image = status_of(PARAMS, "image")
    assert image.prepared and image.state().startswith("prepared")
    assert sources.missing_summary([image], "paper") == ""
    assert "imdb_bytes: missing" in sources.missing_summary([image, imdb], "paper")


def test_a_missing_path_and_an_unpinned_release_are_problems(in_tmp: Path) -> None:
    gone = status_of(with_data("paper", "sst2", source="/no/such/sst2"), "sst2")
    assert gone.kind == "path"
    assert "/no/such/sst2 does not exist: set data.paper.sst2.source" in gone.problems[0]
    assert "(does not exist)" in flat("\n".join(gone.lines()))
    allowed = with_data("paper", "retrieval", allow_unpinned=True)
    assert not status_of(allowed, "retrieval").problems
    # an unpacked folder needs no checksum, so no allow_unpinned either
    (in_tmp / "lra").mkdir()
    folder = with_data("paper", "retrieval", source=str(in_tmp / "lra"))
    assert not status_of(folder, "retrieval").problems
    blocked = sources.cannot_build(
        [status_of(PARAMS, t) for t in ("listops", "retrieval")], probe=False
    )
    assert [s.task for s in blocked] == ["retrieval"]
    report = flat(sources.blocked_report(blocked, "paper"))
    assert "cannot be built as set, so no job was started" in report
    assert "data.paper.retrieval.allow_unpinned: true" in report


def test_a_server_out_of_reach_blocks_its_tasks_once_per_host(monkeypatch) -> None:
    asked = []

    def unreachable(url: str, timeout: float = 3.0) -> str | None:
        asked.append(url)
        return "Name or service not known" if "stanford" in url else None

    monkeypatch.setattr("pdelab.data.sources.unreachable", unreachable)
    statuses = [status_of(PARAMS, t) for t in ("imdb_bytes", "imdb_bytes_lra", "sst2")]
    blocked = sources.cannot_build(statuses)
    assert [s.task for s in blocked] == ["imdb_bytes", "imdb_bytes_lra"]
    assert blocked[0].problems == (
        "cannot reach ai.stanford.edu (Name or service not known) to download its files",
    )
    assert len(asked) == 2  # one attempt per host, not per task


def test_status_command_lists_every_task(capsys) -> None:
    params = ROOT / "params.yaml"
    data_main(["status", "--profile", "paper", "--params", str(params)])
    out = capsys.readouterr().out
    assert out.startswith(
        "Data of run profile paper (params.yaml: data.paper), 12 tasks: 0 prepared"
    )
    for task in PAPER:
        assert f"\n{task}: missing" in out
    assert cli.main(["--params", str(params), "data", "status", "--profile", "paper", "sst2"]) == 0
    out = capsys.readouterr().out
    assert "\nsst2: missing" in out and "\nimdb_bytes: " not in out


def test_a_failed_fetch_prints_its_reason_and_status_not_a_traceback(in_tmp: Path) -> None:
    params = in_tmp / "params.yaml"
    params.write_text(yaml.safe_dump(with_data("paper", "sst2", source=str(in_tmp / "nowhere"))))
    out = subprocess.run(
        [
            "python",
            "-m",
            "pdelab.data",
            "build",
            "sst2",
            "--profile",
            "paper",
            "--params",
            str(params),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(ROOT / "src")},
    )
    err = flat(out.stderr)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "build sst2 --profile paper: cannot fetch its data:" in err
    assert f"{in_tmp / 'nowhere'}: does not exist" in err  # not "not a folder"
    assert "data.paper.sst2.source" in err and "SST-2/{train,dev}.tsv" in err


def test_no_network_names_the_download_folder_and_the_key(in_tmp, monkeypatch, capsys) -> None:
    url = f"http://127.0.0.1:{closed_port()}/SST-2.zip"
    monkeypatch.setitem(PINNED, "sst2", replace(PINNED["sst2"], url=url))
    with pytest.raises(SystemExit) as stop:
        data_main(["build", "sst2", "--profile", "paper", "--params", str(ROOT / "params.yaml")])
    assert stop.value.code == 1
    err = flat(capsys.readouterr().err)
    assert f"cannot reach {url}" in err
    assert "put it at data/paper/raw/downloads/SST-2.zip" in err and "fetch(" not in err
    assert "set data.paper.sst2.source to the path of SST-2.zip" in err


def test_listops_generation_reports_progress_lines(monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    spec = listops.ListOpsSpec(n_train=30, n_val=5, n_test=5, min_length=4, max_length=40,
                               max_depth=3, max_args=5)  # fmt: skip
    listops.generate(spec)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "listops: making 40 sequences of 5-39 tokens"
    assert re.fullmatch(
        r"listops: 1 of 40 \(2%\) in 0:00, [\d,]+/s, about 0:00 left \([\d,]+ trees drawn\)",
        lines[1],
    )
    assert re.fullmatch(
        r"listops: making 40 sequences of 5-39 tokens: done in 0:00 \([\d,]+/s\)", lines[-1]
    )


def test_progress_in_a_log_is_lines_and_on_a_terminal_a_bar() -> None:
    log = io.StringIO()
    with progress.Progress("demo", 3, "items", stream=log, every_s=0) as bar:
        for _ in range(3):
            bar.update()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 5
    assert lines[0] == "demo: making 3 items" and lines[-1].startswith("demo: making 3 items: done")
    assert [line.split(" in ")[0] for line in lines[1:4]] == [
        f"demo: {i} of 3 ({i / 3:.0%})" for i in (1, 2, 3)
    ]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    with progress.Progress("demo", 3, "items", stream=tty, every_s=0) as bar:
        bar.update(3)
    assert "\r" in tty.getvalue() and "3/3" in tty.getvalue()


def test_pathfinder_generation_reports_progress(in_tmp, monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    generate_pathfinder(in_tmp / "pf", "small10_contour_length_1", 4, seed=0)
    err = capsys.readouterr().err
    assert "pathfinder small10_contour_length_1: making 4 images" in err
    assert "pathfinder small10_contour_length_1: 4 of 4 (100%)" in err


def test_every_task_declares_its_sources() -> None:
    for task in TASK_DATA.names():
        spec_class = TASK_DATA.get(task).spec_class
        declared = spec_class.sources
        assert declared.layout, task
        assert all(key in PINNED for key in declared.downloads), task
        assert not declared.package or declared.package in DEBIAN, task


@pytest.mark.slow
def test_the_workflow_stops_before_any_job_and_ends_with_a_summary(in_tmp: Path) -> None:
    for name in ("Snakefile", "dvc.yaml", "tasks.yaml", "workflow", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, in_tmp / name)
    (in_tmp / "profiles").symlink_to("workflow/profiles")
    text = (ROOT / "params.yaml").read_text()
    text = re.sub(r"(?m)^profile: \w+$", "profile: paper", text)
    text = text.replace(
        "    listops: {source: generate, n_train: 96000,",
        "    listops: {source: /no/listops, n_train: 96000,",
    )
    (in_tmp / "params.yaml").write_text(text)
    target = ["snakemake", "--cores", "1", "data/paper/prepared/listops/manifest.json"]
    env = os.environ | {"PYTHONPATH": str(in_tmp / "src"), "PDELAB_WARM": "0"}
    # a `source:` path is its fetch stage's dependency: dvc.yaml is written again, as
    # the workflow's error says to (docs/data.md)
    stale = subprocess.run(target, cwd=in_tmp, capture_output=True, text=True, env=env)
    assert "python -m pdelab.runtime.dvc_stages" in stale.stderr
    subprocess.run(
        [sys.executable, "-m", "pdelab.runtime.dvc_stages"], cwd=in_tmp, env=env, check=True
    )

    def run(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(target, cwd=in_tmp, capture_output=True, text=True, timeout=600,
                              env=env | extra)  # fmt: skip

    stopped = run()
    said = flat(stopped.stdout + stopped.stderr)
    assert stopped.returncode != 0
    assert "The data of 1 task(s) of run profile paper cannot be built as set" in said
    assert "listops: /no/listops does not exist: set data.paper.listops.source" in said
    assert not (in_tmp / "results" / "logs" / "data").exists()  # no job was started

    failed = run(PDELAB_DATA_CHECK="0")  # the data job runs, and fails
    said = flat(failed.stdout + failed.stderr)
    assert failed.returncode != 0 and "Traceback" not in said
    assert "build listops --profile paper: cannot fetch its data" in said
    assert "Data missing for 1 task(s) of run profile paper: listops: missing; the path" in said
