"""Options of the PDE attention kernels and their stability conditions (App. E), torch-free.

The package registers these checks with pdelab.spec.options, so pdelab.spec.config rejects a bad
option when params.yaml is resolved, before any job starts: this module must not import torch.
"""

from __future__ import annotations

import math
from typing import Any

# Table 11 (App. B.5.3): initial coefficients of the four PDE variants. The wave coefficient
# is the speed c (Table 5 prints it as "alpha"); the update uses c^2, as eq. (25) and the
# released code (alpha ** 2 * laplacian) do.
TABLE_11: dict[str, dict[str, float]] = {
    "diffusion": {"alpha": 0.10},
    "wave": {"c": 0.15},
    "reaction_diffusion": {"alpha": 0.10, "beta": 0.02},
    "advection_diffusion": {"alpha": 0.10, "beta": 0.03},
}
PDE_TYPES = tuple(TABLE_11)
LINEAR_PDES = ("diffusion", "wave", "advection_diffusion")
CAUSAL_FORMS = ("restricted", "two_sided")
DEFAULT_STEPS = 4  # Table 4: best perplexity at 4 steps; 8 diverged


# --------------------------------------------------------------------------------------------
# Option validation (call when configs are resolved)
# --------------------------------------------------------------------------------------------


def check_stability(**options: Any) -> None:
    """Reject PDE-kernel options that are unknown-valued or violate a stability bound.

    Bounds (ds = 1): diffusion alpha*dt <= 1/2 (App. E eq. 23); wave c*dt <= 1 (eq. 27);
    reaction-diffusion alpha*dt <= 1/2 and dt*(2*alpha + |beta|) <= 1 (the paper gives none;
    this is the discrete maximum principle that keeps A in [0, 1]); advection-diffusion
    alpha*dt <= 1/2 and (beta*dt)^2 <= 2*alpha*dt (von Neumann for forward-time central-space;
    the paper gives none). Raises ``ValueError`` naming the offending option and its bound.
    Options the PDE kernels do not read (window, dropout, ...) are ignored.
    """
    pde = options.get("pde", "diffusion")
    if not isinstance(pde, str) or pde not in TABLE_11:
        raise ValueError(f"option 'pde'={pde!r} is not one of {PDE_TYPES}")
    steps = options.get("steps", DEFAULT_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"option 'steps'={steps!r} must be an integer >= 0")
    for key in ("fast", "learnable"):
        flag = options.get(key, False)
        if not isinstance(flag, bool):
            raise ValueError(f"option {key!r}={flag!r} must be true or false")
    for key in ("dt", "alpha", "c", "beta"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"option {key!r}={value!r} must be a number")
    dt = float(options.get("dt", 1.0))
    if not dt > 0:
        raise ValueError(f"option 'dt'={dt} must be > 0")
    form = options.get("causal_form", "restricted")
    if not isinstance(form, str) or form not in CAUSAL_FORMS:
        raise ValueError(f"option 'causal_form'={form!r} is not one of {CAUSAL_FORMS}")
    chunk = options.get("chunk_size")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"option 'chunk_size'={chunk!r} must be a positive integer or None")
    for key in ("window", "n_global"):
        val = options.get(key, 0)
        if isinstance(val, bool) or not isinstance(val, int) or val < 0:
            raise ValueError(f"option {key!r}={val!r} must be an integer >= 0")

    coef = dict(TABLE_11[pde])
    for name in ("alpha", "c", "beta"):
        if options.get(name) is None:
            continue
        if name not in coef:
            raise ValueError(
                f"option {name!r} has no effect for pde={pde!r}; its coefficients are "
                f"{sorted(coef)} (Table 11)"
            )
        coef[name] = float(options[name])

    alpha, beta, c = coef.get("alpha"), coef.get("beta"), coef.get("c")
    if alpha is not None:
        if alpha < 0:
            raise ValueError(f"option 'alpha'={alpha} must be >= 0 (anti-diffusion is ill-posed)")
        if alpha * dt > 0.5:
            raise ValueError(
                f"option 'alpha'={alpha} with dt={dt} violates the CFL bound "
                f"dt <= ds^2 / (2 * alpha), i.e. alpha <= {0.5 / dt:g} (App. E eq. 23)"
            )
    if c is not None:
        if c < 0:
            raise ValueError(f"option 'c'={c} must be >= 0 (a wave speed)")
        if c * dt > 1.0:
            raise ValueError(
                f"option 'c'={c} with dt={dt} violates the CFL bound dt <= ds / c, "
                f"i.e. c <= {1.0 / dt:g} (App. E eq. 27)"
            )
    if pde == "reaction_diffusion" and dt * (2 * alpha + abs(beta)) > 1.0:
        raise ValueError(
            f"option 'beta'={beta} with alpha={alpha}, dt={dt} violates the bound "
            f"dt * (2 * alpha + |beta|) <= 1, i.e. |beta| <= {1.0 / dt - 2 * alpha:g} "
            "(maximum principle keeping A in [0, 1])"
        )
    if pde == "advection_diffusion" and (beta * dt) ** 2 > 2 * alpha * dt:
        raise ValueError(
            f"option 'beta'={beta} with alpha={alpha}, dt={dt} violates the bound "
            f"(beta * dt)^2 <= 2 * alpha * dt, i.e. |beta| <= {math.sqrt(2 * alpha / dt):g} "
            "(von Neumann stability of forward-time central-space)"
        )


# The options each kernel takes from params.yaml (``model.attention_options``); its dropout comes
# from ``model.attention_dropout``. tests/test_config.py keeps these equal to the kernels'
# constructor arguments.
PDE_KERNEL_OPTIONS = (
    "pde",
    "steps",
    "dt",
    "alpha",
    "c",
    "beta",
    "fast",
    "chunk_size",
    "causal_form",
    "learnable",
)
WINDOW_OPTIONS = ("window", "n_global")
KERNEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "pde": PDE_KERNEL_OPTIONS,
    "pde_reference": tuple(o for o in PDE_KERNEL_OPTIONS if o != "fast"),
    "longformer": WINDOW_OPTIONS,
    "pde_longformer": PDE_KERNEL_OPTIONS + WINDOW_OPTIONS,
}
