"""Does a sequence model read the future? An empirical causality probe.

A function fn maps x, either features (B, T, D) float or token ids (B, T) long, to outputs
(B, T, ...). It is causal when output t depends on x[:, :t+1] only. Two probes:

- ``"perturb"``: for each probed position t, change every token after t (resample ids, or add
  Gaussian noise to features) and measure how far the outputs at positions <= t move;
- ``"grad"``: for each t, the gradient of a random projection of outputs[:, :t+1] with respect
  to x[:, t+1:] (autograd), which must be exactly zero. The random projection avoids a
  cancellation that a plain sum could hide.

Either way the report gives whether anything moved beyond ``tol``, by how much at most, and
the first (smallest) probed t whose past saw its future. The perturbation probe treats fn as
a black box (dropout should be off: call ``model.eval()`` first); the gradient probe needs a
float input, so for token models probe the embedding-level function.

:func:`verdict` turns a report into a :class:`Causality`, the word result.parquet stores. The
enum itself lives in the torch-free pdelab.records.causal_verdict, so the report can read verdicts
without importing torch; it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pdelab.records.causal_verdict import Causality
from pdelab.training.precision import full_precision


@dataclass(frozen=True)
class CausalityReport:
    """Outcome of a probe. ``leaks`` is max_leak > tol; per_position[i] is the largest change
    (or gradient) seen at outputs <= positions[i] from inputs after positions[i]."""

    leaks: bool
    max_leak: float
    first_leak_position: int | None
    positions: tuple[int, ...]
    per_position: tuple[float, ...]
    method: str
    tol: float


def verdict(report: CausalityReport) -> Causality:
    """The one-line answer, as an enum whose value is the word result.parquet stores."""
    return Causality.LEAKS if report.leaks else Causality.CAUSAL


def _positions(t: int, positions: Sequence[int] | None) -> list[int]:
    if positions is None:
        return list(range(t - 1))  # after position T-1 there is nothing to perturb
    out = sorted({int(p) for p in positions})
    if out and not 0 <= out[0] <= out[-1] < t:
        raise ValueError(f"positions must lie in [0, {t - 1}], got {out}")
    return out


def _report(positions: list[int], leaks: list[float], method: str, tol: float) -> CausalityReport:
    first = next((p for p, m in zip(positions, leaks, strict=True) if m > tol), None)
    worst = max(leaks, default=0.0)
    return CausalityReport(
        leaks=first is not None,
        max_leak=worst,
        first_leak_position=first,
        positions=tuple(positions),
        per_position=tuple(leaks),
        method=method,
        tol=tol,
    )


def _perturbed(
    x: Tensor, t: int, gen: torch.Generator, vocab_size: int | None, noise_scale: float
) -> Tensor:
    """x with every token after t changed: ids shifted by a random non-zero offset modulo the
    vocabulary (so each one really changes), features plus Gaussian noise."""
    y = x.clone()
    tail = y[:, t + 1 :]
    if x.is_floating_point():
        noise = torch.randn(tail.shape, generator=gen, dtype=x.dtype, device="cpu")
        y[:, t + 1 :] = tail + noise_scale * noise.to(x.device)
        return y
    vocab = vocab_size if vocab_size is not None else int(x.max()) + 1
    if vocab < 2:
        raise ValueError("need a vocabulary of at least 2 ids to resample tokens")
    offset = torch.randint(1, vocab, tail.shape, generator=gen, device="cpu").to(x.device)
    y[:, t + 1 :] = (tail + offset) % vocab
    return y


@full_precision()  # a leak of 1e-6 is below bf16's resolution: the probe runs in fp32
def probe_causality(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    positions: Sequence[int] | None = None,
    tol: float = 1e-6,
    method: str = "perturb",
    vocab_size: int | None = None,
    noise_scale: float = 1.0,
    seed: int = 0,
) -> CausalityReport:
    """Probe fn for dependence of outputs at positions <= t on inputs after t.

    ``positions`` defaults to every t in [0, T-2]. ``method`` is "perturb" or "grad" (see the
    module docstring). ``vocab_size`` bounds resampled ids (default: max id + 1).
    """
    if method == "grad":
        return probe_causality_grad(fn, x, positions=positions, tol=tol, seed=seed)
    if method != "perturb":
        raise ValueError(f"method must be 'perturb' or 'grad', got {method!r}")
    gen = torch.Generator().manual_seed(seed)
    probed = _positions(x.shape[1], positions)
    leaks = []
    with torch.no_grad():
        base = fn(x)
        for t in probed:
            out = fn(_perturbed(x, t, gen, vocab_size, noise_scale))
            diff = (out[:, : t + 1] - base[:, : t + 1]).abs()
            leaks.append(float(diff.max()) if diff.numel() else 0.0)
    return _report(probed, leaks, "perturb", tol)


@full_precision()
def probe_causality_grad(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    positions: Sequence[int] | None = None,
    tol: float = 1e-6,
    seed: int = 0,
) -> CausalityReport:
    """Gradient probe: max |d <r, out[:, :t+1]> / d x[:, t+1:]| for a fixed random r."""
    if not x.is_floating_point():
        raise TypeError("the gradient probe needs a float input; probe the embedding-level fn")
    gen = torch.Generator().manual_seed(seed)
    probed = _positions(x.shape[1], positions)
    xg = x.detach().clone().requires_grad_(True)
    out = fn(xg)
    weights = torch.randn(out.shape, generator=gen, dtype=out.dtype, device="cpu").to(out.device)
    leaks = []
    for t in probed:
        objective = (out[:, : t + 1] * weights[:, : t + 1]).sum()
        (grad,) = torch.autograd.grad(objective, xg, retain_graph=True, allow_unused=True)
        tail = None if grad is None else grad[:, t + 1 :].abs()
        leaks.append(float(tail.max()) if tail is not None and tail.numel() else 0.0)
    return _report(probed, leaks, "grad", tol)


__all__ = ["Causality", "CausalityReport", "probe_causality", "probe_causality_grad", "verdict"]
