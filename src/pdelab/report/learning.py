"""Did each task's model learn? Its test score against a predictor that ignores the input.

A run can finish, log and fill every table while its model learned nothing: accuracy at the
majority-class rate, perplexity at the unigram level, BLEU at what copying the source scores.
A table of such numbers checks the plumbing only. This module compares, per task, one
variant's mean test score over its seeds (``results/summary.parquet``) with what a trivial
predictor scores on the same prepared test set:

* classification: the rate of the test set's most frequent label;
* language modelling: the unigram perplexity of the test targets, with add-one smoothed
  frequencies of the training targets over the vocabulary less padding. Targets are the tokens
  :func:`pdelab.training.language_model.next_token_loss` scores: every real token but a
  document's first (the trainer's windows overlap by one token, so that set does not depend
  on ``seq_len``);
* translation: the corpus BLEU of copying each source sentence unchanged
  (:func:`pdelab.training.bleu.copy_source_bleu`), against the greedy-decoding corpus BLEU the run
  records (``test_bleu``). Both score vocabulary tokens, a reference word outside the target
  vocabulary matching nothing: exact for the model, which cannot output such a word, while a
  copier could have matched the few of them its source vocabulary holds, so the baseline is
  slightly low; ``min_bleu_gain`` leaves room for that.

A profile's ``learning`` block holds the rule (``min_gain``: accuracy points over the majority
rate, ``min_test_items``, ``max_ppl_ratio``: perplexity over the unigram's, ``min_bleu_gain``:
BLEU points over copying, ``variant``); a profile without it gets the table and no verdicts.
The command line exits non-zero, naming the task and both numbers, when a task does not
learn::

    python -m pdelab.report.learning --summary results/summary.parquet \\
        --out results/tables/learning.md
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pdelab.data.pairs import load_pairs
from pdelab.data.store import PAD_ID, Split, load_split, verified_manifest
from pdelab.report.claims import judged_profile
from pdelab.report.table_file import Grid, Part, TableFile
from pdelab.spec.config import PARAMS_FILE, ConfigError, active_profile, data_dir, load_params
from pdelab.training.bleu import copy_source_bleu

TOLERANCE = 1e-9  # a gain of exactly min_gain passes despite floating-point rounding


@dataclass(frozen=True)
class LearningRule:
    """What counts as learning (``profiles.<profile>.learning`` in params.yaml)."""

    min_gain: float = 0.10
    min_test_items: int = 100
    max_ppl_ratio: float = 0.7
    min_bleu_gain: float = 1.0
    variant: str = "baseline"

    @classmethod
    def of_profile(cls, params: dict[str, Any], profile: str) -> LearningRule | None:
        """The profile's rule, or None when it has no ``learning`` block (report only)."""
        block = params["profiles"][profile].get("learning")
        if block is None:
            return None
        where = f"profiles.{profile}.learning"
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(block) - names)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key; valid keys: {sorted(names)}")
        gain = block.get("min_bleu_gain", cls.min_bleu_gain)
        if isinstance(gain, bool) or not isinstance(gain, int | float) or gain < 0:
            raise ConfigError(
                f"{where}.min_bleu_gain: BLEU points over the copy-the-source baseline, a "
                f"number >= 0; got {gain!r}"
            )
        return cls(**block)


@dataclass(frozen=True)
class Baseline:
    """What the input-blind predictor scores on a task's test set."""

    kind: str  # "classification", "language model" or "translation"
    value: float  # the majority-class rate, the unigram perplexity, or the copy BLEU x 100
    test_items: int  # test examples (sentence pairs), or test targets (tokens) of an LM
    data_hash: str


def lm_targets(split: Split) -> np.ndarray:
    """The tokens a language model is scored on: every real token but each document's first."""
    tokens = np.asarray(split.tokens, dtype=np.int64)
    keep = np.ones(len(tokens), dtype=bool)
    starts = np.asarray(split.offsets[:-1], dtype=np.int64)
    keep[starts[starts < np.asarray(split.offsets[1:])]] = False  # non-empty documents
    return tokens[keep & (tokens != PAD_ID)]


