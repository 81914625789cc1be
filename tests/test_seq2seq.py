"""The encoder-decoder and translation training: shapes, a causal decoder, source padding,
projections and decoding against their reference paths, a reverse task learned by every
kernel that takes Tq != Tk, the loss options, and an exactly resumed translation run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from pdelab.data import translation as data
from pdelab.data.store import RESERVED, SPLITS, load_manifest, write_prepared
from pdelab.models.attention import ATTENTION_KERNELS, supports_cross_attention
from pdelab.models.factory import build_model
from pdelab.models.seq2seq import CrossAttention, Seq2Seq, greedy, greedy_reference
from pdelab.records.causal_verdict import Causality
from pdelab.spec.config import ConfigError, TrainSpec, build, resolve
from pdelab.spec.plugins import import_mechanisms
from pdelab.training import train as training
from pdelab.training.bleu import corpus_bleu
from pdelab.training.causality import probe_causality
from pdelab.training.strategy import widened
from pdelab.training.train import train
from pdelab.training.trained import load_trained
from pdelab.training.translation import (
    RESULT_COLUMNS,
    TRANSLATION_HISTORY_COLUMNS,
    PairBatches,
    decoder_causality,
    teacher_forced_bleu,
    token_loss,
    translation_loss,
)

import_mechanisms()  # every paper's kernels
KERNELS = ATTENTION_KERNELS.names()
CROSS = [k for k in KERNELS if supports_cross_attention(k)]
PAD, BOS, EOS = data.PAD_ID, data.BOS_ID, data.EOS_ID
SYMBOLS = range(4, 12)  # the reverse task's tokens, after the four specials
VOCAB = 12


def tiny(kernel: str = "sdpa", norm: str = "post", dim: int = 16, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB + 3,
        src_max_len=12,
        tgt_max_len=24,
        bos_id=BOS,
        eos_id=EOS,
        dim=dim,
        layers=1,
        heads=2,
        mlp_dim=2 * dim,
        dropout=0.0,
        attention_dropout=0.0,
        norm=norm,
        attention=kernel,
    )


def reverse_batch(
    gen: torch.Generator, n: int, lo: int = 2, hi: int = 6
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, src_mask, tgt): <bos> s <eos> padded, and <bos> reversed(s) <eos> padded."""
    lengths = torch.randint(lo, hi + 1, (n,), generator=gen)
    src = torch.full((n, hi + 2), PAD)
    tgt = torch.full((n, hi + 2), PAD)
    for i, length in enumerate(lengths.tolist()):
        s = torch.randint(SYMBOLS.start, SYMBOLS.stop, (length,), generator=gen)
        src[i, : length + 2] = torch.cat([torch.tensor([BOS]), s, torch.tensor([EOS])])
        tgt[i, : length + 2] = torch.cat([torch.tensor([BOS]), s.flip(0), torch.tensor([EOS])])
    return src, src != PAD, tgt


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return reverse_batch(torch.Generator().manual_seed(seed), 4)


def test_shapes_and_the_output_layer_is_separate() -> None:
    model = tiny().eval()
    src, mask, tgt = batch()
    assert model.encode(src, mask).shape == (4, src.shape[1], 16)
    assert model(src, mask, tgt).shape == (4, tgt.shape[1], VOCAB + 3)
    assert model.head.weight.data_ptr() != model.decoder.tokens.weight.data_ptr()
    out = greedy(model, src, mask)
    assert out.shape[0] == 4 and out.shape[1] <= int(model.max_new_tokens(mask).max())


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("kernel", CROSS)
def test_the_decoder_is_causal(kernel: str, norm: str) -> None:
    model = tiny(kernel, norm).double().eval()
    src, mask, tgt = batch()
    report = probe_causality(lambda ids: model(src, mask, ids), tgt, tol=1e-12, vocab_size=VOCAB)
    assert not report.leaks, report


@pytest.mark.parametrize("kernel", CROSS)
def test_cross_attention_reads_real_source_tokens_only(kernel: str) -> None:
    model = tiny(kernel).double().eval()
    src, mask, tgt = batch()
    short = int(mask.sum(1).argmin())
    alone = model(src[short : short + 1, : int(mask[short].sum())], None, tgt[short : short + 1])
    in_batch = model(src, mask, tgt)[short : short + 1]
    torch.testing.assert_close(alone, in_batch)
    noisy = src.masked_fill(~mask, 7)  # padding positions hold a real token's id
    torch.testing.assert_close(model(noisy, mask, tgt), model(src, mask, tgt))


