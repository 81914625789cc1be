"""Time and memory of fractional neural attention: its fast paths vs SDPA vs the references.

    python benchmarks/bench_fna.py                      # CPU: T = 1024, 2048, 4096, one thread
    python benchmarks/bench_fna.py --device cuda        # GPU: FlexAttention
    python benchmarks/bench_fna.py --norms --device cuda --head-dim 16   # FlexAttention's norms

Five kernels on the same (B, H, T, d_H) float32 inputs, no padding: ``sdpa`` (softmax
attention, the DP baseline), ``la`` and ``fna`` (the registered ``fna`` kernel at alpha = 2
and alpha = 1.2: SDPA on augmented q, k; FlexAttention on CUDA or the tiled ``chunked`` path
on a CPU) and their materialised references ``la_ref`` and ``fna_ref`` (the official code's
cdist computation). "fwd" runs under no_grad; "fwd+bwd" adds the backward to q, k and v.

Time: per length and mode, each kernel runs --warmup untimed calls (FlexAttention compiles in
them), then rounds in which every kernel runs once, starting at a rotating offset
(``measure.interleaved_times``): --repeats rounds of SDPA, LA and FNA, then --ref-repeats
rounds of the fast paths with their references (a reference call at T = 4096 takes seconds on
a CPU, and would hold apart the calls whose ratio a round pairs). Reported: the median ms per
kernel, and each kernel's time over SDPA's (a reference's over its fast path's) in the same
round, as the median with its interquartile range: paired rounds, so a slow spell of a shared
machine cancels out of the ratio. One thread by default (--threads): the threads of a shared
machine are not ours to take, and one gives the steadiest ratios.

Peak memory is measured first, before this process allocates anything, with one fresh child
process per kernel (``measure.memory_per_kernel``), so that no other kernel's heap nor the
timing pass's cached blocks sit beside it: torch.cuda.max_memory_allocated above the
allocation before the call (CUDA), or the resident-set high-water mark above the resident set
before the call (CPU; the child's glibc maps every block >= 64 KiB, so freed tensors leave).
A call expected to need more than --memory-fraction of the memory available is skipped, with
its reason printed, rather than run out of memory.

--norms times FlexAttention's two constructions of the squared norms instead (flex.py):
``captured`` (q.k at width d, |q|^2 and |k|^2 captured by score_mod, two atomic adds per score
in the backward) against ``columns``, the default (q' = [-2q, 1, |q|^2], k' = [k, |k|^2, 1],
width d + 2, no atomics), compiled, at alpha = 1.2 without padding, in interleaved rounds:
the median ms of each and columns / captured paired per round. A CPU compiles FlexAttention's
forward only (it has no CPU backward); the backward, where the atomics are, is CUDA's.
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
from pdelab.papers.fractional_attention.attention import FNAAttention, tile_rows
from pdelab.papers.fractional_attention.flex import DEFAULT_NORMS, NORMS, flex_path
from pdelab.spec.plugins import import_mechanisms

KERNELS = {  # name -> (registered kernel, options)
    "sdpa": ("sdpa", {}),
    "la": ("fna", {"alpha": 2.0}),
    "la_ref": ("fna_reference", {"alpha": 2.0}),
    "fna": ("fna", {"alpha": 1.2}),
    "fna_ref": ("fna_reference", {"alpha": 1.2}),
}
BASELINE = "sdpa"
MODES = ("fwd", "fwd+bwd")
PAIRS = (("la", "la_ref"), ("fna", "fna_ref"))  # (fast, reference)
FAST = ("sdpa", "la", "fna")  # timed apart from the references
# (B, H, T, T) float32 buffers a reference holds at its peak: distances, Phi, the normalised
# weights and their autograd copies (measured on a CPU: 4 forward, 8 with the backward)
REFERENCE_SQUARES = {"fwd": 5.0, "fwd+bwd": 9.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=None, help="default 8 on CUDA, 4 on a CPU")
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=None, help="default 20 on CUDA, 9 on a CPU")
    p.add_argument("--ref-repeats", type=int, default=3, help="rounds with the references")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per kernel and length")
    p.add_argument("--chunk", type=int, default=256, help="keys per tile of the CPU path")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=0.5,
        help="largest share of the available memory one call may be expected to take",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument(
        "--norms", action="store_true", help="time FlexAttention's norm constructions instead"
    )
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--memory-kernel", choices=list(KERNELS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.heads = args.heads or (8 if gpu else 4)
    args.repeats = args.repeats or (20 if gpu else 9)
    return args


def build(
    args: argparse.Namespace, device: torch.device, names: tuple[str, ...] = tuple(KERNELS)
) -> dict[str, torch.nn.Module]:
    import_mechanisms()
    kernels = {}
    for name in names:
        kernel, options = KERNELS[name]
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


def make_run(
    kernel: torch.nn.Module, xs: tuple[torch.Tensor, ...], backward: bool
) -> Callable[[], torch.Tensor]:
    """One forward (no_grad), or one forward + backward to q, k, v."""

    def run() -> torch.Tensor:
        if not backward:
            with torch.no_grad():
                return kernel(*xs, None, False)
        for x in xs:
            x.grad = None
        out = kernel(*xs, None, False)
        out.square().mean().backward()
        return out.detach()

    return run


# -- will it fit ------------------------------------------------------------------------------


def too_big(
    name: str,
    mode: str,
    t: int,
    args: argparse.Namespace,
    device: torch.device,
    measured: dict[int, float] | None = None,
) -> str | None:
    """Why one call would not fit in memory (None: it fits). A reference holds
    REFERENCE_SQUARES (B, H, T, T) buffers, or the peak measured at the longest shorter
    length scaled by (T / T0)^2, whichever is more; the fast paths and SDPA hold O(T)."""
    if not name.endswith("_ref"):
        return None
    square = args.batch * args.heads * t * t * 4 / 2**20
    need = scaled_need_mib(REFERENCE_SQUARES[mode], square, t, measured or {})
    return refuse_above(name, mode, t, need, args.memory_fraction, device)


# -- memory (a child process per kernel) ------------------------------------------------------


def memory_child(args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    """Peaks of the one kernel --memory-kernel names, measured in this (fresh) process."""
    name = args.memory_kernel
    kernel = build(args, device, (name,))[name]
    return peaks_of_one_kernel(
        name,
        args.lengths,
        MODES,
        lambda t: inputs(args, t, device),
        lambda xs, mode: make_run(kernel, xs, mode == "fwd+bwd"),
        lambda mode, t, measured: too_big(name, mode, t, args, device, measured),
        device,
    )


# -- time -------------------------------------------------------------------------------------


def time_group(
    args: argparse.Namespace,
    kernels: dict[str, torch.nn.Module],
    names: tuple[str, ...],
    xs: tuple[torch.Tensor, ...],
    mode: str,
    repeats: int,
    memory: dict[int, dict[str, float]],
    notes: list[str],
) -> dict[str, list[float]]:
    """Interleaved seconds per round of the kernels in ``names`` that fit in memory."""
    t, device, runs = xs[0].shape[-2], xs[0].device, {}
    for name in names:
        key = f"{name} {mode} MiB"
        measured = {t0: m[key] for t0, m in memory.items() if key in m}
        why = too_big(name, mode, t, args, device, measured)
        if why:
            notes.append(why.replace(" skipped", " not timed"))
        else:
            runs[name] = make_run(kernels[name], xs, mode == "fwd+bwd")
    return interleaved_times(runs, device, repeats, args.warmup) if repeats > 0 else {}


def time_length(
    args: argparse.Namespace,
    kernels: dict[str, torch.nn.Module],
    t: int,
    device: torch.device,
    memory: dict[int, dict[str, float]],
) -> tuple[dict[str, object], list[str]]:
    """One row at length t: per mode the median ms and paired ratios (the fast paths to
    SDPA, the references to their fast paths), and the largest |fast - reference| of each
    pair's output."""
    xs = inputs(args, t, device)
    row: dict[str, object] = {"T": t}
    notes: list[str] = []
    for mode in MODES:
        fast = time_group(args, kernels, FAST, xs, mode, args.repeats, memory, notes)
        for name, ratio in paired_ratios(fast, BASELINE).items():
            row[f"{name} {mode}"] = statistics.median(fast[name])
            row[f"{name} {mode} ratio"] = ratio
        names = tuple(n for pair in PAIRS for n in pair)
        slow = time_group(args, kernels, names, xs, mode, args.ref_repeats, memory, notes)
        for name, ref in PAIRS:
            if ref in slow and name in slow:  # paired in the reference rounds
                row[f"{ref} {mode}"] = statistics.median(slow[ref])
                row[f"{ref}/{name} {mode} ratio"] = paired_ratios(slow, name)[ref]
        timed = [n for n in KERNELS if f"{n} {mode}" in row]
        print(
            f"T={t} {mode}: " + ", ".join(f"{n} {row[f'{n} {mode}'] * 1e3:.1f} ms" for n in timed),
            file=sys.stderr,
            flush=True,
        )
    with torch.no_grad():
        for name, ref in PAIRS:
            if f"{ref} fwd" in row:
                diff = kernels[name](*xs, None, False) - kernels[ref](*xs, None, False)
                row[f"{name} err"] = diff.abs().max().item()
    return row, notes


