"""BLEU written out: Papineni's corpus BLEU and NLTK's default sentence BLEU, dependency-free.

Why our own: a training job should not need nltk or sacrebleu, and the two numbers a
translation table reports are different metrics whose difference must be visible in code.

* :func:`corpus_bleu` (Papineni et al. 2002): clipped n-gram matches and hypothesis n-grams are
  summed over the whole corpus for n = 1..4, the score is the geometric mean of the four
  precisions times the brevity penalty exp(1 - r/c) when the corpus' hypothesis length c is
  below its reference length r (per sentence the closest reference, ties to the shorter).
  No smoothing: a corpus with no match at some order scores exactly 0. This is sacreBLEU's
  BLEU with ``tokenize="none", smooth_method="none"`` on the same tokens. NLTK's
  ``corpus_bleu`` differs where a hypothesis is shorter than n: it counts it as holding one
  n-gram of that order (a per-sentence denominator of max(1, count)), which lowers the score.
* :func:`sentence_bleu`: what ``nltk.translate.bleu_score.sentence_bleu(references,
  hypothesis)`` returns with its defaults (4-gram, equal weights, no smoothing), arithmetic
  included. No unigram match gives exactly 0. An order with no match does not give 0: NLTK
  replaces that precision by the smallest positive float (2.2e-308, with a warning that "the
  BLEU score evaluates to 0"), so the score is about 1e-77 per such order, zero for any
  table. A hypothesis shorter than n has no n-grams, so one of 1-3 tokens scores about 1e-77
  even when it is exactly the reference.

A mean of sentence BLEUs is not corpus BLEU: short sentences, which rarely hold a matching
4-gram, pull it towards 0 however good they are, and it weighs every sentence alike.

Scores here are fractions in [0, 1]; tables report BLEU x 100.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence

MAX_ORDER = 4
TINY = sys.float_info.min  # NLTK's stand-in for a zero precision (SmoothingFunction.method0)

Tokens = Sequence[str]


def ngrams(tokens: Tokens, n: int) -> Counter[tuple[str, ...]]:
    """How often each n-gram of ``tokens`` occurs."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def clipped_matches(hypothesis: Tokens, references: Sequence[Tokens], n: int) -> tuple[int, int]:
    """(matches, n-grams) of one hypothesis at order n: each hypothesis n-gram counts at most
    as often as it occurs in any one reference (Papineni's modified precision)."""
    counts = ngrams(hypothesis, n)
    most: Counter[tuple[str, ...]] = Counter()
    for reference in references:
        most |= ngrams(reference, n)  # element-wise maximum over the references
    return sum(min(c, most[g]) for g, c in counts.items()), sum(counts.values())


def closest_length(references: Sequence[Tokens], hypothesis_length: int) -> int:
    """The reference length closest to the hypothesis', the shorter one on a tie."""
    return min((len(r) for r in references), key=lambda r: (abs(r - hypothesis_length), r))


def brevity_penalty(reference_length: int, hypothesis_length: int) -> float:
    """1 for a hypothesis longer than the reference, exp(1 - r/c) otherwise, 0 when empty."""
    if hypothesis_length > reference_length:
        return 1.0
    if hypothesis_length == 0:
        return 0.0
    return math.exp(1 - reference_length / hypothesis_length)


def corpus_bleu(
    hypotheses: Sequence[Tokens], references: Sequence[Sequence[Tokens]], max_order: int = MAX_ORDER
) -> float:
    """Papineni's corpus BLEU in [0, 1]: ``references[i]`` holds hypothesis i's references."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference sets")
    matches, totals = [0] * max_order, [0] * max_order
    hyp_length = ref_length = 0
    for hypothesis, refs in zip(hypotheses, references, strict=True):
        for n in range(1, max_order + 1):
            m, t = clipped_matches(hypothesis, refs, n)
            matches[n - 1] += m
            totals[n - 1] += t
        hyp_length += len(hypothesis)
        ref_length += closest_length(refs, len(hypothesis))
    if min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True))
    return brevity_penalty(ref_length, hyp_length) * math.exp(log_precision / max_order)


def sentence_bleu(hypothesis: Tokens, references: Sequence[Tokens]) -> float:
    """NLTK's ``sentence_bleu(references, hypothesis)`` with its defaults, in [0, 1] (see the
    module docstring: an order without a match costs a factor of about 1e-77, not 0)."""
    precisions = []
    for n in range(1, MAX_ORDER + 1):
        m, t = clipped_matches(hypothesis, references, n)
        precisions.append((m, max(1, t)))  # NLTK: an empty order is 0 / 1
    if precisions[0][0] == 0:
        return 0.0
    weight = 1 / MAX_ORDER
    log_mean = math.fsum(weight * math.log(m / t if m else TINY) for m, t in precisions)
    bp = brevity_penalty(closest_length(references, len(hypothesis)), len(hypothesis))
    return bp * math.exp(log_mean)


# --------------------------------------------------------------------------------------------
# Encoded sentences: ids of a vocabulary whose specials are <pad>, <bos>, <eos> and <unk>
# --------------------------------------------------------------------------------------------

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# What an unknown reference word becomes: a token no system can output, so it never matches.
# Against the real reference word that is exact for a model (it cannot output a word its
# vocabulary lacks), and the hypothesis' own <unk> stays the token "<unk>".
UNMATCHABLE = "\x00<unk>"


def decode(ids: Sequence[int], vocab: Sequence[str]) -> list[str]:
    """The tokens of one encoded sentence: <pad> and <bos> skipped, cut at the first <eos>."""
    out = []
    for i in ids:
        token = vocab[int(i)]
        if token == EOS:
            break
        if token not in (PAD, BOS):
            out.append(token)
    return out


def as_reference(tokens: Sequence[str]) -> list[str]:
    """A decoded reference with every <unk> made unmatchable (see UNMATCHABLE)."""
    return [UNMATCHABLE if t == UNK else t for t in tokens]


def copy_source_bleu(
    src: Sequence[Sequence[int]],
    tgt: Sequence[Sequence[int]],
    src_vocab: Sequence[str],
    tgt_vocab: Sequence[str],
) -> float:
    """Corpus BLEU (0-100) of returning each source sentence untranslated: what a model that
    learned nothing but copying scores (names, numbers and punctuation pass unchanged)."""
    hypotheses = [decode(row, src_vocab) for row in src]
    references = [[as_reference(decode(row, tgt_vocab))] for row in tgt]
    return 100 * corpus_bleu(hypotheses, references)
