"""Time and memory of fractional neural attention: its fast paths vs the reference vs SDPA.

    python benchmarks/bench_fna.py                          # GPU: T = 512..4096, H = 8, d_H = 32
    nice python benchmarks/bench_fna.py --device cpu        # CPU: T = 512..2048, a few minutes

Five kernels on the same (B, H, T, d_H) float32 inputs, no padding: ``sdpa`` (softmax
attention, the DP baseline), ``la`` and ``fna`` (the registered ``fna`` kernel at alpha = 2 and
alpha = 1.2: SDPA on augmented q, k; FlexAttention on CUDA or the chunked log-space path on a
CPU) and their materialised references ``la_ref`` and ``fna_ref`` (the official code's cdist
computation, the memory anchor). One call is forward + backward to q, k and v.

Time: per length, every kernel runs --warmup untimed calls (FlexAttention compiles in them),
then --repeats rounds in which each kernel runs once, starting at a rotating offset, so that
a slow spell of a shared machine falls on all of them; the median per kernel. Ratios are
taken within one process. Peak memory: torch.cuda.max_memory_allocated above what was
allocated before the call (CUDA), or on a CPU the growth of the resident-set high-water mark
in a fresh child process whose allocator returns freed blocks at once (benchmarks/measure.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch
from measure import (
    cpu_memory_supported,
    interleaved,
    keep_freed_memory,
    memory_in_child,
    peak_mib,
)

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.papers import import_mechanisms

KERNELS = {  # name -> (registered kernel, options)
    "sdpa": ("sdpa", {}),
    "la": ("fna", {"alpha": 2.0}),
    "la_ref": ("fna_reference", {"alpha": 2.0}),
    "fna": ("fna", {"alpha": 1.2}),
    "fna_ref": ("fna_reference", {"alpha": 1.2}),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=None, help="default 8 on CUDA, 4 on a CPU")
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=None, help="default 20 on CUDA, 5 on a CPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--chunk", type=int, default=256, help="keys per block of the CPU path")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.lengths = args.lengths or ([512, 1024, 2048, 4096] if gpu else [512, 1024, 2048])
    args.heads = args.heads or (8 if gpu else 4)
    args.repeats = args.repeats or (20 if gpu else 5)
    return args


def build(args: argparse.Namespace, device: torch.device) -> dict[str, torch.nn.Module]:
    import_mechanisms()
    kernels = {}
    for name, (kernel, options) in KERNELS.items():
        extra = {"chunk_size": args.chunk} if kernel == "fna" else {}
        module = ATTENTION_KERNELS.get(kernel)(
            heads=args.heads, head_dim=args.head_dim, **options, **extra
        )
        kernels[name] = module.to(device)
    return kernels


def inputs(args: argparse.Namespace, t: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(t)
    shape = (args.batch, args.heads, t, args.head_dim)
    return tuple(
        torch.randn(shape, generator=gen, device=device).requires_grad_() for _ in range(3)
    )


def call(kernel: torch.nn.Module, xs: tuple[torch.Tensor, ...]) -> Callable[[], torch.Tensor]:
    """One forward + backward to q, k, v."""

    def run() -> torch.Tensor:
        for x in xs:
            x.grad = None
        out = kernel(*xs, None, False)
        out.square().mean().backward()
        return out.detach()

    return run


def memory_pass(args: argparse.Namespace, device: torch.device) -> dict[int, dict[str, float]]:
    """{T: {kernel: peak MiB of one call}}, measured in this process (a fresh one on a CPU)."""
    kernels = build(args, device)
    for kernel in kernels.values():  # thread pools, scratch and compiled kernels, once
        call(kernel, inputs(args, min(args.lengths), device))()
    return {
        t: {name: peak_mib(call(k, inputs(args, t, device)), device) for name, k in kernels.items()}
        for t in args.lengths
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_only:
        ok = device.type == "cuda" or cpu_memory_supported()
        print(json.dumps(memory_pass(args, device) if ok else {t: {} for t in args.lengths}))
        return
    if device.type == "cpu":
        keep_freed_memory()
    kernels = build(args, device)
    fast_path = kernels["fna"].path(torch.empty(0, device=device))
    print(
        f"device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} H={args.heads} d_H={args.head_dim} float32, fwd+bwd, "
        f"median of {args.repeats} interleaved rounds; alpha=1.2 runs on '{fast_path}'"
    )
    rows = []
    for t in args.lengths:
        xs = inputs(args, t, device)
        row: dict[str, float] = {"T": t}
        with torch.no_grad():
            for fast, ref in (("la", "la_ref"), ("fna", "fna_ref")):
                diff = kernels[fast](*xs, None, False) - kernels[ref](*xs, None, False)
                row[f"{fast} err"] = diff.abs().max().item()
        runs = {name: call(kernel, xs) for name, kernel in kernels.items()}
        row.update(interleaved(runs, device, args.repeats, args.warmup))
        print(f"T={t}: " + ", ".join(f"{n} {row[n] * 1e3:.1f} ms" for n in kernels), flush=True)
        rows.append(row)
        del xs, runs
    memory = {}
    if not args.no_memory:
        memory = (
            memory_pass(args, device) if device.type == "cuda" else memory_in_child(__file__, argv)
        )
    print_tables(rows, memory, device)


def print_tables(rows: list[dict], memory: dict[int, dict[str, float]], device) -> None:
    print("\nTime, fwd+bwd (ms):\n")
    print(
        "| T | SDPA | LA fast | LA ref | FNA fast | FNA ref | LA fast / SDPA | FNA fast / SDPA "
        "| LA ref / fast | FNA ref / fast | max abs(fast - ref) LA, FNA |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['T']} | {r['sdpa'] * 1e3:.1f} | {r['la'] * 1e3:.1f} | {r['la_ref'] * 1e3:.1f} "
            f"| {r['fna'] * 1e3:.1f} | {r['fna_ref'] * 1e3:.1f} | {r['la'] / r['sdpa']:.2f} "
            f"| {r['fna'] / r['sdpa']:.2f} | {r['la_ref'] / r['la']:.1f} "
            f"| {r['fna_ref'] / r['fna']:.1f} | {r['la err']:.1e}, {r['fna err']:.1e} |"
        )
    if not any(memory.values()):
        print("\n(no memory pass)")
        return
    how = "max_memory_allocated" if device.type == "cuda" else "VmHWM growth, fresh process"
    print(f"\nPeak memory of one fwd+bwd call, MiB ({how}):\n")
    print("| T | SDPA | LA fast | LA ref | FNA fast | FNA ref | LA ref / fast | FNA ref / fast |")
    print("|---|---|---|---|---|---|---|---|")
    for t, m in memory.items():
        la, fn = m["la_ref"] / max(m["la"], 1e-9), m["fna_ref"] / max(m["fna"], 1e-9)
        print(
            f"| {t} | {m['sdpa']:.1f} | {m['la']:.1f} | {m['la_ref']:.1f} | {m['fna']:.1f} "
            f"| {m['fna_ref']:.1f} | {la:.1f} | {fn:.1f} |"
        )


if __name__ == "__main__":
    main()
