"""Length buckets: the padded length of a batch, from a short ladder of lengths.

Why: a compiled training step is specialised to its input shapes, and a batch padded to its
own longest sequence has a new length nearly every step, so ``torch.compile`` would compile
again and again (or fall back to dynamic shapes, slower kernels). Padding each batch up to the
next rung of a ladder makes the shapes repeat: a few compiled graphs serve a whole run.

The ladder has two rungs per octave, 2^k and 1.5 * 2^k (16, 24, 32, 48, 64, 96, 128, ...),
each a multiple of 8 (the widths tensor cores tile), so padding adds at most half of a
batch's length and a task of sequences up to 4,096 tokens compiles at most 17 shapes. The
cap (the task's longest sequence, or its position table) is itself a rung: nothing is padded
past it.
"""

from __future__ import annotations

SMALLEST = 16  # the first rung: shorter batches are padded to it


def rungs(max_len: int) -> list[int]:
    """Every length :func:`bucket_length` can return for sequences of at most ``max_len``."""
    if max_len < 1:
        raise ValueError(f"max_len = {max_len}: a bucket needs room for one token")
    out, low = [], SMALLEST
    while low < max_len:
        out += [r for r in (low, low + low // 2) if r < max_len]
        low *= 2
    return [*out, max_len]


def bucket_length(n: int, max_len: int) -> int:
    """The padded length of a batch whose longest sequence has ``n`` tokens: the first rung of
    the ladder at or above ``n``, capped at ``max_len``."""
    if n > max_len:
        raise ValueError(f"a batch of {n} tokens does not fit max_len = {max_len}")
    if n <= SMALLEST:
        return min(SMALLEST, max_len)
    octave = 1 << ((n - 1).bit_length() - 1)  # the largest power of two below n
    rung = octave + octave // 2 if n <= octave + octave // 2 else 2 * octave
    return min(rung, max_len)


__all__ = ["SMALLEST", "bucket_length", "rungs"]
