"""Every paper's fast path against SDPA on one GPU, in bf16, in one process, interleaved.

    python benchmarks/bench_gpu.py --out $OUT/kernels      # writes kernels.json, kernels.md

What runs, at each length T (default 1024, 4096, 16384) and in two modes, "fwd" (no_grad)
and "fwd+bwd" (gradients to q, k, v and every parameter), all under bf16 autocast as a
``train.precision: bf16`` profile trains:

- attention kernels on (B, H, T, 32) bf16 inputs, B x H chosen to fill the GPU (2^18 / T
  rows of T queries: 256 at T = 1024), no padding: ``sdpa`` (the baseline), ``fna`` at
  alpha = 1.2 (FlexAttention), ``la`` (the ``fna`` kernel at alpha = 2: SDPA on augmented
  q, k in bf16), ``pde`` (SDPA over PDE-transformed values), each beside its materialised
  reference (``fna_ref``, ``la_ref``: the official code's cdist form; ``pde_ref``: A evolved
  as a T x T matrix), where that reference fits;
- the LDN block (banded path) against the Transformer block it replaces (post-LN, SDPA,
  MLP 4C), dim 128, 8 heads, B x T = 2^16 tokens, and the LDN block's reference path;
- the diffusion layer: a training step (forward, loss, backward, AdamW) of the paper's
  ListOps model (dim 128, 6 layers, L = 2000, batch 32) with diffusion after the embedding
  and after each MLP, against the same model without diffusion.

Time: untimed warm-up calls (FlexAttention compiles there), then rounds in which every
entry of a group runs once from a rotating offset (``measure.interleaved_times``); the table
gives each entry's median ms and its time over the group's baseline in the same round
(median and interquartile range of the paired ratios). Memory: the peak
``torch.cuda.max_memory_allocated`` of one call above what was allocated before it, measured
in this process after the warm-up. A reference whose T x T buffers would not fit in half of
the free memory is skipped, and the table says so. The goals beside the ratios are the
project's targets for each fast path, not the papers' numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import bench_diffusion
import bench_ldn
import torch
from measure import available_mib, interleaved_times, paired_ratios, peak_mib

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.spec.plugins import import_mechanisms

HEAD_DIM, HEADS = 32, 8
ROWS = 2**18  # B x H x T of the attention inputs
TOKENS = 2**16  # B x T of the block inputs
# kernel name -> (registered kernel, options, its baseline in the ratio)
KERNELS: dict[str, tuple[str, dict, str]] = {
    "sdpa": ("sdpa", {}, "sdpa"),
    "fna": ("fna", {"alpha": 1.2}, "sdpa"),
    "la": ("fna", {"alpha": 2.0}, "sdpa"),
    "pde": ("pde", {}, "sdpa"),
    "fna_ref": ("fna_reference", {"alpha": 1.2}, "fna"),
    "la_ref": ("fna_reference", {"alpha": 2.0}, "la"),
    "pde_ref": ("pde_reference", {}, "pde"),
}
# the most a fast path may take over its baseline (x), per group
GOALS = {"fna": 1.5, "la": 1.1, "pde": 1.2, "ldn": 1.0}
DIFFUSION_GOAL = {"after_embedding": 3.0}  # % step-time overhead over the baseline
SQUARES = 8  # (B, H, T, T) fp32 buffers a reference keeps live at its peak, at most


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--repeats", type=int, default=15, help="interleaved rounds per group")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per entry")
    p.add_argument("--diffusion-repeats", type=int, default=15)
    p.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    p.add_argument("--rows", type=int, default=ROWS, help="B x H x T of attention inputs")
    p.add_argument("--tokens", type=int, default=TOKENS, help="B x T of block inputs")
    p.add_argument("--diffusion-length", type=int, default=2000)
    p.add_argument("--diffusion-batch", type=int, default=32)
    return p.parse_args(argv)


def autocast(device: torch.device) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16)


def kernel_call(
    kernel: torch.nn.Module, xs: tuple[torch.Tensor, ...], backward: bool, device: torch.device
) -> Callable[[], torch.Tensor]:
    """One call of an attention kernel under bf16 autocast; with ``backward``, the gradients
    of a scalar of its output to q, k, v and the kernel's parameters."""

    def run() -> torch.Tensor:
        with autocast(device):
            if not backward:
                with torch.no_grad():
                    return kernel(*xs, None, False)
            for x in (*xs, *kernel.parameters()):
                x.grad = None
            out = kernel(*xs, None, False)
        out.float().square().mean().backward()
        return out.detach()

    return run


