"""The model's spec, torch-free: what params.yaml may say about a network, read by
pdelab.spec.config when it resolves a run and by the modules that build the network.

Kept apart from the torch modules of this package so that validating params.yaml (at workflow
parse time) never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field

from pdelab.spec.keys import CheckedInCode, Refusal

# train.precision: fp32, or bf16 autocast for the forward passes (pdelab.training.precision)
Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

# The backbone's insertion sites, in the order pdelab.models.transformer applies them.
Site = Literal[
    "after_embedding",
    "after_mlp",
    "layer_diffusion",
    "before_layernorm",
    "in_attention",
    "head_diffusion",
    "after_attention",
]
SITES: tuple[str, ...] = get_args(Site)
# The one site the encoder applies itself, outside its blocks: the only one a block other than
# the Transformer's (model.block) can have.
ENCODER_SITES = ("after_embedding",)

# Field metadata of a key added after runs were recorded: left out of a run's JSON while it
# holds its default, so every spec written before the key existed stays the same (no rerun).
OMIT_AT_DEFAULT = {"omit_at_default": True}

# pydantic's reading of a spec section (pdelab.spec.keys, pdelab.spec.schema): no other key
SECTION_CONFIG = ConfigDict(extra="forbid")

Rate = Annotated[float, Field(ge=0, lt=1), Refusal("a dropout rate in {range}; e.g. {default}")]


@dataclass(frozen=True)
class ModelSpec:
    __pydantic_config__ = SECTION_CONFIG

    dim: Annotated[int, Field(ge=1, description="width of each token's vector")] = 128
    layers: Annotated[int, Field(ge=1, description="encoder blocks")] = 6
    heads: Annotated[int, Field(ge=1, description="attention heads; they divide dim")] = 8
    mlp_dim: Annotated[int, Field(ge=1, description="hidden width of each block's MLP")] = 512
    dropout: Annotated[Rate, Field(description="dropout on each block's outputs")] = 0.1
    attention_dropout: Annotated[
        Rate, Field(description="dropout on attention probabilities (LRA sets it separately)")
    ] = 0.1
    norm: Annotated[
        Literal["post", "pre"], Field(description="layer norm after (post) or before (pre)")
    ] = "post"
    pooling: Annotated[
        Literal["mean", "cls"], Field(description="a sequence's summary: mean of tokens or CLS")
    ] = "mean"
    # ViT's patch embedding: 0 embeds each token; p > 0 embeds each p x p patch of a square
    # image of pixel tokens with one linear map (image tasks only; T = side**2 -> (side/p)**2)
    patch: Annotated[
        int,
        Field(ge=0, description="ViT patch side (image tasks); 0 embeds each pixel token"),
        Refusal("the patch side must be an integer {range} (0: no patches)"),
    ] = field(default=0, metadata=OMIT_AT_DEFAULT)
    attention: Annotated[
        str, Field(description="a kernel of pdelab.models.attention.ATTENTION_KERNELS")
    ] = "sdpa"
    # the kernel's own options, e.g. {pde: wave, steps: 4, causal_form: restricted}; a later
    # layer replaces the whole mapping (pdelab.spec.options.ATTENTION_OPTIONS lists them)
    attention_options: Annotated[
        dict[str, Any],
        Field(description="the kernel's options (pdelab.spec.options.ATTENTION_OPTIONS)"),
    ] = field(default_factory=dict)
    # the released code's hidden-state smoothing after every layer, e.g. {pde: diffusion};
    # empty: none (pdelab.spec.options.SMOOTHING_OPTIONS)
    smoothing: Annotated[
        dict[str, Any],
        Field(description="hidden-state smoothing after every layer; empty: none"),
    ] = field(default_factory=dict)
    # the encoder block: "transformer" (attention + MLP, with the diffusion sites) or one a
    # paper registers (pdelab.models.transformer.ENCODER_BLOCKS), with its own options
    # (pdelab.spec.options.BLOCK_OPTIONS); a later layer replaces the whole mapping
    block: Annotated[
        str, Field(description="the encoder block: transformer or one a paper registers")
    ] = field(default="transformer", metadata=OMIT_AT_DEFAULT)
    block_options: Annotated[
        dict[str, Any], Field(description="the block's options (pdelab.spec.options)")
    ] = field(default_factory=dict, metadata=OMIT_AT_DEFAULT)


@dataclass(frozen=True)
class DiffusionSpec:
    """Where diffusion acts and how; no sites is the baseline. alpha: total, or one per stride."""

    __pydantic_config__ = SECTION_CONFIG

    sites: Annotated[
        tuple[Site, ...], Field(description="where diffusion acts, each site once; none: baseline")
    ] = ()
    strides: Annotated[
        tuple[Annotated[int, Field(ge=1)], ...],
        Field(min_length=1, description="the token distances each diffusion term couples"),
        Refusal("strides must be integers {range}, at least one"),
    ] = (1,)
    # explicit diffusion is non-expansive only for a total coefficient under 1/2
    alpha: Annotated[
        Annotated[float, Field(gt=0, lt=0.5)]
        | Annotated[tuple[Annotated[float, Field(gt=0)], ...], Field(min_length=1)],
        Field(description="the coefficient: a total, or one per stride; their sum under 1/2"),
        CheckedInCode("pdelab.spec.config.check_diffusion: one per stride, their sum under 1/2"),
    ] = 0.1
    learnable: Annotated[bool, Field(description="the coefficients train with the model")] = True
    layernorm: Annotated[bool, Field(description="a layer norm after each diffusion step")] = True

    def alphas(self) -> tuple[float, ...]:
        """Initial coefficient per stride (a scalar alpha is split evenly)."""
        if isinstance(self.alpha, tuple):
            return self.alpha
        return tuple(self.alpha / len(self.strides) for _ in self.strides)
