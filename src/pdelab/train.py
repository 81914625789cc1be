"""Train one (task, variant, seed) run: ``train(run, out)``; ``main()`` only parses arguments.

AdamW with linear warm-up then cosine decay, gradient clipping and early stopping on
validation accuracy; test accuracy is measured at the best-validation checkpoint. A
checkpoint after every epoch (model, optimizer, schedule, RNG state, history) lets a killed
job started again resume exactly: batch order depends only on (seed, epoch), so on CPU the
resumed run's final metrics equal an uninterrupted run's. A non-finite loss ends the run as
"diverged", which is a result, not a crash.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from pdelab.causality import verdict
from pdelab.config import PARAMS_FILE, RunSpec, load_params, resolve
from pdelab.data.store import Split, load_manifest, load_split
from pdelab.lm import check_causality, next_token_loss, windows
from pdelab.models.transformer import Classifier, LanguageModel, PairClassifier
from pdelab.tracking import Tracker, write_parquet

CHECKPOINT, BEST = "checkpoint.pt", "best.pt"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "the profile asks for device: cuda but no GPU is visible; use "
            "--config profile=smoke or set the profile's device to cpu/auto"
        )
    return torch.device(name)


def is_language_model(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == "lm"


def build_model(run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
    """A causal language model, a classifier, or LRA's two-tower model for document pairs."""
    m = run.model
    common = dict(
        vocab_size=len(manifest["vocab"]),
        dim=m.dim,
        layers=m.layers,
        heads=m.heads,
        mlp_dim=m.mlp_dim,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        norm=m.norm,
        attention=m.attention,
        attention_options=m.attention_options,
        smoothing=m.smoothing,
        diffusion=run.diffusion,
    )
    if is_language_model(manifest):
        return LanguageModel(max_len=run.train.seq_len, **common)
    max_len = max(s["max_length"] for s in manifest["splits"].values())
    model = PairClassifier if manifest.get("pairs") else Classifier
    return model(
        manifest["num_classes"],
        pooling=m.pooling,
        max_len=max_len + (m.pooling == "cls"),
        **common,
    )


def warmup_cosine(warmup: int, total: int) -> Any:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def batches(n: int, batch_size: int, order: np.ndarray | None = None) -> list[np.ndarray]:
    index = np.arange(n) if order is None else order
    return [index[i : i + batch_size] for i in range(0, n, batch_size)]


