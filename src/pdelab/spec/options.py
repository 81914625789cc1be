"""The params.yaml options of the backbone's mechanisms, checked without torch.

pdelab.spec.config checks every run's ``model.attention_options``, ``model.block_options`` and
``model.smoothing`` here when params.yaml is resolved, before any job starts. Generic kernels
and the Transformer block are registered below; a paper package registers its own kernels' and
blocks' options (names and a check) when it is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdelab.spec.registry import Registry


@dataclass(frozen=True)
class KernelOptions:
    """The options an attention kernel (or an encoder block) takes, a check of their values
    (ValueError), and the module whose import registers it ("" for the backbone's own, which
    every run executes): a run's code provenance (pdelab.records.provenance) includes that
    module."""

    names: tuple[str, ...] = ()
    check: Callable[..., None] | None = None
    module: str = ""


ATTENTION_OPTIONS: Registry[KernelOptions] = Registry("attention kernel")
ATTENTION_OPTIONS.register("sdpa")(KernelOptions())
ATTENTION_OPTIONS.register("reference")(KernelOptions())

# Encoder blocks (``model.block``): the Transformer's own takes no options.
BLOCK_OPTIONS: Registry[KernelOptions] = Registry("encoder block")
BLOCK_OPTIONS.register("transformer")(KernelOptions())


def _check_options(
    registry: Registry[KernelOptions], noun: str, name: str, options: dict[str, Any]
) -> None:
    if name not in registry:
        raise ValueError(f"unknown {registry.kind} {name!r}; valid: {', '.join(registry.names())}")
    spec = registry.get(name)
    for key in options:
        if key not in spec.names:
            valid = ", ".join(spec.names) or "none"
            raise ValueError(f"option {key!r} is not taken by {noun} {name!r}; it takes: {valid}")
    if spec.check is not None:
        spec.check(**options)


def check_attention(kernel: str, options: dict[str, Any]) -> None:
    """A known kernel, options it takes, and PDE coefficients inside their stability bounds."""
    _check_options(ATTENTION_OPTIONS, "kernel", kernel, options)


def check_block(block: str, options: dict[str, Any]) -> None:
    """A known encoder block and options it takes, with values its check accepts."""
    _check_options(BLOCK_OPTIONS, "block", block, options)


# The released code's coefficients (github.com/XueqingZhou/Continuous-Time-Attention).
RELEASED_DEFAULTS: dict[str, dict[str, float]] = {
    "diffusion": {"alpha": 0.10},
    "wave": {"alpha": 0.15},
    "reaction_diffusion": {"alpha": 0.10, "beta": 0.02},
    "advection_diffusion": {"alpha": 0.10, "beta": 0.03},
}

SMOOTHING_OPTIONS = ("pde", "steps", "alpha", "beta", "causal", "learnable")


def check_smoothing(options: dict[str, Any]) -> None:
    """Options of the released code's hidden-state smoothing (``model.smoothing``).

    The explicit step x += a * lap(x) is non-expansive for a <= 1/2, where a is alpha (alpha^2
    for the wave form), as for the attention kernels.
    """
    for key in options:
        if key not in SMOOTHING_OPTIONS:
            raise ValueError(f"unknown option {key!r}; valid: {', '.join(SMOOTHING_OPTIONS)}")
    pde = options.get("pde", "diffusion")
    if not isinstance(pde, str) or pde not in RELEASED_DEFAULTS:
        raise ValueError(f"option 'pde'={pde!r} is not one of {tuple(RELEASED_DEFAULTS)}")
    steps = options.get("steps", 1)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"option 'steps'={steps!r} must be an integer >= 0")
    for key in ("causal", "learnable"):
        if not isinstance(options.get(key, False), bool):
            raise ValueError(f"option {key!r}={options[key]!r} must be true or false")
    for key in ("alpha", "beta"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"option {key!r}={value!r} must be a number")
    if options.get("beta") is not None and "beta" not in RELEASED_DEFAULTS[pde]:
        raise ValueError(f"option 'beta' has no effect for pde={pde!r}")
    alpha = options.get("alpha")
    alpha = RELEASED_DEFAULTS[pde]["alpha"] if alpha is None else float(alpha)
    rate = alpha**2 if pde == "wave" else alpha
    if not 0 <= rate <= 0.5:
        raise ValueError(
            f"option 'alpha'={alpha} gives a step coefficient {rate:g} outside [0, 1/2], where "
            "the explicit smoothing step stops being stable"
        )
