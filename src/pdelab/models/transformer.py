"""A BERT-style (post-LN) Transformer encoder with named sites where PDE diffusion can act.

Post-LN block (norm="post"), with S the diffusion at each enabled site:

    h  = X + Attn(X)            in_attention: Attn(Q, K, S(V)); head_diffusion: S over heads
    h  = S(h)                   after_attention  (P7)
    X1 = LN1(S(h))              before_layernorm (P4) acts on every LayerNorm input
    g  = X1 + MLP(X1)
    g  = S(g)                   after_mlp        (P2)
    X2 = LN2(S(g))              before_layernorm
    X2 = S(X2)                  layer_diffusion  (P3)

after_embedding (P1) acts once on token + position embeddings. With norm="pre" the same
sites sit on the residual stream: h = X + Attn(LN1(X)), g = h + MLP(LN2(h)). The list of
sites is pdelab.spec.model.SITES; adding one is its name there plus one call line below.

Taps: ``Encoder.forward(..., taps={})`` fills the dict with the tensors the diagnostics read
(BLOCK_TAPS per layer as "blocks.{i}.{name}", and "embedding"), each taken *before* its own
site's diffusion, so measurements come from this forward and not from a copy of it. With
``taps=None`` (the default) nothing is recorded and the computation is unchanged.

Other blocks: ``model.block`` names one from ENCODER_BLOCKS in place of this Transformer block
(the encoder's embeddings, after_embedding, smoothing and final norm stay as they are).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.diffusion import Diffusion
from pdelab.models.smoothing import ReleasedSmoothing
from pdelab.spec.model import ENCODER_SITES, SITES, DiffusionSpec
from pdelab.spec.registry import Registry

# What Block.forward records into ``taps``, each before its own site's diffusion: the layer's
# input X, the tensor its attention reads (X post-norm, LN1(X) pre-norm), h = X + Attn, the
# MLP's residual sum g and the block's output X2 before layer_diffusion.
BLOCK_TAPS = ("attention_input", "attention_read", "after_attention", "mlp_output", "block_output")

# Encoder blocks other than the Transformer's, by name (``model.block``); a paper registers its
# own. One is built as ``cls(dim=, heads=, mlp_dim=, dropout=, attention_dropout=, norm=,
# **model.block_options)`` and called as ``block(x, mask, causal, taps, tokens=...)``, mapping
# (B, T, C) to (B, T, C); ``tokens`` are the token (or patch) embeddings before positions are
# added, for a block whose update reads the input itself and not only the hidden state.
ENCODER_BLOCKS: Registry[type[nn.Module]] = Registry("encoder block")


def make_diffusion(spec: DiffusionSpec, dim: int) -> Diffusion:
    return Diffusion(dim, spec.strides, spec.alphas(), spec.learnable, spec.layernorm)


class SelfAttention(nn.Module):
    """Multi-head self-attention owning its projections; the kernel comes from the registry."""

    def __init__(
        self,
        dim: int,
        heads: int,
        attention_dropout: float,
        kernel: str,
        value_diffusion: Diffusion | None = None,
        head_diffusion: Diffusion | None = None,
        kernel_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"model dim {dim} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.kernel = ATTENTION_KERNELS.get(kernel)(
            heads=heads, head_dim=self.head_dim, dropout=attention_dropout, **(kernel_options or {})
        )
        if hasattr(self.kernel, "make_projection"):  # a kernel that owns its q, k, v maps
            self.qkv = self.kernel.make_projection(dim)
        self.value_diffusion = value_diffusion
        self.head_diffusion = head_diffusion

    def forward(self, x: Tensor, mask: Tensor | None, causal: bool = False) -> Tensor:
        q, k, v = self.project(x)
        return self.attend(q, k, v, mask, causal)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, C) -> per-head queries, keys and values, each (B, H, T, Dh).

        Split from :meth:`attend` so the diagnostics can route with one input's queries and
        keys while mixing another's values (the frozen-routing commutator, Eq. 13).
        """
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool = False
    ) -> Tensor:
        """The kernel on per-head q, k, v, the value and head diffusion, the output projection.

        ``mask`` (B, Tk) marks the real keys; queries may be another sequence (Tq != Tk), as
        in an encoder-decoder's cross-attention.
        """
        b, _, tq, _ = q.shape
        tk = v.shape[2]
        if self.value_diffusion is not None:  # in_attention: Attn(Q, K, S(V)), per head
            flat = v.reshape(b * self.heads, tk, self.head_dim)
            flat_mask = None if mask is None else mask.repeat_interleave(self.heads, dim=0)
            v = self.value_diffusion(flat, flat_mask).view(b, self.heads, tk, self.head_dim)
        y = self.kernel(q, k, v, key_padding_mask=mask, causal=causal)  # (B, H, Tq, Dh)
        if self.head_diffusion is not None:  # head_diffusion: S along the head axis
            per_token = y.permute(0, 2, 1, 3).reshape(b * tq, self.heads, self.head_dim)
            y = self.head_diffusion(per_token).view(b, tq, self.heads, self.head_dim)
        else:
            y = y.transpose(1, 2)  # (B, Tq, H, Dh)
        return self.out(y.reshape(b, tq, self.heads * self.head_dim))


