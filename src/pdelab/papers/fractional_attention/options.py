"""Options of the fractional-attention kernels, the distance scale and d_M, all torch-free.

The package registers :func:`check_options` with pdelab.spec.options, so pdelab.spec.config rejects
a bad option when params.yaml is resolved, before any job starts; the kernels compute their
constants from :func:`distance_scale` and :func:`intrinsic_dim`, so the checks and the
kernels read one definition. This module must not import torch.
"""

from __future__ import annotations

import math
from typing import Any

# The official code sets kappa per task family (spec section 1): text (nlp-tutorial,
# att_rdfns.py:20-27), vision (vit-pytorch att.py:132-142) and translation (translation
# attention.py:27-36). Vision and translation share one rule; the names say which run uses it.
KAPPA_RULES = ("text", "vision", "translation")
DEFAULT_ALPHA = 1.2  # the paper's multiscale FNA in every headline table
DEFAULT_CHUNK = 256  # keys per block of the CPU log-space path

# Options each kernel takes from params.yaml (``model.attention_options``); its dropout comes
# from ``model.attention_dropout``. tests/test_config.py keeps these equal to the kernels'
# constructor arguments.
PROJECTION_OPTIONS = ("orthogonal", "tied")
FNA_OPTIONS = ("alpha", "kappa", *PROJECTION_OPTIONS, "spherical", "zero_diagonal", "laplace")
KERNEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "fna": (*FNA_OPTIONS, "chunk_size"),
    "fna_reference": FNA_OPTIONS,
    "fna_dp": PROJECTION_OPTIONS,
}


def _flag(options: dict[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"option {key!r}={value!r} must be true or false")
    return value


def check_options(**options: Any) -> None:
    """Reject values the kernels cannot honour; the error names the option.

    alpha must lie in [1, 2] (the official code asserts it; the paper's kernels are Eq. 9 at
    alpha = 2 and Eq. 10 below); kappa is a positive number or a task family of KAPPA_RULES;
    the sphere has a scale only for text in the official code; ``zero_diagonal`` is the
    official text model's treatment of tied queries and keys, so it needs ``tied``; ``laplace``
    is the small-z form of the power law, so it needs alpha < 2.
    """
    alpha = options.get("alpha", DEFAULT_ALPHA)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 1 <= alpha <= 2:
        raise ValueError(
            f"option 'alpha'={alpha!r} must be a number in [1, 2] (alpha = 2 is the Gaussian "
            "'local attention', alpha < 2 the power law)"
        )
    kappa = options.get("kappa", "text")
    if isinstance(kappa, str):
        if kappa not in KAPPA_RULES:
            raise ValueError(
                f"option 'kappa'={kappa!r} must be > 0 or one of {', '.join(KAPPA_RULES)}"
            )
    elif isinstance(kappa, bool) or not isinstance(kappa, int | float) or not kappa > 0:
        raise ValueError(f"option 'kappa'={kappa!r} must be > 0 or one of {', '.join(KAPPA_RULES)}")
    tied = _flag(options, "tied")
    _flag(options, "orthogonal")
    spherical = _flag(options, "spherical")
    if spherical and kappa in ("vision", "translation"):
        raise ValueError(
            f"option 'kappa'={kappa!r} with spherical=true: the official code scales the sphere "
            "for text only (pi / (pi^(1/d_M) - 1)); give kappa as a number"
        )
    if _flag(options, "zero_diagonal") and not tied:
        raise ValueError(
            "option 'zero_diagonal'=true needs tied=true: it drops each token's weight on "
            "itself when Q = K, which is where the official text model does it"
        )
    if _flag(options, "laplace") and alpha == 2:
        raise ValueError(
            "option 'laplace'=true needs alpha < 2: it replaces the power law "
            "(1 + z)^-(d_M + alpha) by its small-z form exp(-(d_M + alpha) z); alpha = 2 is the "
            "Gaussian"
        )
    chunk = options.get("chunk_size", DEFAULT_CHUNK)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"option 'chunk_size'={chunk!r} must be a positive integer")


def intrinsic_dim(head_dim: int, heads: int, spherical: bool) -> int:
    """d_M in Phi's exponent -(d_M + alpha): the head dimension, or the dimension of the sphere
    S^(d-1) itself for a single spherical head (Appendix A1; nlp-tutorial/main.py:290-295)."""
    if spherical and heads == 1:
        if head_dim < 2:
            raise ValueError("a spherical single head needs dim >= 2 (d_M = dim - 1)")
        return head_dim - 1
    return head_dim


def distance_scale(
    kappa: float | str, alpha: float, head_dim: int, heads: int, spherical: bool
) -> float:
    """kappa, the distance divisor inside Phi, as the official code sets it.

    text: sqrt(d_H) / (2^(1/d_H) - 1) for alpha < 2, which puts Phi near 1/2 at distance
    sqrt(d_H), and sqrt(d_H) at alpha = 2; vision and translation: d_H for alpha < 2 and
    sqrt(d_H) at alpha = 2; the sphere (text): pi / (pi^(1/d_M) - 1) for alpha < 2 and 1 at
    alpha = 2. A number is used as it is.
    """
    if not isinstance(kappa, str):
        return float(kappa)
    if spherical:
        d_m = intrinsic_dim(head_dim, heads, spherical)
        return 1.0 if alpha == 2 else math.pi / (math.pi ** (1 / d_m) - 1)
    if alpha == 2:
        return math.sqrt(head_dim)
    if kappa == "text":
        return math.sqrt(head_dim) / (2 ** (1 / head_dim) - 1)
    return float(head_dim)
