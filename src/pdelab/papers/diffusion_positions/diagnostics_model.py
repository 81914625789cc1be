"""Roughness and commutators of one model on one batch, read from the model's own forward.

Every activation comes from the real forward through its ``taps`` (pdelab.models.transformer),
so a new site or kernel needs no change here. Roughness points, each taken *before* its own
site's diffusion (the Z_j of Theorem 4.7): ``embedding`` (token + position embeddings; P1),
``attention_input`` X, ``after_attention`` h = X + Attn(X) (P7), ``mlp_output`` g (P2),
``block_output`` X2 (P3). ``site_active`` marks the points where the variant applies diffusion
(before_layernorm: the LayerNorm inputs; in_attention: X).

Commutators, per layer, of the layer's attention on the tensor it reads (X post-norm, LN1(X)
pre-norm). ``_rel`` columns divide by ||A(X)||_F per example. S is the variant's own diffusion
where it has one near the layer (``alpha_source`` names the module: the block's sites,
post-attention first, then in-attention / head diffusion, then the embedding's), else alpha =
0.1, stride 1 (``reference``); ``_ref`` columns use the reference S for every variant, so
variants compare at one operator (the commutator scales with alpha). The whole model runs as a
float64 copy.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from pdelab.models.transformer import Classifier, Encoder, PairClassifier
from pdelab.papers.diffusion_positions.diagnostics_measures import (
    ROUGHNESS,
    TINY,
    Operator,
    commutators,
    reference_operator,
    roughness,
)
from pdelab.training.precision import full_precision

POINTS = ("embedding", "attention_input", "after_attention", "mlp_output", "block_output")
BLOCK_POINTS = POINTS[1:]
# A block's diffusion modules in the order the layer's own S is picked from: the post-attention
# site first, since S o A there is exactly the composition the commutator compares to A o S.
BLOCK_SITES = ("after_attention", "layer_diffusion", "after_mlp", "before_ln1", "before_ln2")


def layer_operator(encoder: Encoder, layer: int) -> Operator:
    """The diffusion the variant applies in or before this layer, else the reference S.

    head_diffusion's coefficients act along heads in the model; here they act along tokens.
    """
    block = encoder.blocks[layer]
    found = [
        (f"blocks.{layer}.{s}", block.diffusion[s]) for s in BLOCK_SITES if s in block.diffusion
    ]
    for name in ("value_diffusion", "head_diffusion"):
        if (module := getattr(block.attn, name)) is not None:
            found.append((f"blocks.{layer}.attn.{name}", module))
    if encoder.embed_diffusion is not None:
        found.append(("embed_diffusion", encoder.embed_diffusion))
    if not found:
        return reference_operator()
    name, module = found[0]
    alphas = tuple(float(a) for a in module.alphas().detach().double())
    return Operator(alphas, tuple(module.strides), name)


def trace(
    encoder: Encoder, ids: Tensor, mask: Tensor | None, causal: bool = False
) -> tuple[Tensor, list[tuple[int, str, Tensor]], list[Tensor]]:
    """The encoder's own forward with taps: (output, [(layer, point, Z)], each layer's
    attention input). The embedding point belongs to layer 0."""
    taps: dict[str, Tensor] = {}
    out = encoder(ids, mask, causal, taps=taps)
    layers = range(len(encoder.blocks))
    points = [(0, "embedding", taps["embedding"])]
    points += [(j, p, taps[f"blocks.{j}.{p}"]) for j in layers for p in BLOCK_POINTS]
    return out, points, [taps[f"blocks.{j}.attention_read"] for j in layers]


def encoder_inputs(
    model: nn.Module, ids: Tensor, mask: Tensor | None
) -> tuple[Encoder, Tensor, Tensor | None]:
    """The encoder and its input as the model builds it: a PairClassifier's (shared) tower on
    the first documents, with the CLS token prepended under cls pooling (Classifier.embed)."""
    if isinstance(model, Encoder):
        return model, ids, mask
    tower = model.tower if isinstance(model, PairClassifier) else model
    if not isinstance(tower, Classifier):
        raise TypeError(f"expected an Encoder, Classifier or PairClassifier, got {type(model)}")
    return tower.encoder, *tower.encoder_inputs(ids, mask)


def active_points(encoder: Encoder, layer: int) -> dict[str, bool]:
    """Which points of this layer the variant diffuses (before_layernorm: the LN inputs)."""
    block = encoder.blocks[layer]
    d, pre = block.diffusion, block.pre_norm
    return {
        "embedding": layer == 0 and encoder.embed_diffusion is not None,
        "attention_input": (pre and "before_ln1" in d) or block.attn.value_diffusion is not None,
        "after_attention": "after_attention" in d or ("before_ln2" if pre else "before_ln1") in d,
        "mlp_output": "after_mlp" in d or (not pre and "before_ln2" in d),
        "block_output": "layer_diffusion" in d,
    }


def _chunks(mask: Tensor | None, n: int, heads: int, budget: int) -> Iterator[slice]:
    """Example ranges whose (H, T, T) float64 attention scores fit the byte budget."""
    t = mask.shape[1] if mask is not None else 1
    size = max(1, budget // max(1, heads * t * t * 8))
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


@torch.no_grad()
@full_precision()  # the dtype copy is never autocast to bf16, nor its products to TF32
def diagnose_model(
    model: nn.Module,
    ids: Tensor,
    mask: Tensor | None,
    *,
    dtype: torch.dtype = torch.float64,
    budget_bytes: int = 2**28,
) -> pd.DataFrame:
    """Rows (layer, point): roughness averaged over the batch's examples, and that layer's
    commutators (repeated on each of its rows). Runs a ``dtype`` copy of the model in eval mode
    in chunks of examples, each cut to its own longest sequence (padding changes nothing)."""
    model = copy.deepcopy(model).to(dtype).eval()
    encoder, ids, mask = encoder_inputs(model, ids, mask)
    layers = len(encoder.blocks)
    own = [layer_operator(encoder, j) for j in range(layers)]
    ref = reference_operator()
    rough: dict[tuple[int, str], dict[str, list[Tensor]]] = defaultdict(lambda: defaultdict(list))
    comm: dict[int, dict[str, list[Tensor]]] = defaultdict(lambda: defaultdict(list))
    heads = encoder.blocks[0].attn.heads if layers else 1
    for rows in _chunks(mask, len(ids), heads, budget_bytes):
        i, m = ids[rows], None if mask is None else mask[rows]
        if m is not None:
            t = int(m.sum(dim=1).max())
            i, m = i[:, :t], m[:, :t]
        _, points, attn_inputs = trace(encoder, i, m)
        for layer, point, z in points:
            for key, value in roughness(z, m).items():
                rough[(layer, point)][key].append(value)
        for j, (block, x) in enumerate(zip(encoder.blocks, attn_inputs, strict=True)):
            found = commutators(block.attn, x, m, own[j])
            at_ref = found
            if own[j].source != "reference":
                at_ref = commutators(block.attn, x, m, ref, tangent=False)
            found |= {f"{form}_ref": at_ref[form] for form in ("exact", "linear")}
            for key, value in found.items():
                comm[j][key].append(value)

    def mean(values: list[Tensor]) -> float:
        return float(np.nanmean(torch.cat(values).double().numpy()))

    rows_out = []
    for j in range(layers):
        c = {k: torch.cat(v) for k, v in comm[j].items()}
        norm = c.pop("attention_norm").clamp_min(TINY)
        stats: dict[str, float | str] = {}
        for key, value in c.items():
            stats[f"commutator_{key}"] = float(value.mean())
            stats[f"commutator_{key}_rel"] = float((value / norm).mean())
        stats |= {
            "attention_norm": float(norm.mean()),
            "alpha_used": own[j].alpha,
            "strides_used": ",".join(str(h) for h in own[j].strides),
            "alpha_source": own[j].source,
        }
        active = active_points(encoder, j)
        for point in POINTS if j == 0 else BLOCK_POINTS:
            depth = 0 if point == "embedding" else 1 + 4 * j + BLOCK_POINTS.index(point)
            r = rough[(j, point)]
            rows_out.append(
                {
                    "layer": j,
                    "point": point,
                    "depth": depth,
                    "site_active": active[point],
                    **{k: mean(r[k]) for k in ROUGHNESS},
                    **stats,
                    "n_examples": len(ids),
                }
            )
    return pd.DataFrame(rows_out)