def reference_fits(t: int, rows: int, device: torch.device) -> bool:
    need = SQUARES * (rows // t) * t * t * 4 / 2**20
    return need <= 0.5 * available_mib(device)


def time_group(
    calls: dict[str, Callable[[], torch.Tensor]], baselines: dict[str, str], args
) -> dict[str, dict]:
    """Median ms, paired ratio to each entry's baseline, and peak MiB of each call."""
    device = torch.device(args.device)
    for call in calls.values():  # compile and allocate before memory is read
        for _ in range(args.warmup):
            call()
    memory = {name: peak_mib(call, device) for name, call in calls.items()}
    times = interleaved_times(calls, device, args.repeats, 0)
    out = {}
    for name, ts in times.items():
        ratio = paired_ratios({name: ts, "base": times[baselines[name]]}, "base")[name]
        out[name] = {
            "ms": 1e3 * statistics.median(ts),
            "over": baselines[name],
            "ratio": ratio,
            "peak_mib": memory[name],
        }
    return out


def attention(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    rows = []
    for t in args.lengths:
        batch = max(1, args.rows // t // HEADS)
        gen = torch.Generator(device=device).manual_seed(t)
        shape = (batch, HEADS, t, HEAD_DIM)
        xs = tuple(
            torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16).requires_grad_()
            for _ in range(3)
        )
        fits = reference_fits(t, batch * HEADS * t, device)
        names = [n for n in KERNELS if fits or not n.endswith("_ref")]
        kernels = {}
        for name in names:
            kind, options, _ = KERNELS[name]
            torch.manual_seed(0)
            kernels[name] = ATTENTION_KERNELS.get(kind)(HEADS, HEAD_DIM, **options).to(device)
        for mode, backward in (("fwd", False), ("fwd+bwd", True)):
            calls = {n: kernel_call(k, xs, backward, device) for n, k in kernels.items()}
            group = time_group(calls, {n: KERNELS[n][2] for n in names}, args)
            for name in KERNELS:
                row = {"group": "attention", "T": t, "B*H": batch * HEADS, "mode": mode}
                row["entry"] = name
                row |= group.get(name, {"skipped": "T x T buffers above half the free memory"})
                rows.append(row)
            print(f"attention T={t} {mode}: done", flush=True)
        del xs, kernels
        torch.cuda.empty_cache()
    return rows


def block_call(
    block: torch.nn.Module, xs: tuple[torch.Tensor, ...], device: torch.device
) -> Callable[[], torch.Tensor]:
    """One forward + backward of an encoder block under bf16 autocast."""
    inner = bench_ldn.call(block, xs)

    def run() -> torch.Tensor:
        with autocast(device):
            return inner()

    return run


def blocks(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    rows = []
    for t in args.lengths:
        batch = max(1, args.tokens // t)
        ns = SimpleNamespace(dim=128, heads=8, batch=batch)
        built = bench_ldn.build(ns, device)
        names = ["sdpa", "ldn"] + (["ldn_ref"] if reference_fits(t, batch * 8 * t, device) else [])
        xs = bench_ldn.inputs(ns, t, device)
        group = time_group(
            {n: block_call(built[n], xs, device) for n in names},
            {"sdpa": "sdpa", "ldn": "sdpa", "ldn_ref": "ldn"},
            args,
        )
        for name in ("sdpa", "ldn", "ldn_ref"):
            row = {"group": "block", "T": t, "B*H": batch * 8, "mode": "fwd+bwd", "entry": name}
            rows.append(row | group.get(name, {"skipped": "T x T above half the free memory"}))
        print(f"blocks T={t}: done", flush=True)
        del built, xs
        torch.cuda.empty_cache()
    return rows


def diffusion(args: argparse.Namespace) -> list[dict]:
    """Training steps of the paper's ListOps model with and without diffusion."""
    device = torch.device(args.device)
    ns = SimpleNamespace(
        vocab=18,
        length=args.diffusion_length,
        dim=128,
        layers=6,
        heads=8,
        mlp_dim=512,
        batch_size=args.diffusion_batch,
    )
    models, optims, batch = bench_diffusion.build(ns, device)
    chosen = ["baseline", "after_embedding", "after_mlp"]
    calls = {}
    for name in chosen:
        step = bench_diffusion.make_step(
            bench_diffusion.Method(name, name, "-" if name == "baseline" else "fast"),
            models,
            optims,
            batch,
        )

        def run(step: Callable[[], torch.Tensor] = step) -> torch.Tensor:
            with autocast(device):
                return step()

        calls[name] = run
    sub = SimpleNamespace(
        warmup=args.warmup + 1, repeats=args.diffusion_repeats, device=args.device
    )
    group = time_group(calls, dict.fromkeys(chosen, "baseline"), sub)
    print("diffusion: done", flush=True)
    return [
        {
            "group": "diffusion",
            "T": ns.length,
            "B*H": ns.batch_size,
            "mode": "train step",
            "entry": n,
        }
        | group[n]
        for n in chosen
    ]


def environment(device: torch.device) -> dict[str, str]:
    return {
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "CPU (dry run)",
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "date": datetime.date.today().isoformat(),
    }


def goal_of(row: dict) -> str:
    if row["group"] == "diffusion":
        limit = DIFFUSION_GOAL.get(row["entry"])
        if limit is None or "ratio" not in row:
            return ""
        overhead = 100 * (row["ratio"][0] - 1)
        return f"<= {limit:g}%: {'met' if overhead <= limit else 'not met'} ({overhead:+.1f}%)"
    limit = GOALS.get(row["entry"])
    if limit is None or "ratio" not in row:
        return ""
    return f"<= {limit:g}x: {'met' if row['ratio'][0] <= limit else 'not met'}"


def render(env: dict[str, str], rows: list[dict]) -> str:
    from tabulate import tabulate

    table = []
    for r in rows:
        cells = [r["group"], r["T"], r["B*H"], r["mode"], r["entry"]]
        if "skipped" in r:
            table.append([*cells, "skipped", "", "", r["skipped"]])
            continue
        mid, lo, hi = r["ratio"]
        ratio = "1" if r["over"] == r["entry"] else f"{mid:.2f} ({lo:.2f}-{hi:.2f}) x {r['over']}"
        table.append([*cells, f"{r['ms']:.2f}", ratio, f"{r['peak_mib']:.0f}", goal_of(r)])
    head = [
        "group",
        "T",
        "B*H (B)",
        "mode",
        "entry",
        "median ms",
        "ratio (IQR)",
        "peak MiB",
        "goal",
    ]
    title = (
        f"Kernels against SDPA on {env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}, "
        f"{env['date']}: bf16 autocast, one process, interleaved rounds "
        "(benchmarks/bench_gpu.py)"
    )
    return f"{title}\n\n{tabulate(table, head, tablefmt='github')}\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu needs a CUDA GPU", file=sys.stderr)
        return 2
    import_mechanisms()
    torch.backends.cuda.matmul.allow_tf32 = False  # pdelab's setting: TF32 off
    env = environment(torch.device(args.device))
    rows: list[dict] = []
    for section in (attention, blocks, diffusion):  # written after each: a timeout keeps them
        rows += section(args)
        text = render(env, rows)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            doc = {"env": env, "rows": rows}
            args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
            args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if all(math.isfinite(r.get("ms", 0.0)) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
