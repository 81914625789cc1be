"""A training job's fixed cost, cold (live or batch MLflow tracking) vs warm, end to end.

    python benchmarks/bench_job_overhead.py --repeats 7

Runs the real commands as subprocesses on a small prepared dataset (the smoke profile's own
data of --task under data/<profile>/prepared/ if present, else a tiny ListOps prepared as the
tests do), in three modes:

- cold live: ``python -m pdelab.training.train --tracking live``, a fresh interpreter logging to
  MLflow;
- cold batch: the same with ``--tracking batch`` (records only, synced to MLflow afterwards);
- warm batch: ``python -m pdelab.runtime.warm pdelab.training.train ...``, the workflow's train
  rule: the job is forked from a server that has torch imported (its own server, started by the
  warm-up).

The modes take turns (the order rotates each round) in one process, so load drifts hit all
alike. For each job:

- wall: spawn to exit, measured here;
- span: first training step to the end of the last test batch, from the job's run.json
  ``timing`` block (the training itself);
- overhead = wall - span = (spawn -> first step) + (last test batch -> exit);
- the first part split at run.json's stamps: start-up and imports (spawn -> ``imported``;
  warm: spawn -> fork),
  params, data and model (-> ``built``), tracking start (-> ``first_step``).

Prints medians with a distribution-free interval for the median (order statistics, the
coverage it reaches for N is printed), and the load average, since other jobs on the machine
inflate start-up (imports are CPU-bound). The MLflow store is a fresh SQLite file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY_DATA = {  # as conftest.py prepares the tests' tiny folder
    "source": "generate",
    "n_train": 480,
    "n_val": 60,
    "n_test": 60,
    "min_length": 10,
    "max_length": 50,
    "seed": 0,
}
MODES = ("cold live", "cold batch", "warm batch")
COLUMNS = ("wall", "span", "overhead", "pre", "post", "startup", "build", "track_start")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="jobs per mode")
    p.add_argument("--profile", default="smoke")
    p.add_argument("--task", default="listops")
    p.add_argument("--variant", default="baseline")
    p.add_argument("--epochs", type=int, default=1, help="epochs per job (spec override)")
    p.add_argument("--threads", type=int, default=1, help="as the workflow's train rule")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    return p.parse_args(argv)


def prepare(work: Path, args: argparse.Namespace) -> str:
    """A scratch project: params.yaml (--epochs), the data, a fresh MLflow store; returns
    where the data came from."""
    from pdelab.spec.config import load_params  # the papers' config files merged: work has none

    params = load_params(ROOT / "params.yaml")
    params["profile"] = args.profile
    prof = params["profiles"][args.profile]
    train = prof.setdefault("overrides", {}).setdefault("train", {})
    train.update(epochs=args.epochs, patience=args.epochs)
    own = ROOT / "data" / args.profile / "prepared" / args.task
    target = work / "data" / args.profile / "prepared" / args.task
    target.parent.mkdir(parents=True)
    if (own / "manifest.json").exists():
        target.symlink_to(own)
        source = str(own.relative_to(ROOT))
    else:
        params["data"][args.profile][args.task] = TINY_DATA
        source = f"a tiny {args.task} prepared here"
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    if not target.exists():
        for stage in ("fetch", "prepare"):
            subprocess.run(
                [sys.executable, "-m", "pdelab.data", stage, args.task, "--profile", args.profile],
                cwd=work,
                check=True,
                capture_output=True,
            )
    subprocess.run(
        [sys.executable, "-m", "pdelab.tracking", "init", f"pdelab-{args.task}-{args.profile}"],
        cwd=work,
        env=env(work),
        check=True,
        capture_output=True,
    )
    return source


def env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
        "PDELAB_WARM_SOCKET": str(work / "warm.sock"),
        "PDELAB_WARM": "1",
    }


def stop_warm_server(work: Path) -> None:
    log = work / "warm.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.rsplit("pid ", 1)[1].rstrip(")")), signal.SIGTERM)


def job(work: Path, args: argparse.Namespace, mode: str, name: str) -> dict[str, float]:
    """One training job; its times in seconds."""
    start_kind, tracking = mode.split()
    launcher = ["pdelab.runtime.warm"] if start_kind == "warm" else []
    cmd = [sys.executable, "-m", *launcher, "pdelab.training.train", "--profile", args.profile]
    cmd += ["--task", args.task, "--variant", args.variant, "--seed", "0", "--out", f"runs/{name}"]
    cmd += ["--threads", str(args.threads), "--no-progress", "--tracking", tracking]
    start = time.time()
    subprocess.run(cmd, cwd=work, env=env(work), check=True, capture_output=True)
    end = time.time()
    t = json.loads((work / "runs" / name / "run.json").read_text())["timing"]
    span = t["last_test_batch"] - t["first_step"]
    return {
        "wall": end - start,
        "span": span,
        "overhead": end - start - span,
        "pre": t["first_step"] - start,
        "post": end - t["last_test_batch"],
        "startup": t["imported"] - start,
        "build": t["built"] - t["imported"],
        "track_start": t["first_step"] - t["built"],
    }


def median_interval(xs: list[float]) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): the narrowest order statistics x_(k), x_(n+1-k) that
    cover the true median with at least 95% probability (any distribution), or the sample
    range when N is too small for 95%."""
    xs, n = sorted(xs), len(xs)

    def coverage(k: int) -> float:
        tail = sum(math.comb(n, i) for i in range(k)) / 2**n
        return 1 - 2 * tail

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= 0.95:
        k += 1
    return statistics.median(xs), xs[k - 1], xs[n - k], coverage(k)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_job_overhead_"))
    try:
        source = prepare(work, args)
        load_before = os.getloadavg()
        for mode in MODES:  # warm-up: page cache, SQLite file, the warm server
            job(work, args, mode, f"warmup-{mode.replace(' ', '-')}")
        times: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for i in range(args.repeats):
            for mode in MODES[i % 3 :] + MODES[: i % 3]:
                times[mode].append(job(work, args, mode, f"{mode.replace(' ', '-')}{i}"))
        load_after = os.getloadavg()
    finally:
        stop_warm_server(work)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, source, times, load_before, load_after)


