"""The cost plan calibrated on a GPU: measured step times and peak memory of sampled jobs beside
the plan's estimates, and the measured rates the plan then uses.

    python -m pdelab.plan.calibration measure --out raw.json     # on the GPU (minutes)
    python -m pdelab.plan.calibration calibrate raw.json         # anywhere: the comparison

Why two steps: measuring needs the GPU and nothing else, counting the plan's estimate needs
only a CPU (fake tensors, pdelab.plan.counting), so the GPU's time goes to measuring.

``measure`` takes each sampled job of the run profile (:data:`SAMPLE`: every task kind and
every mechanism family; or the ``task/variant`` names given) at the profile's own batch on
synthetic batches of its task's shapes (pdelab.plan.shapes, the plan's), each in a fresh process
so that nothing else allocates there: ``WARMUP`` untimed steps of the trainer's
:func:`pdelab.training.train.train_step` (FlexAttention compiles in them), then ``TIMED`` steps,
each synchronised; its median seconds, and ``torch.cuda.max_memory_allocated`` over all steps.

``calibrate`` counts each job's step as the plan does, and writes:

- ``results/plan/measured.json`` (what :func:`pdelab.plan.measured.load_measured` reads): each
  sampled job's measured step time on that GPU, and the GPU's sustained rates, bf16 and fp32,
  as the datasheet peaks times the median over the sampled jobs of the utilisation each
  reached (the seconds its FLOPs would take at 100% of peak over its measured seconds), in
  place of the assumed :data:`pdelab.plan.hardware.UTILISATION`;
- ``results/plan/calibration.md``: per job, the estimated and measured peak (and their
  difference), the measured step time, the assumed one, and the utilisation reached.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pdelab.records.atomic import write_text
from pdelab.spec.config import PARAMS_FILE, active_profile, load_params

# one job per task kind and mechanism family of the paper profile, each fitting an 80 GB card
SAMPLE = (
    "listops/baseline",  # classification, SDPA
    "listops/after_embedding",  # the diffusion layer
    "image/baseline",  # classification of pixels, batch 1024
    "retrieval/ldn",  # document pairs, the LDN block
    "imdb_wordpiece/fna",  # FNA, general alpha: FlexAttention
    "imdb_wordpiece/fna_la",  # LA: SDPA on augmented q, k
    "wikitext/pde_s4_causal_T256",  # a causal language model, PDE attention
    "multi30k/mt_fna",  # translation, FNA in a causal decoder
)
WARMUP, TIMED = 3, 10
CALIBRATION_TABLE = Path("results/plan/calibration.md")
# the plan's GPU names (pdelab.plan.hardware.GPUS), by what torch.cuda.get_device_name says
GPU_NAMES = (("H100", "H100-SXM"), ("H200", "H200"), ("A100", "A100-80GB"), ("4090", "RTX-4090"))


def plan_gpu(device_name: str) -> str:
    """The cost plan's name of a GPU torch names (``NVIDIA H100 80GB HBM3`` -> H100-SXM)."""
    for fragment, name in GPU_NAMES:
        if fragment in device_name:
            return name
    known = ", ".join(f for f, _ in GPU_NAMES)
    raise ValueError(f"no cost-plan GPU for {device_name!r}; the plan knows {known}")


def measure_job(
    params: dict[str, Any],
    profile: str,
    job: str,
    warmup: int = WARMUP,
    timed: int = TIMED,
    batch: int | None = None,
    device_name: str = "cuda",
) -> dict[str, Any]:
    """One job's median step seconds and peak CUDA bytes at the profile's batch (or
    ``batch``); run it in a fresh process: nothing else may allocate there. On a CPU (a dry
    run of this code, in tests) the peak is not measured: 0."""
    import torch

    from pdelab.plan.check import checked_run, train_steps
    from pdelab.plan.hardware import JOB_THREADS
    from pdelab.spec.config import resolve
    from pdelab.training.train import train_step

    task, variant = job.split("/")
    batch = batch or resolve(params, task, variant, 0, profile).train.batch_size
    run, shape = checked_run(params, profile, task, variant, batch, device_name)
    torch.set_num_threads(JOB_THREADS)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []

    def timed_step(*args: Any) -> None:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        train_step(*args)
        if cuda:
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)

    train_steps(run, shape, warmup + timed, device, timed_step)
    return {
        "job": job,
        "batch": batch,
        "step_s": statistics.median(seconds[warmup:]),
        "first_step_s": seconds[0],
        "peak_bytes": int(torch.cuda.max_memory_allocated(device)) if cuda else 0,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
    }


def measure(
    params: dict[str, Any], profile: str, jobs: Sequence[str], out: Path | None = None
) -> dict[str, Any]:
    """Every job in its own fresh process, one after another (the GPU to itself); ``out``
    is rewritten after each job, so a run cut short keeps the jobs it measured."""
    import torch

    doc: dict[str, Any] = {
        "profile": profile,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "date": datetime.date.today().isoformat(),
        "warmup": WARMUP,
        "timed": TIMED,
        "jobs": [],
    }
    for job in jobs:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            try:
                row = pool.submit(measure_job, params, profile, job).result()
            except Exception as error:  # one job's failure (out of memory) is its row
                row = {"job": job, "error": f"{type(error).__name__}: {error}"[:500]}
        doc["jobs"].append(row)
        print(json.dumps(row), flush=True)
        if out:
            write_text(out, json.dumps(doc, indent=1))
    return doc


