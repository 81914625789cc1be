"""Train one (task, variant, seed) run: ``train(run, out)``; ``main()`` only parses arguments.

AdamW with linear warm-up then cosine decay, gradient clipping and early stopping on
validation accuracy (validation loss for language models and translation); the test is taken
at the best-validation checkpoint. A checkpoint after every epoch (model, optimizer, schedule,
RNG states, history) lets a killed job started again resume exactly: batch order depends only
on (seed, epoch), so on CPU the resumed run's final metrics equal an uninterrupted run's. A
non-finite loss ends the run as "diverged", which is a result, not a crash.

SIGTERM (a cluster's time limit, or Snakemake stopping a job) checkpoints at the end of the
current training step, not of the epoch: a paper-profile epoch can outlast the seconds a
cluster grants before SIGKILL, and finishing it would lose it all. The mid-epoch checkpoint
stays exact because it holds the step reached and the epoch's running sums, and the batch
order is recomputed from (seed, epoch); the command then exits with status 143 and the same
command resumes. Checkpoints are verified by sha256 and loaded with ``weights_only=True``; a
damaged one gives way to the previous one, or to a fresh start (pdelab.checkpoint).

``train`` reads as its steps: :func:`build` (data, model, optimizer, schedule), :func:`resume`
(from a checkpoint of the same spec and data), :func:`run_epoch` until done,
:func:`evaluate_best` (test and causality probe) and :func:`finish` (records and tracking).

A job's fixed cost (start to first step, last test batch to exit) is paid ~200 times by the
smoke workflow, so the command line imports no pandas (the records are written with pyarrow),
no mlflow unless the profile's ``tracking`` is ``live``, and skips the interpreter's teardown.
run.json's ``timing`` block holds the wall-clock stamps that measure it
(benchmarks/bench_job_overhead.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from pdelab import checkpoint, gpu_slots, translation
from pdelab.atomic import write_text
from pdelab.checkpoint import CorruptCheckpoint, StopOnSigterm, Stopped
from pdelab.config import PARAMS_FILE, TRACKING_MODES, RunSpec, load_params, resolve, tracking_mode
from pdelab.data.store import Split, load_manifest, load_split
from pdelab.data.translation import load_pairs
from pdelab.lm import causality_columns, next_token_loss, not_probed, windows
from pdelab.models.factory import build_model, task_kind
from pdelab.precision import autocast, maybe_compile
from pdelab.tracking import Tracker, git_commit, now_ms, record_table, write_parquet

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

IMPORTED_S = time.time()  # on the command line: every import training needs is done

CHECKPOINT, BEST = "checkpoint.pt", "best.pt"
HISTORY_COLUMNS = (
    "epoch",
    "train_loss",
    "train_acc",
    "val_loss",
    "val_acc",
    "val_ppl",
    "lr",
    "epoch_time_s",
)
# a translation run's metrics.parquet adds the teacher-forced mean sentence BLEU x 100
TRANSLATION_HISTORY_COLUMNS = (*HISTORY_COLUMNS, "val_tf_bleu")


def process_start_s() -> float:
    """Wall-clock time the kernel started this process (Linux, 10 ms resolution), so a job's
    interpreter start-up is measured too; elsewhere the time this module was imported."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - started)
    except (OSError, ValueError, IndexError):
        return IMPORTED_S


def job_started_s() -> float:
    """The job's start: this process's, or the warm client's (``pdelab.warm`` sets it)."""
    return float(os.environ.get("PDELAB_JOB_STARTED") or process_start_s())


def job_imported_s() -> float:
    """When the job's imports were done: at this module's import, or, for a job forked warm
    from a server that had them loaded already, at the fork."""
    return float(os.environ.get("PDELAB_JOB_IMPORTED") or IMPORTED_S)


def seed_everything(seed: int) -> None:
    """Seed every generator the run draws from, so a seed fixes the run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    """The profile's device; asking for a GPU that is not there fails early and says why."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "the profile asks for device: cuda but no GPU is visible; use "
            "--config profile=smoke or set the profile's device to cpu/auto"
        )
    return torch.device(name)


