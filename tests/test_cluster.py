"""What a job asks a cluster for (pdelab.runtime.cluster), and a SLURM cluster made safe to wait on:
the cost plan's data read back as the plan writes it, and the status command chosen from a faked
``scontrol``/``sacct`` (no SLURM needed; .ci/slurm runs a real cluster)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT
from pdelab.runtime import cluster


def plan_json(profile: str = "paper") -> str:
    """A cost plan's data (results/plan.json) with two jobs, as pdelab.plan.render.plan_data
    writes it."""
    jobs = [
        {"task": "listops", "variant": "baseline", "seed": 0, "batch": 32, "gpus": 1},
        {"task": "image", "variant": "vit_patch", "seed": 1, "batch": 32, "gpus": 1},
    ]
    jobs[0] |= {"peak_bytes": 3 * 2**29, "gpu_hours": {"A100-80GB": 2.5, "RTX-4090": 1234.5}}
    jobs[1] |= {"peak_bytes": 100 * 2**20, "gpu_hours": {"A100-80GB": 0.01, "RTX-4090": 0.02}}
    return json.dumps({"profile": profile, "card_gib": None, "cards": {}, "jobs": jobs})


def wc(task: str, variant: str, seed: int) -> SimpleNamespace:
    return SimpleNamespace(task=task, variant=variant, seed=seed)


def config(device: str) -> dict:
    return {"profiles": {"paper": {"device": device}}}


def test_a_training_job_of_a_cuda_profile_asks_for_the_plans_time(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_json())
    need = cluster.train_need(config("cuda"), "paper", wc("image", "vit_patch", 1), plan)
    # the slowest named GPU's hours, with the margin, and the start-up allowance
    assert need.runtime == math.ceil(0.02 * 60 * cluster.RUNTIME_MARGIN) + cluster.STARTUP_MIN
    assert need.mem_mb == cluster.TRAIN_DEFAULT["cuda"].mem_mb
    slow = cluster.train_need(config("cuda"), "paper", wc("listops", "baseline", 0), plan)
    assert slow.runtime == math.ceil(1234.5 * 60 * cluster.RUNTIME_MARGIN) + cluster.STARTUP_MIN


def test_a_job_the_plan_puts_on_several_gpus_asks_for_them(tmp_path: Path) -> None:
    """gpu=N and N CPUs (SLURM: --gpus=N), host memory for N processes, its hours over N,
    and torchrun's N processes after pdelab.runtime.gpu_job took N slots; 1 where the plan says
    nothing, and no GPU on a CPU profile, whose processes are still the plan's."""
    doc = json.loads(plan_json())
    doc["jobs"][0]["gpus"] = 4
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    four, one = wc("listops", "baseline", 0), wc("image", "vit_patch", 1)
    assert cluster.train_processes(config("cuda"), "paper", four, plan) == 4
    assert cluster.train_gpus(config("cuda"), "paper", four, plan) == 4
    assert cluster.train_gpus(config("cpu"), "paper", four, plan) == 0
    assert cluster.train_processes(config("cuda"), "paper", one, plan) == 1
    assert cluster.train_processes(config("cuda"), "smoke", four, plan) == 1  # another's plan
    need = cluster.train_need(config("cuda"), "paper", four, plan)
    hours = 1234.5 / 4
    assert need.runtime == math.ceil(hours * 60 * cluster.RUNTIME_MARGIN) + cluster.STARTUP_MIN
    assert need.mem_mb == cluster.TRAIN_DEFAULT["cuda"].mem_mb + 3 * cluster.PROCESS_MB
    assert cluster.train_launch(1, 1) == "python -m pdelab.runtime.warm pdelab.training.train"
    assert cluster.train_launch(4, 4) == (
        "python -m pdelab.runtime.gpu_job 4 torchrun --standalone --nproc-per-node 4 "
        "-m pdelab.training.train"
    )
    assert cluster.train_launch(2, 0).startswith("python -m pdelab.runtime.gpu_job 0 torchrun ")


def test_the_train_rule_takes_its_processes_from_the_plan_outside_the_rerun_triggers() -> None:
    """N reaches the job's GPUs, CPUs and command, but not Snakemake's params trigger: the
    launch is a function of the input (a derived param), so a changed N retrains nothing."""
    rule = (ROOT / "workflow/rules/train.smk").read_text()
    assert "gpu=lambda wc: train_gpu_share(wc).gpu" in rule  # whole GPUs, or a share of one
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert "gpus = cluster.train_gpus(config, PROFILE, wc)" in common
    assert "threads: lambda wc: cluster.train_processes(config, PROFILE, wc)" in rule
    assert "launch=lambda wc, input: cluster.train_launch(" in rule
    assert '"{params.launch} --plan {input.plan} ' in rule
    assert '"PDELAB_GPU_SHARE_MIB={resources.gpu_share_mib} "' in rule