def report(
    args: argparse.Namespace,
    source: str,
    times: dict[str, list[dict[str, float]]],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    print(
        f"python -m pdelab.training.train --profile {args.profile} --task {args.task} "
        f"--variant {args.variant} --threads {args.threads}, {args.epochs} epoch(s), data: "
        f"{source}; {args.repeats} jobs per mode, the order rotating each round"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (other jobs inflate start-up)"
    )
    _, _, _, cover = median_interval([0.0] * args.repeats)
    print(f"\nseconds, median [interval for the median, {cover:.0%} coverage]\n")
    print("| mode | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for mode, rows in times.items():
        cells = []
        for col in COLUMNS:
            med, lo, hi, _ = median_interval([r[col] for r in rows])
            cells.append(f"{med:.2f} [{lo:.2f}, {hi:.2f}]")
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print()
    for a, b in (("cold live", "cold batch"), ("cold batch", "warm batch")):
        saved = [x["overhead"] - y["overhead"] for x, y in zip(times[a], times[b], strict=True)]
        med, lo, hi, _ = median_interval(saved)
        print(f"overhead {a} - {b}, paired by round: {med:.2f} s [{lo:.2f}, {hi:.2f}]")
    print(
        "pre = spawn -> first step = startup (interpreter, imports; warm: to the fork) + build "
        "(params, data, model; cold: torch.optim's first-use imports) + track_start (git "
        "commit; live: mlflow import, run creation); post = last test batch -> exit (records; "
        "live: MLflow closing)"
    )


if __name__ == "__main__":
    main()