# -- FlexAttention's norms --------------------------------------------------------------------


def norms_run(
    kernel: FNAAttention, xs: tuple[torch.Tensor, ...], norms: str, backward: bool
) -> Callable[[], torch.Tensor]:
    """One compiled FlexAttention call with ``norms``: a forward (no_grad), or a forward and
    the backward to q, k, v (CUDA)."""

    def attend() -> torch.Tensor:
        q, k = kernel.prepare(xs[0], xs[1])
        return flex_path(q, k, xs[2], kernel.geo, None, False, False, True, norms)

    def run() -> torch.Tensor:
        if not backward:
            with torch.no_grad():
                return attend()
        for x in xs:
            x.grad = None
        out = attend()
        out.square().mean().backward()
        return out.detach()

    return run


def compare_norms(args: argparse.Namespace, device: torch.device) -> list[dict[str, object]]:
    """Per length and mode: the median ms of each norm construction and columns / captured,
    paired per interleaved round, and the largest |columns - captured| of the output."""
    kernel = FNAAttention(args.heads, args.head_dim, **KERNELS["fna"][1]).to(device)
    modes = MODES if device.type == "cuda" else ("fwd",)
    rows = []
    for t in args.lengths:
        xs = inputs(args, t, device)
        row: dict[str, object] = {"T": t}
        for mode in modes:
            runs = {n: norms_run(kernel, xs, n, mode == "fwd+bwd") for n in NORMS}
            times = interleaved_times(runs, device, args.repeats, args.warmup)
            for name in NORMS:
                row[f"{name} {mode}"] = statistics.median(times[name])
            row[f"columns {mode} ratio"] = paired_ratios(times, "captured")["columns"]
            print(
                f"T={t} {mode}: "
                + ", ".join(f"{n} {row[f'{n} {mode}'] * 1e3:.2f} ms" for n in NORMS),
                file=sys.stderr,
                flush=True,
            )
        outs = [norms_run(kernel, xs, n, False)() for n in NORMS]
        row["err"] = (outs[0] - outs[1]).abs().max().item()
        rows.append(row)
    print(
        f"device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} H={args.heads} d_H={args.head_dim} float32, alpha=1.2, no padding, "
        f"{args.repeats} interleaved rounds; default norms: {DEFAULT_NORMS}\n"
    )
    print("| T | mode | captured ms | columns ms | columns / captured |")
    print("|---|---|---|---|---|")
    for row in rows:
        for mode in modes:
            cells = [cell_ms(row, f"{n} {mode}") for n in NORMS]
            cells.append(cell_ratio(row, f"columns {mode} ratio"))
            print(f"| {row['T']} | {mode} | " + " | ".join(cells) + " |")
    errors = "; ".join(f"T={r['T']}: {r['err']:.1e}" for r in rows)
    print(f"\nmax abs(columns - captured) of the output: {errors}")
    return rows


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.memory_only:
        print(json.dumps(memory_child(args, device)))
        return
    if args.norms:
        compare_norms(args, device)
        return
    # memory first: this process has allocated nothing yet, so holds nothing beside a child
    memory: dict[int, dict[str, float]] = {}
    notes: list[str] = []
    if not args.no_memory:
        memory, notes = memory_per_kernel(__file__, argv, list(KERNELS))
    if device.type == "cpu":
        keep_freed_memory()
    kernels = build(args, device)
    path = kernels["fna"].path(torch.empty(0, device=device))
    tile = ""
    if path == "chunked":
        rows = [tile_rows(args.batch * args.heads, t, args.chunk, 4) for t in args.lengths]
        tile = f" (tiles of {'/'.join(map(str, sorted(set(rows))))} queries x {args.chunk} keys)"
    print(
        f"device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} H={args.heads} d_H={args.head_dim} float32, {args.repeats} "
        f"interleaved rounds ({args.ref_repeats} with the references); alpha=1.2 runs on "
        f"'{path}'{tile}"
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
        "| T | mode | SDPA | LA fast | LA ref | FNA fast | FNA ref | LA fast / SDPA "
        "| FNA fast / SDPA | LA ref / fast | FNA ref / fast |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for mode in MODES:
            cells = [cell_ms(row, f"{n} {mode}") for n in KERNELS]
            cells += [cell_ratio(row, f"{n} {mode} ratio") for n in ("la", "fna")]
            cells += [cell_ratio(row, f"{ref}/{fast} {mode} ratio") for fast, ref in PAIRS]
            print(f"| {row['T']} | {mode} | " + " | ".join(cells) + " |")

    def err(row: dict, key: str) -> str:
        return f"{row[key]:.1e}" if key in row else "n/a"

    errors = [f"T={r['T']}: LA {err(r, 'la err')}, FNA {err(r, 'fna err')}" for r in rows]
    print("\nmax abs(fast - reference) of the output: " + "; ".join(errors))
    if memory:
        how = "max_memory_allocated" if device.type == "cuda" else "VmHWM - VmRSS"
        print(f"\nPeak memory of one call, MiB ({how}, a fresh process per kernel):\n")
        print("| T | mode | SDPA | LA fast | LA ref | FNA fast | FNA ref | FNA ref / fast |")
        print("|---|---|---|---|---|---|---|---|")
        for t in sorted(memory):
            for mode in MODES:
                got = [memory[t].get(f"{n} {mode} MiB") for n in KERNELS]
                cells = ["skipped" if m is None else f"{m:.1f}" for m in got]
                fast, ref = got[3], got[4]
                cells.append(f"{ref / fast:.1f}" if fast and ref is not None else "n/a")
                print(f"| {t} | {mode} | " + " | ".join(cells) + " |")
    else:
        print("\n(no memory pass)")
    if notes:
        print("\nSkipped:\n" + "\n".join(f"- {note}" for note in notes))


if __name__ == "__main__":
    main()
