"""Time and memory of PDE attention: plain SDPA vs the PDE fast path, the chunked evolution and
the materialized reference.

    python benchmarks/bench_pde_attention.py --device cpu --lengths 1024 2048 4096 --repeats 5
    python benchmarks/bench_pde_attention.py --causal --dropout 0.1 --batch 2 --lengths 512

All four run on the same (B, H, T, Dh) inputs: ``sdpa`` (the registered SDPA kernel, no PDE,
the baseline), ``pde`` (A(N) V as SDPA over transformed values, O(T) memory; the nonlinear
reaction-diffusion is chunked), ``pde_chunked`` (``pde`` with ``fast=False``: A evolved
``chunk_size`` query rows at a time, each chunk recomputed in the backward instead of kept)
and ``pde_reference`` (A evolved as a T x T matrix, plain autograd: what a dropout run of the
leak-free causal form did before). "fwd" runs under no_grad; "fwd+bwd" takes gradients to q,
k, v and the PDE coefficients. ``--dropout`` gives every kernel that attention dropout, in
training mode; the max-abs-difference columns then compare each path with the reference on
one shared keep mask (``dropout_keep``), since drawn masks differ between paths.

Time: per length and mode, each kernel runs --warmup untimed calls, then --repeats rounds in
which every kernel runs once, starting at a rotating offset (``measure.interleaved_times``).
Reported: median ms per kernel, and each kernel's time over SDPA's in the same round, as the
median with its interquartile range: paired rounds, so a slow spell of a shared machine
cancels out of the ratio. One thread by default (``--threads``): the thread count of a shared
machine is not ours to take, and one thread gives the steadiest ratios.

Peak memory, measured first, before the timing process allocates anything, with one fresh
child process per kernel (``measure.memory_per_kernel``): the child measures its own kernel
only, so no other kernel's heap or the timing pass's cached blocks are resident beside it.
- CUDA: torch.cuda.max_memory_allocated() minus the allocation before the call.
- CPU: the resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs) minus the
  resident set before the call; glibc serves every block >= 64 KiB by mmap in the child, so
  freed tensors leave the resident set and each call is measured from a clean base.
A shape whose expected peak is above --memory-fraction of the memory available (MemAvailable,
or free GPU memory) is skipped with its reason printed, in the timing pass as in the children,
rather than run out of memory. The expectation is the larger of a count of (B, H, T, T)
buffers (``square_buffers``, measured on a CPU) and the peak measured at a shorter length
scaled by (T / T0)^2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

import torch
from measure import (  # benchmarks/measure.py
    cell_ms,
    cell_ratio,
    interleaved_times,
    keep_freed_memory,
    memory_per_kernel,
    paired_ratios,
    peaks_of_one_kernel,
    refuse_above,
    scaled_need_mib,
)

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.papers.continuous_time_attention.attention import PDE_TYPES  # registers its kernels
from pdelab.papers.continuous_time_attention.options import LINEAR_PDES

METHODS = ("sdpa", "pde", "pde_chunked", "pde_reference")
REFERENCE = "pde_reference"
COMPARED = ("pde", "pde_chunked")  # each against the reference: time ratio and max abs diff
BASELINE = "sdpa"
MODES = ("fwd", "fwd+bwd")
# (B, H, T, T) buffers that the backward keeps per Euler step, by PDE: the stencil products
# autograd saves (advection adds its gradient, reaction-diffusion its A * (1 - A) terms)
SAVED_PER_STEP = {"diffusion": 1, "wave": 1, "advection_diffusion": 2, "reaction_diffusion": 4}
CHUNK = 256  # query rows per materialized chunk of "pde" and "pde_chunked" (chunk_size)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds per length")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per kernel and length")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--pde", choices=PDE_TYPES, default="diffusion")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--causal", action="store_true", help="causal=True (restricted form)")
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout (training)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=0.5,
        help="largest share of the available memory one call may be expected to take",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--memory-kernel", choices=METHODS, help=argparse.SUPPRESS)
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


def build_kernels(
    args: argparse.Namespace, device: torch.device, names: tuple[str, ...] = METHODS
) -> dict[str, torch.nn.Module]:
    pde = {"pde": args.pde, "steps": args.steps, "chunk_size": CHUNK}
    kinds = {
        "sdpa": ("sdpa", {}),
        "pde": ("pde", pde),
        "pde_chunked": ("pde", {**pde, "fast": False}),
        "pde_reference": ("pde_reference", {"pde": args.pde, "steps": args.steps}),
    }
    kernels = {}
    for name in names:
        kind, options = kinds[name]
        kernel = ATTENTION_KERNELS.get(kind)(
            heads=args.heads, head_dim=args.head_dim, dropout=args.dropout, **options
        )
        kernels[name] = kernel.to(device).train()
    return kernels


def make_inputs(args: argparse.Namespace, t: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(t)
    shape = (args.batch, args.heads, t, args.head_dim)
    dtype = getattr(torch, args.dtype)
    return tuple(
        torch.randn(shape, generator=gen, device=device, dtype=dtype).requires_grad_(True)
        for _ in range(3)
    )


# -- will it fit ------------------------------------------------------------------------------


def square_buffers(name: str, mode: str, t: int, args: argparse.Namespace) -> float:
    """Upper estimate of the (B, H, T, T) buffers live at one call's peak. The materialized
    evolution holds about 8 in a forward (scores, softmax, a step's stencil temporaries) and
    in a backward 8 plus what autograd saves per step; the chunked paths hold that for CHUNK
    query rows (the backward recomputes one chunk at a time); the fast linear path holds
    none, but for SDPA's own weights where it has no fused kernel (dropout on a CPU)."""
    chunked = name == "pde_chunked" or (name == "pde" and args.pde not in LINEAR_PDES)
    if name != "pde_reference" and not chunked:
        return 4.0 if args.dropout > 0 and device_kind(args) == "cpu" else 0.0
    squares = 9.0 if mode == "fwd" else 8.0 + SAVED_PER_STEP[args.pde] * args.steps + 1.0
    return squares * (min(1.0, CHUNK / t) if chunked else 1.0)  # + 1: causal masks, slack


def device_kind(args: argparse.Namespace) -> str:
    return torch.device(args.device).type


def too_big(
    name: str,
    mode: str,
    t: int,
    args: argparse.Namespace,
    device: torch.device,
    measured: dict[int, float] | None = None,
) -> str | None:
    """Why one call would not fit in memory (None: it fits): its T x T count, or the peak
    measured at the longest shorter length scaled by (t / t0)^2, whichever is larger."""
    itemsize = torch.empty(0, dtype=getattr(torch, args.dtype)).element_size()
    square = args.batch * args.heads * t * t * itemsize / 2**20
    squares = square_buffers(name, mode, t, args)
    need = scaled_need_mib(squares, square, t, measured or {})
    return refuse_above(name, mode, t, need, args.memory_fraction, device)


# -- memory (a child process per kernel) ------------------------------------------------------


def memory_child(args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    """Peaks of the one kernel --memory-kernel names, measured in this (fresh) process."""
    name = args.memory_kernel
    kernel = build_kernels(args, device, (name,))[name]
    return peaks_of_one_kernel(
        name,
        args.lengths,
        MODES,
        lambda t: make_inputs(args, t, device),
        lambda xs, mode: make_run(kernel, xs, args.causal, mode == "fwd+bwd"),
        lambda mode, t, measured: too_big(name, mode, t, args, device, measured),
        device,
    )


# -- time -------------------------------------------------------------------------------------


def time_length(
    args: argparse.Namespace,
    kernels: dict[str, torch.nn.Module],
    t: int,
    device: torch.device,
    memory: dict[int, dict[str, float]],
) -> tuple[dict[str, object], list[str]]:
    """One table row per mode at length t: median ms and paired ratios to the baseline."""
    inputs = make_inputs(args, t, device)
    notes: list[str] = []
    rows: dict[str, object] = {"T": t}
    for mode in MODES:
        runs = {}
        for name, kernel in kernels.items():
            key = f"{name} {mode} MiB"
            measured = {t0: m[key] for t0, m in memory.items() if key in m}
            why = too_big(name, mode, t, args, device, measured)
            if why:
                notes.append(why.replace(" skipped", " not timed"))
            else:
                runs[name] = make_run(kernel, inputs, args.causal, mode == "fwd+bwd")
        if BASELINE not in runs:
            continue
        times = interleaved_times(runs, device, args.repeats, args.warmup)
        ratios = paired_ratios(times, BASELINE)
        for name, ts in times.items():
            rows[f"{name} {mode}"] = statistics.median(ts)
            rows[f"{name} {mode} ratio"] = ratios[name]
        for name in COMPARED:  # paired too: the reference's time over this path's
            if name in runs and REFERENCE in runs:
                rows[f"ref/{name} {mode} ratio"] = paired_ratios(times, name)[REFERENCE]
        print(
            f"T={t} {mode}: "
            + ", ".join(f"{n} {statistics.median(ts) * 1e3:.1f} ms" for n, ts in times.items()),
            file=sys.stderr,
            flush=True,
        )
    if f"{REFERENCE} fwd" in rows:
        rows.update(max_differences(args, kernels, inputs, t, device))
    return rows, notes


def max_differences(
    args: argparse.Namespace,
    kernels: dict[str, torch.nn.Module],
    inputs: tuple[torch.Tensor, ...],
    t: int,
    device: torch.device,
) -> dict[str, str]:
    """max |path - reference| of each compared path, on one keep mask when there is dropout."""
    keep = None
    if args.dropout > 0:
        gen = torch.Generator(device=device).manual_seed(t)
        shape = (args.batch, args.heads, t, t)
        keep = torch.rand(shape, generator=gen, device=device) >= args.dropout
    out = {}
    with torch.no_grad():
        ref = kernels[REFERENCE](*inputs, None, args.causal, dropout_keep=keep)
        for name in COMPARED:
            got = kernels[name](*inputs, None, args.causal, dropout_keep=keep)
            out[f"max |{name}-ref|"] = f"{(got - ref).abs().max().item():.1e}"
    return out


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.memory_only:
        print(json.dumps(memory_child(args, device)))
        return
    # memory first: this process has allocated nothing yet, so holds nothing beside a child
    memory: dict[int, dict[str, float]] = {}
    notes: list[str] = []
    if not args.no_memory:
        memory, notes = memory_per_kernel(__file__, argv, list(METHODS))
    if device.type == "cpu":
        keep_freed_memory()
    kernels = build_kernels(args, device)
    print(
        f"# device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} H={args.heads} Dh={args.head_dim} {args.dtype}, pde={args.pde} "
        f"N_t={args.steps}, causal={args.causal}, dropout={args.dropout}, "
        f"{args.repeats} interleaved rounds",
        file=sys.stderr,
    )
    rows = []
    for t in args.lengths:
        row, skipped = time_length(args, kernels, t, device, memory)
        rows.append(row)
        notes += skipped
    print_tables(rows, memory, notes, device)


def print_tables(
    rows: list[dict],
    memory: dict[int, dict[str, float]],
    notes: list[str],
    device: torch.device,
) -> None:
    print("\nTime, median ms; ratios: median (interquartile range) of paired rounds\n")
    print(
        "| T | mode | SDPA | PDE fast | PDE chunked | PDE reference | fast / SDPA "
        "| chunked / SDPA | reference / SDPA | reference / fast | reference / chunked "
        "| max abs(fast - ref) | max abs(chunked - ref) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for mode in MODES:
            cells = [cell_ms(row, f"{n} {mode}") for n in METHODS]
            cells += [cell_ratio(row, f"{n} {mode} ratio") for n in METHODS[1:]]
            cells += [cell_ratio(row, f"ref/{n} {mode} ratio") for n in COMPARED]
            cells += [row.get(f"max |{n}-ref|", "n/a") for n in COMPARED]
            print(f"| {row['T']} | {mode} | " + " | ".join(cells) + " |")
    if memory:
        how = "max_memory_allocated" if device.type == "cuda" else "VmHWM - VmRSS"
        print(f"\nPeak memory of one call, MiB ({how}, a fresh process per kernel):\n")
        print(
            "| T | mode | SDPA | PDE fast | PDE chunked | PDE reference "
            "| reference / fast | reference / chunked |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for t in sorted(memory):
            for mode in MODES:
                got = {n: memory[t].get(f"{n} {mode} MiB") for n in METHODS}
                cells = ["skipped" if m is None else f"{m:.1f}" for m in got.values()]
                ref = got[REFERENCE]
                for name in COMPARED:
                    mib = got[name]
                    cells.append(f"{ref / mib:.1f}" if mib and ref is not None else "n/a")
                print(f"| {t} | {mode} | " + " | ".join(cells) + " |")
    else:
        print("\n(no memory pass)")
    if notes:
        print("\nSkipped:\n" + "\n".join(f"- {note}" for note in notes))


if __name__ == "__main__":
    main()