def test_a_training_job_of_a_cpu_profile_asks_for_the_plans_memory(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_json())
    need = cluster.train_need(config("cpu"), "paper", wc("listops", "baseline", 0), plan)
    assert need == cluster.Need(
        cluster.HOST_BASE_MB + 2 * 1536, cluster.TRAIN_DEFAULT["cpu"].runtime
    )
    small = cluster.train_need(config("cpu"), "paper", wc("image", "vit_patch", 1), plan)
    assert small == cluster.TRAIN_DEFAULT["cpu"]  # never below the allowance


def test_without_the_job_in_a_plan_of_this_profile_the_defaults_apply(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    job = wc("listops", "baseline", 0)
    assert cluster.train_need(config("cuda"), "paper", job, plan) == cluster.TRAIN_DEFAULT["cuda"]
    plan.write_text(plan_json("smoke"))  # another profile's
    assert cluster.train_need(config("cuda"), "paper", job, plan) == cluster.TRAIN_DEFAULT["cuda"]
    plan.write_text(plan_json())
    other = wc("listops", "baseline", 7)  # a seed the plan does not have
    assert cluster.train_need(config("cuda"), "paper", other, plan) == cluster.TRAIN_DEFAULT["cuda"]
    for broken in ("not a plan", "[]", '{"profile": "paper"}', '{"profile": "paper", "jobs": [1]}'):
        plan.write_text(broken)
        assert cluster.plan_rows("paper", plan) == {}, broken


def test_the_cluster_reads_the_data_file_the_plan_rule_writes() -> None:
    """The plan's data, not its Markdown: the plan rule's `data` output is the file read."""
    rules = (ROOT / "workflow/rules/report.smk").read_text()
    assert f'data="{cluster.PLAN_FILE.as_posix()}"' in rules
    assert cluster.PLAN_FILE.suffix == ".json"


def test_the_plan_is_read_as_pdelab_plan_writes_it(tmp_path: Path) -> None:
    """The reader's keys are the writer's: a plan's data made by pdelab.plan.render.plan_data,
    written as `pdelab plan` writes it, read back to the exact numbers (not the Markdown's
    rounding)."""
    render = pytest.importorskip("pdelab.plan.render")
    from pdelab.plan.hardware import CARDS_GIB, GPUS

    run = SimpleNamespace(
        task="listops", variant="baseline", seed=2, train=SimpleNamespace(batch_size=8)
    )
    job = SimpleNamespace(
        run=run,
        step=SimpleNamespace(peak_bytes=3 * 2**30 + 12345),
        gpu_hours=lambda gpu: {"A100-80GB": 1.23456}.get(gpu, 0.5),
        fit=None,  # no card declared
        on_cpu=False,  # a GPU job: no CPU core-hours
        gpus=4,  # over the profile's threshold (pdelab.plan.cost.proposed_gpus)
    )
    cards = CARDS_GIB
    total = SimpleNamespace(jobs=1, too_big=dict.fromkeys(cards, 0), fit={}, cpu_jobs=0)
    made = SimpleNamespace(profile="paper", card_gib=None, jobs=[job], total=total)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(render.plan_data(made), indent=1) + "\n")
    planned = cluster.plan_rows("paper", path)["listops", "baseline", "2"]
    assert planned.peak_mib == (3 * 2**30 + 12345) / 2**20
    assert planned.gpu_hours == {g.name: (1.23456 if g.name == "A100-80GB" else 0.5) for g in GPUS}
    assert planned.gpus == 4


# -- SLURM status ------------------------------------------------------------------------------


