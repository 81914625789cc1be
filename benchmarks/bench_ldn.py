"""Time and memory of the LDN block: banded path vs materialised reference vs an SDPA block.

    python benchmarks/bench_ldn.py                        # GPU: T = 1024, 2048, 4096, C = 128
    nice python benchmarks/bench_ldn.py --device cpu --threads 1   # CPU: T = 256-1024, C = 64

Each is one encoder layer on the same (B, T, C) float32 input without padding; one call is
forward + backward to the input and every parameter:

- ``sdpa``: the Transformer block (post-LN, scaled_dot_product_attention over H heads, MLP
  4C): the attention baseline the LDN layer replaces;
- ``ldn``: the LDN block with its defaults (K + D + F, psi bilinear of rank C, banded path
  over the static band, from sigma_max: what training runs, with no host read);
- ``ldn_sigma_band``: the same weights, banded over the band of the current widths, read from
  sigma on the host every call (the decision before the static band: a device sync and a
  torch.compile graph break per kernel, and fewer pairs while the widths are below the cap);
- ``ldn_ref``: the same weights on the reference path (K and D materialised, T x T);
- ``ldn_mlp``: psi as the pair MLP (width C), banded;
- ``ldn_mlp_ref``: the literal form, that MLP on all T^2 concatenated pairs [h_t; h_s]
  (skipped where T^2 * 2C exceeds --pair-budget elements).

Time: per length, every block runs --warmup untimed calls, then --repeats rounds in which each
runs once, starting at a rotating offset (measure.interleaved); the median per block, ratios
within one process. Peak memory: torch.cuda.max_memory_allocated above what was allocated
before the call (CUDA), or on a CPU the growth of the resident-set high-water mark in a fresh
child process (measure.memory_in_child). "max err" is the largest |banded - reference| output
difference in float32 (tests/test_ldn.py checks equality in float64).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable

import torch
from measure import (  # benchmarks/measure.py
    cpu_memory_supported,
    interleaved,
    keep_freed_memory,
    memory_in_child,
    peak_mib,
)

from pdelab.models.transformer import Block
from pdelab.papers.linear_diffusion.layer import LDNBlock
from pdelab.spec.config import DiffusionSpec

BLOCKS = {  # name -> LDN options (None: the Transformer block)
    "sdpa": None,
    "ldn": {"path": "banded"},
    "ldn_sigma_band": {"path": "banded"},
    "ldn_ref": {"path": "reference"},
    "ldn_mlp": {"psi": "mlp", "path": "banded"},
    "ldn_mlp_ref": {"psi": "mlp", "path": "reference"},
}
LITERAL = "ldn_mlp_ref"
SIGMA_BAND = "ldn_sigma_band"  # the band read from the current sigma (before the static band)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dim", type=int, default=None, help="default 128 on CUDA, 64 on a CPU")
    p.add_argument("--heads", type=int, default=None, help="default 8 on CUDA, 4 on a CPU")
    p.add_argument("--repeats", type=int, default=None, help="default 20 on CUDA, 5 on a CPU")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument(
        "--pair-budget",
        type=int,
        default=None,
        help="largest T^2 * 2C of the literal pair MLP (default 2^31 on CUDA, 2^27 on a CPU)",
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.lengths = args.lengths or ([1024, 2048, 4096] if gpu else [256, 512, 1024])
    args.dim = args.dim or (128 if gpu else 64)
    args.heads = args.heads or (8 if gpu else 4)
    args.repeats = args.repeats or (20 if gpu else 5)
    args.pair_budget = args.pair_budget or (2**31 if gpu else 2**27)
    return args


def build(args: argparse.Namespace, device: torch.device) -> dict[str, torch.nn.Module]:
    blocks: dict[str, torch.nn.Module] = {}
    for name, options in BLOCKS.items():
        torch.manual_seed(0)  # the LDN blocks of one psi share their weights
        if options is None:
            dims = (args.dim, args.heads, 4 * args.dim, 0.0, 0.0, "post", "sdpa", DiffusionSpec())
            blocks[name] = Block(*dims).to(device)
        else:
            blocks[name] = LDNBlock(args.dim, **options).to(device)
    for kernel in blocks[SIGMA_BAND].kernels.values():
        kernel.reach = kernel.g.band  # the band decided from sigma's value, on the host
    return blocks


def runs_at(args: argparse.Namespace, t: int) -> list[str]:
    """The blocks measured at length t: the literal pair MLP only within the pair budget."""
    return [n for n in BLOCKS if n != LITERAL or t * t * 2 * args.dim <= args.pair_budget]


def inputs(args: argparse.Namespace, t: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(t)
    shape = (args.batch, t, args.dim)
    x = torch.randn(shape, generator=gen, device=device).requires_grad_()
    return x, torch.randn(shape, generator=gen, device=device)


def forward(block: torch.nn.Module, xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    x, tokens = xs
    extra = {"tokens": tokens} if isinstance(block, LDNBlock) else {}
    return block(x, None, False, **extra)


def call(block: torch.nn.Module, xs: tuple[torch.Tensor, ...]) -> Callable[[], torch.Tensor]:
    """One forward + backward to the input and the block's parameters."""

    def run() -> torch.Tensor:
        xs[0].grad = None
        block.zero_grad(set_to_none=True)
        out = forward(block, xs)
        out.square().mean().backward()
        return out.detach()

    return run


