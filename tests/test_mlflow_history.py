"""MLflow as a researcher compares runs, against a real ``mlflow server`` on 127.0.0.1: a
parent per setting with its seeds as children and the seeds' mean, interval and n; a params
change keeps the old run (``pdelab.current`` = false), nothing deleted; a leaking model is
never ranked by ``test_ppl``; each value logged once, counts as params, a GPU run's memory as
a system metric. Records are written as the trainer writes them (conftest.write_run)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from conftest import write_run
from pdelab.records.causal_verdict import Causality
from pdelab.tracking.sync import client_for, sync
from tests.test_tracking_server import server  # noqa: F401 - the module-scoped fixture, reused

pytestmark = pytest.mark.slow  # an mlflow server starts: about 10 s


def make_run(
    root: Path, task: str, variant: str, seed: int, result: dict[str, Any], **spec: Any
) -> Path:
    """A run folder of ``task`` (its own experiment) with ``result`` in result.parquet."""
    folder = root / task / variant / f"seed{seed}"
    full = {"task": task, "variant": variant, "seed": seed, "profile": "smoke"}
    full |= {"data_dir": f"data/smoke/prepared/{task}"} | spec
    write_run(folder, result=result, spec=full)
    return folder


def experiment_runs(client: Any, task: str, where: str = "", order: list[str] | None = None):
    from mlflow.entities import ViewType

    exp = client.get_experiment_by_name(f"pdelab-{task}-smoke")
    return client.search_runs(
        [exp.experiment_id], where, run_view_type=ViewType.ALL, order_by=order or []
    )


def t_interval(values: list[float]) -> tuple[float, float]:
    """The 95% t interval of the mean, computed here from its definition."""
    mean, n = statistics.fmean(values), len(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / n**0.5
    return mean - half, mean + half


ACCURACY = {"baseline": [0.50, 0.55, 0.62], "wide": [0.70, 0.66, 0.74]}


def test_a_parent_per_variant_holds_its_seeds_and_their_aggregates(
    server,  # noqa: F811
    tmp_path,
) -> None:
    folders = [
        make_run(tmp_path, "agg", variant, seed, {"test_acc": acc})
        for variant, values in ACCURACY.items()
        for seed, acc in enumerate(values)
    ]
    client = client_for(server)
    sync(folders, client)
    runs = experiment_runs(client, "agg")
    parents = {r.data.tags["variant"]: r for r in runs if r.data.tags.get("pdelab.parent")}
    assert sorted(parents) == sorted(ACCURACY)
    for variant, values in ACCURACY.items():
        parent = parents[variant]
        children = [
            r
            for r in runs
            if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
            and r.data.tags["variant"] == variant
        ]
        assert sorted(int(r.data.tags["seed"]) for r in children) == [0, 1, 2]
        m = parent.data.metrics
        low, high = t_interval(values)
        assert m["test_acc_mean"] == pytest.approx(statistics.fmean(values))
        assert (m["test_acc_low"], m["test_acc_high"]) == pytest.approx((low, high))
        assert m["test_acc_n"] == 3
        assert parent.data.tags["pdelab.current"] == "true"
        assert "seed" not in parent.data.params and parent.data.params["variant"] == variant

    # a fourth seed: the parent is recomputed, not made again
    extra = make_run(tmp_path, "agg", "baseline", 3, {"test_acc": 0.40})
    sync([extra], client)
    runs = experiment_runs(client, "agg")
    [parent] = [
        r for r in runs if r.data.tags.get("pdelab.parent") and r.data.tags["variant"] == "baseline"
    ]
    values = [*ACCURACY["baseline"], 0.40]
    assert parent.info.run_id == parents["baseline"].info.run_id
    assert parent.data.metrics["test_acc_n"] == 4
    assert parent.data.metrics["test_acc_mean"] == pytest.approx(statistics.fmean(values))
    assert parent.data.metrics["test_acc_low"] == pytest.approx(t_interval(values)[0])


def test_a_params_change_keeps_the_old_run_and_deletes_nothing(
    server,  # noqa: F811
    tmp_path,
) -> None:
    client = client_for(server)
    folder = make_run(tmp_path, "hist", "baseline", 0, {"test_acc": 0.5})
    [first] = sync([folder], client)
    make_run(tmp_path, "hist", "baseline", 0, {"test_acc": 0.6}, model={"dim": 32})
    [second] = sync([folder], client)
    assert second["action"] == "replaced" and second["run_id"] != first["run_id"]
    runs = {r.info.run_id: r for r in experiment_runs(client, "hist")}
    assert all(r.info.lifecycle_stage == "active" for r in runs.values())  # none deleted
    old, new = runs[first["run_id"]], runs[second["run_id"]]
    assert old.data.tags["pdelab.current"] == "false" and old.data.metrics["test_acc"] == 0.5
    assert new.data.tags["pdelab.current"] == "true" and new.data.metrics["test_acc"] == 0.6
    assert old.data.tags["pdelab.spec_sha256"] != new.data.tags["pdelab.spec_sha256"]
    parents = [r for r in runs.values() if r.data.tags.get("pdelab.parent")]
    current = {p.data.tags["pdelab.current"]: p for p in parents}
    assert sorted(current) == ["false", "true"] and len(parents) == 2
    assert new.data.tags["mlflow.parentRunId"] == current["true"].info.run_id
    assert old.data.tags["mlflow.parentRunId"] == current["false"].info.run_id
    assert sync([folder], client)[0]["action"] == "kept"  # a rerun logs nothing new
    assert len(experiment_runs(client, "hist")) == 4


def test_sorted_by_test_ppl_a_leaking_variant_is_marked_not_ranked(
    server,  # noqa: F811
    tmp_path,
) -> None:
    verdicts = {"causal": (Causality.CAUSAL, 5.0), "leaky": (Causality.LEAKS, 1.01)}
    folders = [
        make_run(
            tmp_path,
            "lm",
            variant,
            seed,
            {"test_ppl": ppl + seed / 10, "causality": verdict.value, "max_leak": 0.0},
        )
        for variant, (verdict, ppl) in verdicts.items()
        for seed in range(2)
    ]
    client = client_for(server)
    sync(folders, client)
    seeds = experiment_runs(client, "lm", "tags.seed != ''", ["metrics.test_ppl ASC"])
    ranked = [r.data.tags["variant"] for r in seeds if "test_ppl" in r.data.metrics]
    assert ranked == ["causal", "causal"]
    assert seeds[0].data.tags["variant"] == "causal"  # a run without test_ppl sorts last
    for run in seeds:
        leaky = run.data.tags["variant"] == "leaky"
        assert run.data.tags["pdelab.leaks"] == ("true" if leaky else "false")
        assert run.data.tags["pdelab.causality"] == verdicts[run.data.tags["variant"]][0].value
        assert ("test_ppl_leaking" in run.data.metrics) is leaky
        assert ("test_ppl" in run.data.metrics) is not leaky
    parents = experiment_runs(
        client, "lm", "tags.`pdelab.parent` = 'true'", ["metrics.test_ppl_mean ASC"]
    )
    assert [p.data.tags["variant"] for p in parents] == ["causal", "leaky"]
    leaky = parents[1]
    assert leaky.data.tags["pdelab.leaks"] == "true" and "test_ppl_mean" not in leaky.data.metrics
    assert leaky.data.metrics["test_ppl_leaking_mean"] == pytest.approx(1.06)


def test_each_value_is_logged_once_counts_as_params(server, tmp_path) -> None:  # noqa: F811
    result = {"parameters": 12345, "micro_batch": 8, "peak_memory_mb": 512.0, "device": "cuda"}
    folder = make_run(tmp_path, "once", "baseline", 7, result)
    client = client_for(server)
    [row] = sync([folder], client)
    run = client.get_run(row["run_id"])
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["parameters"] == "12345" and params["micro_batch"] == "8"
    assert params["seed"] == "7" and "parameters" not in metrics
    assert not [k for k in params if k.startswith("final_")]
    assert metrics["system/gpu_peak_memory_megabytes"] == 512.0
    assert "peak_memory_mb" not in metrics
    assert "git_commit" in tags and "pdelab.git_commit" not in tags
