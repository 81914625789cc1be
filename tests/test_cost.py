"""The cost study: paired ratios and their interval, overhead verdicts, the table and claims read
from the interleaved timing file, and one small real timing run on prepared ListOps."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from conftest import TINY_DATA, make_workdir
from pdelab.papers.diffusion_positions.claims import NOT_MEASURABLE, overhead_verdict
from pdelab.papers.diffusion_positions.report import write_cost
from pdelab.plan.step_timing import (
    INTERVAL,
    NOT_MEASURED,
    interleaved,
    main,
    median_interval,
    paired_ratio,
    summarize,
    timed_batches,
)
from pdelab.report.context import StudyContext
from pdelab.spec.config import load_params, resolve
from pdelab.spec.studies import Study
from pdelab.training.train import build, train_epoch, train_step

STUDY = {
    "kind": "cost",
    "title": "Cost",
    "tasks": ["listops"],
    "baseline": "baseline",
    "variants": ["baseline", "after_embedding", "after_mlp"],
    "paper_table": "diffusion_cost_listops.csv",
}


# -- statistics --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [6, 7, 10, 17, 30, 50, 101])
def test_median_interval_takes_the_widest_ranks_binomial_coverage_allows(n: int) -> None:
    median, low, high = median_interval(range(n))  # the values are their own ranks - 1
    k = int(low) + 1
    assert high == n - k and median == (n - 1) / 2

    def coverage(rank: int) -> float:  # P(x_(rank) <= median <= x_(n+1-rank))
        return 1 - 2 * stats.binom.cdf(rank - 1, n, 0.5)

    assert coverage(k) >= 0.95 > coverage(k + 1)


def test_median_interval_needs_six_values_for_95_percent() -> None:
    assert all(math.isnan(v) for v in median_interval([1.0, 2.0, 3.0, 4.0, 5.0])[1:])
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (3.5, 1.0, 6.0)


def test_pairing_cancels_what_the_machine_does_to_both() -> None:
    rng = np.random.default_rng(0)
    load = 1 + 2 * rng.random(40)  # another job slows some repetitions threefold
    base = 0.01 * load
    ratio, low, high = paired_ratio(list(1.1 * base * (1 + 0.002 * rng.standard_normal(40))), base)
    assert abs(ratio - 1.1) < 0.002 and 1.09 < low <= ratio <= high < 1.11


def test_summarize_gives_each_variant_its_ratio_and_no_memory_where_none_was_measured() -> None:
    frame = summarize({"baseline": [1.0] * 6, "slow": [1.5] * 6}, "baseline").set_index("variant")
    assert frame.loc["slow", "time_ratio"] == 1.5 == frame.loc["slow", "time_ratio_low"]
    assert frame.loc["baseline", "time_ratio"] == 1.0
    assert math.isnan(frame.loc["slow", "memory_ratio"])
    memory = {"baseline": 100.0, "slow": 110.0}
    with_memory = summarize({"baseline": [1.0] * 6, "slow": [1.5] * 6}, "baseline", memory)
    assert math.isclose(with_memory.set_index("variant").loc["slow", "memory_ratio"], 1.1)
    with pytest.raises(ValueError, match="baseline"):
        summarize({"slow": [1.0]}, "baseline")


def test_interleaving_rotates_the_order_and_pairs_repetitions() -> None:
    calls: list[tuple[str, int]] = []
    steps = {name: (lambda r, name=name: calls.append((name, r))) for name in "abc"}
    ticks = iter(range(1000))
    times = interleaved(
        steps, repeats=3, warmup=2, device=torch.device("cpu"), clock=lambda: next(ticks)
    )
    warm, timed = calls[:6], calls[6:]
    assert warm == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("c", 1)]
    assert [n for n, _ in timed] == list("abc" + "bca" + "cab")
    assert [r for _, r in timed] == [0] * 3 + [1] * 3 + [2] * 3
    assert all(len(t) == 3 and all(x == 1 for x in t) for t in times.values())


# -- verdicts ----------------------------------------------------------------------------------


def test_a_tight_interval_near_the_papers_overhead_is_reproduced() -> None:
    assert overhead_verdict(5.0, 4.8, 5.2, paper=5.6) == "reproduced"


def test_a_tight_interval_far_from_it_is_not_reproduced() -> None:
    assert overhead_verdict(39.7, 39.3, 40.4, paper=18.4) == "not reproduced"


def test_noise_reads_not_measurable_never_not_reproduced() -> None:
    # what the training jobs' step times gave on a shared CPU: -24.8% against the paper's +5.6
    assert overhead_verdict(-24.8, -40.0, -5.0, paper=5.6) == NOT_MEASURABLE  # wider than effect
    assert overhead_verdict(10.0, 9.0, 12.0, paper=5.6) == NOT_MEASURABLE  # straddles 5.6 + 5
    assert overhead_verdict(3.0, math.nan, math.nan, paper=5.6) == NOT_MEASURABLE


# -- the table and the claims read the timing file ---------------------------------------------


def timing(device: str, noise: float, repeats: int = 30) -> pd.DataFrame:
    """A timing file's rows from synthetic step times: after_embedding +5%, after_mlp +40%."""
    rng = np.random.default_rng(3)
    base = 0.02 * (1 + rng.random(repeats))
    times = {
        variant: list(base * ratio * (1 + noise * rng.standard_normal(repeats)))
        for variant, ratio in (("baseline", 1.0), ("after_embedding", 1.05), ("after_mlp", 1.4))
    }
    frame = summarize(times, "baseline")
    frame.insert(0, "task", "listops")
    return frame.assign(
        profile="smoke",
        device=device,
        device_name=f"{device} (test)",
        threads=1,
        torch_version="test",
        repeats=repeats,
        warmup=1,
        batches=2,
        batch_size=4,
        interval=INTERVAL,
        memory_measured_as=NOT_MEASURED,
    )


