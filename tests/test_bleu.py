"""BLEU: hand-computed examples of both metrics, encoded sentences and the copy baseline, and
agreement with NLTK and sacreBLEU where they are installed (the `test` extra)."""

from __future__ import annotations

import math
import random
import sys
import warnings

import pytest

from pdelab.training.bleu import (
    UNMATCHABLE,
    as_reference,
    brevity_penalty,
    clipped_matches,
    closest_length,
    copy_source_bleu,
    corpus_bleu,
    decode,
    sentence_bleu,
)


def split(text: str) -> list[str]:
    return text.split()


HYP = split("the cat sat on the mat")
SHORTER = split("the cat sat on the red mat")  # the reference is one token longer
NO_4GRAM = split("the cat is on the mat")


def test_clipping_counts_a_word_at_most_as_often_as_a_reference_has_it() -> None:
    # Papineni et al.'s example: "the" x 7 against references holding it at most twice
    refs = [split("the cat is on the mat"), split("there is a cat on the mat")]
    assert clipped_matches(["the"] * 7, refs, 1) == (2, 7)
    assert clipped_matches(HYP, [SHORTER], 2) == (4, 5)  # "the mat" is not in the reference
    assert clipped_matches(["a", "b"], [["a", "b"]], 3) == (0, 0)  # no trigrams at all


def test_brevity_penalty_uses_the_closest_reference_shorter_on_ties() -> None:
    assert closest_length([["x"] * 4, ["x"] * 6], 5) == 4
    assert closest_length([["x"] * 13, ["x"] * 2], 12) == 13
    assert brevity_penalty(12, 12) == 1.0
    assert brevity_penalty(13, 12) == pytest.approx(math.exp(1 - 13 / 12))
    assert brevity_penalty(5, 7) == 1.0 and brevity_penalty(5, 0) == 0.0