def memory_pass(args: argparse.Namespace, device: torch.device) -> dict[int, dict[str, float]]:
    """{T: {block: peak MiB of one call}}, measured in this process (a fresh one on a CPU)."""
    blocks = build(args, device)
    for block in blocks.values():  # thread pools and scratch, once
        call(block, inputs(args, min(args.lengths), device))()
    return {
        t: {n: peak_mib(call(blocks[n], inputs(args, t, device)), device) for n in runs_at(args, t)}
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
    blocks = build(args, device)
    k, d = blocks["ldn"].kernels["diffusion"], blocks["ldn"].kernels["attention"]
    bands = ", ".join(
        f"{name} sigma {float(kernel.g.sigma().detach()):g} -> half-width {kernel.g.band()} "
        f"(static, sigma_max {kernel.g.sigma_max:g}: {kernel.g.band_limit()})"
        for name, kernel in (("K", k), ("D", d))
    )
    print(
        f"device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"B={args.batch} C={args.dim} H={args.heads} float32, fwd+bwd, median of "
        f"{args.repeats} interleaved rounds; LDN defaults: {bands}"
    )
    rows = []
    for t in args.lengths:
        xs = inputs(args, t, device)
        names = runs_at(args, t)
        row: dict[str, float] = {"T": t}
        with torch.no_grad():
            for fast, ref in (("ldn", "ldn_ref"), (SIGMA_BAND, "ldn_ref"), ("ldn_mlp", LITERAL)):
                if ref in names:
                    out, want = (forward(blocks[n], xs) for n in (fast, ref))
                    row[f"{fast} err"] = (out - want).abs().max().item()
        runs = {n: call(blocks[n], xs) for n in names}
        row.update(interleaved(runs, device, args.repeats, args.warmup))
        print(f"T={t}: " + ", ".join(f"{n} {row[n] * 1e3:.1f} ms" for n in names), flush=True)
        rows.append(row)
        del xs
    memory = {}
    if not args.no_memory:
        memory = (
            memory_pass(args, device) if device.type == "cuda" else memory_in_child(__file__, argv)
        )
    print_tables(rows, memory, device)


def cell(value: float | None, scale: float = 1.0, fmt: str = ".1f") -> str:
    return "-" if value is None or math.isnan(value) else f"{value * scale:{fmt}}"


def ratio(a: float | None, b: float | None, fmt: str = ".2f", floor: float = 0.0) -> str:
    """a / b, or "-" where either is missing or b is at or below the resolution ``floor``."""
    return "-" if a is None or b is None or b <= floor else f"{a / b:{fmt}}"


def print_tables(rows: list[dict], memory: dict[int, dict[str, float]], device) -> None:
    print("\nTime, fwd+bwd (ms):\n")
    print(
        "| T | SDPA block | LDN | LDN ref | LDN mlp | LDN mlp ref | LDN / SDPA | LDN ref / LDN "
        "| LDN mlp / SDPA | LDN mlp ref / LDN mlp | max err LDN, LDN mlp |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r.get
        print(
            f"| {r['T']} | {cell(g('sdpa'), 1e3)} | {cell(g('ldn'), 1e3)} "
            f"| {cell(g('ldn_ref'), 1e3)} | {cell(g('ldn_mlp'), 1e3)} "
            f"| {cell(g(LITERAL), 1e3)} | {ratio(g('ldn'), g('sdpa'))} "
            f"| {ratio(g('ldn_ref'), g('ldn'), '.1f')} | {ratio(g('ldn_mlp'), g('sdpa'))} "
            f"| {ratio(g(LITERAL), g('ldn_mlp'), '.1f')} "
            f"| {cell(g('ldn err'), 1, '.1e')}, {cell(g('ldn_mlp err'), 1, '.1e')} |"
        )
    print("\nThe band decision, fwd+bwd (ms): static band (sigma_max) vs the current sigma's:\n")
    print("| T | LDN, static band | LDN, sigma's band | static / sigma's | max err sigma's |")
    print("|---|---|---|---|---|")
    for r in rows:
        g = r.get
        print(
            f"| {r['T']} | {cell(g('ldn'), 1e3)} | {cell(g(SIGMA_BAND), 1e3)} "
            f"| {ratio(g('ldn'), g(SIGMA_BAND))} | {cell(g(f'{SIGMA_BAND} err'), 1, '.1e')} |"
        )
    if not any(memory.values()):
        print("\n(no memory pass)")
        return
    how = "max_memory_allocated" if device.type == "cuda" else "VmHWM growth, fresh process"
    print(f"\nPeak memory of one fwd+bwd call, MiB ({how}; ratios where the base is > 1 MiB):\n")
    print(
        "| T | SDPA block | LDN | LDN ref | LDN mlp | LDN mlp ref | LDN / SDPA | LDN ref / LDN "
        "| LDN mlp ref / LDN mlp |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for t, m in memory.items():
        g = m.get
        print(
            f"| {t} | {cell(g('sdpa'))} | {cell(g('ldn'))} | {cell(g('ldn_ref'))} "
            f"| {cell(g('ldn_mlp'))} | {cell(g(LITERAL))} | {ratio(g('ldn'), g('sdpa'), '.2f', 1)} "
            f"| {ratio(g('ldn_ref'), g('ldn'), '.1f', 1)} "
            f"| {ratio(g(LITERAL), g('ldn_mlp'), '.1f', 1)} |"
        )
    print("\n| T | LDN, static band | LDN, sigma's band | static / sigma's |")
    print("|---|---|---|---|")
    for t, m in memory.items():
        g = m.get
        print(
            f"| {t} | {cell(g('ldn'))} | {cell(g(SIGMA_BAND))} "
            f"| {ratio(g('ldn'), g(SIGMA_BAND), '.2f', 1)} |"
        )


if __name__ == "__main__":
    main()
