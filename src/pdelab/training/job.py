"""A training job's plumbing around the training itself: its command line, its process (the
device, the seeds, its peak memory), and its fixed cost, measured and cut.

The smoke workflow pays a job's start (to its first step) and end (its last test batch to
exit) ~200 times, so the command line imports no pandas (the records are written with
pyarrow), no mlflow unless the profile's ``tracking`` is ``live``, and leaves without the
interpreter's teardown (:func:`exit_now`); run.json's ``timing`` block records the wall-clock
stamps that measure it (:func:`timing`, benchmarks/bench_job_overhead.py). A job forked warm
by pdelab.runtime.warm gets its client's start and its fork's time from the environment.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from pdelab.runtime import warm
from pdelab.spec.config import COMPILE_MODES

T = TypeVar("T")

_imported_s = time.time()  # replaced by mark_imported() once the job's imports are done


def mark_imported() -> None:
    """Stamp the job's imports as done (pdelab.training.train calls it after its own imports)."""
    global _imported_s
    _imported_s = time.time()


def process_start_s() -> float:
    """Wall-clock time the kernel started this process (Linux, 10 ms resolution), so a job's
    interpreter start-up is measured too; elsewhere the time its imports were done."""
    try:
        return warm.process_start_s()
    except (OSError, ValueError, IndexError):
        return _imported_s


def job_started_s() -> float:
    """The job's start: this process's, or the warm client's (``pdelab.runtime.warm`` sets it)."""
    return float(os.environ.get("PDELAB_JOB_STARTED") or process_start_s())


def job_imported_s() -> float:
    """When the job's imports were done: at :func:`mark_imported`, or, for a job forked warm
    from a server that had them loaded already, at the fork."""
    return float(os.environ.get("PDELAB_JOB_IMPORTED") or _imported_s)


def timing(stamps: dict[str, float]) -> dict[str, Any]:
    """run.json's ``timing`` block: the job's start and imports, the trainer's own stamps
    (built, first_step, last_test_batch), and whether pdelab.runtime.warm forked it."""
    record: dict[str, Any] = {"process_start": job_started_s(), "imported": job_imported_s()}
    record |= stamps
    record["warm"] = "PDELAB_JOB_IMPORTED" in os.environ  # forked by pdelab.runtime.warm, or cold
    return record


def exit_now() -> None:
    """End the command line without the interpreter's teardown of torch's objects (over a
    second on a busy machine, paid by every job): the records are written and closed, and a
    job that never imported mlflow holds nothing else to finalize. One that did (live
    tracking) exits normally, so MLflow's exit handlers run, minus the final collection."""
    sys.stdout.flush()
    sys.stderr.flush()
    if "mlflow" in sys.modules:
        gc.freeze()
        return
    os._exit(0)


def arguments(
    argv: list[str] | None, description: str | None, params_file: Path, tracking: Sequence[str]
) -> argparse.Namespace:
    """The train rule's arguments (``python -m pdelab.training.train``): a run planned by the
    workflow (``--plan``), or one named by hand (``--task --variant --seed``, resolved from
    params.yaml); ``tracking``: the modes ``--tracking`` takes
    (pdelab.spec.config.TRACKING_MODES)."""
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.training.train",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--plan",
        type=Path,
        help="the run's plan as the workflow wrote it (results/stamps/...: its resolved spec "
        "and code digest, pdelab.records.staleness); the job trains that spec and reads no "
        "params.yaml",
    )
    parser.add_argument(
        "--plan-digest",
        help="the digest of the plan's text the workflow read (pdelab.records.run.plan_sha256); "
        "the job stops if the file holds another plan",
    )
    parser.add_argument("--task", help="by hand: a task of params.yaml")
    parser.add_argument("--variant", help="by hand: a variant of params.yaml")
    parser.add_argument("--seed", type=int, help="by hand: the run's seed")
    parser.add_argument("--profile", help="by hand: defaults to params.yaml's `profile`")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--params", default=str(params_file), help="by hand: the params file")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--tracking",
        choices=tracking,
        help="live: log to MLflow while training; batch: write only the records, for "
        "`python -m pdelab.tracking sync` (default: by hand, the profile's `tracking`; with "
        "--plan, live)",
    )
    parser.add_argument("--no-mlflow", action="store_true", help="the same as --tracking batch")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--card-gb",
        type=float,
        help="the GPU memory (GB) the cost plan's fit must be for (default: by hand, the "
        "profile's gpu_memory_gb; with --plan, whatever card results/plan.json was made for)",
    )
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="examples per forward and backward pass; the gradients of a batch's micro-batches "
        "are summed into one optimizer step (default: the cost plan's for the profile's card, "
        "results/plan.json, else the whole batch). Not part of the run's spec",
    )
    parser.add_argument(
        "--checkpoint-blocks",
        action="store_true",
        help="recompute the encoder's and decoder's block activations in the backward pass",
    )
    parser.add_argument(
        "--compile",
        choices=COMPILE_MODES,
        help="torch.compile the step's forward and loss (pdelab.training.compiled; default: by "
        "hand, the profile's `compile`; with --plan, off). Not part of the run's spec",
    )
    args = parser.parse_args(argv)
    named = [args.task, args.variant, args.seed]
    if args.plan is not None and any(v is not None for v in [*named, args.profile]):
        parser.error("--plan names the run already: give --plan or --task/--variant/--seed")
    if args.plan is None and any(v is None for v in named):
        parser.error("give --plan (the workflow's), or --task, --variant and --seed (by hand)")
    if args.plan_digest and args.plan is None:
        parser.error("--plan-digest is the digest of a --plan")
    return args


def progress_bar(todo: list[T], done: int, desc: str, enabled: bool) -> Iterable[T]:
    """``todo[done:]``, with a progress bar on stderr (at most every 2 s, removed at the end)."""
    return tqdm(
        todo[done:],
        initial=done,
        total=len(todo),
        desc=desc,
        disable=not enabled,
        mininterval=2.0,
        file=sys.stderr,
        leave=False,
    )


def pick_device(name: str, profile: str = "") -> torch.device:
    """The profile's device; asking for a GPU that is not there fails early and says why, and
    names the params.yaml keys that change it (the workflow refuses --config)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else ""
        key = f"profiles.{profile or '<profile>'}.device"
        raise RuntimeError(
            f"run profile {profile or '(this one)'} asks for device: cuda ({key} in "
            f"params.yaml), but no GPU is visible to this job{why}. Run it on a machine with "
            f"a GPU; or, on this one, set `profile: smoke` in params.yaml (the CPU run profile), "
            f"or {key}: auto to train this profile on the CPU (slow at paper size)"
        )
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed every generator the run draws from, so a seed fixes the run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """(peak MiB, what was measured): GPU allocations, or the process's RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_max_rss"
