"""The learning check: input-blind scores by hand, the rule's verdicts, the command line, and a
model really trained on true and on shuffled labels (it must pass, and fail, the check)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT
from pdelab.data import listops, translation
from pdelab.data.store import RESERVED, SPLITS, load_manifest, load_split, write_prepared
from pdelab.report.learning import (
    LearningRule,
    input_blind,
    learning_table,
    lm_targets,
    main,
    unigram_perplexity,
    write_learning,
)
from pdelab.spec.config import ConfigError, data_dir, load_params, resolve
from pdelab.training.train import train

LENIENT = LearningRule(min_gain=0.10, min_test_items=4, max_ppl_ratio=0.7)


def classification_data(root: Path) -> Path:
    """Test labels 0, 0, 1, 2: the majority rate is 0.5 over 4 items."""
    seq = [np.array([2, 3])] * 4
    labels = {"train": [0, 1, 2, 0], "val": [0, 1, 2, 0], "test": [0, 0, 1, 2]}
    splits = {s: (seq, np.array(labels[s])) for s in SPLITS}
    write_prepared(root, splits, (*RESERVED, "a", "b"), 3, {"task": "cls"})
    return root


def lm_data(root: Path) -> Path:
    """Vocabulary of 6 ids (0 padding). Training targets: 3, 3 (the one-token document has
    none), so the add-one counts of ids 1-5 are 1, 1, 3, 1, 1 (total 7); the test targets 3
    and 5 have probabilities 3/7 and 1/7: perplexity sqrt(49 / 3)."""
    docs = {
        "train": [np.array([2, 3, 3]), np.array([4])],
        "val": [np.array([2, 3])],
        "test": [np.array([2, 3, 5])],
    }
    splits = {s: (d, np.zeros(len(d), dtype=np.int64)) for s, d in docs.items()}
    write_prepared(root, splits, (*RESERVED, "a", "b", "c", "d"), 0, {"task": "lm", "kind": "lm"})
    return root


def translation_data(root: Path) -> Path:
    """Each split: "a b c d" -> "a b c d" and "w x y z" -> "p q r s", twice. Copying the
    source matches 4, 3, 2, 1 of the 8, 6, 4, 2 n-grams of orders 1-4, lengths equal: copy
    BLEU = 100 * (1/2 * 1/2 * 1/2 * 1/2) ** (1/4) = 50."""
    folder = root / "raw" / "multi30k"
    folder.mkdir(parents=True)
    for split in SPLITS:
        translation.write_lines(folder / f"{split}.en", ["a b c d", "w x y z"] * 2)
        translation.write_lines(folder / f"{split}.de", ["a b c d", "p q r s"] * 2)
    spec = translation.Multi30kSpec(source="standin", n_train=4, n_val=4, n_test=4)
    out = root / data_dir("smoke", "mt")
    translation.prepare(spec, root / "raw", out)
    return out


def summary(task: str, column: str, values: list[float], data_hash: str) -> pd.DataFrame:
    rows = [
        {"task": task, "variant": "baseline", "seed": seed, "profile": "smoke", "status": "ok",
         "test_acc": math.nan, "test_ppl": math.nan, "data_hash": data_hash} | {column: value}
        for seed, value in enumerate(values)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_input_blind_scores_by_hand(tmp_path) -> None:
    cls = input_blind(classification_data(tmp_path / "cls"))
    assert (cls.kind, cls.value, cls.test_items) == ("classification", 0.5, 4)
    lm = input_blind(lm_data(tmp_path / "lm"))
    assert lm.kind == "language model" and lm.test_items == 2
    assert lm.value == pytest.approx(math.sqrt(49 / 3))
    # the targets are what next_token_loss scores: each document's first token is context only
    assert lm_targets(load_split(tmp_path / "lm", "train")).tolist() == [3, 3]
    # a uniform model over the 5 non-padding ids is the limit of no training data at all
    assert unigram_perplexity(np.zeros(0, np.int64), np.array([1, 2, 3]), 6) == pytest.approx(5)


@pytest.mark.parametrize(
    ("values", "verdict", "words"),
    [
        ([0.75, 0.65], "pass", []),
        ([0.55, 0.6], "FAIL", ["cls does not learn", "0.575", "0.5", "gain +0.075 < 0.1"]),
        ([0.7, math.nan], "FAIL", ["cls", "no test accuracy"]),
    ],
)
def test_classification_verdicts_name_task_and_numbers(tmp_path, values, verdict, words) -> None:
    data = classification_data(tmp_path)
    frame = summary("cls", "test_acc", values, load_manifest(data)["content_hash"])
    row = learning_table(frame, lambda task: data, LENIENT).iloc[0]
    assert row["verdict"] == verdict and row["test_items"] == 4 and row["seeds"] == 2
    assert all(w in row["reason"] for w in words), row["reason"]


def test_too_few_test_items_fail_even_when_learned(tmp_path) -> None:
    data = classification_data(tmp_path)
    frame = summary("cls", "test_acc", [1.0, 1.0], load_manifest(data)["content_hash"])
    row = learning_table(frame, lambda task: data, LearningRule()).iloc[0]
    assert row["verdict"] == "FAIL" and "only 4 test items, fewer than 100" in row["reason"]


@pytest.mark.parametrize(("ppl", "verdict"), [(2.0, "pass"), (3.5, "FAIL")])
def test_language_model_verdict_is_a_perplexity_ratio(tmp_path, ppl, verdict) -> None:
    data = lm_data(tmp_path)
    frame = summary("lm", "test_ppl", [ppl, ppl], load_manifest(data)["content_hash"])
    rule = replace(LENIENT, min_test_items=2)
    row = learning_table(frame, lambda task: data, rule).iloc[0]
    assert row["gain"] == pytest.approx(ppl / math.sqrt(49 / 3))
    assert row["verdict"] == verdict
    if verdict == "FAIL":
        assert "lm does not learn" in row["reason"] and "4.041" in row["reason"]


@pytest.mark.parametrize(("bleu", "verdict"), [([53.0, 52.5], "pass"), ([51.0, 51.5], "FAIL")])
def test_translation_verdict_is_bleu_points_over_copying(tmp_path, bleu, verdict) -> None:
    data = translation_data(tmp_path)
    base = input_blind(data)
    assert (base.kind, base.test_items) == ("translation", 4)
    assert base.value == pytest.approx(50.0)
    frame = summary("mt", "test_bleu", bleu, load_manifest(data)["content_hash"])
    row = learning_table(frame, lambda task: data, replace(LENIENT, min_bleu_gain=2.0)).iloc[0]
    assert row["gain"] == pytest.approx(np.mean(bleu) - 50.0) and row["verdict"] == verdict
    if verdict == "FAIL":
        assert "mt does not learn: baseline mean test BLEU (greedy) 51.25" in row["reason"]
        assert "copy-the-source BLEU 50 (gain +1.25 < 2.0)" in row["reason"]
    rule = {"min_bleu_gain": 2.0, "min_test_items": 4}
    params = {"profile": "smoke", "profiles": {"smoke": {"learning": rule}}}
    write_learning(frame, tmp_path / "learning.md", params, root=tmp_path)
    table = (tmp_path / "learning.md").read_text()
    assert "| 50 (copy BLEU) " in table and f"| {verdict} " in table and "BLEU >= copy + 2" in table


def test_runs_on_other_data_fail_and_no_rule_only_reports(tmp_path) -> None:
    data = classification_data(tmp_path)
    frame = summary("cls", "test_acc", [0.9, 0.9], "0" * 64)
    row = learning_table(frame, lambda task: data, LENIENT).iloc[0]
    assert row["verdict"] == "FAIL" and "rebuild the data or rerun" in row["reason"]
    row = learning_table(frame, lambda task: data, None).iloc[0]
    assert row["verdict"] == "" and row["gain"] == pytest.approx(0.4)


def test_rule_comes_from_the_profile(params) -> None:
    smoke = LearningRule.of_profile(params, "smoke")
    assert smoke is not None and smoke.variant == "baseline"
    assert LearningRule.of_profile(params, "paper") is None  # the paper profile only reports
    bad = {"profiles": {"smoke": {"learning": {"min_gian": 0.1}}}}
    with pytest.raises(ConfigError, match=r"profiles\.smoke\.learning\.min_gian: unknown key"):
        LearningRule.of_profile(bad, "smoke")
    assert smoke.min_bleu_gain > 0  # translation must beat copying the source
    for value in (-1.0, "2", True):
        bad = {"profiles": {"smoke": {"learning": {"min_bleu_gain": value}}}}
        with pytest.raises(ConfigError, match=r"learning\.min_bleu_gain: BLEU points"):
            LearningRule.of_profile(bad, "smoke")


def cli_workdir(tmp_path: Path, acc: list[float]) -> Path:
    """params.yaml with a learning rule, prepared data under data/, a summary of two seeds."""
    rule = {"min_gain": 0.1, "min_test_items": 4, "max_ppl_ratio": 0.7, "variant": "baseline"}
    params = {"profile": "smoke", "profiles": {"smoke": {"learning": rule}}}
    tmp_path.mkdir()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    data = classification_data(tmp_path / "data" / "smoke" / "prepared" / "cls")
    frame = summary("cls", "test_acc", acc, load_manifest(data)["content_hash"])
    frame.to_parquet(tmp_path / "summary.parquet")
    return tmp_path


def run_cli(work: Path) -> None:
    main(
        ["--summary", str(work / "summary.parquet"), "--out", str(work / "learning.md"),
         "--params", str(work / "params.yaml"), "--data-root", str(work)]
    )  # fmt: skip


def test_command_line_passes_quietly_and_fails_loudly(tmp_path) -> None:
    run_cli(cli_workdir(tmp_path / "good", [0.75, 0.75]))
    table = (tmp_path / "good" / "learning.md").read_text()
    assert "| cls " in table and "pass" in table and "+0.250" in table
    with pytest.raises(SystemExit) as exit_:
        run_cli(cli_workdir(tmp_path / "bad", [0.5, 0.5]))
    assert "cls does not learn" in str(exit_.value) and "0.5 vs majority-class rate 0.5" in str(
        exit_.value
    )
    assert "FAIL" in (tmp_path / "bad" / "learning.md").read_text()


# -- a model really trained: true labels learn, shuffled training labels do not ---------------


@pytest.fixture(scope="module")
def listops_data(tmp_path_factory) -> dict[str, Path]:
    """Small shallow ListOps (LRA's generator), and a copy with its training labels shuffled."""
    root = tmp_path_factory.mktemp("listops")
    spec = listops.ListOpsSpec(
        n_train=1600, n_val=100, n_test=200, min_length=4, max_length=40, max_depth=3,
        max_args=5, seed=0,
    )  # fmt: skip
    listops.fetch(spec, root / "raw")
    true = root / "true"
    manifest = listops.prepare(spec, root / "raw", true)
    splits = {}
    for name in SPLITS:
        split = load_split(true, name)
        ends = np.asarray(split.offsets)
        seqs = [np.asarray(split.tokens[a:b]) for a, b in zip(ends[:-1], ends[1:], strict=True)]
        labels = np.asarray(split.labels)
        if name == "train":
            labels = np.random.default_rng(0).permutation(labels)
        splits[name] = (seqs, labels)
    shuffled = root / "shuffled"
    write_prepared(shuffled, splits, manifest["vocab"], manifest["num_classes"], {"task": "x"})
    return {"true": true, "shuffled": shuffled}


def trained_summary(data: Path, out: Path) -> pd.DataFrame:
    run = resolve(load_params(ROOT / "params.yaml"), "listops", "baseline", 0, "smoke")
    run = replace(
        run,
        data_dir=str(data),
        model=replace(run.model, dim=32, layers=1, heads=2, mlp_dim=64, dropout=0.0),
        train=replace(run.train, batch_size=32, lr=1e-2, warmup_steps=10, epochs=4, patience=4),
    )
    train(run, out, track=False, progress=False, threads=1)
    return pd.read_parquet(out / "result.parquet")


@pytest.mark.parametrize("labels", ["true", "shuffled"])
def test_a_model_trained_on_shuffled_labels_fails_the_check(listops_data, labels, tmp_path):
    data = listops_data[labels]
    frame = trained_summary(data, tmp_path / "run")
    row = learning_table(frame, lambda task: data, LearningRule()).iloc[0]
    assert row["test_items"] == 200
    if labels == "true":
        assert row["verdict"] == "pass", row.to_dict()
    else:
        assert row["verdict"] == "FAIL", row.to_dict()
        assert row["reason"].startswith("listops does not learn: baseline mean test accuracy")
        for number in (row["input_blind"], row["mean"]):
            assert f"{number:.4g}" in row["reason"]