def warmup_cosine(warmup: int, total: int) -> Any:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def batches(n: int, batch_size: int, order: np.ndarray | None = None) -> list[np.ndarray]:
    """Index arrays of consecutive batches over ``order`` (default: 0..n-1)."""
    index = np.arange(n) if order is None else order
    return [index[i : i + batch_size] for i in range(0, n, batch_size)]


def to_device(
    split: Split, index: np.ndarray, device: torch.device
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(model inputs, labels) of one batch."""
    arrays = {k: torch.from_numpy(v).to(device) for k, v in split.batch(index).items()}
    return arrays, arrays.pop("labels")


def batch_loss(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    kind: str,
    include_pad: bool = False,
) -> tuple[torch.Tensor, int, int]:
    """(mean loss, correct predictions, items): items are examples, or real target tokens
    (language models, translation; ``include_pad``: see pdelab.translation)."""
    if kind == "lm":
        return next_token_loss(model, inputs["ids"])
    if kind == "translation":
        return translation.translation_loss(model, inputs, labels, include_pad)
    logits = model(**inputs)
    correct = (logits.argmax(-1) == labels).sum().item()
    return F.cross_entropy(logits.float(), labels), int(correct), len(labels)


@torch.no_grad()
def evaluate(
    model: nn.Module, split: Split, batch_size: int, device: torch.device, lm: bool = False
) -> dict[str, float]:
    """Loss and accuracy per item (and perplexity for language models); batches of similar
    length keep padding (and time) low."""
    model.eval()
    order = np.argsort(split.lengths(), kind="stable")
    loss_sum, correct, items = 0.0, 0, 0
    for index in batches(len(split), batch_size, order):
        inputs, labels = to_device(split, index, device)
        loss, right, n = batch_loss(model, inputs, labels, "lm" if lm else "classification")
        loss_sum += loss.item() * n
        correct, items = correct + right, items + n
    out = {"loss": loss_sum / items, "acc": correct / items}
    if lm:
        out["ppl"] = math.exp(out["loss"])
    return out


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """(peak MiB, what was measured): GPU allocations, or the process's RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_max_rss"


@dataclass
class Session:
    """Everything one run trains with, handed from step to step, so each step is a short
    function of it. ``state`` is the resumable part, saved whole in every checkpoint."""

    run: RunSpec
    out: Path
    device: torch.device
    manifest: dict[str, Any]
    data: dict[str, Split] | dict[str, translation.PairBatches]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    state: dict[str, Any]
    resumed: bool = False
    stop: StopOnSigterm = field(default_factory=StopOnSigterm)
    # wall-clock stamps (s) of this process: built, first_step, last_test_batch
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """classification, lm (next-token loss, perplexity, the causality probe) or
        translation (teacher-forced loss, BLEU, the probe on the decoder)."""
        return task_kind(self.manifest)

    @property
    def lm(self) -> bool:
        return self.kind == "lm"

    def training(self) -> bool:
        """Epochs left, no divergence, and validation still improving within the patience."""
        s, tc = self.state, self.run.train
        return s["epoch"] < tc.epochs and s["status"] == "ok" and s["bad_epochs"] < tc.patience


def load_data(
    run: RunSpec, manifest: dict[str, Any]
) -> dict[str, Split] | dict[str, translation.PairBatches]:
    """The three splits; a language model's documents become windows of seq_len + 1 tokens,
    a translation task's sentence pairs are batched as pdelab.translation does."""
    splits = ("train", "val", "test")
    if task_kind(manifest) == "translation":
        return {
            s: translation.PairBatches(load_pairs(run.data_dir, s, manifest=manifest))
            for s in splits
        }
    data = {s: load_split(run.data_dir, s, manifest=manifest) for s in splits}
    if task_kind(manifest) == "lm":
        data = {s: windows(split, run.train.seq_len) for s, split in data.items()}
    return data


def fresh_state() -> dict[str, Any]:
    """The resumable state before the first epoch (a plain dict: checkpoints pickle it)."""
    return {
        "epoch": 0,
        "history": [],
        "best_val": -math.inf,  # the selection score: val accuracy, or -val loss (LM, translation)
        "best_epoch": 0,
        "bad_epochs": 0,
        "step_times": [],
        "status": "ok",
        "run_id": None,
        "start_ms": None,  # wall clock (ms) of the first start: MLflow's run start
        "epoch_end_ms": [],  # wall clock (ms) at each epoch's end: its metrics' timestamp
        "partial": None,  # stopped mid-epoch: {step, loss_sum, correct, seen} of the next epoch
    }


def build(run: RunSpec, out: Path) -> Session:
    """Data, model, optimizer and schedule, seeded before the model's weights are drawn so a
    seed fixes the initialisation; deterministic kernels on CPU make a resume exact."""
    device = pick_device(run.device)
    manifest = load_manifest(run.data_dir)
    if run.train.loss_includes_pad and task_kind(manifest) != "translation":
        raise ValueError(
            f"{run.task}: train.loss_includes_pad applies to translation tasks only; this task's "
            f"data is of kind {task_kind(manifest)!r}. Leave it false"
        )
    data = load_data(run, manifest)
    seed_everything(run.seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    tc = run.train
    model = maybe_compile(build_model(run, manifest).to(device), tc.compile)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay
    )
    steps_per_epoch = math.ceil(len(data["train"]) / tc.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(tc.warmup_steps, tc.epochs * steps_per_epoch)
    )
    return Session(run, out, device, manifest, data, model, optimizer, schedule, fresh_state())


def resume(s: Session) -> None:
    """Continue from the last good checkpoint (pdelab.checkpoint: a damaged one gives way to
    the previous one), but only one of this very spec and data: anything else (an edited
    params.yaml, re-prepared data) starts afresh rather than mixing runs. A damaged best.pt
    cannot be rebuilt from a checkpoint, so it too means a fresh start."""
    found = checkpoint.load_latest(s.out / CHECKPOINT, s.device)
    if found is None:
        return
    ckpt, path = found
    if ckpt["spec"] != s.run.to_json() or ckpt["data_hash"] != s.manifest["content_hash"]:
        print(f"{path} is of another spec or data; starting afresh", file=sys.stderr)
        return
    state = fresh_state() | ckpt["state"]
    if state["best_epoch"]:
        try:
            checkpoint.verify(s.out / BEST)
        except CorruptCheckpoint as bad:
            print(f"{bad}; starting from scratch", file=sys.stderr)
            return
    s.model.load_state_dict(ckpt["model"])
    s.optimizer.load_state_dict(ckpt["optimizer"])
    s.schedule.load_state_dict(ckpt["schedule"])
    checkpoint.restore_rng(ckpt["rng"])
    s.state, s.resumed = state, True
    part = state["partial"]
    where = (
        f"step {part['step']} of epoch {state['epoch'] + 1}" if part else f"epoch {state['epoch']}"
    )
    print(f"resuming from {where} of {path}", file=sys.stderr)


def train_step(s: Session, index: np.ndarray) -> tuple[Tensor, int, int] | None:
    """One optimizer step on the training items ``index``: (loss, correct, items), or None
    (and no update) on a non-finite loss. The cost study times this very function."""
    inputs, labels = to_device(s.data["train"], index, s.device)
    with autocast(s.device, s.run.train.precision):  # bf16: pdelab.precision
        loss, right, n = batch_loss(s.model, inputs, labels, s.kind, s.run.train.loss_includes_pad)
    if not torch.isfinite(loss):
        return None
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(s.model.parameters(), s.run.train.grad_clip)
    s.optimizer.step()
    s.schedule.step()
    return loss, right, n


def train_epoch(s: Session, epoch: int, progress: bool) -> tuple[float, float] | None:
    """One pass over the training split: (loss, accuracy) per item, or None on a non-finite
    loss. The batch order depends only on (seed, epoch), so a resumed run sees the same; one
    stopped mid-epoch goes on from the step and running sums its checkpoint holds."""
    s.model.train()
    tc = s.run.train
    order = np.random.default_rng([s.run.seed, epoch]).permutation(len(s.data["train"]))
    part = s.state["partial"] or {"step": 0, "loss_sum": 0.0, "correct": 0, "seen": 0}
    todo = batches(len(order), tc.batch_size, order)
    bar = tqdm(
        todo[part["step"] :],
        initial=part["step"],
        total=len(todo),
        desc=f"epoch {epoch}",
        disable=not progress,
        mininterval=2.0,
        file=sys.stderr,
        leave=False,
    )
    for index in bar:
        step_start = time.perf_counter()
        if "first_step" not in s.timing:
            s.timing["first_step"] = time.time()
        stepped = train_step(s, index)
        if stepped is None:
            return None
        loss, right, n = stepped
        if s.device.type == "cuda":
            torch.cuda.synchronize(s.device)
        s.state["step_times"].append(time.perf_counter() - step_start)
        part = {
            "step": part["step"] + 1,
            "loss_sum": part["loss_sum"] + loss.item() * n,
            "correct": part["correct"] + right,
            "seen": part["seen"] + n,
        }
        if s.stop.requested:
            s.state["partial"] = part
            stop_if_asked(s)
    s.state["partial"] = None
    return part["loss_sum"] / part["seen"], part["correct"] / part["seen"]


def stop_if_asked(s: Session) -> None:
    """After SIGTERM: checkpoint the state as it stands and raise :class:`Stopped`."""
    if not s.stop.requested:
        return
    save_checkpoint(s)
    part, epoch = s.state["partial"], s.state["epoch"]
    where = f"after step {part['step']} of epoch {epoch + 1}" if part else f"after epoch {epoch}"
    raise Stopped(
        f"pdelab.train: stopped by SIGTERM {where}; checkpoint written to "
        f"{s.out / CHECKPOINT}. Run the same command again to resume from it"
    )


def run_epoch(s: Session, tracker: Tracker, progress: bool) -> None:
    """Train one epoch and validate; a non-finite loss marks the run diverged (a result, not
    a crash). Otherwise the epoch's row is recorded and checkpointed."""
    epoch, epoch_start = s.state["epoch"] + 1, time.perf_counter()
    trained = train_epoch(s, epoch, progress)
    if trained is None:
        s.state["status"] = "diverged"
        return
    val = validate(s, "val")
    if not math.isfinite(val["loss"]):
        s.state["status"] = "diverged"
        return
    row = {
        "epoch": epoch,
        "train_loss": trained[0],
        "train_acc": trained[1],
        "val_loss": val["loss"],
        "val_acc": val["acc"],
        "val_ppl": val.get("ppl", math.nan),
        "lr": s.schedule.get_last_lr()[0],
        "epoch_time_s": time.perf_counter() - epoch_start,
    }
    if s.kind == "translation":
        row["val_tf_bleu"] = val["tf_bleu"]
    score = val["acc"] if s.kind == "classification" else -val["loss"]
    record_epoch(s, row, score, tracker, now_ms())


def validate(s: Session, split: str) -> dict[str, float]:
    """Loss and accuracy on a split (perplexity for language models and translation, and the
    teacher-forced BLEU of translation)."""
    batch_size = s.run.train.batch_size
    with autocast(s.device, s.run.train.precision):
        if s.kind == "translation":
            vocab = s.manifest["tgt_vocab"]
            return translation.evaluate(s.model, s.data[split], batch_size, s.device, vocab)
        return evaluate(s.model, s.data[split], batch_size, s.device, s.lm)


def record_epoch(
    s: Session, row: dict[str, float], score: float, tracker: Tracker, end_ms: int
) -> None:
    """Keep the best-validation weights (the test is taken there), count epochs without
    improvement for early stopping, log, and checkpoint so a killed job resumes here."""
    state = s.state
    state["history"].append(row)
    state["epoch_end_ms"].append(end_ms)
    if score > state["best_val"]:
        state.update(best_val=score, best_epoch=row["epoch"], bad_epochs=0)
        checkpoint.save(s.model.state_dict(), s.out / BEST, rotate=False)
    else:
        state["bad_epochs"] += 1
    state["epoch"] = row["epoch"]
    tracker.log_epoch(row, end_ms)
    print(json.dumps({k: round(v, 4) for k, v in row.items()}), file=sys.stderr)
    save_checkpoint(s)


def save_checkpoint(s: Session) -> None:
    """Everything a resume needs, in a form ``weights_only`` loading accepts; the last
    checkpoint is kept as checkpoint.prev.pt (pdelab.checkpoint)."""
    saved = {
        "spec": s.run.to_json(),
        "data_hash": s.manifest["content_hash"],
        "model": s.model.state_dict(),
        "optimizer": s.optimizer.state_dict(),
        "schedule": s.schedule.state_dict(),
        "rng": checkpoint.rng_state(s.device),
        "state": s.state,
    }
    checkpoint.save(saved, s.out / CHECKPOINT)


def evaluate_best(s: Session) -> dict[str, Any]:
    """Test metrics at the best-validation checkpoint (none if the run diverged), and for a
    language model the causality probe's columns, so a leaky model's perplexity is flagged.
    A translation run adds its BLEU (pdelab.translation) and probes its decoder."""
    test: dict[str, Any] = {"loss": math.nan, "acc": math.nan, "ppl": math.nan, **not_probed()}
    if s.kind == "translation":
        test |= dict.fromkeys(translation.RESULT_COLUMNS, math.nan)
        test["test_copy_bleu"] = translation.copy_baseline(s.data["test"], s.manifest)
    if not s.state["best_epoch"]:  # a best.pt there is another spec's, not this run's
        return test
    s.model.load_state_dict(checkpoint.load(s.out / BEST, s.device))
    if s.state["status"] == "ok":
        test |= validate(s, "test")
    if s.lm:
        test |= causality_columns(s.model, s.data["test"], len(s.manifest["vocab"]))
    if s.kind == "translation":
        test |= translation_scores(s, test.pop("tf_bleu", math.nan))
    return test


def translation_scores(s: Session, test_tf_bleu: float) -> dict[str, Any]:
    """The teacher-forced mean sentence BLEU (a published metric, pdelab.translation) on the
    validation and test splits, greedy corpus BLEU on the test split (all x 100; none if the
    run diverged) and the decoder's causality probe."""
    vocab = s.manifest["tgt_vocab"]
    scores = translation.decoder_causality(s.model, s.data["test"], len(vocab))
    scores["test_tf_bleu"] = test_tf_bleu
    if s.state["status"] == "ok":
        scores["val_tf_bleu"] = validate(s, "val")["tf_bleu"]
        batch_size = s.run.train.batch_size
        scores["test_bleu"] = translation.greedy_bleu(
            s.model, s.data["test"], batch_size, s.device, vocab
        )
    return scores


def result_row(s: Session, test: dict[str, Any]) -> dict[str, Any]:
    """result.parquet's one row: the run's identity, test metrics, selection and cost."""
    state, run = s.state, s.run
    memory, memory_kind = peak_memory_mb(s.device)
    best = state["history"][state["best_epoch"] - 1]["val_acc"] if state["best_epoch"] else math.nan
    steps = state["step_times"]
    return {
        "task": run.task,
        "variant": run.variant,
        "seed": run.seed,
        "profile": run.profile,
        "status": state["status"],
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "test_ppl": float(test["ppl"]),  # LM, translation: exp(test loss per real token)
        "causality": test["causality"],  # LM, translation (decoder): the probe's verdict
        "max_leak": float(test["max_leak"]),
        "best_val_acc": best,
        "best_epoch": state["best_epoch"],
        "epochs_run": state["epoch"],
        "median_step_s": statistics.median(steps) if steps else float("nan"),
        "peak_memory_mb": memory,
        "memory_kind": memory_kind,
        "device": s.device.type,
        "precision": run.train.precision,  # bf16: forward passes under autocast
        "parameters": sum(p.numel() for p in s.model.parameters()),
        "data_hash": s.manifest["content_hash"],
        "stand_in": s.manifest.get("stand_in", ""),  # what stands in for the paper's data
        "resumed": s.resumed,
        "mlflow_run_id": state["run_id"] or "",
    } | {k: float(test[k]) for k in translation.RESULT_COLUMNS if k in test}


def history_table(run: RunSpec, history: list[dict[str, float]], kind: str) -> pa.Table:
    """metrics.parquet: one row per epoch, named by (seed, variant, task) in front."""
    import pyarrow as pa

    identity = {"seed": run.seed, "variant": run.variant, "task": run.task}
    types = {k: pa.int64() if k == "seed" else pa.string() for k in identity}
    columns = TRANSLATION_HISTORY_COLUMNS if kind == "translation" else HISTORY_COLUMNS
    types |= {k: pa.int64() if k == "epoch" else pa.float64() for k in columns}
    return record_table([identity | row for row in history], types)


def finish(s: Session, test: dict[str, Any], tracker: Tracker, commit: str) -> pa.Table:
    """Write the records the workflow reads (metrics, result, run.json) and close the MLflow
    run with them as artifacts; returns the per-epoch history. run.json also keeps what a
    later MLflow sync needs beyond the Parquet files (commit, wall-clock stamps)."""
    run, out, state = s.run, s.out, s.state
    history = history_table(run, state["history"], s.kind)
    result = result_row(s, test)
    end_ms = now_ms()
    tracking = {
        "git_commit": commit,
        "start_ms": state["start_ms"],
        "epoch_end_ms": state["epoch_end_ms"],
        "end_ms": end_ms,
    }
    timing = {"process_start": job_started_s(), "imported": job_imported_s(), **s.timing}
    timing["warm"] = "PDELAB_JOB_IMPORTED" in os.environ  # forked by pdelab.warm, or cold
    slot = gpu_slots.held()  # the GPU this job was given on a multi-GPU node, if any
    record = {"spec": run.to_dict(), "result": result, "tracking": tracking, "timing": timing}
    record["gpu_slot"] = slot.record() if slot else None
    write_parquet(history, out / "metrics.parquet")
    write_text(out / "run.json", json.dumps(record, indent=2, default=str) + "\n")
    write_parquet(record_table([result]), out / "result.parquet")
    tracker.finish(result, out, end_ms)
    return history


def run_training(
    run: RunSpec,
    out: Path | str,
    *,
    track: bool = True,
    progress: bool = True,
    threads: int | None = None,
) -> pa.Table:
    """Train and evaluate one run; writes metrics.parquet, result.parquet and run.json to out.
    ``track``: log live to MLflow. Returns the per-epoch history as a pyarrow Table."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    session = build(run, out)
    resume(session)
    session.timing["built"] = time.time()
    commit = git_commit()
    tracker = Tracker(run, session.manifest["content_hash"], enabled=track)
    session.state["start_ms"] = session.state["start_ms"] or now_ms()
    session.state["run_id"] = tracker.start(
        session.state["run_id"], commit, session.state["start_ms"]
    )
    with session.stop:  # SIGTERM: checkpoint after the current step, raise Stopped
        while session.training():
            stop_if_asked(session)
            run_epoch(session, tracker, progress)
        stop_if_asked(session)
    test = evaluate_best(session)
    session.timing["last_test_batch"] = time.time()
    return finish(session, test, tracker, commit)


def train(
    run: RunSpec,
    out: Path | str,
    *,
    track: bool = True,
    progress: bool = True,
    threads: int | None = None,
) -> pd.DataFrame:
    """:func:`run_training`, returning the per-epoch history as a DataFrame (for callers in
    Python; the command line skips it, as importing pandas costs a job most of a second)."""
    history = run_training(run, out, track=track, progress=progress, threads=threads)
    return history.to_pandas()


def main(argv: list[str] | None = None) -> None:
    """The command line (the workflow's train rule): arguments to a resolved spec, then train."""
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--task", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--profile", help="defaults to params.yaml's `profile`")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--params", default=str(PARAMS_FILE))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--tracking",
        choices=TRACKING_MODES,
        help="live: log to MLflow while training; batch: write only the records, for "
        "`python -m pdelab.tracking sync` (default: the profile's `tracking`)",
    )
    parser.add_argument("--no-mlflow", action="store_true", help="the same as --tracking batch")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    run = resolve(params, args.task, args.variant, args.seed, args.profile)
    mode = "batch" if args.no_mlflow else args.tracking or tracking_mode(params, run.profile)
    gpu_slots.claim(run.device)  # one GPU per concurrent job, before torch initialises CUDA
    try:
        run_training(
            run, args.out, track=mode == "live", progress=not args.no_progress, threads=args.threads
        )
    except Stopped as stop:
        print(stop, file=sys.stderr)
        sys.exit(stop.exit_status)


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


if __name__ == "__main__":
    main()
    exit_now()