def test_every_order_matching_by_hand() -> None:
    # precisions 6/6, 4/5, 3/4, 2/3; c = 6 < r = 7: BP = exp(1 - 7/6)
    want = math.exp(1 - 7 / 6) * (1 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25
    assert corpus_bleu([HYP], [[SHORTER]]) == pytest.approx(want, rel=1e-12)
    assert sentence_bleu(HYP, [SHORTER]) == pytest.approx(want, rel=1e-12)
    assert corpus_bleu([SHORTER], [[SHORTER]]) == 1.0 == sentence_bleu(SHORTER, [SHORTER])


def test_an_order_without_a_match_zeroes_corpus_bleu_not_nltk_sentence_bleu() -> None:
    # precisions 5/6, 3/5, 1/4, 0/3: Papineni's BLEU is 0; NLTK puts the smallest float for
    # the 4-gram precision, so the score is about 7e-78, never exactly 0
    assert corpus_bleu([HYP], [[NO_4GRAM]]) == 0.0
    tiny = sys.float_info.min
    want = math.exp(0.25 * (math.log(5 / 6) + math.log(3 / 5) + math.log(1 / 4) + math.log(tiny)))
    got = sentence_bleu(HYP, [NO_4GRAM])
    assert got == pytest.approx(want, rel=1e-12) and 0 < got < 1e-77
    # a hypothesis of three tokens has no 4-gram: even an exact one scores min_float ** 0.25
    assert sentence_bleu(["a", "b", "c"], [["a", "b", "c"]]) == pytest.approx(tiny**0.25)
    # no unigram match, or nothing at all, is exactly 0
    assert sentence_bleu(["x", "y"], [["a", "b"]]) == 0.0
    assert sentence_bleu([], [["a"]]) == 0.0 and corpus_bleu([[]], [[["a"]]]) == 0.0


def test_corpus_bleu_sums_counts_where_the_mean_of_sentences_does_not() -> None:
    # "a b c d" exact, and "x y" against "x z": counts 5/6, 3/4, 2/2, 1/1, c = r = 6
    hyps, refs = [list("abcd"), ["x", "y"]], [[list("abcd")], [["x", "z"]]]
    assert corpus_bleu(hyps, refs) == pytest.approx((5 / 6 * 3 / 4) ** 0.25, rel=1e-12)
    mean = sum(sentence_bleu(h, r) for h, r in zip(hyps, refs, strict=True)) / 2
    assert mean == pytest.approx(0.5)  # the short sentence scores ~1e-77 however close it is
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference sets"):
        corpus_bleu(hyps, refs[:1])


VOCAB = ["<pad>", "<unk>", "<bos>", "<eos>", "ein", "haus", "a", "house"]


def test_encoded_sentences_and_the_copy_baseline() -> None:
    assert decode([2, 4, 1, 5, 3, 6, 0], VOCAB) == ["ein", "<unk>", "haus"]
    assert decode([4, 5, 0, 0], VOCAB) == ["ein", "haus"]  # no <bos>, no <eos>: up to padding
    assert as_reference(["ein", "<unk>"]) == ["ein", UNMATCHABLE]
    # copying "a house" to "a house": exact; an unknown reference word never matches, even
    # the source's <unk>
    src = [[2, 6, 7, 6, 7, 3]]
    assert copy_source_bleu(src, [[2, 6, 7, 6, 7, 3, 0]], VOCAB, VOCAB) == pytest.approx(100)
    assert copy_source_bleu([[2, 1, 1, 1, 1, 3]], [[2, 1, 1, 1, 1, 3]], VOCAB, VOCAB) == 0.0


# -- against the reference implementations, when installed ----------------------------------


def random_corpus(seed: int, n: int = 60) -> tuple[list[list[str]], list[list[list[str]]]]:
    """Hypotheses and one or two references each, drawn from 6 words so that n-grams match
    often, lengths 0-14 so that short ones (no 4-grams) occur too."""
    rng = random.Random(seed)
    words = list("abcdef")

    def sentence() -> list[str]:
        return [rng.choice(words) for _ in range(rng.randint(0, 14))]

    hyps = [sentence() for _ in range(n)]
    refs = [[sentence() or ["a"] for _ in range(rng.randint(1, 2))] for _ in range(n)]
    return hyps, refs


@pytest.mark.parametrize("seed", range(5))
def test_sentence_bleu_equals_nltk(seed: int) -> None:
    bleu_score = pytest.importorskip("nltk.translate.bleu_score")
    hyps, refs = random_corpus(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns on every order without a match
        theirs = [bleu_score.sentence_bleu(r, h) for h, r in zip(hyps, refs, strict=True)]
    ours = [sentence_bleu(h, r) for h, r in zip(hyps, refs, strict=True)]
    assert ours == pytest.approx(theirs, rel=1e-12, abs=0)
    assert any(0 < x < 1e-70 for x in ours) and any(x > 0.1 for x in ours)


@pytest.mark.parametrize("seed", range(5))
def test_corpus_bleu_equals_sacrebleu_and_nltk(seed: int) -> None:
    sacrebleu = pytest.importorskip("sacrebleu")
    bleu_score = pytest.importorskip("nltk.translate.bleu_score")
    hyps, refs = random_corpus(seed)
    single = [[r[0]] for r in refs]  # sacreBLEU takes reference streams: one per sentence
    scorer = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
    theirs = scorer.corpus_score([" ".join(h) for h in hyps], [[" ".join(r[0]) for r in refs]])
    assert 100 * corpus_bleu(hyps, single) == pytest.approx(theirs.score, rel=1e-9)
    # NLTK's corpus_bleu counts a hypothesis too short for an order as one n-gram of it
    # (its per-sentence denominator is max(1, count)): equal only when every hypothesis has
    # 4 tokens or more, lower otherwise
    long = [i for i, h in enumerate(hyps) if len(h) >= 4]
    hyps_long, refs_long = [hyps[i] for i in long], [refs[i] for i in long]
    nltk_long = bleu_score.corpus_bleu(refs_long, hyps_long)
    assert corpus_bleu(hyps_long, refs_long) == pytest.approx(nltk_long, rel=1e-12)
    assert bleu_score.corpus_bleu(refs, hyps) < corpus_bleu(hyps, refs)
    assert corpus_bleu(hyps, refs) > 0.03  # a corpus matches at every order


def test_a_corpus_without_4gram_matches_is_zero_for_sacrebleu_too() -> None:
    sacrebleu = pytest.importorskip("sacrebleu")
    scorer = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
    assert scorer.corpus_score([" ".join(HYP)], [[" ".join(NO_4GRAM)]]).score == 0.0
    assert corpus_bleu([HYP], [[NO_4GRAM]]) == 0.0