def fake_slurm(tmp_path: Path, accounting: str, min_job_age: str, sacct_rc: int) -> Path:
    """A folder with a ``scontrol`` that prints a config and a ``sacct`` that exits sacct_rc
    (as slurm 22.05 does without accounting: "Slurm accounting storage is disabled")."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "scontrol").write_text(
        "#!/bin/sh\n"
        f'echo "AccountingStorageType   = {accounting}"\n'
        f'echo "MinJobAge               = {min_job_age}"\n'
        'echo "SlurmctldPort           = 6817"\n'
    )
    (folder / "sacct").write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path / "sacct-calls"}\n'
        f"[ {sacct_rc} = 0 ] || echo 'Slurm accounting storage is disabled' >&2\nexit {sacct_rc}\n"
    )
    for tool in folder.iterdir():
        tool.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("accounting", "age", "sacct_rc", "asked", "expected"),
    [
        ("accounting_storage/none", "300 sec", 1, "sacct", "squeue"),  # sacct cannot answer
        ("accounting_storage/none", "1h", 1, None, "squeue"),
        ("accounting_storage/slurmdbd", "300 sec", 0, "sacct", "sacct"),  # it answers: kept
        ("accounting_storage/slurmdbd", "300 sec", 0, "squeue", "squeue"),  # as the user asked
        ("accounting_storage/slurmdbd", "300 sec", 1, "sacct", "squeue"),  # slurmdbd down
    ],
)
def test_the_status_command_is_one_the_cluster_can_answer(
    tmp_path, monkeypatch, accounting, age, sacct_rc, asked, expected
) -> None:
    monkeypatch.setenv("PATH", f"{fake_slurm(tmp_path, accounting, age, sacct_rc)}")
    status = cluster.slurm_status()
    assert status.accounting == accounting
    assert status.min_job_age_s == (3600 if age == "1h" else 300)
    assert cluster.status_command(status, asked) == expected
    # sacct is asked only where the cluster says it keeps accounts
    assert (tmp_path / "sacct-calls").exists() == (accounting != "accounting_storage/none")


def test_a_cluster_that_forgets_finished_jobs_too_soon_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_slurm(tmp_path, "accounting_storage/none", "60 sec", 1)))
    with pytest.raises(ValueError) as stop:
        cluster.status_command(cluster.slurm_status(), "sacct")
    message = str(stop.value)
    assert "AccountingStorageType=accounting_storage/none" in message
    assert "MinJobAge=60 s" in message and f"MinJobAge={cluster.MIN_JOB_AGE_S}" in message
    assert "slurmdbd" in message and "no job was submitted" in message


def test_without_scontrol_nothing_is_known_and_the_run_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    status = cluster.slurm_status()
    assert status == cluster.SlurmStatus("unknown", None, False)
    with pytest.raises(ValueError, match="MinJobAge=None"):
        cluster.status_command(status, None)


def test_prepare_slurm_sets_the_plugins_setting_and_sigterm_interrupts(tmp_path, monkeypatch):
    """The plugin reads ``status_command`` from the workflow's executor settings at every
    check; SIGTERM becomes the KeyboardInterrupt on which Snakemake cancels the jobs."""
    monkeypatch.setenv("PATH", str(fake_slurm(tmp_path, "accounting_storage/none", "300", 1)))
    workflow = SimpleNamespace(executor_settings=SimpleNamespace(status_command="sacct"))
    before = signal.getsignal(signal.SIGTERM)
    try:
        line = cluster.prepare_slurm(workflow)
        assert workflow.executor_settings.status_command == "squeue"
        assert "job states from squeue" in line and "SIGTERM cancels" in line
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at once: never reached
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize(
    ("accounting", "no_account", "skipped"),
    [
        ("accounting_storage/none", False, True),  # no account to find: none guessed
        ("accounting_storage/slurmdbd", True, True),  # --slurm-no-account
        ("accounting_storage/slurmdbd", False, False),  # the plugin guesses, as it would
    ],
)
def test_no_account_is_guessed_where_there_is_none_to_find(
    tmp_path, monkeypatch, accounting, no_account, skipped
) -> None:
    """The plugin guesses an account (warnings, a failing sacct call) until its executor
    holds the outcome; where the cluster keeps no accounts, or --slurm-no-account was
    passed, prepare_slurm leaves it "no account" before the first submission."""
    monkeypatch.setenv("PATH", str(fake_slurm(tmp_path, accounting, "300", 0)))
    executor = SimpleNamespace(_fallback_account_arg=None)
    workflow = SimpleNamespace(
        executor_settings=SimpleNamespace(status_command="sacct", no_account=no_account),
        scheduler=SimpleNamespace(_executor=executor),
    )
    before = signal.getsignal(signal.SIGTERM)
    try:
        line = cluster.prepare_slurm(workflow)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert executor._fallback_account_arg == ("" if skipped else None)  # noqa: SLF001
    assert ("submitting without an account" in line) == skipped


def test_the_plugin_keeps_its_account_guess_where_prepare_slurm_sets_it() -> None:
    """The attribute prepare_slurm sets is the one the installed plugin reads (skipped where
    the plugin is not installed)."""
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    source = Path(plugin.__file__).read_text()
    assert "if self._fallback_account_arg is None:" in source
    assert "yield self._fallback_account_arg" in source


@pytest.mark.parametrize(("gpu", "partition"), [(1, "gpu"), (2, "gpu"), (8, "gpu"), (0, "cpu")])
def test_the_slurm_profile_routes_gpu_jobs_to_the_gpu_partition(gpu, partition) -> None:
    """The plugin's own partition choice over workflow/profiles/slurm/partitions.yaml: a job
    that asks for GPUs (one, or a node's several) goes to the partition with GPUs, any other
    to the one without."""
    partitions = pytest.importorskip("snakemake_executor_plugin_slurm.partitions")
    found = partitions.read_partition_file(ROOT / "workflow/profiles/slurm/partitions.yaml")
    resources = {"gpu": gpu, "mem_mb": 16000, "runtime": 1440}
    job = SimpleNamespace(name="train", threads=1, resources=SimpleNamespace(get=resources.get))
    logger = SimpleNamespace(info=lambda *a: None, debug=lambda *a: None, warning=print)
    assert partitions.get_best_partition(found, job, logger) == partition