def test_cross_projection_equals_its_reference() -> None:
    attn = CrossAttention(16, 2, 0.0, "sdpa").double()
    x, memory = torch.randn(3, 5, 16).double(), torch.randn(3, 9, 16).double()
    fast, ref = attn.project_pair(x, memory), attn.project_pair_reference(x, memory)
    assert [t.shape for t in fast] == [(3, 2, 5, 8), (3, 2, 9, 8), (3, 2, 9, 8)]
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k not in CROSS])
def test_single_sequence_kernels_are_refused(kernel: str) -> None:
    with pytest.raises(ValueError, match=f"{kernel!r} .* is defined on one sequence only"):
        tiny(kernel)


# -- a reverse task, learned ------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models train fastest on one thread, and the machine may be shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_reverse(kernel: str, steps: int = 150) -> Seq2Seq:
    """Teacher-forced training on random reversals of 2-6 symbols."""
    model = tiny(kernel, dim=32).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, mask, tgt = reverse_batch(gen, 64)
        loss, _, _ = token_loss(model(src, mask, tgt[:, :-1]), tgt[:, 1:], include_pad=False)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def reverser() -> Seq2Seq:
    return train_reverse("sdpa")


def bleu_of(model: Seq2Seq, seed: int = 7) -> tuple[float, torch.Tensor, torch.Tensor]:
    src, mask, tgt = reverse_batch(torch.Generator().manual_seed(seed), 100)
    decoded = greedy(model, src, mask)

    def words(ids: torch.Tensor) -> list[list[str]]:
        return [[str(i) for i in row.tolist() if i in SYMBOLS] for row in ids]

    bleu = corpus_bleu(words(decoded), [[r] for r in words(tgt)])
    return 100 * bleu, src, mask


# the default kernel and each paper's fast path learn in the fast tier; the references and the
# other kernels' variants in the slow one (test_model.py runs every variant in the fast tier)
LEARNERS = [
    k if k in ("sdpa", "fna", "pde") else pytest.param(k, marks=pytest.mark.slow) for k in KERNELS
]


@pytest.mark.parametrize("kernel", LEARNERS)
def test_greedy_decoding_learns_to_reverse(kernel: str) -> None:
    if not supports_cross_attention(kernel):
        pytest.skip(f"{kernel} is defined on one sequence only: no cross-attention")
    bleu, _, _ = bleu_of(train_reverse(kernel))
    assert bleu > 90, f"{kernel}: BLEU {bleu:.1f}"


def test_batched_greedy_equals_one_sentence_at_a_time(reverser: Seq2Seq) -> None:
    _, src, mask = bleu_of(reverser)
    out = greedy(reverser, src, mask)
    torch.testing.assert_close(out, greedy_reference(reverser, src, mask))
    ended = (out == EOS).any(1)
    assert ended.all()  # a trained model stops by itself, before its limit


def test_decoding_stops_at_its_limit() -> None:
    model = tiny().eval()
    with torch.no_grad():  # a model that never says <eos>
        model.head.bias.fill_(0.0)
        model.head.weight.zero_()
        model.head.bias[5] = 1.0
    src, mask, _ = batch()
    out = greedy(model, src, mask, margin=3)
    assert out.shape[1] == int(mask.sum(1).max()) + 3
    assert ((out != PAD).sum(1) == mask.sum(1) + 3).all()


# -- the loss and the metrics ------------------------------------------------------------------


def test_the_loss_counts_real_targets_unless_padding_is_asked_for() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    labels = torch.tensor([[5, 3, PAD, PAD], [4, 4, 5, 3]])
    real = labels != PAD
    per_token = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    loss, correct, n = token_loss(logits, labels, include_pad=False)
    assert n == 6 and correct == int(((logits.argmax(-1) == labels) & real).sum())
    torch.testing.assert_close(loss, per_token[real.flatten()].mean())
    with_pad, _, n_pad = token_loss(logits, labels, include_pad=True)
    torch.testing.assert_close(with_pad, per_token.mean())
    assert n_pad == 6  # accuracy and weights still count real targets