def calibrate(params: dict[str, Any], raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """measured.json's content and the Markdown comparison, from ``measure``'s output."""
    from tabulate import tabulate

    from pdelab.plan.check import checked_run
    from pdelab.plan.cost import step_seconds
    from pdelab.plan.counting import count_step
    from pdelab.plan.hardware import GPUS, PRECISIONS, UTILISATION, Throughput
    from pdelab.plan.measured import Measured

    gpu = next(g for g in GPUS if g.name == plan_gpu(raw["gpu"]))
    where = f"{raw['gpu']}, torch {raw['torch']}, CUDA {raw['cuda']}, {raw['date']}"
    # the datasheet's peaks: a step's seconds at 100% utilisation
    peak = {(gpu.name, p): Throughput(gpu.name, p, gpu.peak_tflops[p], "peak") for p in PRECISIONS}
    rows, steps, utilisations = [], [], []
    for m in raw["jobs"]:
        task, variant = m["job"].split("/")
        if "error" in m:
            rows.append([m["job"], "", "", "", "", "", "", f"not measured: {m['error'][:80]}"])
            continue
        run = checked_run(params, raw["profile"], task, variant, m["batch"])
        step = count_step(*run)
        at_peak = step_seconds(run[0], step, gpu, peak, Measured())[0]
        utilisation = at_peak / m["step_s"]
        utilisations.append(utilisation)
        source = f"pdelab.plan.calibration on {where}, median of {raw['timed']} steps"
        steps.append(
            {"gpu": gpu.name, "task": task, "variant": variant, "step_s": m["step_s"]}
            | {"profile": raw["profile"], "source": source}
        )
        off = step.peak_bytes / m["peak_bytes"] - 1
        rows.append(
            [
                m["job"],
                m["batch"],
                f"{step.peak_bytes / 2**30:.2f}",
                f"{m['peak_bytes'] / 2**30:.2f}",
                f"{100 * off:+.1f}%",
                f"{1e3 * m['step_s']:.1f}",
                f"{1e3 * at_peak / UTILISATION:.1f}",
                f"{100 * utilisation:.1f}%",
            ]
        )
    if not utilisations:
        raise ValueError("no job was measured: nothing to calibrate")
    median = statistics.median(utilisations)
    spread = f"{100 * min(utilisations):.1f}-{100 * max(utilisations):.1f}%"
    why = (
        f"median utilisation {100 * median:.1f}% of the datasheet peak over "
        f"{len(utilisations)} sampled paper-profile jobs (range {spread}) on {where}"
    )
    doc = {
        "throughput": [
            {"gpu": gpu.name, "precision": p, "tflops": gpu.peak_tflops[p] * median}
            | {"source": why}
            for p in PRECISIONS
        ],
        "step_s": steps,
        "measured_on": where,
    }
    head = [
        "job",
        "batch",
        "plan peak GiB",
        "measured peak GiB",
        "plan vs measured",
        "measured ms/step",
        f"assumed ms/step ({UTILISATION:.0%} of peak)",
        "utilisation reached",
    ]
    text = (
        f"# The cost plan against {raw['gpu']}\n\n"
        f"{where}; run profile `{raw['profile']}` at each job's own batch, on synthetic "
        f"batches of its task's shapes; peak: `torch.cuda.max_memory_allocated` over "
        f"{raw['warmup']} + {raw['timed']} steps; time: the median of the {raw['timed']} "
        f"after {raw['warmup']} warm-up steps (`python -m pdelab.plan.calibration`).\n\n"
        f"{tabulate(rows, head, tablefmt='github')}\n\n"
        f"The plan assumed {UTILISATION:.0%} of the datasheet peak; the sampled jobs "
        f"reached {spread} (median {100 * median:.1f}%), so the assumed GPU-hours were "
        f"{UTILISATION / median:.1f}x too low. `results/plan/measured.json` now gives "
        f"{gpu.name} the measured median rate for every job, and these jobs their measured "
        f"step times.\n"
    )
    return doc, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdelab.plan.calibration", description=__doc__)
    parser.add_argument("what", choices=("measure", "calibrate"))
    parser.add_argument("raw", nargs="?", type=Path, help="calibrate: measure's output")
    parser.add_argument("--jobs", nargs="+", default=list(SAMPLE), help='"task/variant" names')
    parser.add_argument("--out", type=Path, help="measure: where its JSON goes")
    parser.add_argument("--profile", help="the run profile (default: params.yaml's)")
    parser.add_argument("--params", type=Path, default=PARAMS_FILE)
    parser.add_argument("--measured", type=Path, help="default results/plan/measured.json")
    parser.add_argument("--table", type=Path, default=CALIBRATION_TABLE)
    args = parser.parse_args(argv)
    params = load_params(args.params)
    if args.what == "measure":
        raw = measure(params, active_profile(params, args.profile), args.jobs, args.out)
        if not args.out:
            print(json.dumps(raw, indent=1))
        return 0 if all("error" not in j for j in raw["jobs"]) else 1
    if args.raw is None:
        parser.error("calibrate needs the JSON that measure wrote")
    from pdelab.plan.measured import MEASURED_FILE

    doc, text = calibrate(params, json.loads(args.raw.read_text()))
    write_text(args.measured or MEASURED_FILE, json.dumps(doc, indent=1) + "\n")
    write_text(args.table, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