def test_cost_table_says_where_its_numbers_come_from(tmp_path) -> None:
    (tmp_path / "cost").mkdir()
    timing("cpu", noise=0.01, repeats=7).to_parquet(tmp_path / "cost" / "listops.parquet")
    (tmp_path / "tables").mkdir()
    md, tex = tmp_path / "tables" / "cost.md", tmp_path / "tables" / "cost.tex"
    table = write_cost(
        StudyContext(
            Study.from_block("cost", STUDY), pd.DataFrame(), "smoke", md, tex, tmp_path / "c.png"
        )
    )
    table.write(md, tex, "smoke")  # the study step writes what the writer returns
    text = md.read_text()
    assert "interleaved in one process on cpu (test), 1 thread(s), 7 repeats, 95% interval" in text
    assert "training runs" not in text


def test_cost_table_without_its_timing_file_names_the_rule(tmp_path) -> None:
    (tmp_path / "tables").mkdir()
    md, tex = tmp_path / "tables" / "cost.md", tmp_path / "tables" / "cost.tex"
    with pytest.raises(FileNotFoundError, match="cost_timing"):
        write_cost(
            StudyContext(
                Study.from_block("cost", STUDY), pd.DataFrame(), "smoke", md, tex, tmp_path / "c"
            )
        )


# -- a real timing run on a tiny prepared ListOps ----------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A folder with a tiny params.yaml (a one-layer model) and its prepared ListOps data."""
    data = TINY_DATA | {"n_train": 48, "n_val": 8, "n_test": 8, "max_length": 40}
    train = {"batch_size": 16, "warmup_steps": 4, "epochs": 1, "patience": 1}
    return make_workdir(tmp_path_factory.mktemp("cost"), data, train)


@pytest.fixture
def in_tiny(tiny: Path, monkeypatch):
    """Run inside the tiny project; torch's thread count is restored afterwards."""
    monkeypatch.chdir(tiny)
    threads = torch.get_num_threads()
    yield tiny
    torch.set_num_threads(threads)


def test_timed_step_is_the_training_step(in_tiny: Path) -> None:
    run = resolve(load_params("params.yaml"), "listops", "multiscale_after_embedding", 0)
    trained = build(run, in_tiny / "a")
    torch.manual_seed(7)
    train_epoch(trained, 1, progress=False)
    timed = build(run, in_tiny / "b")
    torch.manual_seed(7)
    for index in timed_batches(timed, 100):  # the whole first epoch, in training's order
        train_step(timed, index)
    for (name, a), b in zip(
        trained.model.state_dict().items(), timed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_real_timing_run_writes_the_timing_file(in_tiny: Path, capsys) -> None:
    out = in_tiny / "results" / "cost" / "listops.parquet"
    variants = ["baseline", "after_embedding", "multiscale_after_embedding"]
    main(
        ["--task", "listops", "--variants", *variants, "--out", str(out), "--repeats", "6"]
        + ["--warmup", "1", "--batches", "2", "--threads", "1"]
    )
    frame = pd.read_parquet(out).set_index("variant")
    assert list(frame.index) == variants
    assert (frame["repeats"] == 6).all() and (frame["threads"] == 1).all()
    assert (frame["device"] == "cpu").all() and (frame["torch_version"] == torch.__version__).all()
    assert all(len(t) == 6 and (t > 0).all() for t in frame["step_times_s"])
    assert frame.loc["baseline", "time_ratio"] == 1.0
    for variant in variants[1:]:
        row = frame.loc[variant]
        assert row["time_ratio_low"] <= row["time_ratio"] <= row["time_ratio_high"]
    assert frame["peak_memory_mb"].isna().all()
    assert frame["memory_measured_as"].str.startswith("not measured").all()
    assert "interleaved in one process" in capsys.readouterr().out