class Block(nn.Module):
    def __init__(
        self,
        dim: int,
        heads: int,
        mlp_dim: int,
        dropout: float,
        attention_dropout: float,
        norm: str,
        kernel: str,
        diffusion: DiffusionSpec,
        kernel_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        sites = set(diffusion.sites)
        head_dim = dim // heads
        self.attn = SelfAttention(
            dim,
            heads,
            attention_dropout,
            kernel,
            value_diffusion=make_diffusion(diffusion, head_dim)
            if "in_attention" in sites
            else None,
            head_diffusion=make_diffusion(diffusion, head_dim)
            if "head_diffusion" in sites
            else None,
            kernel_options=kernel_options,
        )
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim)
        )
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"
        block_sites = ["after_attention", "after_mlp", "layer_diffusion"]
        self.diffusion = nn.ModuleDict(
            {s: make_diffusion(diffusion, dim) for s in block_sites if s in sites}
        )
        if "before_layernorm" in sites:
            self.diffusion["before_ln1"] = make_diffusion(diffusion, dim)
            self.diffusion["before_ln2"] = make_diffusion(diffusion, dim)

    def site(self, name: str, x: Tensor, mask: Tensor | None) -> Tensor:
        """Diffuse x at the named site if the variant enables it, else pass it through."""
        return self.diffusion[name](x, mask) if name in self.diffusion else x

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        causal: bool = False,
        taps: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """One layer; ``taps``, if given, receives the BLOCK_TAPS of this call."""
        if self.pre_norm:
            read = self.ln1(self.site("before_ln1", x, mask))
            h = x + self.drop(self.attn(read, mask, causal))
            h_site = self.site("after_attention", h, mask)
            g = h_site + self.drop(self.mlp(self.ln2(self.site("before_ln2", h_site, mask))))
            x2 = self.site("after_mlp", g, mask)
        else:
            read = x
            h = x + self.drop(self.attn(x, mask, causal))  # (B, T, C)
            x1 = self.ln1(self.site("before_ln1", self.site("after_attention", h, mask), mask))
            g = x1 + self.drop(self.mlp(x1))
            x2 = self.ln2(self.site("before_ln2", self.site("after_mlp", g, mask), mask))
        if taps is not None:
            taps["attention_input"], taps["attention_read"] = x, read
            taps["after_attention"], taps["mlp_output"], taps["block_output"] = h, g, x2
        return self.site("layer_diffusion", x2, mask)


