"""The model's spec, torch-free: what params.yaml may say about a network, read by
pdelab.spec.config when it resolves a run and by the modules that build the network.

Kept apart from the torch modules of this package so that validating params.yaml (at workflow
parse time) never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# train.precision: fp32, or bf16 autocast for the forward passes (pdelab.training.precision)
PRECISIONS = ("fp32", "bf16")

# The backbone's insertion sites, in the order pdelab.models.transformer applies them.
SITES = (
    "after_embedding",
    "after_mlp",
    "layer_diffusion",
    "before_layernorm",
    "in_attention",
    "head_diffusion",
    "after_attention",
)
# The one site the encoder applies itself, outside its blocks: the only one a block other than
# the Transformer's (model.block) can have.
ENCODER_SITES = ("after_embedding",)

# Field metadata of a key added after runs were recorded: left out of a run's JSON while it
# holds its default, so every spec written before the key existed stays the same (no rerun).
OMIT_AT_DEFAULT = {"omit_at_default": True}


@dataclass(frozen=True)
class ModelSpec:
    dim: int = 128
    layers: int = 6
    heads: int = 8
    mlp_dim: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.1  # on attention probabilities (LRA sets it separately)
    norm: str = "post"
    pooling: str = "mean"
    # ViT's patch embedding: 0 embeds each token; p > 0 embeds each p x p patch of a square
    # image of pixel tokens with one linear map (image tasks only; T = side**2 -> (side/p)**2)
    patch: int = field(default=0, metadata=OMIT_AT_DEFAULT)
    attention: str = "sdpa"  # a kernel of pdelab.models.attention.ATTENTION_KERNELS
    # the kernel's own options, e.g. {pde: wave, steps: 4, causal_form: restricted}; a later
    # layer replaces the whole mapping (pdelab.spec.options.ATTENTION_OPTIONS lists them)
    attention_options: dict[str, Any] = field(default_factory=dict)
    # the released code's hidden-state smoothing after every layer, e.g. {pde: diffusion};
    # empty: none (pdelab.spec.options.SMOOTHING_OPTIONS)
    smoothing: dict[str, Any] = field(default_factory=dict)
    # the encoder block: "transformer" (attention + MLP, with the diffusion sites) or one a
    # paper registers (pdelab.models.transformer.ENCODER_BLOCKS), with its own options
    # (pdelab.spec.options.BLOCK_OPTIONS); a later layer replaces the whole mapping
    block: str = field(default="transformer", metadata=OMIT_AT_DEFAULT)
    block_options: dict[str, Any] = field(default_factory=dict, metadata=OMIT_AT_DEFAULT)


@dataclass(frozen=True)
class DiffusionSpec:
    """Where diffusion acts and how; no sites is the baseline. alpha: total, or one per stride."""

    sites: tuple[str, ...] = ()
    strides: tuple[int, ...] = (1,)
    alpha: float | tuple[float, ...] = 0.1
    learnable: bool = True
    layernorm: bool = True

    def alphas(self) -> tuple[float, ...]:
        """Initial coefficient per stride (a scalar alpha is split evenly)."""
        if isinstance(self.alpha, tuple):
            return self.alpha
        return tuple(self.alpha / len(self.strides) for _ in self.strides)
