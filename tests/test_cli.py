"""``pdelab`` (pdelab.cli): list, explain and status read params.yaml and the run records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, write_run
from pdelab.cli import changes, explain, main, status
from pdelab.data.store import content_hash
from pdelab.records import provenance
from pdelab.records.run import identity, record_table, write_records
from pdelab.spec.config import load_with_sources, resolve

DATA = content_hash({})  # a prepared folder's hash: of no files, in these tests


def test_explain_names_the_file_and_layer_that_set_each_key(params) -> None:
    own, paper = ROOT / "params.yaml", ROOT / "src/pdelab/papers/diffusion_positions/config.yaml"
    shared = ROOT / "tasks.yaml"
    lines = explain(params, "listops", "after_embedding", 1, "smoke", load_with_sources(own)[1])
    line = {ln.split()[0]: ln for ln in lines[1:]}
    assert line["train.lr"].endswith(f"<- {own}: profiles.smoke.overrides.train.lr")
    assert line["train.batch_size"].endswith(
        f"<- {shared}: profiles.smoke.tasks.listops.train.batch_size"
    )
    assert line["diffusion.sites"].endswith(f"<- {paper}: variants.after_embedding.diffusion.sites")
    assert line["train.seq_len"].endswith("<- (the default)")
    assert line["device"].endswith(f"<- {own}: profiles.smoke.device") and '"cpu"' in line["device"]
    assert line["profile"].endswith(f"<- {own}: profile")
    assert explain(params, "listops", "after_embedding", 1, "smoke")[-1].endswith(
        "<- defaults.diffusion.layernorm"  # without the sources: the layers alone
    )


def test_an_invalid_paper_key_is_named_with_its_file(tmp_path: Path, capsys) -> None:
    """The command names the paper's config file that holds a bad key, not params.yaml."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(ROOT / "tasks.yaml", tmp_path / "tasks.yaml")
    paper = tmp_path / "src/pdelab/papers/diffusion_positions"
    paper.mkdir(parents=True)
    (paper / "__init__.py").write_text("")
    text = (ROOT / "src/pdelab/papers/diffusion_positions/config.yaml").read_text()
    bad = "after_embedding: {diffusion: {sites: [after_embedding], alpha: 0.6}}"
    (paper / "config.yaml").write_text(
        text.replace("after_embedding: {diffusion: {sites: [after_embedding]}}", bad, 1)
    )
    assert main(["--params", str(tmp_path / "params.yaml"), "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"invalid params: {paper / 'config.yaml'}: variants.after_embedding.diffusion.alpha = 0.6"
    ), err


def test_changes_are_key_old_new_lines() -> None:
    old = {"train": {"lr": 0.001, "epochs": 3}, "model": {"dim": 8}}
    new = {"train": {"lr": 0.01, "epochs": 3}, "model": {"dim": 8, "patch": 4}}
    assert changes(old, new) == ['model.patch: "unset" -> 4', "train.lr: 0.001 -> 0.01"]


def test_status_lists_untrained_runs_and_changed_specs_code_and_data(
    params, tmp_path: Path, monkeypatch
) -> None:
    """Each reason a run would be trained again, as ``key: old -> new``: its spec, a source file
    it executes, its data; records of another run are named too."""
    monkeypatch.chdir(tmp_path)  # the spec's relative data_dir is read from here
    runs = tmp_path / "runs"
    lines = status(params, "smoke", runs)
    assert lines[:-1] and all(line.endswith(": not trained") for line in lines[:-1])
    n = len(lines) - 1
    assert lines[-1] == f"{n} of {n} runs would be trained again by `snakemake`"
    run = resolve(params, "listops", "baseline", 0, "smoke")
    data = tmp_path / run.data_dir
    data.mkdir(parents=True)
    (data / "manifest.json").write_text(json.dumps({"files": {}, "content_hash": DATA}))
    folder = runs / "smoke/listops/baseline/seed0"

    def trained_as(spec: dict, code: dict, data_hash: str = DATA) -> list[str]:
        record = write_run(folder, "listops", "baseline", 0, data_hash=data_hash)
        record |= {"spec": spec, "identity": identity(spec, data_hash)}
        record["provenance"] = {"code": code}
        history = record_table([{"seed": 0, "epoch": 1}])
        write_records(folder, record, history, record_table([record["result"]]))
        return [ln for ln in status(params, "smoke", runs) if "listops baseline seed 0" in ln]

    spec, code = run.to_dict(), provenance.code_files(run)
    assert trained_as(spec, code) == []
    old = json.loads(json.dumps(spec))
    old["train"]["lr"] = 0.001
    assert trained_as(old, code) == ["listops baseline seed 0: train.lr: 0.001 -> 0.01"]
    edited = code | {"pdelab/training/train.py": "0" * 64}
    now, run_key = code["pdelab/training/train.py"][:12], "listops baseline seed 0"
    assert trained_as(spec, edited) == [
        f"{run_key}: code: pdelab/training/train.py {'0' * 12} -> {now}"
    ]
    said = trained_as(spec, code, data_hash="e" * 64)
    assert said == [f"{run_key}: data: {run.data_dir} {'e' * 12} -> {DATA[:12]}"]
    write_run(runs / "smoke/listops/baseline/seed1", "listops", "baseline", 1)
    for name in ("result.parquet", "run.json"):
        (folder / name).write_bytes((runs / "smoke/listops/baseline/seed1" / name).read_bytes())
    said = [ln for ln in status(params, "smoke", runs) if "listops baseline seed 0" in ln]
    assert (
        len(said) == 1
        and "records unusable" in said[0]
        and "belongs to listops/baseline/seed1" in said[0]
    )


def test_the_command_lists_and_refuses_naming_the_key(capsys) -> None:
    assert main(["--params", str(ROOT / "params.yaml"), "list"]) == 0
    out = capsys.readouterr().out
    assert "multiscale (multiscale): 1 x 13 x 2" in out and "runs trained:" in out
    assert main(["--params", str(ROOT / "params.yaml"), "explain", "listopz", "baseline"]) == 2
    assert "task: unknown name 'listopz'" in capsys.readouterr().err


def test_the_command_line_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and "explain" in out.stdout and "status" in out.stdout


def test_global_options_come_before_or_after_the_subcommand(capsys) -> None:
    params = str(ROOT / "params.yaml")
    assert main(["list", "--params", params, "--profile", "paper"]) == 0
    after = capsys.readouterr().out
    assert main(["--params", params, "--profile", "paper", "list"]) == 0
    assert capsys.readouterr().out == after and after.startswith("# run profile paper")


def test_an_unknown_name_is_answered_with_the_closest(capsys) -> None:
    params = str(ROOT / "params.yaml")
    assert main(["--params", params, "explain", "listops", "after_embeding"]) == 2
    err = capsys.readouterr().err
    assert "did you mean after_embedding" in err and "invalid params.yaml" not in err
    assert len(err.splitlines()) == 1
    assert main(["--params", params, "show", "position"]) == 2
    assert "did you mean positions?" in capsys.readouterr().err


def test_outside_a_project_one_line_says_what_to_do(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "list"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "no params.yaml" in out.stderr, out.stderr


def test_show_prints_a_studys_table(tmp_path: Path, capsys) -> None:
    params = str(ROOT / "params.yaml")
    assert main(["--params", params, "show", "positions", "--results", str(tmp_path)]) == 2
    assert "not built yet" in capsys.readouterr().err
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "positions.md").write_text("**Positions**\n\n| a |\n|---|\n| 1 |\n")
    assert main(["--params", params, "show", "positions", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "**Positions**\n\n| a |\n|---|\n| 1 |\n"


def test_the_help_is_for_a_person() -> None:
    """No RST markup; every option described; each subcommand with an example."""
    top = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert "``" not in top.stdout and "examples:" in top.stdout
    for name in ("list", "explain", "status", "show", "plan"):
        page = subprocess.run(
            [sys.executable, "-m", "pdelab.cli", name, "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
        assert "example: pdelab" in page and "``" not in page, name
        options = [ln for ln in page.splitlines() if ln.startswith("  -")]
        assert all(len(ln.split("  ")) > 2 or ln.strip().endswith(":") for ln in options), page


def test_the_jobs_run_by_hand_are_subcommands(capsys) -> None:
    """`pdelab tracking|rehearsal|report ...` are `python -m ...`'s command lines."""
    assert main(["report", "outputs", "--params", str(ROOT / "params.yaml")]) == 0
    assert "results/REPORT.md" in capsys.readouterr().out.splitlines()
    assert main(["tracking", "--help"]) == 0
    assert "links" in capsys.readouterr().out
    assert main(["rehearsal", "--help"]) == 0 and "--batch" in capsys.readouterr().out


def test_mlflow_prints_the_links_that_open_the_runs_tables(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["--params", str(ROOT / "params.yaml"), "mlflow", "--no-ui", "--port", "5077"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("MLflow UI at http://127.0.0.1:5077") and "Studies:" in out


def test_status_names_a_current_run_made_in_another_environment(
    params, tmp_path: Path, monkeypatch
) -> None:
    """A run whose spec, code and data are today's but whose torch (or Python, numpy) is not
    this interpreter's is kept, and named with the versions; the count says nothing retrains."""
    from pdelab.records import environment

    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    run = resolve(params, "listops", "baseline", 0, "smoke")
    (tmp_path / run.data_dir).mkdir(parents=True)
    (tmp_path / run.data_dir / "manifest.json").write_text(
        json.dumps({"files": {}, "content_hash": DATA})
    )
    folder = runs / "smoke/listops/baseline/seed0"
    record = write_run(folder, "listops", "baseline", 0, data_hash=DATA)
    spec = run.to_dict()
    record |= {"spec": spec, "identity": identity(spec, DATA)}
    record["provenance"] = {"code": provenance.code_files(run)}
    record["environment"] = environment.versions() | {"torch": "0.1.0"}
    write_records(folder, record, record_table([{"seed": 0}]), record_table([record["result"]]))
    lines = status(params, "smoke", runs)
    now = environment.versions()["torch"]
    assert f"listops baseline seed 0: kept, environment: torch: 0.1.0 -> {now}" in lines
    assert any(ln.startswith("1 of ") and "another environment" in ln for ln in lines)
    assert not [
        ln for ln in lines if ln.startswith("listops baseline seed 0: ") and "kept" not in ln
    ]


def test_pdelab_runs_the_code_of_the_tree_it_is_run_in(tmp_path: Path) -> None:
    """In a second checkout or a copy, `pdelab` runs that tree's code (as the Snakefile does),
    not the package pip installed from another tree: its digests are that tree's."""
    import shutil
    import subprocess
    import sys

    import pdelab

    copy = tmp_path / "src" / "pdelab"
    shutil.copytree(
        Path(pdelab.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    init = copy / "__init__.py"
    init.write_text(init.read_text() + "\nimport sys\nprint('THE COPY', file=sys.stderr)\n")
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PDELAB_TREE_CODE")},
    )
    assert out.returncode == 0, out.stderr
    assert "THE COPY" in out.stderr


def project_params(tmp_path: Path, edit) -> Path:
    """This project's params.yaml with ``edit`` applied, beside its tasks.yaml and papers."""
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    edit(params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "tasks.yaml").symlink_to(ROOT / "tasks.yaml")
    (tmp_path / "src" / "pdelab").mkdir(parents=True)
    (tmp_path / "src" / "pdelab" / "papers").symlink_to(ROOT / "src" / "pdelab" / "papers")
    return tmp_path / "params.yaml"


def test_a_profile_task_key_set_in_params_yaml_is_named_as_params_yaml_s(tmp_path: Path) -> None:
    """The first edit a researcher makes, a task's learning rate in the smoke profile, set in
    params.yaml: accepted, it wins at that key alone, and explain names params.yaml."""

    def lower(params: dict) -> None:
        params["profiles"]["smoke"]["tasks"] = {"listops": {"train": {"lr": 0.003}}}

    path = project_params(tmp_path, lower)
    params, sources = load_with_sources(path)
    lines = explain(params, "listops", "baseline", 0, "smoke", sources)
    line = {ln.split()[0]: ln for ln in lines[1:]}
    assert line["train.lr"].endswith(f"<- {path}: profiles.smoke.tasks.listops.train.lr")
    assert "0.003" in line["train.lr"]
    assert line["train.batch_size"].endswith(  # the rest of the block is tasks.yaml's still
        f"<- {tmp_path / 'tasks.yaml'}: profiles.smoke.tasks.listops.train.batch_size"
    )


def test_a_shadowed_key_of_params_yaml_gets_its_own_line_in_status(tmp_path: Path) -> None:
    """tasks.listops.train.lr set in params.yaml is accepted; the smoke profile's overrides
    win, so `pdelab status` (as the workflow at parse time) names the key that wins and where
    to write the value instead."""

    def lower(params: dict) -> None:
        params["tasks"] = {"listops": {"train": {"lr": 0.003}}}

    path = project_params(tmp_path, lower)
    params, sources = load_with_sources(path)
    lines = status(params, "smoke", tmp_path / "runs", sources)
    assert lines[0] == (
        f"params: {path}: tasks.listops.train.lr changes no run of the smoke run profile: "
        "profiles.smoke.overrides.train.lr wins; write it as "
        "profiles.smoke.tasks.listops.train.lr instead"
    )


def test_explain_refuses_a_seed_the_profile_does_not_run(capsys) -> None:
    assert main(["explain", "listops", "baseline", "7"]) == 2
    err = capsys.readouterr().err
    assert "seed 7: the smoke profile runs listops baseline with seeds 0, 1" in err


def test_a_profile_task_lr_in_params_yaml_changes_exactly_that_task_s_runs(tmp_path: Path) -> None:
    """What the workflow plans is decided by each run's resolved spec: set in params.yaml,
    ``profiles.smoke.tasks.listops.train.lr`` changes every ListOps run of the smoke profile
    and no other run."""
    from pdelab.spec.run_sheet import trained_runs

    def lower(params: dict) -> None:
        params["profiles"]["smoke"]["tasks"] = {"listops": {"train": {"lr": 0.003}}}

    before = load_with_sources(ROOT / "params.yaml")[0]
    after = load_with_sources(project_params(tmp_path, lower))[0]
    runs = trained_runs(before, "smoke")
    changed = {
        (r.task, r.variant, r.seed)
        for r in runs
        if resolve(before, r.task, r.variant, r.seed, "smoke")
        != resolve(after, r.task, r.variant, r.seed, "smoke")
    }
    listops = {(r.task, r.variant, r.seed) for r in runs if r.task == "listops"}
    assert changed == listops and len(listops) > 10
