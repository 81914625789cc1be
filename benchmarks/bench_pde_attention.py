"""Time and memory of PDE attention: plain SDPA vs the PDE fast path vs the materialized reference.

    python benchmarks/bench_pde_attention.py --device cpu --lengths 1024 2048 4096 --repeats 3

All three run side by side in one process on the same (B, H, T, Dh) inputs: ``sdpa`` (the
registered SDPA kernel, no PDE), ``pde`` (A(N) V as SDPA over transformed values, O(T) memory)
and ``pde_reference`` (A evolved as a T x T matrix). "fwd" runs under no_grad; "fwd+bwd" takes
gradients to q, k, v and the PDE coefficients. Times are medians over at least --repeats calls
(cheap calls repeat until 0.3 s in all: a shared CPU jitters), after --warmup calls at the
first length. Prints two Markdown tables (times, peak memory) and the largest |fast - ref|.

On CPU the timing process keeps freed memory for reuse (see ``keep_freed_memory``).

Peak memory, measured in a separate pass after all timings:
- CUDA: torch.cuda.max_memory_allocated() minus the allocation before the call (exact).
- CPU: the resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs) minus the
  resident set before the call. tracemalloc cannot see torch's C++ allocations, so it is not
  used. A warm heap would hide allocations (freed blocks stay resident and get reused), so the
  memory pass runs in a fresh child process (same arguments, --memory-only) in which glibc is
  told (mallopt) to serve every block >= 64 KiB by mmap: freed tensors leave the resident set
  and every call is measured from a clean base. The number is the extra resident memory of the
  call, page-granular, scratch buffers included; "nan" where clear_refs is not writable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from measure import (  # benchmarks/measure.py
    cpu_memory_supported,
    keep_freed_memory,
    memory_in_child,
    peak_mib,
    sync,
)

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.papers.continuous_time_attention.attention import PDE_TYPES  # registers its kernels

METHODS = ("sdpa", "pde", "pde_reference")
MIN_TOTAL_S = 0.3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--pde", choices=PDE_TYPES, default="diffusion")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--causal", action="store_true", help="causal=True (restricted form)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def make_run(
    kernel: torch.nn.Module, inputs: tuple[torch.Tensor, ...], causal: bool, backward: bool
) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        if not backward:
            with torch.no_grad():
                return kernel(*inputs, None, causal)
        for x in (*inputs, *kernel.parameters()):
            x.grad = None
        out = kernel(*inputs, None, causal)
        out.float().square().mean().backward()
        return out.detach()

    return run


def median_seconds(
    run: Callable[[], torch.Tensor], device: torch.device, repeats: int, warmup: int
) -> float:
    for _ in range(warmup):
        run()
    sync(device)
    times: list[float] = []
    # at least `repeats` runs; cheap calls repeat up to MIN_TOTAL_S so jitter averages out
    while len(times) < repeats or (sum(times) < MIN_TOTAL_S and len(times) < 100):
        start = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- peak memory ------------------------------------------------------------------------------


# -- main -------------------------------------------------------------------------------------


def build_kernels(args: argparse.Namespace, device: torch.device) -> dict[str, torch.nn.Module]:
    pde = {"pde": args.pde, "steps": args.steps}
    kernels = {
        "sdpa": ATTENTION_KERNELS.get("sdpa")(heads=args.heads, head_dim=args.head_dim),
        "pde": ATTENTION_KERNELS.get("pde")(heads=args.heads, head_dim=args.head_dim, **pde),
        "pde_reference": ATTENTION_KERNELS.get("pde_reference")(
            heads=args.heads, head_dim=args.head_dim, **pde
        ),
    }
    return {name: k.to(device) for name, k in kernels.items()}


def make_inputs(args: argparse.Namespace, t: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(t)
    shape = (args.batch, args.heads, t, args.head_dim)
    dtype = getattr(torch, args.dtype)
    return tuple(
        torch.randn(shape, generator=gen, device=device, dtype=dtype).requires_grad_(True)
        for _ in range(3)
    )


def memory_pass(args: argparse.Namespace, device: torch.device) -> dict[int, dict[str, float]]:
    """{T: {"<method> <mode> MiB": peak}}, measured in this process (call it on a fresh one)."""
    kernels = build_kernels(args, device)
    tiny = make_inputs(args, 64, device)
    for kernel in kernels.values():  # first calls allocate thread pools and scratch once
        make_run(kernel, tiny, args.causal, True)()
    result: dict[int, dict[str, float]] = {}
    for t in args.lengths:
        inputs = make_inputs(args, t, device)
        result[t] = {}
        for mode, backward in (("fwd", False), ("fwd+bwd", True)):
            for name, kernel in kernels.items():
                run = make_run(kernel, inputs, args.causal, backward)
                result[t][f"{name} {mode} MiB"] = peak_mib(run, device)
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.memory_only:
        ok = device.type == "cuda" or cpu_memory_supported()
        nan = {t: {} for t in args.lengths}
        print(json.dumps(memory_pass(args, device) if ok else nan))
        return
    if device.type == "cpu":
        keep_freed_memory()
    kernels = build_kernels(args, device)
    print(
        f"# device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} H={args.heads} Dh={args.head_dim} {args.dtype}, pde={args.pde} "
        f"N_t={args.steps}, causal={args.causal}",
        file=sys.stderr,
    )

    rows = []
    for t in args.lengths:
        inputs = make_inputs(args, t, device)
        row: dict[str, float | int | str] = {"T": t}
        with torch.no_grad():
            fast = kernels["pde"](*inputs, None, args.causal)
            ref = kernels["pde_reference"](*inputs, None, args.causal)
            row["max |fast-ref|"] = f"{(fast - ref).abs().max().item():.1e}"
        del fast, ref
        for mode, backward in (("fwd", False), ("fwd+bwd", True)):
            for name, kernel in kernels.items():
                run = make_run(kernel, inputs, args.causal, backward)
                warmup = args.warmup if t == args.lengths[0] else 0  # first calls only
                row[f"{name} {mode}"] = median_seconds(run, device, args.repeats, warmup)
                print(f"T={t} {name} {mode}: {row[f'{name} {mode}'] * 1e3:.1f} ms", file=sys.stderr)
        rows.append(row)
        del inputs

    memory: dict[int, dict[str, float]] = {}
    if not args.no_memory:
        memory = (
            memory_pass(args, device) if device.type == "cuda" else memory_in_child(__file__, argv)
        )
    for row in rows:
        for name in METHODS:
            for mode in ("fwd", "fwd+bwd"):
                key = f"{name} {mode} MiB"
                row[key] = memory.get(row["T"], {}).get(key, float("nan"))
    print_tables(rows, device)


def print_tables(rows: list[dict], device: torch.device) -> None:
    def ms(x: float) -> str:
        return f"{x * 1e3:.1f}"

    print(
        "\n| T | mode | SDPA ms | PDE fast ms | PDE reference ms | fast / SDPA "
        "| reference / fast | max abs(fast - ref) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        for mode in ("fwd", "fwd+bwd"):
            s, f, r = (row[f"{n} {mode}"] for n in METHODS)
            print(
                f"| {row['T']} | {mode} | {ms(s)} | {ms(f)} | {ms(r)} | {f / s:.2f} | "
                f"{r / f:.1f} | {row['max |fast-ref|']} |"
            )
    if all(
        row[f"{n} {m} MiB"] != row[f"{n} {m} MiB"]
        for row in rows
        for n in METHODS
        for m in ("fwd", "fwd+bwd")
    ):
        print("\n(no memory pass)")
        return
    how = "max_memory_allocated" if device.type == "cuda" else "VmHWM - VmRSS"
    print(f"\nPeak memory, MiB ({how}):\n")
    print("| T | mode | SDPA | PDE fast | PDE reference | reference / fast |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        for mode in ("fwd", "fwd+bwd"):
            s, f, r = (row[f"{n} {mode} MiB"] for n in METHODS)
            ratio = f"{r / f:.1f}" if f == f and f > 0 else "n/a"
            print(f"| {row['T']} | {mode} | {s:.1f} | {f:.1f} | {r:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