class PatchEmbedding(nn.Module):
    """ViT's patch embedding over pixel tokens: (B, [1 +] side**2) ids -> (B, [1 +] n**2, C),
    n = side / patch, each patch's intensities (token - 2, scaled to [0, 1]) mapped linearly.

    Why: attention over single pixels costs T**2 with T = 1,024 for a 32x32 image; ViT's 2x2
    patches give the 256 tokens (257 with CLS) the papers' CIFAR-10 models see. A leading
    special token (CLS, id 1) is kept as a token of its own with a learned embedding; it is
    found by the length, since 1 + side**2 is never a square.
    """

    RESERVED = 2  # pixel token = intensity + 2 (0: padding, 1: CLS), as pdelab.data.store

    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.patch = patch
        self.pixels = nn.Linear(patch * patch, dim)
        self.specials = nn.Embedding(self.RESERVED, dim)

    def forward(self, ids: Tensor) -> Tensor:
        b, t = ids.shape
        side = math.isqrt(t)
        lead = t - side * side
        p = self.patch
        if lead > 1 or side % p:
            raise ValueError(
                f"patch {p}: expects a square image of side divisible by {p} (and at most one "
                f"leading CLS token), got {t} tokens"
            )
        image = (ids[:, lead:] - self.RESERVED).clamp_min(0).to(self.pixels.weight.dtype) / 255
        n = side // p
        patches = image.reshape(b, n, p, n, p).transpose(2, 3).reshape(b, n * n, p * p)
        return torch.cat([self.specials(ids[:, :lead]), self.pixels(patches)], dim=1)

    def token_mask(self, mask: Tensor) -> Tensor:
        """The (B, T) pixel mask -> the mask of the embedded tokens: a patch is real if any
        of its pixels is."""
        b, t = mask.shape
        side = math.isqrt(t)
        lead, n, p = t - side * side, side // self.patch, self.patch
        pixels = mask[:, lead:].reshape(b, n, p, n, p).transpose(2, 3).reshape(b, n * n, p * p)
        return torch.cat([mask[:, :lead], pixels.any(-1)], dim=1)


