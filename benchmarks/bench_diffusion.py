"""Training-step time and peak memory of PDE diffusion variants vs the baseline (ListOps config).

    python benchmarks/bench_diffusion.py                                  # GPU: the paper's size
    python benchmarks/bench_diffusion.py --device cpu --threads 1 --clock cpu --batch-size 2 \\
        --length 512 --repeats 20                                         # CPU: ~2.5 minutes

The paper's ListOps model (dim 128, 6 layers, 8 heads, MLP 512, L = 2000; the rest from
pdelab.spec.config.ModelSpec / TrainSpec defaults: post-LN, dropout and attention dropout 0.1, mean
pooling, SDPA, AdamW lr 1e-3) is built with pdelab.models.transformer.Classifier and
pdelab.spec.config.DiffusionSpec, as pdelab.models.factory.build_model does, for: baseline (no
diffusion), after_embedding (one layer, h = 1, alpha 0.1), after_mlp (one layer per block), and
multi-scale after_embedding (h = 1, 2, 4, alpha 0.16 each: the paper's budget 0.48). Each
diffusion variant runs with the fast path (DiffusionStepFunction) and with the autograd
reference (the same model, toggled with set_fast_path); --compile adds torch.compile'd steps.
One training step is zero_grad + forward + cross-entropy + backward + AdamW step on a padded
batch (random tokens, lengths uniform in [L/4, L], as ListOps' 500..2000).

Time: all methods are timed in one process, interleaved (each repetition runs every method
once, in a rotated order), after --warmup untimed steps each; the table shows the median of
--repeats. Targets: step-time overhead over the baseline <= 3% after_embedding,
<= 10% per-layer (the paper's Table 9: +5.6%, +12.8%, multi-scale +18.4%).

Peak memory of one training step above what is resident before it (parameters, AdamW state and
inputs; gradients are freed by zero_grad(set_to_none=True), so they count in the step):
- CUDA: torch.cuda.max_memory_allocated() - memory_allocated() before the step (exact).
- CPU: torch has no CPU allocator statistics and tracemalloc does not see its C++ allocations,
  so this is the resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs)
  minus VmRSS before the step, measured in a fresh child process in which glibc serves every
  block >= 64 KiB by mmap (freed tensors leave the resident set at once, so each step starts
  from a clean base). Page-granular; includes scratch buffers and allocator slack. "nan" where
  clear_refs is not writable.
The memory ratios over the baseline are ratios of these step peaks.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from measure import cpu_memory_supported, peak_mib, sync  # benchmarks/measure.py

from pdelab.models.diffusion import Diffusion
from pdelab.models.transformer import Classifier
from pdelab.spec.config import DiffusionSpec, ModelSpec, TrainSpec

VARIANTS: dict[str, DiffusionSpec] = {
    "baseline": DiffusionSpec(),
    "after_embedding": DiffusionSpec(sites=("after_embedding",), strides=(1,), alpha=0.1),
    "after_mlp": DiffusionSpec(sites=("after_mlp",), strides=(1,), alpha=0.1),
    "multiscale_after_embedding": DiffusionSpec(
        sites=("after_embedding",), strides=(1, 2, 4), alpha=0.48
    ),
}
TARGETS = {"after_embedding": 3.0, "after_mlp": 10.0}  # max step-time overhead, %
PAPER = {"after_embedding": 5.6, "after_mlp": 12.8, "multiscale_after_embedding": 18.4}


@dataclass
class Method:
    name: str
    variant: str
    impl: str  # "-" (baseline), "fast", "reference" or "compiled"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=2000)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--mlp-dim", type=int, default=512)
    p.add_argument("--vocab", type=int, default=18)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    p.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall: perf_counter; cpu: process CPU time, which on a shared CPU excludes time "
        "the process was preempted (use with --threads 1; not for GPU)",
    )
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd steps")
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument("--out", type=Path, help="also write the Markdown tables here")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def methods(args: argparse.Namespace) -> list[Method]:
    impls = ["fast", "reference"] + (["compiled"] if args.compile else [])
    out = [Method("baseline", "baseline", "-")]
    for variant in list(VARIANTS)[1:]:
        out += [Method(f"{variant} {impl}", variant, impl) for impl in impls]
    return out


def build(args: argparse.Namespace, device: torch.device):
    """One model + AdamW per variant (same seed, so shared weights are identical) and a batch."""
    m, train = ModelSpec(), TrainSpec()  # the paper's defaults, as models.factory.build_model
    models, optims = {}, {}
    for variant, spec in VARIANTS.items():
        torch.manual_seed(0)
        models[variant] = Classifier(
            10,
            pooling=m.pooling,
            vocab_size=args.vocab,
            max_len=args.length,
            dim=args.dim,
            layers=args.layers,
            heads=args.heads,
            mlp_dim=args.mlp_dim,
            dropout=m.dropout,
            attention_dropout=m.attention_dropout,
            norm=m.norm,
            attention=m.attention,
            diffusion=spec,
        ).to(device)
        optims[variant] = torch.optim.AdamW(
            models[variant].parameters(),
            lr=train.lr,
            betas=train.betas,
            weight_decay=train.weight_decay,
        )
    gen = torch.Generator().manual_seed(1)
    b, n = args.batch_size, args.length
    lengths = torch.randint(n // 4, n + 1, (b,), generator=gen)
    mask = torch.arange(n)[None, :] < lengths[:, None]
    ids = torch.randint(2, args.vocab, (b, n), generator=gen).masked_fill(~mask, 0)
    labels = torch.randint(0, 10, (b,), generator=gen)
    return models, optims, (ids.to(device), mask.to(device), labels.to(device))


def make_step(method: Method, models, optims, batch) -> Callable[[], torch.Tensor]:
    model, optim = models[method.variant], optims[method.variant]
    ids, mask, labels = batch

    def step() -> torch.Tensor:
        for layer in model.modules():  # cheap attribute switches: fast / reference / compiled
            if isinstance(layer, Diffusion):
                layer.fast = method.impl == "fast"
                layer.compile_step = method.impl == "compiled"
        optim.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(ids, mask), labels)
        loss.backward()
        optim.step()
        return loss.detach()

    return step


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_methods(
    steps: dict[str, Callable[[], torch.Tensor]],
    device: torch.device,
    repeats: int,
    warmup: int,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Interleaved timing: repetition r runs every method once, starting at a rotating offset,
    so times[name][r] of different methods are paired (same moment, same machine load)."""
    now = CLOCKS[clock]
    for step in steps.values():
        for _ in range(warmup):
            step()
    sync(device)
    names = list(steps)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            sync(device)
            start = now()
            steps[name]()
            sync(device)
            times[name].append(now() - start)
    return times


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(low, median, high): distribution-free confidence interval of the median from order
    statistics (binomial(n, 1/2) ranks); (min, median, max) when n is too small for `level`."""
    x, n = sorted(values), len(values)
    tail = (1 - level) / 2
    k, cdf = 0, 0.0  # largest k with P(Binom(n, 1/2) <= k - 1) <= tail
    while k < n // 2:
        cdf_next = cdf + math.comb(n, k) / 2**n
        if cdf_next > tail:
            break
        cdf, k = cdf_next, k + 1
    lo, hi = (x[k - 1], x[n - k]) if k > 0 else (x[0], x[-1])
    return lo, statistics.median(x), hi


def layer_times(args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, float]]:
    """Each variant's Diffusion module alone (S_alpha + its LayerNorm, as the model runs it),
    fwd+bwd on (B, L, dim) with 1/4 padding, fast vs reference, interleaved: the low-noise part
    of the overhead. {variant: {"fast": s, "reference": s, "count": layers in the model}}."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(args.batch_size, args.length, args.dim, generator=gen).to(device)
    g = torch.randn(x.shape, generator=gen).to(device)
    mask = torch.ones(x.shape[:2], dtype=torch.bool, device=device)
    mask[:, (3 * args.length) // 4 :] = False
    out: dict[str, dict[str, float]] = {}
    for variant, spec in list(VARIANTS.items())[1:]:
        layer = Diffusion(args.dim, spec.strides, spec.alphas()).to(device)
        xg = x.clone().requires_grad_(True)

        def run(fast: bool, layer=layer, xg=xg) -> torch.Tensor:
            layer.fast = fast
            xg.grad = None
            layer.zero_grad(set_to_none=True)
            y = layer(xg, mask)
            y.backward(g)
            return y.detach()

        steps = {"fast": lambda run=run: run(True), "reference": lambda run=run: run(False)}
        times = time_methods(steps, device, max(3 * args.repeats, 30), args.warmup, args.clock)
        out[variant] = {k: statistics.median(v) for k, v in times.items()}
        out[variant]["count"] = 1 if "after_embedding" in spec.sites else args.layers
    return out


# -- peak memory ------------------------------------------------------------------------------


def memory_pass(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    models, optims, batch = build(args, device)
    steps = {m.name: make_step(m, models, optims, batch) for m in methods(args)}
    for step in steps.values():  # AdamW state, thread pools, compiled code: resident from now
        step()
    return {name: peak_mib(step, device) for name, step in steps.items()}


def memory_in_child(argv: list[str]) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--memory-only"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- report -----------------------------------------------------------------------------------


def tables(
    args: argparse.Namespace,
    device: torch.device,
    times: dict[str, list[float]],
    memory: dict[str, float],
    layers: dict[str, dict[str, float]],
) -> str:
    med = {k: statistics.median(v) for k, v in times.items()}
    base_t, base_m = med["baseline"], memory.get("baseline", float("nan"))
    how = "max_memory_allocated" if device.type == "cuda" else "VmHWM - VmRSS, fresh process"
    lines = [
        f"device={device} ({torch.get_num_threads()} threads), torch {torch.__version__}; "
        f"batch {args.batch_size}, L={args.length}, dim {args.dim}, {args.layers} layers, "
        f"{args.heads} heads, MLP {args.mlp_dim}; {args.repeats} interleaved repetitions, "
        f"{args.clock} clock. Overhead: median over repetitions of the paired ratio step / "
        "baseline step of the same repetition, with a 95% confidence interval of that median; "
        "target verdict: ok if the interval's top meets it, MISSED if its bottom misses it, "
        "else inconclusive.",
        "",
        f"| variant | impl | step ms | overhead [95% CI] | target | paper "
        f"| isolated-layer estimate | step peak MiB ({how}) | memory / baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in methods(args):
        paired = [t / b for t, b in zip(times[m.name], times["baseline"], strict=True)]
        q1, q2, q3 = (100 * (q - 1) for q in median_ci(paired))
        mem = memory.get(m.name, float("nan"))
        target = ""
        if m.variant in TARGETS and m.impl != "-":
            goal = TARGETS[m.variant]
            verdict = "ok" if q3 <= goal else "MISSED" if q1 > goal else "inconclusive"
            target = f"<= {goal:.0f}%: {verdict}"
        paper = f"+{PAPER[m.variant]}%" if m.variant in PAPER else ""
        layer = layers.get(m.variant, {})
        estimate = (
            f"+{100 * layer['count'] * layer[m.impl] / base_t:.2f}%" if m.impl in layer else ""
        )
        lines.append(
            f"| {m.variant} | {m.impl} | {med[m.name] * 1e3:.1f} | {q2:+.1f}% [{q1:+.1f}, "
            f"{q3:+.1f}] | {target} | {paper} | {estimate} | {mem:.1f} | {mem / base_m:.3f} |"
        )
    lines += [
        "",
        "| variant | fast / reference step time (paired median) "
        "| fast / reference step peak memory |",
        "|---|---|---|",
    ]
    for variant in list(VARIANTS)[1:]:
        fast, ref = times[f"{variant} fast"], times[f"{variant} reference"]
        ratio = statistics.median(f / r for f, r in zip(fast, ref, strict=True))
        fm = memory.get(f"{variant} fast", float("nan"))
        rm = memory.get(f"{variant} reference", float("nan"))
        lines.append(f"| {variant} | {ratio:.3f} | {fm / rm:.3f} |")
    lines += [
        "",
        f"One Diffusion module (S_alpha + LayerNorm) alone, fwd+bwd on ({args.batch_size}, "
        f"{args.length}, {args.dim}), 1/4 padding; the isolated-layer estimate above is "
        "layers x module time / baseline step:",
        "",
        "| variant | strides | layers | fast ms | reference ms | fast / reference |",
        "|---|---|---|---|---|---|",
    ]
    for variant, row in layers.items():
        lines.append(
            f"| {variant} | {VARIANTS[variant].strides} | {row['count']} | {row['fast'] * 1e3:.2f} "
            f"| {row['reference'] * 1e3:.2f} | {row['fast'] / row['reference']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.memory_only:
        ok = device.type == "cuda" or cpu_memory_supported()
        print(json.dumps(memory_pass(args, device) if ok else {}))
        return
    start = time.perf_counter()
    models, optims, batch = build(args, device)
    steps = {m.name: make_step(m, models, optims, batch) for m in methods(args)}
    times = time_methods(steps, device, args.repeats, args.warmup, args.clock)
    del models, optims, steps
    layers = layer_times(args, device)
    memory: dict[str, float] = {}
    if not args.no_memory:
        memory = memory_pass(args, device) if device.type == "cuda" else memory_in_child(argv)
    text = tables(args, device, times, memory, layers)
    print(text)
    print(f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