def unigram_perplexity(train: np.ndarray, test: np.ndarray, vocab_size: int) -> float:
    """Perplexity of ``test`` under add-one smoothed frequencies of ``train``, over the
    ``vocab_size`` token ids less padding (the outcomes a model can be scored on)."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    counts[PAD_ID] = 0.0
    return math.exp(-float(np.log(counts[test] / counts.sum()).mean()))


def majority_rate(labels: np.ndarray) -> float:
    """The share of the most frequent label."""
    return float(np.bincount(np.asarray(labels, dtype=np.int64)).max() / len(labels))


def input_blind(path: Path | str) -> Baseline:
    """The trivial predictor's score on one prepared dataset's test split: input-blind, or
    for translation copying the source. The folder's files are checked against its manifest's
    hashes first (pdelab.data.store.verified_manifest): a swapped split is refused, not scored."""
    manifest = verified_manifest(path)
    if manifest.get("kind") == "translation":
        pairs = load_pairs(path, "test")
        bleu = copy_source_bleu(pairs.src, pairs.tgt, manifest["src_vocab"], manifest["tgt_vocab"])
        return Baseline("translation", bleu, len(pairs), manifest["content_hash"])
    test = load_split(path, "test")
    if manifest.get("kind") == "lm":
        targets = lm_targets(test)
        train = lm_targets(load_split(path, "train"))
        ppl = unigram_perplexity(train, targets, len(manifest["vocab"]))
        return Baseline("language model", ppl, len(targets), manifest["content_hash"])
    return Baseline(
        "classification", majority_rate(test.labels), len(test), manifest["content_hash"]
    )


SCORE = {  # kind -> (result column, what it is, what the trivial predictor scores)
    "classification": ("test_acc", "test accuracy", "majority-class rate"),
    "language model": ("test_ppl", "test perplexity", "unigram perplexity"),
    "translation": ("test_bleu", "test BLEU (greedy)", "copy-the-source BLEU"),
}


def _scores(runs: pd.DataFrame, kind: str) -> list[float]:
    column = SCORE[kind][0]
    if column not in runs:
        return [math.nan] * len(runs)
    return [float(x) for x in runs.sort_values("seed")[column]]


def _gain(kind: str, mean: float, baseline: float) -> float:
    """Accuracy or BLEU points over the baseline, or the ratio of perplexities."""
    return mean / baseline if kind == "language model" else mean - baseline


def _failure(
    task: str, variant: str, base: Baseline, runs: pd.DataFrame, rule: LearningRule
) -> str:
    """Why the task fails the rule, naming the task and both numbers; "" when it passes."""
    lm = base.kind == "language model"
    scores = _scores(runs, base.kind)
    _, what, blind = SCORE[base.kind]
    used = sorted({str(h) for h in runs.get("data_hash", [])} - {base.data_hash})
    if used:
        return (
            f"{task}: the prepared data ({base.data_hash[:12]}) is not the data its runs used "
            f"({used[0][:12]}); rebuild the data or rerun"
        )
    if not scores:
        return f"{task}: no {variant} runs in the summary"
    mean = float(np.mean(scores))
    if math.isnan(mean):
        return f"{task}: a {variant} run has no {what} (diverged?)"
    numbers = f"{variant} mean {what} {mean:.4g} vs {blind} {base.value:.4g}"
    if base.test_items < rule.min_test_items:
        items = "test tokens" if lm else "test items"
        return (
            f"{task}: only {base.test_items} {items}, fewer than {rule.min_test_items} ({numbers})"
        )
    ratio, gain = mean / base.value, mean - base.value
    if lm and ratio > rule.max_ppl_ratio + TOLERANCE:
        return f"{task} does not learn: {numbers} (ratio {ratio:.3f} > {rule.max_ppl_ratio})"
    if base.kind == "translation":
        if gain < rule.min_bleu_gain - TOLERANCE:
            return f"{task} does not learn: {numbers} (gain {gain:+.2f} < {rule.min_bleu_gain})"
        return ""
    if not lm and gain < rule.min_gain - TOLERANCE:
        return f"{task} does not learn: {numbers} (gain {gain:+.3f} < {rule.min_gain})"
    return ""


def learning_table(
    summary: pd.DataFrame,
    data_of: Callable[[str], Path | str],
    rule: LearningRule | None,
    variant: str | None = None,
) -> pd.DataFrame:
    """One row per task of ``summary``: the trivial predictor's score on its test set (read
    from ``data_of(task)``), the variant's test scores per seed and their mean, the gain
    (accuracy or BLEU points) or ratio (perplexity), and the verdict under ``rule`` with the
    reason it fails."""
    variant = variant or (rule.variant if rule else LearningRule.variant)
    rows = []
    for task in sorted(summary["task"].unique()):
        base = input_blind(data_of(task))
        runs = summary[(summary["task"] == task) & (summary["variant"] == variant)]
        scores = _scores(runs, base.kind)
        mean = float(np.mean(scores)) if scores else math.nan
        reason = _failure(task, variant, base, runs, rule) if rule else ""
        rows.append(
            {
                "task": task,
                "kind": base.kind,
                "test_items": base.test_items,
                "input_blind": base.value,
                "variant": variant,
                "seeds": len(scores),
                "per_seed": scores,
                "mean": mean,
                "gain": _gain(base.kind, mean, base.value),
                "verdict": "" if rule is None else "FAIL" if reason else "pass",
                "reason": reason,
            }
        )
    return pd.DataFrame(rows)


def _table_file(table: pd.DataFrame, rule: LearningRule | None, profile: str) -> TableFile:
    """The learning check as a report table: what is compared, the rule, the table, and why
    each failing task fails."""

    def blind(row: pd.Series) -> str:
        name = {"language model": "unigram ppl", "translation": "copy BLEU"}.get(
            row["kind"], "majority"
        )
        return f"{row['input_blind']:.4g} ({name})"

    def gain(row: pd.Series) -> str:
        if row["kind"] == "language model":
            return f"x{row['gain']:.3f}"
        if row["kind"] == "translation":
            return f"{row['gain']:+.2f}"
        return f"{row['gain']:+.3f}"

    shown = pd.DataFrame(
        {
            "task": table["task"],
            "test items": table["test_items"],
            "input-blind": table.apply(blind, axis=1),
            "ours (mean)": table["mean"].map(lambda x: f"{x:.4g}"),
            "per seed": table["per_seed"].map(lambda s: ", ".join(f"{x:.4g}" for x in s)),
            "gain": table.apply(gain, axis=1),
        }
    )
    if rule is not None:
        shown["verdict"] = table["verdict"]
    variant = table["variant"].iloc[0] if len(table) else (rule.variant if rule else "baseline")
    parts: list[Part] = [
        f"# Does each task learn? ({profile} profile)",
        f"Mean test score of variant `{variant}` over its seeds against a predictor that ignores "
        "the input: the test set's majority-class rate (accuracy; gain in points) or the "
        "unigram perplexity of the test tokens under add-one smoothed training frequencies "
        "(language models; gain as the ratio of perplexities). Translation: greedy-decoding "
        "corpus BLEU against copying the source (gain in BLEU points). Test items are "
        "examples (sentence pairs), or the tokens a language model is scored on.",
    ]
    if rule is None:
        lines = [f"No `profiles.{profile}.learning` rule: reported, not checked."]
    else:
        lines = [
            f"Rule (`profiles.{profile}.learning`): accuracy >= majority rate + "
            f"{rule.min_gain:g}, perplexity <= {rule.max_ppl_ratio:g} x unigram, BLEU >= copy "
            f"+ {rule.min_bleu_gain:g}, on >= {rule.min_test_items} test items."
        ]
    if not judged_profile(profile):
        check = f"{profile.capitalize()} numbers check the pipeline; they are not a reproduction."
        lines.append(check)
    parts += ["\n".join(lines), Grid(shown, floatfmt="g", numparse=False)]
    failing = table.loc[table["verdict"] == "FAIL", "reason"].tolist()
    if failing:
        parts.append("\n".join(f"- {reason}" for reason in failing))
    return TableFile(parts)


def write_learning(
    summary: pd.DataFrame,
    out: Path,
    params: dict[str, Any],
    profile: str | None = None,
    root: Path = Path("."),
) -> pd.DataFrame:
    """Write the table for the summary's profile (Markdown, and its HTML page beside it);
    return it (its ``verdict`` column says which tasks fail the profile's rule)."""
    profiles = sorted(summary["profile"].unique()) if "profile" in summary else []
    profile = active_profile(params, profile or (profiles[0] if len(profiles) == 1 else None))
    rule = LearningRule.of_profile(params, profile)
    table = learning_table(summary, lambda task: root / data_dir(profile, task), rule)
    out.parent.mkdir(parents=True, exist_ok=True)
    _table_file(table, rule, profile).write(out, None, profile)  # the page: what the report shows
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.report.learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--summary", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--params", type=Path, default=PARAMS_FILE)
    parser.add_argument("--profile", help="default: the summary's profile")
    parser.add_argument(
        "--data-root", type=Path, default=Path("."), help="the folder holding data/"
    )
    args = parser.parse_args(argv)
    table = write_learning(
        pd.read_parquet(args.summary),
        args.out,
        load_params(args.params),
        args.profile,
        args.data_root,
    )
    failing = table.loc[table["verdict"] == "FAIL", "reason"].tolist()
    if failing:
        sys.exit("not every task learns:\n" + "\n".join(f"  {r}" for r in failing))


if __name__ == "__main__":
    main()