class Encoder(nn.Module):
    """Token (or patch) + learned position embeddings, then a stack of blocks:
    (B, T) ids -> (B, T, C), T counted in patches when ``patch`` > 0.

    ``unpadded``: every sequence fills the whole length by the task's format (square images
    of pixel tokens), decided when the model is built (pdelab.models.factory.encoder_options).
    The mask is then not passed on, so attention runs unmasked (SDPA's flash kernel on a GPU)
    and the diffusion layers skip their edge weights; whether a batch is padded is never read
    from its values, which would be a host sync in every step. A mask given to such an encoder
    is checked to be all real on the device (``torch._assert_async``: no sync on a GPU).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        dim: int,
        layers: int,
        heads: int,
        mlp_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        norm: str = "post",
        attention: str = "sdpa",
        diffusion: DiffusionSpec | None = None,
        attention_options: dict[str, Any] | None = None,
        smoothing: dict[str, Any] | None = None,
        patch: int = 0,
        block: str = "transformer",
        block_options: dict[str, Any] | None = None,
        unpadded: bool = False,
    ) -> None:
        super().__init__()
        self.unpadded = unpadded
        diffusion = diffusion or DiffusionSpec()
        unknown = set(diffusion.sites) - set(SITES)
        if unknown:
            raise ValueError(f"unknown diffusion sites {sorted(unknown)}; known: {list(SITES)}")
        inside = sorted(set(diffusion.sites) - set(ENCODER_SITES))
        if block != "transformer" and inside:
            raise ValueError(f"diffusion sites {inside} need the transformer block, not {block!r}")
        if norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', not {norm!r}")
        self.tokens = (
            PatchEmbedding(patch, dim) if patch else nn.Embedding(vocab_size, dim, padding_idx=0)
        )
        self.positions = nn.Embedding(max_len, dim)
        self.embed_diffusion = (
            make_diffusion(diffusion, dim) if "after_embedding" in diffusion.sites else None
        )
        self.drop = nn.Dropout(dropout)
        if block == "transformer":
            self.blocks = nn.ModuleList(
                Block(
                    dim,
                    heads,
                    mlp_dim,
                    dropout,
                    attention_dropout,
                    norm,
                    attention,
                    diffusion,
                    attention_options,
                )
                for _ in range(layers)
            )
        else:
            shape = dict(dim=dim, heads=heads, mlp_dim=mlp_dim, dropout=dropout)
            shape |= dict(attention_dropout=attention_dropout, norm=norm)
            make = ENCODER_BLOCKS.get(block)
            self.blocks = nn.ModuleList(
                make(**shape, **(block_options or {})) for _ in range(layers)
            )
        self.reads_tokens = block != "transformer"  # registered blocks get the embeddings
        # The released code's mechanism: hidden states smoothed after every layer.
        self.smoothing = (
            nn.ModuleList(ReleasedSmoothing(**smoothing) for _ in range(layers))
            if smoothing
            else None
        )
        self.final_norm = nn.LayerNorm(dim) if norm == "pre" else nn.Identity()
        self.checkpointed = False  # recompute the blocks in the backward: checkpoint_blocks

    def forward(
        self,
        ids: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        taps: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """``taps``, if given, receives "embedding" (before after_embedding's diffusion) and
        each layer's BLOCK_TAPS as "blocks.{i}.{name}"."""
        tokens = self.tokens(ids)
        mask = self.token_mask(self.read_mask(mask))
        t = tokens.shape[1]
        if t > self.positions.num_embeddings:
            raise ValueError(f"sequence length {t} exceeds max_len {self.positions.num_embeddings}")
        x = tokens + self.positions(torch.arange(t, device=ids.device))
        if taps is not None:
            taps["embedding"] = x
        if self.embed_diffusion is not None:
            x = self.embed_diffusion(x, mask)
        x = self.drop(x)
        inputs = {"tokens": tokens} if self.reads_tokens else {}
        for i, block in enumerate(self.blocks):
            if taps is None:
                x = run_block(self, block, x, mask, causal, **inputs)
            else:
                found: dict[str, Tensor] = {}
                x = block(x, mask, causal, found, **inputs)
                taps.update((f"blocks.{i}.{name}", z) for name, z in found.items())
            if self.smoothing is not None:
                x = self.smoothing[i](x, mask)
        return self.final_norm(x)

    def read_mask(self, mask: Tensor | None) -> Tensor | None:
        """The mask as the layers read it: None for an ``unpadded`` encoder (after checking,
        on the device, that it marks every token real)."""
        if not self.unpadded or mask is None:
            return mask
        torch._assert_async(mask.all(), "an unpadded encoder was given a padded batch")
        return None

    def token_mask(self, mask: Tensor | None) -> Tensor | None:
        """The mask of the tokens the blocks see (of the patches, with ``patch`` > 0)."""
        if mask is None or not isinstance(self.tokens, PatchEmbedding):
            return mask
        return self.tokens.token_mask(mask)


# (forward, recompute) contexts of a checkpointed block beyond those torch restores itself:
# the cost plan's emulated CUDA autocast on fake CPU tensors (pdelab.plan.cuda_kernels)
RECOMPUTE_CONTEXT: ContextVar[Callable[[], tuple[Any, Any]] | None] = ContextVar(
    "RECOMPUTE_CONTEXT", default=None
)


def run_block(owner: nn.Module, block: nn.Module, *args: Any, **kwargs: Any) -> Tensor:
    """``block(*args, **kwargs)``; in training with ``owner.checkpointed``, through
    torch.utils.checkpoint: its activations are recomputed in the backward pass instead of
    kept (the RNG state preserved, so dropout draws the same masks again)."""
    if getattr(owner, "checkpointed", False) and owner.training and torch.is_grad_enabled():
        # the cost plan's count runs eager, never compiled; Dynamo cannot trace ContextVar.get
        context = None if torch.compiler.is_compiling() else RECOMPUTE_CONTEXT.get()
        options: dict[str, Any] = {"context_fn": context} if context else {}
        return checkpoint(
            block, *args, use_reentrant=False, preserve_rng_state=True, **options, **kwargs
        )
    return block(*args, **kwargs)


def checkpoint_blocks(model: nn.Module, on: bool = True) -> None:
    """Switch activation checkpointing of every encoder and decoder block of ``model``: what
    lets a step fit a card where one example's activations do not (pdelab.plan.card_fit)."""
    for module in model.modules():
        if hasattr(module, "checkpointed"):
            module.checkpointed = on


def pool(x: Tensor, mask: Tensor | None, how: str) -> Tensor:
    """(B, T, C) -> (B, C): the first token ("cls") or the mean over real tokens ("mean")."""
    if how == "cls":
        return x[:, 0]
    if mask is None:
        return x.mean(dim=1)
    weights = mask.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


class Classifier(nn.Module):
    """Encoder + pooling + a two-layer MLP head, as in LRA's classification models."""

    CLS_ID = 1  # reserved by every tokenizer in pdelab.data: 0 = padding, 1 = CLS

    def __init__(self, num_classes: int, pooling: str = "mean", **encoder_kwargs) -> None:
        super().__init__()
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
        self.pooling = pooling
        self.encoder = Encoder(**encoder_kwargs)
        dim = encoder_kwargs["dim"]
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, num_classes))

    def encoder_inputs(self, ids: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """What the encoder reads: the CLS token prepended under cls pooling."""
        if self.pooling == "cls":
            cls = torch.full_like(ids[:, :1], self.CLS_ID)
            ids = torch.cat([cls, ids], dim=1)
            if mask is not None:
                mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)
        return ids, mask

    def embed(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """(B, T) ids -> (B, C) pooled representation."""
        ids, mask = self.encoder_inputs(ids, self.encoder.read_mask(mask))
        return pool(self.encoder(ids, mask), self.encoder.token_mask(mask), self.pooling)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.head(self.embed(ids, mask))


class PairClassifier(nn.Module):
    """LRA's two-tower retrieval model: one shared encoder pools each document to u and v,
    and an MLP classifies [u, v, u * v, u - v].

    Both towers run as one encoder call on the 2B documents (:func:`stacked_pair`, the shorter
    side padded to the longer): one launch of each kernel over twice the batch instead of two
    calls of half the work each, and one compiled graph. Every real token's result is the
    same as in two separate calls (masked attention, diffusion edges cut at padding, pooling
    over real tokens): :meth:`forward_reference` runs them apart, and a test holds the two
    equal. The padding added costs little: a batch's longest document on either side is
    near the task's cap, and length buckets (pdelab.training.shape_buckets) pad both to it.
    """

    def __init__(self, num_classes: int, pooling: str = "mean", **encoder_kwargs) -> None:
        super().__init__()
        self.tower = Classifier(num_classes, pooling=pooling, **encoder_kwargs)
        # the tower only embeds: its own head would be dead weight, never given a gradient.
        # Dropped after it is drawn, so a seed draws the same weights as before.
        self.tower.head = nn.Identity()
        dim = encoder_kwargs["dim"]
        self.head = nn.Sequential(nn.Linear(4 * dim, dim), nn.GELU(), nn.Linear(dim, num_classes))

    def forward(self, ids: Tensor, mask: Tensor, ids2: Tensor, mask2: Tensor) -> Tensor:
        both, both_mask = stacked_pair(ids, mask, ids2, mask2)
        u, v = self.tower.embed(both, both_mask).split(ids.shape[0])  # (B, C) each
        return self.classify(u, v)

    def forward_reference(self, ids: Tensor, mask: Tensor, ids2: Tensor, mask2: Tensor) -> Tensor:
        """The two towers as two encoder calls: what :meth:`forward` must equal."""
        return self.classify(self.tower.embed(ids, mask), self.tower.embed(ids2, mask2))

    def classify(self, u: Tensor, v: Tensor) -> Tensor:
        """The head over the two documents' (B, C) representations."""
        return self.head(torch.cat([u, v, u * v, u - v], dim=-1))


def stacked_pair(
    ids: Tensor, mask: Tensor | None, ids2: Tensor, mask2: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """The (B, T1) and (B, T2) documents of a pair batch as one (2B, max(T1, T2)) batch, the
    shorter side padded with id 0 and mask False (a side without a mask is all real)."""
    width = max(ids.shape[1], ids2.shape[1])
    if mask is None and mask2 is None and ids.shape[1] == ids2.shape[1]:
        return torch.cat([ids, ids2]), None
    sides = [(ids, mask), (ids2, mask2)]
    padded = [F.pad(x, (0, width - x.shape[1]), value=0) for x, _ in sides]
    masks = [torch.ones_like(x, dtype=torch.bool) if m is None else m for x, m in sides]
    masks = [F.pad(m, (0, width - m.shape[1]), value=False) for m in masks]
    return torch.cat(padded), torch.cat(masks)


class LanguageModel(nn.Module):
    """A causal language model: the encoder with causal attention and a linear output layer.

    ``forward(ids, mask)`` gives next-token logits (B, T, V); output t may read ids[:, :t+1]
    only, provided every mechanism inside is causal (pdelab.training.causality probes that).
    """

    def __init__(self, **encoder_kwargs) -> None:
        super().__init__()
        self.encoder = Encoder(**encoder_kwargs)
        # Not tied to the N(0, 1) token embeddings: their scale would start the logits at a
        # standard deviation of sqrt(dim) and the loss far above log(vocab).
        self.head = nn.Linear(encoder_kwargs["dim"], encoder_kwargs["vocab_size"])

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.head(self.encoder(ids, mask, causal=True))


def diffusion_modules(model: nn.Module) -> list[tuple[str, Diffusion]]:
    """Every diffusion layer in a model with its qualified name (for tests and diagnostics)."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, Diffusion)]
