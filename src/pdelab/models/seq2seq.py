"""An encoder-decoder Transformer (Vaswani et al. 2017's base layout) for translation.

The encoder is the backbone's :class:`~pdelab.models.transformer.Encoder` over the source. A
decoder block is, post-LN (norm="post", as the original) or pre-LN (norm="pre"):

    h = LN1(x + SelfAttn(x))          causal, keys = real target tokens
    c = LN2(h + CrossAttn(h, M))      queries from the target, keys/values from the encoder
                                      output M, keys = real source tokens
    y = LN3(c + MLP(c))

(pre-LN: x + SelfAttn(LN1 x), ..., and a final LayerNorm.) All three attentions take their
kernel from the registry with the run's ``model.attention`` and options, so any kernel runs
everywhere; cross-attention has Tq != Tk, which a kernel must support (``cross_attention``,
see pdelab.models.attention). The MLP is the encoder's (GELU).

The output layer is a separate linear map, not tied to the target embedding: the embeddings
start at N(0, 1), and tied logits would start with a standard deviation of sqrt(dim) (the
language model's reason too). Source and target vocabularies are separate, as in the data.

Decoding (:func:`greedy`) runs the whole decoder on the prefix at every step, without a cache
of keys and values: a kernel that transforms the keys as a sequence (a PDE along the key axis)
cannot be cached, and at sentence lengths of tens of tokens the recomputation is cheap. So the
logits a decoded token was chosen from are exactly the teacher-forced logits of that prefix.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.models.transformer import Encoder, SelfAttention, run_block

PAD_ID = 0  # padding of both vocabularies, as every prepared task (pdelab.data.store)
DECODE_MARGIN = 10  # greedy decoding stops after (source length + this) tokens


class CrossAttention(SelfAttention):
    """Queries from one sequence, keys and values from another (the encoder's output).

    The projection is the attention's own ``qkv`` map, applied to each side, so a kernel that
    constrains its projections constrains them here too: q = W_Q x, (k, v) = (W_K m, W_V m).
    A kernel whose class or instance says ``cross_attention = False`` is refused.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        attention_dropout: float,
        kernel: str,
        kernel_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(dim, heads, attention_dropout, kernel, kernel_options=kernel_options)
        if not getattr(self.kernel, "cross_attention", True):
            raise ValueError(
                f"attention kernel {kernel!r} (options {kernel_options or {}}) is defined on one "
                "sequence only (cross_attention = False); an encoder-decoder's cross-attention "
                "needs queries and keys from different sentences"
            )

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        """(B, Tq, C) queries, (B, Tk, C) memory -> (B, Tq, C); ``memory_mask`` (B, Tk)."""
        q, k, v = self.project_pair(x, memory)
        return self.attend(q, k, v, memory_mask)

    def project_pair(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-head q from ``x`` and k, v from ``memory``, each (B, H, T, Dh). With a plain
        linear projection only the needed rows of its weight are applied; any other
        projection module goes through :meth:`project_pair_reference`."""
        if not isinstance(self.qkv, nn.Linear):
            return self.project_pair_reference(x, memory)
        c = self.heads * self.head_dim
        w, b = self.qkv.weight, self.qkv.bias
        q = F.linear(x, w[:c], None if b is None else b[:c])
        kv = F.linear(memory, w[c:], None if b is None else b[c:])
        return self.heads_of(q, 1)[0], *self.heads_of(kv, 2)

    def project_pair_reference(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The whole [q | k | v] projection of both sides, q taken from ``x``'s and k, v from
        ``memory``'s: what the fast path must equal, and the path of any projection module."""
        q = self.project(x)[0]
        _, k, v = self.project(memory)
        return q, k, v

    def heads_of(self, y: Tensor, parts: int) -> tuple[Tensor, ...]:
        """(B, T, parts * C) -> ``parts`` tensors (B, H, T, Dh)."""
        b, t, _ = y.shape
        split = y.view(b, t, parts, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return tuple(split.unbind(0))


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, MLP; post- or pre-LN."""

    def __init__(
        self,
        dim: int,
        heads: int,
        mlp_dim: int,
        dropout: float,
        attention_dropout: float,
        norm: str,
        kernel: str,
        kernel_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.attn = SelfAttention(
            dim, heads, attention_dropout, kernel, kernel_options=kernel_options
        )
        self.cross = CrossAttention(
            dim, heads, attention_dropout, kernel, kernel_options=kernel_options
        )
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim)
        )
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"

    def forward(
        self, x: Tensor, mask: Tensor | None, memory: Tensor, memory_mask: Tensor | None
    ) -> Tensor:
        """(B, T, C) target states -> (B, T, C); ``mask`` (B, T) and ``memory_mask`` (B, S)
        mark the real target and source tokens."""
        if self.pre_norm:
            x = x + self.drop(self.attn(self.ln1(x), mask, causal=True))
            x = x + self.drop(self.cross(self.ln2(x), memory, memory_mask))
            return x + self.drop(self.mlp(self.ln3(x)))
        x = self.ln1(x + self.drop(self.attn(x, mask, causal=True)))
        x = self.ln2(x + self.drop(self.cross(x, memory, memory_mask)))
        return self.ln3(x + self.drop(self.mlp(x)))


class Decoder(nn.Module):
    """Target token + learned position embeddings, then decoder blocks: (B, T) -> (B, T, C)."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        dim: int,
        layers: int,
        heads: int,
        mlp_dim: int,
        dropout: float,
        attention_dropout: float,
        norm: str,
        attention: str,
        attention_options: dict[str, Any] | None,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
        self.positions = nn.Embedding(max_len, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(
                dim, heads, mlp_dim, dropout, attention_dropout, norm, attention, attention_options
            )
            for _ in range(layers)
        )
        self.final_norm = nn.LayerNorm(dim) if norm == "pre" else nn.Identity()
        self.checkpointed = False  # recompute the blocks in the backward: checkpoint_blocks

    def forward(self, ids: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        t = ids.shape[1]
        if t > self.positions.num_embeddings:
            raise ValueError(f"target length {t} exceeds max_len {self.positions.num_embeddings}")
        x = self.drop(self.tokens(ids) + self.positions(torch.arange(t, device=ids.device)))
        mask = ids != PAD_ID
        for block in self.blocks:
            x = run_block(self, block, x, mask, memory, memory_mask)
        return self.final_norm(x)


class Seq2Seq(nn.Module):
    """Encoder-decoder: ``forward(src, src_mask, tgt)`` gives teacher-forced next-token logits
    (B, T, V_tgt), position t read from tgt[:, :t+1] and the whole (real) source.

    ``layers`` encoder and as many decoder blocks; ``src_max_len`` / ``tgt_max_len`` size the
    position tables (the decoder's must hold the longest decoded prefix). ``bos_id`` starts
    decoding, ``eos_id`` ends it; padding is id 0 on both sides.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        src_max_len: int,
        tgt_max_len: int,
        bos_id: int,
        eos_id: int,
        dim: int,
        layers: int,
        heads: int,
        mlp_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        norm: str = "post",
        attention: str = "sdpa",
        attention_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.bos_id, self.eos_id = bos_id, eos_id
        self.encoder = Encoder(
            vocab_size=src_vocab_size,
            max_len=src_max_len,
            dim=dim,
            layers=layers,
            heads=heads,
            mlp_dim=mlp_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            norm=norm,
            attention=attention,
            attention_options=attention_options,
        )
        self.decoder = Decoder(
            tgt_vocab_size,
            tgt_max_len,
            dim,
            layers,
            heads,
            mlp_dim,
            dropout,
            attention_dropout,
            norm,
            attention,
            attention_options,
        )
        self.head = nn.Linear(dim, tgt_vocab_size)

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """(B, S) source ids -> (B, S, C) memory."""
        return self.encoder(src, src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None) -> Tensor:
        """(B, T) target prefix ids and the memory -> (B, T, V) next-token logits."""
        return self.head(self.decoder(tgt, memory, src_mask))

    def forward(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        return self.head(self.decoder_states(src, src_mask, tgt))

    def decoder_states(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        """(B, T, C): the decoder's output, before the head (the training loss applies the
        head at real target positions only, see pdelab.training.translation.translation_loss)."""
        return self.decoder(tgt, self.encode(src, src_mask), src_mask)

    def max_new_tokens(self, src_mask: Tensor, margin: int = DECODE_MARGIN) -> Tensor:
        """(B,) decoding limit per sentence: its source length (with <bos>, <eos>) + margin,
        within the decoder's position table (one position holds <bos>)."""
        limit = src_mask.sum(dim=1) + margin
        return limit.clamp(max=self.decoder.positions.num_embeddings - 1)


@torch.no_grad()
def greedy(model: Seq2Seq, src: Tensor, src_mask: Tensor, margin: int = DECODE_MARGIN) -> Tensor:
    """Batched greedy decoding: (B, S) padded source -> (B, L) target ids without <bos>, each
    row its argmax tokens up to and including <eos> (or until its limit, see
    :meth:`Seq2Seq.max_new_tokens`), padded with 0 after; stops when every row has ended.

    A finished row is fed padding, which no real position attends to (keys are masked, the
    self-attention is causal), so every row decodes as it would alone (:func:`greedy_reference`).
    """
    memory = model.encode(src, src_mask)
    limit = model.max_new_tokens(src_mask, margin)
    ys = torch.full((src.shape[0], 1), model.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for step in range(int(limit.max())):
        logits = model.decode(ys, memory, src_mask)[:, -1]  # (B, V)
        token = torch.where(done, PAD_ID, logits.argmax(-1))
        ys = torch.cat([ys, token[:, None]], dim=1)
        done |= (token == model.eos_id) | (step + 1 >= limit)
        if bool(done.all()):
            break
    return ys[:, 1:]


@torch.no_grad()
def greedy_reference(
    model: Seq2Seq, src: Tensor, src_mask: Tensor, margin: int = DECODE_MARGIN
) -> Tensor:
    """Greedy decoding one sentence at a time, unpadded: the slow path :func:`greedy` must
    equal (same (B, L) layout, L = the longest row)."""
    rows = []
    for ids, mask in zip(src, src_mask, strict=True):
        real = ids[mask][None]
        rows.append(greedy(model, real, torch.ones_like(real, dtype=torch.bool), margin)[0])
    width = max(len(r) for r in rows)
    return torch.stack([F.pad(r, (0, width - len(r)), value=PAD_ID) for r in rows])
