"""Options of the LDN block (``model.block: ldn``, ``model.block_options``), checked torch-free.

The package registers :func:`check_options` with pdelab.spec.options, so pdelab.spec.config rejects
a bad option when params.yaml is resolved, before any job starts; the block calls the same
check when it is built. Every default is stated here once (README.md explains each choice).
This module must not import torch.
"""

from __future__ import annotations

import math
from typing import Any

BLOCK = "ldn"

DIRECTIONS = ("two_sided", "forward")  # phi: a learnable gate per direction, or s <= t only
PSI_FORMS = ("bilinear", "mlp")  # psi: softplus-free score q_t.k_s / sqrt(r), or a pair MLP
SOFTPLUS = ("content", "product")  # k = phi g softplus(psi), or softplus(phi g psi) (Sec. 3.3)
PATHS = ("banded", "reference")  # blocks of the band of g, or every T^2 pair materialised

# Each option and its default. The K options act only with diffusion: true, the D options only
# with attention: true, the shared ones only when either is on.
K_OPTIONS = {"dt": 0.1, "direction": "two_sided", "sigma": 4.0}
D_OPTIONS = {"dt_att": 0.1, "direction_att": "two_sided", "sigma_att": 16.0}
SHARED_OPTIONS: dict[str, Any] = {
    "learn_dt": True,
    "step_bound": True,
    "sigma_max": 64.0,
    "psi": "bilinear",
    "rank": None,  # None: the model dimension
    "softplus": "content",
    "path": "banded",
}
TERMS = {"diffusion": True, "attention": True, "local": True}  # K, D and F
DEFAULTS: dict[str, Any] = {**TERMS, **K_OPTIONS, **D_OPTIONS, **SHARED_OPTIONS}
OPTION_NAMES = tuple(DEFAULTS)


def _flag(options: dict[str, Any], key: str) -> bool:
    value = options.get(key, DEFAULTS[key])
    if not isinstance(value, bool):
        raise ValueError(f"option {key!r}={value!r} must be true or false")
    return value


def _positive(options: dict[str, Any], key: str) -> float:
    value = options.get(key, DEFAULTS[key])
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"option {key!r}={value!r} must be a number > 0")
    return float(value)


def _choice(options: dict[str, Any], key: str, valid: tuple[str, ...]) -> str:
    value = options.get(key, DEFAULTS[key])
    if value not in valid:
        raise ValueError(f"option {key!r}={value!r} must be one of {', '.join(valid)}")
    return value


def check_options(**options: Any) -> None:
    """Reject what the block cannot honour, naming the option.

    At least one of the three terms is on (else the layer is the identity); an option of a term
    that is off is refused rather than ignored; steps and widths are positive, and each initial
    width lies below sigma_max, the cap of the learnable width (sigma = sigma_max sigmoid(theta)).
    """
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; valid: {', '.join(OPTION_NAMES)}")
    diffusion, attention, local = (_flag(options, key) for key in TERMS)
    if not (diffusion or attention or local):
        raise ValueError(
            "options 'diffusion', 'attention' and 'local' are all false: the layer would be "
            "the identity"
        )
    for on, own, term in ((diffusion, K_OPTIONS, "diffusion"), (attention, D_OPTIONS, "attention")):
        given = [key for key in own if key in options]
        if not on and given:
            raise ValueError(f"option {given[0]!r} has no effect with {term}: false")
    if not (diffusion or attention):
        given = [key for key in SHARED_OPTIONS if key in options]
        if given:
            raise ValueError(
                f"option {given[0]!r} has no effect with diffusion: false and attention: false"
            )
    _flag(options, "learn_dt")
    _flag(options, "step_bound")
    _positive(options, "dt")
    _positive(options, "dt_att")
    _choice(options, "direction", DIRECTIONS)
    _choice(options, "direction_att", DIRECTIONS)
    _choice(options, "psi", PSI_FORMS)
    _choice(options, "softplus", SOFTPLUS)
    _choice(options, "path", PATHS)
    cap = _positive(options, "sigma_max")
    for key in ("sigma", "sigma_att"):
        if _positive(options, key) >= cap:
            raise ValueError(
                f"option {key!r}={options.get(key, DEFAULTS[key])!r} must be below sigma_max = "
                f"{cap:g}, the cap of the learnable width"
            )
    rank = options.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ValueError(f"option 'rank'={rank!r} must be a positive integer (or null: dim)")


def band_halfwidth(sigma: float, eps: float) -> int:
    """The largest |t - s| at which g = exp(-(t - s)^2 / (2 sigma^2)) can still be >= eps: g is
    set to 0 below eps (the float's resolution), so every kernel is zero outside this band.
    One more than the formula gives, so rounding never cuts an entry the test g >= eps keeps."""
    return math.floor(sigma * math.sqrt(2 * math.log(1 / eps))) + 1