def to_device(
    split: Split, index: np.ndarray, device: torch.device
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(model inputs, labels) of one batch."""
    arrays = {k: torch.from_numpy(v).to(device) for k, v in split.batch(index).items()}
    return arrays, arrays.pop("labels")


def batch_loss(
    model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor, lm: bool
) -> tuple[torch.Tensor, int, int]:
    """(mean loss, correct predictions, items): items are examples, or real target tokens."""
    if lm:
        return next_token_loss(model, inputs["ids"])
    logits = model(**inputs)
    correct = (logits.argmax(-1) == labels).sum().item()
    return F.cross_entropy(logits.float(), labels), int(correct), len(labels)


@torch.no_grad()
def evaluate(
    model: nn.Module, split: Split, batch_size: int, device: torch.device, lm: bool = False
) -> dict:
    """Loss and accuracy per item (and perplexity for language models); batches of similar
    length keep padding (and time) low."""
    model.eval()
    order = np.argsort(split.lengths(), kind="stable")
    loss_sum, correct, items = 0.0, 0, 0
    for index in batches(len(split), batch_size, order):
        inputs, labels = to_device(split, index, device)
        loss, right, n = batch_loss(model, inputs, labels, lm)
        loss_sum += loss.item() * n
        correct, items = correct + right, items + n
    out = {"loss": loss_sum / items, "acc": correct / items}
    if lm:
        out["ppl"] = math.exp(out["loss"])
    return out


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_max_rss"


def save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def train(
    run: RunSpec,
    out: Path | str,
    *,
    track: bool = True,
    progress: bool = True,
    threads: int | None = None,
) -> pd.DataFrame:
    """Train and evaluate one run; writes metrics.parquet, result.parquet and run.json to out.

    Returns the per-epoch history.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    device = pick_device(run.device)
    manifest = load_manifest(run.data_dir)
    tc = run.train
    lm = is_language_model(manifest)
    data = {s: load_split(run.data_dir, s) for s in ("train", "val", "test")}
    if lm:  # documents -> windows of seq_len + 1 tokens
        data = {s: windows(split, tc.seq_len) for s, split in data.items()}

    seed_everything(run.seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    model = build_model(run, manifest).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay
    )
    steps_per_epoch = math.ceil(len(data["train"]) / tc.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(tc.warmup_steps, tc.epochs * steps_per_epoch)
    )

    # Resume only a checkpoint of this very spec and data; anything else starts afresh.
    state: dict[str, Any] = {
        "epoch": 0,
        "history": [],
        "best_val": -math.inf,  # the selection score: val accuracy, or -val loss (LM)
        "best_epoch": 0,
        "bad_epochs": 0,
        "step_times": [],
        "status": "ok",
        "run_id": None,
    }
    resumed = False
    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ckpt["spec"] == run.to_json() and ckpt["data_hash"] == manifest["content_hash"]:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            schedule.load_state_dict(ckpt["schedule"])
            torch.set_rng_state(ckpt["torch_rng"])
            state = ckpt["state"]
            resumed = True
            print(f"resuming from epoch {state['epoch']} of {ckpt_path}", file=sys.stderr)

    tracker = Tracker(run, manifest["content_hash"], enabled=track)
    state["run_id"] = tracker.start(state["run_id"])

    while (
        state["epoch"] < tc.epochs and state["status"] == "ok" and state["bad_epochs"] < tc.patience
    ):
        epoch = state["epoch"] + 1
        model.train()
        order = np.random.default_rng([run.seed, epoch]).permutation(len(data["train"]))
        loss_sum, correct, seen, epoch_start = 0.0, 0, 0, time.perf_counter()
        bar = tqdm(
            batches(len(order), tc.batch_size, order),
            desc=f"epoch {epoch}",
            disable=not progress,
            mininterval=2.0,
            file=sys.stderr,
            leave=False,
        )
        for index in bar:
            step_start = time.perf_counter()
            inputs, labels = to_device(data["train"], index, device)
            loss, right, n = batch_loss(model, inputs, labels, lm)
            if not torch.isfinite(loss):
                state["status"] = "diverged"
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            schedule.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            state["step_times"].append(time.perf_counter() - step_start)
            loss_sum += loss.item() * n
            correct += right
            seen += n
        if state["status"] != "ok":
            break
        val = evaluate(model, data["val"], tc.batch_size, device, lm)
        if not math.isfinite(val["loss"]):
            state["status"] = "diverged"
            break
        row = {
            "epoch": epoch,
            "train_loss": loss_sum / seen,
            "train_acc": correct / seen,
            "val_loss": val["loss"],
            "val_acc": val["acc"],
            "val_ppl": val.get("ppl", math.nan),
            "lr": schedule.get_last_lr()[0],
            "epoch_time_s": time.perf_counter() - epoch_start,
        }
        state["history"].append(row)
        score = -val["loss"] if lm else val["acc"]
        if score > state["best_val"]:
            state.update(best_val=score, best_epoch=epoch, bad_epochs=0)
            save_atomic(model.state_dict(), out / BEST)
        else:
            state["bad_epochs"] += 1
        state["epoch"] = epoch
        tracker.log_epoch(row)
        print(json.dumps({k: round(v, 4) for k, v in row.items()}), file=sys.stderr)
        save_atomic(
            {
                "spec": run.to_json(),
                "data_hash": manifest["content_hash"],
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "state": state,
            },
            ckpt_path,
        )

    test = {"loss": math.nan, "acc": math.nan, "ppl": math.nan}
    causality = {"causality": "", "max_leak": math.nan}  # probed for language models only
    if (out / BEST).exists():
        model.load_state_dict(torch.load(out / BEST, map_location=device, weights_only=True))
        if state["status"] == "ok":
            test |= evaluate(model, data["test"], tc.batch_size, device, lm)
        if lm:
            report = check_causality(model, data["test"], len(manifest["vocab"]))
            causality = {"causality": verdict(report), "max_leak": report.max_leak}
    memory, memory_kind = peak_memory_mb(device)
    history = pd.DataFrame(
        state["history"],
        columns=[
            "epoch",
            "train_loss",
            "train_acc",
            "val_loss",
            "val_acc",
            "val_ppl",
            "lr",
            "epoch_time_s",
        ],
    )
    result = {
        "task": run.task,
        "variant": run.variant,
        "seed": run.seed,
        "profile": run.profile,
        "status": state["status"],
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "test_ppl": test["ppl"],  # language models: exp(test loss per real token)
        **causality,
        "best_val_acc": state["history"][state["best_epoch"] - 1]["val_acc"]
        if state["best_epoch"]
        else math.nan,
        "best_epoch": state["best_epoch"],
        "epochs_run": state["epoch"],
        "median_step_s": statistics.median(state["step_times"])
        if state["step_times"]
        else float("nan"),
        "peak_memory_mb": memory,
        "memory_kind": memory_kind,
        "device": device.type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "data_hash": manifest["content_hash"],
        "stand_in": manifest.get("stand_in", ""),  # what stands in for the paper's data
        "resumed": resumed,
        "mlflow_run_id": state["run_id"] or "",
    }
    for key, value in (("task", run.task), ("variant", run.variant), ("seed", run.seed)):
        history.insert(0, key, value)
    write_parquet(history, out / "metrics.parquet")
    (out / "run.json").write_text(
        json.dumps({"spec": run.to_dict(), "result": result}, indent=2, default=str) + "\n"
    )
    write_parquet(pd.DataFrame([result]), out / "result.parquet")
    tracker.finish(
        state["status"], result, [out / "metrics.parquet", out / "result.parquet", out / "run.json"]
    )
    return history


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument("--no-mlflow", action="store_true")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    run = resolve(load_params(args.params), args.task, args.variant, args.seed, args.profile)
    train(
        run, args.out, track=not args.no_mlflow, progress=not args.no_progress, threads=args.threads
    )


if __name__ == "__main__":
    main()