@pytest.mark.parametrize("kernel", CROSS)
def test_the_training_loss_on_real_positions_equals_the_loss_on_all_logits(kernel) -> None:
    """translation_loss applies the head at real target positions only: the same loss,
    count and gradients as token_loss of every position's logits (the reference)."""
    src, mask, tgt = batch()
    inputs, labels = {"src": src, "src_mask": mask, "tgt": tgt[:, :-1]}, tgt[:, 1:]
    assert (labels == PAD).any()  # the batch has padding to skip
    results = []
    for fast in (True, False):
        model = tiny(kernel).double()
        if fast:
            loss, correct, n = translation_loss(model, inputs, labels)
        else:
            loss, correct, n = token_loss(widened(model(**inputs)), labels, include_pad=False)
        loss.backward()
        results.append((loss, correct, n, [p.grad for p in model.parameters()]))
    (fast_loss, *fast_counts, fast_grads), (ref_loss, *ref_counts, ref_grads) = results
    torch.testing.assert_close(fast_loss, ref_loss)
    assert fast_counts == ref_counts
    for fast_grad, ref_grad in zip(fast_grads, ref_grads, strict=True):
        torch.testing.assert_close(fast_grad, ref_grad)


def test_teacher_forced_bleu_reads_every_position_and_drops_specials() -> None:
    vocab = ["<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c", "d", "<"]
    labels = np.array([[4, 5, 6, 7, 3, 0], [4, 5, 3, 0, 0, 0], [4, 3, 0, 0, 0, 0]])
    exact = np.array([[4, 5, 6, 7, 3, 0], [1, 8, 2, 0, 0, 0], [3, 0, 0, 0, 0, 0]])
    assert teacher_forced_bleu(exact, labels, vocab) == [1.0, 0.0, 0.0]  # empty -> 0
    # a word predicted where the target is padding counts against the sentence
    padded = np.array([[4, 5, 6, 7, 3, 7]])
    assert teacher_forced_bleu(padded, labels[:1], vocab)[0] == pytest.approx(
        (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    )


# -- the factory and a real translation run -------------------------------------------------------

WORDS = {f"w{i}": f"v{i}" for i in range(12)}  # an English -> "German" dictionary


def write_raw(root: Path, sizes: dict[str, int]) -> None:
    """Line-aligned pairs: the target is the source word by word through WORDS, reversed."""
    rng = np.random.default_rng(0)
    folder = root / "multi30k"
    folder.mkdir(parents=True)
    for split, n in sizes.items():
        en, de = [], []
        for _ in range(n):
            sentence = list(rng.choice(list(WORDS), size=rng.integers(3, 7)))
            en.append(" ".join(sentence))
            de.append(" ".join(WORDS[w] for w in reversed(sentence)))
        data.write_lines(folder / f"{split}.en", en)
        data.write_lines(folder / f"{split}.de", de)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pairs")
    sizes = {"train": 400, "val": 50, "test": 60}
    write_raw(root / "raw", sizes)
    spec = data.Multi30kSpec(source="standin", n_train=400, n_val=50, n_test=60)
    data.prepare(spec, root / "raw", root / "prepared")
    return root / "prepared"


def translation_run(params: dict, pairs: Path, **train_options):
    run = resolve(params, "multi30k", "baseline", 0, "smoke")
    return replace(
        run,
        data_dir=str(pairs),
        model=replace(run.model, dim=32, heads=2, mlp_dim=64, layers=1),
        train=replace(run.train, batch_size=16, lr=5e-3, epochs=6, patience=6, **train_options),
    )


def test_the_factory_builds_the_encoder_decoder(params, pairs: Path) -> None:
    run = translation_run(params, pairs)
    manifest = load_manifest(pairs)
    model = build_model(run, manifest)
    assert isinstance(model, Seq2Seq) and model.head.out_features == len(manifest["tgt_vocab"])
    # the decoder's positions hold <bos> and the longest decoding of the longest source
    longest = max(s["src_max_length"] for s in manifest["splits"].values())
    assert model.decoder.positions.num_embeddings >= longest + 11
    sites = replace(run, diffusion=replace(run.diffusion, sites=("after_mlp",)))
    with pytest.raises(ValueError, match="diffusion.sites .* does not apply"):
        build_model(sites, manifest)
    other_block = replace(run, model=replace(run.model, block="another"))
    with pytest.raises(ValueError, match="model.block = 'another' does not apply"):
        build_model(other_block, manifest)


def test_loss_includes_pad_is_checked(params, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="loss_includes_pad: expected true or false"):
        build(TrainSpec, {"loss_includes_pad": "yes"}, "train")
    default = resolve(params, "multi30k", "baseline", 0, "smoke")
    assert "loss_includes_pad" not in default.to_dict()["train"]  # older specs unchanged
    padded = replace(default, train=replace(default.train, loss_includes_pad=True))
    assert padded.to_dict()["train"]["loss_includes_pad"] is True
    labelled = {s: ([np.array([2, 3])] * 4, np.array([0, 1, 0, 1])) for s in SPLITS}
    write_prepared(tmp_path / "cls", labelled, (*RESERVED, "a", "b"), 2, {"task": "cls"})
    run = resolve(params, "listops", "baseline", 0, "smoke")
    run = replace(
        run, data_dir=str(tmp_path / "cls"), train=replace(run.train, loss_includes_pad=True)
    )
    with pytest.raises(ValueError, match="loss_includes_pad applies to translation tasks only"):
        training.build(run, tmp_path)


class Unmasked(torch.nn.Module):
    """A kernel that ignores ``causal``: every target position reads the whole target."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = ATTENTION_KERNELS.get("reference")(heads=2, head_dim=16)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        return self.inner(q, k, v, key_padding_mask, causal=False)


def test_the_decoder_probe_flags_a_leak(params, pairs: Path) -> None:
    model = build_model(translation_run(params, pairs), load_manifest(pairs)).eval()
    split, vocab = PairBatches(data.load_pairs(pairs, "test")), model.head.out_features
    assert decoder_causality(model, split, vocab)["causality"] == Causality.CAUSAL
    for block in model.decoder.blocks:
        block.attn.kernel = Unmasked()
    leaked = decoder_causality(model, split, vocab)
    assert leaked["causality"] == Causality.LEAKS and leaked["max_leak"] > 1e-3


class Killed(Exception):
    """Stands in for a job killed right after a checkpoint."""


def test_a_killed_translation_run_resumes_to_identical_records(
    params, pairs: Path, tmp_path: Path, monkeypatch
) -> None:
    run = translation_run(params, pairs)
    full = train(run, tmp_path / "full", track=False, progress=False)
    record = training.record_epoch

    def killed_after_epoch_3(s, row, *args) -> None:
        record(s, row, *args)
        if row["epoch"] == 3:
            raise Killed

    monkeypatch.setattr(training, "record_epoch", killed_after_epoch_3)
    with pytest.raises(Killed):
        train(run, tmp_path / "killed", track=False, progress=False)
    monkeypatch.setattr(training, "record_epoch", record)
    again = train(run, tmp_path / "killed", track=False, progress=False)

    columns = [c for c in TRANSLATION_HISTORY_COLUMNS if c != "epoch_time_s"]
    pd.testing.assert_frame_equal(full[columns], again[columns])
    a = pd.read_parquet(tmp_path / "full" / "result.parquet").iloc[0]
    b = pd.read_parquet(tmp_path / "killed" / "result.parquet").iloc[0]
    assert bool(b["resumed"]) and not bool(a["resumed"])
    keys = ["test_loss", "test_acc", "test_ppl", "best_epoch", "causality", *RESULT_COLUMNS]
    for key in keys:
        assert a[key] == b[key], key
    assert a["causality"] == "causal" and a["test_bleu"] > a["test_copy_bleu"]
    assert list(full.columns[3:]) == list(TRANSLATION_HISTORY_COLUMNS)


def test_training_with_padding_in_the_loss_learns_to_predict_padding(
    params, pairs: Path, tmp_path: Path
) -> None:
    run = translation_run(params, pairs, loss_includes_pad=True)
    train(run, tmp_path / "pad", track=False, progress=False)
    result = pd.read_parquet(tmp_path / "pad" / "result.parquet").iloc[0]
    assert result["status"] == "ok" and result["test_bleu"] > result["test_copy_bleu"]
    model = load_trained(tmp_path / "pad").model  # its best.pt, checked to be this run's
    batch_ = PairBatches(data.load_pairs(pairs, "val")).batch(np.arange(50))
    tensors = {k: torch.from_numpy(v) for k, v in batch_.items()}
    labels = tensors.pop("labels")
    predicted = model.eval()(**tensors).argmax(-1)
    after_end = labels == PAD
    assert after_end.any() and (predicted[after_end] == PAD).float().mean() > 0.9
