"""The numerics environment a run records (pdelab.records.environment) and how ``pdelab status``
names a current run made under another."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import write_run
from pdelab.cli import status
from pdelab.data.store import content_hash
from pdelab.records import environment, provenance
from pdelab.records.run import identity, record_table, write_records
from pdelab.spec.config import resolve

DATA = content_hash({})  # a prepared folder's hash: of no files, in these tests


def test_a_numerics_variable_is_recorded_and_named_as_a_difference(monkeypatch) -> None:
    """MKL_CBWR moves a loss in the 8th digit: a run records it, unset as "unset", and a run
    made without it differs from one made with it in exactly that key."""
    monkeypatch.delenv("MKL_CBWR", raising=False)
    without = environment.environment("cpu")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    with_it = environment.environment("cpu")
    assert without["MKL_CBWR"] == "unset" and with_it["MKL_CBWR"] == "COMPATIBLE"
    assert environment.differences(without, with_it) == ["MKL_CBWR: unset -> COMPATIBLE"]
    assert environment.versions()["MKL_CBWR"] == "COMPATIBLE"
    assert environment.tags(with_it)["env.MKL_CBWR"] == "COMPATIBLE"


def test_every_numerics_variable_is_recorded_and_no_allocator_setting(monkeypatch) -> None:
    for name in environment.NUMERICS_VARIABLES:
        monkeypatch.setenv(name, f"value-of-{name}")
    made = environment.environment("cpu")
    assert {n: made[n] for n in environment.NUMERICS_VARIABLES} == {
        n: f"value-of-{n}" for n in environment.NUMERICS_VARIABLES
    }
    assert len(set(environment.NUMERICS_VARIABLES)) == len(environment.NUMERICS_VARIABLES)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in environment.NUMERICS_VARIABLES
    assert set(environment.NUMERICS_VARIABLES) <= set(environment.COMPARED)


def test_a_cpu_run_records_the_cpu_and_torch_settings_and_no_cuda_keys() -> None:
    made = environment.environment("cpu")
    assert made["cpu"] == environment.cpu_model() and made["cpu"] not in ("", "unknown")
    assert made["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert made["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert made["deterministic"] == torch.are_deterministic_algorithms_enabled()
    assert not set(environment.CUDA_KEYS) & set(made)


def test_the_cpu_model_is_read_from_cpuinfo_else_platform(tmp_path: Path, monkeypatch) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU 9000 @ 3GHz\n")
    assert environment.cpu_model(cpuinfo) == "Example CPU 9000 @ 3GHz"
    monkeypatch.setattr(environment.platform, "processor", lambda: "armv9")
    assert environment.cpu_model(tmp_path / "absent") == "armv9"


def test_a_cuda_run_records_the_gpu_driver_cudnn_cublas_and_tf32(monkeypatch) -> None:
    """The CUDA keys, with torch's answers faked (this machine has no GPU), and the driver
    from nvidia-smi, None where it cannot be read."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Example GPU")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    monkeypatch.setattr(environment, "nvidia_smi", lambda fields: [["550.54.15"]])
    made = environment.environment("cuda")
    assert made["gpu"] == "Example GPU" and made["gpu_driver"] == "550.54.15"
    assert made["cudnn"] == 90100
    assert made["cublas"] == environment.cublas_version(torch.version.cuda)
    assert made["tf32_matmul"] == torch.backends.cuda.matmul.allow_tf32
    assert made["tf32_cudnn"] == torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(environment, "nvidia_smi", lambda fields: [])
    unread = environment.environment("cuda")
    assert unread["gpu_driver"] is None
    assert environment.differences(made, unread) == ["gpu_driver: 550.54.15 -> unknown"]


def test_nvidia_smi_absent_is_no_gpu_not_an_error(monkeypatch) -> None:
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)
    assert environment.nvidia_smi("name,driver_version") == []
    assert environment.gpu_driver() is None
    assert not {"gpu", "gpu_driver"} & set(environment.versions())


def test_gpu_keys_are_compared_for_cuda_runs_only() -> None:
    today = {"python": "3.11", "gpu": "GPU B", "gpu_driver": "550"}
    on_cpu = {"python": "3.11", "device": "cpu"}
    on_cuda = {"python": "3.11", "device": "cuda", "gpu": "GPU A", "gpu_driver": "550"}
    assert environment.differences(on_cpu, today) == []
    assert environment.differences(on_cuda, today) == ["gpu: GPU A -> GPU B"]
    before = {"python": "3.11", "device": "cuda:0"}  # made before the GPU was recorded
    assert environment.differences(before, today) == [
        "gpu: unrecorded -> GPU B",
        "gpu_driver: unrecorded -> 550",
    ]


def test_a_record_made_before_the_variables_were_recorded_says_so_once() -> None:
    today = {"python": "3.11", "cpu": "Example CPU"} | environment.numerics_variables()
    assert environment.differences({"python": "3.11"}, today) == [
        "cpu: unrecorded -> Example CPU",
        "numerics variables: unrecorded",
    ]
    assert environment.differences(None, today) == ["environment: unrecorded"]


def test_status_leaves_the_per_job_thread_variables_to_the_workflow(monkeypatch) -> None:
    """Snakemake sets OMP_NUM_THREADS and the like in each job: a shell's value is not a
    job's, so status does not compare them."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    today = environment.versions()
    assert not environment.PER_JOB_VARIABLES & set(today)
    assert set(environment.NUMERICS_VARIABLES) - environment.PER_JOB_VARIABLES <= set(today)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ({"MKL_CBWR": "COMPATIBLE"}, ["environment: MKL_CBWR: COMPATIBLE -> unset"]),
        ({"cpu": "Another CPU"}, [f"environment: cpu: Another CPU -> {environment.cpu_model()}"]),
        ({}, []),
    ],
)
def test_status_names_a_current_run_made_under_other_numerics(
    params, tmp_path: Path, monkeypatch, recorded: dict[str, str], expected: list[str]
) -> None:
    """A current run recorded under another numerics variable or CPU is kept and named, one
    line per key; one recorded under this machine's is not."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    runs = tmp_path / "runs"
    run = resolve(params, "listops", "baseline", 0, "smoke")
    (tmp_path / run.data_dir).mkdir(parents=True)
    (tmp_path / run.data_dir / "manifest.json").write_text(
        f'{{"files": {{}}, "content_hash": "{DATA}"}}'
    )
    folder = runs / "smoke/listops/baseline/seed0"
    record = write_run(folder, "listops", "baseline", 0, data_hash=DATA)
    spec = run.to_dict()
    record |= {"spec": spec, "identity": identity(spec, DATA)}
    record["provenance"] = {"code": provenance.code_files(run)}
    record["environment"] = environment.environment("cpu") | recorded
    write_records(folder, record, record_table([{"seed": 0}]), record_table([record["result"]]))
    lines = status(params, "smoke", runs)
    prefix = "listops baseline seed 0: kept, "
    named = [ln.removeprefix(prefix) for ln in lines if ln.startswith(prefix)]
    assert named == expected
    assert any("another environment" in ln for ln in lines) == bool(expected)
