"""BERT-style uncased WordPiece tokenizers, trained on a task's training split only.

The Continuous-Time Attention paper tokenizes every word-level task with bert-base-uncased,
whose vocabulary cannot be downloaded here. Each task therefore trains its own WordPiece
vocabulary, the way BERT's was built, on its training texts (never on validation or test
texts) and saves it as ``tokenizer.json`` next to the prepared arrays; the manifest names it in
``tokenizer`` and ``tokenizer_note`` so the tables can say that the vocabulary differs.

The ``tokenizers`` library supplies the pipeline: BERT normalization (lowercase, accents
stripped, control characters dropped, CJK characters split), BERT pre-tokenization (split on
whitespace and punctuation), greedy longest-match-first WordPiece encoding with ``##`` marking
word-internal pieces, the decoder and the ``tokenizer.json`` format. Only the vocabulary is
learned here, by the algorithm of the library's ``WordPieceTrainer`` (byte-pair merges over
word counts, ``##`` on word-internal symbols, the merged strings become the vocabulary):
that trainer is not deterministic across processes (huggingface/tokenizers#1794: the ids of
``##`` symbols follow hash-map order and decide ties between equally frequent merges), and the
prepared data must be identical on every build. Here ties go to the alphabetically first pair.

Ids: ``<pad>`` = 0 and ``<cls>`` = 1 (store.RESERVED), ``<unk>`` = 2, then the characters of
the training words (the 1,000 most frequent), word-initial and as ``##`` pieces (so only words
with other characters, or over 100 characters, become ``<unk>``), then the merged tokens in
merge order. Texts are encoded without special tokens.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from pdelab.data.store import RESERVED

UNK = "<unk>"
SPECIALS = (*RESERVED, UNK)
UNK_ID = SPECIALS.index(UNK)
PREFIX = "##"
MAX_WORD_CHARS = 100  # BERT's: longer words become <unk>
MAX_ALPHABET = 1000  # characters kept (BERT's WordPiece trainers default to 1,000)
FILE = "tokenizer.json"
NOTE = (
    "tokenized with an uncased WordPiece vocabulary trained on this training split "
    "(bert-base-uncased's vocabulary, which the paper used, cannot be downloaded here)"
)
_SPECIAL_TEXT = re.compile("|".join(re.escape(s) for s in SPECIALS))


def _normalizer() -> normalizers.Normalizer:
    return normalizers.BertNormalizer(lowercase=True)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.BertPreTokenizer()


@cache
def _pipeline() -> tuple[normalizers.Normalizer, pre_tokenizers.PreTokenizer]:
    return _normalizer(), _pre_tokenizer()


def words(text: str) -> list[str]:
    """The normalized, pre-tokenized words of ``text``, as the tokenizer sees them (the text
    of special tokens, such as WikiText's ``<unk>``, left out)."""
    normalizer, pre = _pipeline()
    return [
        word
        for piece in _SPECIAL_TEXT.split(text)
        for word, _ in pre.pre_tokenize_str(normalizer.normalize_str(piece))
    ]


def word_counts(texts: Iterable[str]) -> Counter[str]:
    """How often each word occurs; words too long for WordPiece (they become <unk>) are left
    out."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(w for w in words(text) if len(w) <= MAX_WORD_CHARS)
    return counts


def _merge(symbols: list[str], a: str, b: str, token: str) -> list[str]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            out.append(token)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def learn_vocab(
    counts: Mapping[str, int], vocab_size: int, max_alphabet: int = MAX_ALPHABET
) -> list[str]:
    """The WordPiece vocabulary (id order) of ``counts``: ``vocab_size`` entries at most,
    unless the specials and the alphabet (always kept whole) alone need more.

    Repeatedly merges the most frequent adjacent symbol pair (ties: the alphabetically first)
    until the vocabulary is full or no pair is left; pair counts are updated only in the words
    holding the merged pair, so a 30k vocabulary on 100k distinct words takes seconds.
    """
    # The max_alphabet most frequent characters, each word-initial and as a ``##`` piece (as
    # in BERT's vocabulary), so a new word of known characters never becomes <unk>; words with
    # a rarer character (they become <unk>) take no part in the merges.
    char_counts: Counter[str] = Counter()
    for word, count in counts.items():
        for c in word:
            char_counts[c] += count
    ranked = sorted(char_counts.items(), key=lambda item: (-item[1], item[0]))
    chars = sorted(c for c, _ in ranked[:max_alphabet])
    known_chars = set(chars)
    words = sorted(w for w in counts if set(w) <= known_chars)
    freq = [int(counts[w]) for w in words]
    symbols = [[w[0], *(PREFIX + c for c in w[1:])] for w in words]
    vocab = [*SPECIALS, *chars, *(PREFIX + c for c in chars)]
    known = set(vocab)
    pair_count: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:], strict=False):
            pair_count[pair] += freq[i]
            where[pair].add(i)
    heap = [(-count, a, b) for (a, b), count in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, a, b = heapq.heappop(heap)
        if pair_count.get((a, b)) != -negative:
            continue  # stale: the pair's count changed after this entry was pushed
        token = a + b[len(PREFIX) :]
        if token not in known:
            vocab.append(token)
            known.add(token)
        changed: set[tuple[str, str]] = set()
        for i in sorted(where[(a, b)]):
            old, f = symbols[i], freq[i]
            new = _merge(old, a, b, token)
            old_pairs = list(zip(old, old[1:], strict=False))
            new_pairs = list(zip(new, new[1:], strict=False))
            for pair in old_pairs:
                pair_count[pair] -= f
            for pair in new_pairs:
                pair_count[pair] += f
            for pair in set(old_pairs) - set(new_pairs):
                where[pair].discard(i)
            for pair in set(new_pairs) - set(old_pairs):
                where[pair].add(i)
            changed.update(old_pairs, new_pairs)
            symbols[i] = new
        for pair in changed:
            if pair_count[pair] > 0:
                heapq.heappush(heap, (-pair_count[pair], *pair))
            else:
                del pair_count[pair]
                where.pop(pair, None)
    return vocab


def build(vocab: Sequence[str]) -> Tokenizer:
    """The BERT-style uncased WordPiece tokenizer over ``vocab`` (which starts with SPECIALS)."""
    if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
        raise ValueError(f"the vocabulary must start with {SPECIALS}, got {tuple(vocab[:3])}")
    model = models.WordPiece(
        {token: i for i, token in enumerate(vocab)},
        unk_token=UNK,
        continuing_subword_prefix=PREFIX,
        max_input_chars_per_word=MAX_WORD_CHARS,
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = _normalizer()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=PREFIX)
    tokenizer.add_special_tokens(list(SPECIALS))  # a literal "<unk>" (WikiText) maps to UNK_ID
    return tokenizer


def train(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A tokenizer whose vocabulary is learned from ``texts`` (the training split only)."""
    if vocab_size <= len(SPECIALS):
        raise ValueError(f"vocab_size must exceed {len(SPECIALS)}, got {vocab_size}")
    return build(learn_vocab(word_counts(texts), vocab_size))


def vocab_of(tokenizer: Tokenizer) -> list[str]:
    """The tokens in id order (what store.write_prepared records as the vocabulary)."""
    ids = tokenizer.get_vocab(with_added_tokens=True)
    vocab = sorted(ids, key=ids.__getitem__)
    if [ids[t] for t in vocab] != list(range(len(vocab))):
        raise ValueError("the tokenizer's ids are not contiguous")
    return vocab


def encode(
    tokenizer: Tokenizer, texts: Sequence[str], max_length: int | None = None
) -> list[np.ndarray]:
    """Token ids of each text (no special tokens added), cut to ``max_length`` if given."""
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [np.asarray(e.ids[:max_length], dtype=np.uint32) for e in encodings]


def save(tokenizer: Tokenizer, out_dir: Path) -> str:
    """Write ``out_dir/tokenizer.json``; return its name (for write_prepared's extra_files)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / FILE))
    return FILE


def load(data_dir: Path | str) -> Tokenizer:
    """The tokenizer saved with a prepared data set."""
    return Tokenizer.from_file(str(Path(data_dir) / FILE))
