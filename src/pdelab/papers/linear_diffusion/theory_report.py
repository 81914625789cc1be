"""The theory checks as the report shows them: trained models measured, a table of claims with
verdicts, a six-panel figure, a CLI.

``python -m pdelab.papers.linear_diffusion.theory_report --out-dir results KEY=DIR ...`` (KEY =
task/variant/seed, DIR a trained LDN run's folder) writes THEORY_OUTPUTS under the out dir. The
random-parameter checks come from theory.py; for each trained model, test examples go through
the model's own forward, each layer's K and D are materialised from the state it read
(``LDNBlock.operators``), and the same measures are taken: row sums, the step bound, ||A||_2,
the columns (mass), and which outputs depend on which inputs after the model's depth (the
support of the product of the layers' Euler matrices: F and LayerNorm act per token, so the
tokens mix through these matrices only).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pdelab.data.store import load_split
from pdelab.papers.linear_diffusion import THEORY_OUTPUTS
from pdelab.papers.linear_diffusion.layer import LDNBlock
from pdelab.papers.linear_diffusion.theory import (
    cost_in_length,
    euler_matrix,
    global_dependency,
    growth_exponent,
    kernel_measures,
    mass_check,
    mass_drift,
    norm_search,
    row_sum_check,
    support_power,
    theorem_1_counterexample,
)
from pdelab.records.atomic import atomic_path
from pdelab.records.run import write_parquet
from pdelab.report import tidy
from pdelab.report.claims import (
    FAILS,
    HOLDS,
    NO_EXPERIMENT,
    Reading,
    agreed,
    readings_cell,
    readings_of,
)
from pdelab.report.profiles import PROFILE_NOTES, profile_here
from pdelab.report.table_file import Grid, TableFile
from pdelab.spec.config import RunSpec
from pdelab.spec.plugins import import_mechanisms
from pdelab.training.trained import load_trained

OUTPUTS = THEORY_OUTPUTS
STUDY = "ldn_theory"  # the tidy CSV's study (pdelab.report.tidy)
EXAMPLES = 8  # test examples per trained model
FLOAT32_TOLERANCE = 1e-5  # a row sum relative to the largest degree, in float32
# the verdicts rest on random and constructed kernels, which hold in any profile; what the
# trained models show is quoted beside them, named as this profile's
TRAINED = "this profile's trained models (quoted, not judged)"
# Theorem 1 as A.2 states it: its hypotheses, and A.1's operator
THEOREM_1 = (
    "Theorem 1: for K_ts ≥ 0 and G(K) strongly connected, some power of "
    "A = I + δt (K − diag(K1)) is > 0"
)
THEOREM_1_LAYER = "Theorem 1 on the layer (two-sided φ, step bound on)"
ROW_SUMS = "Row sums of K and D are zero"
# checks of pdelab's implementation, not findings about the paper (the report keeps them apart)
OWN_CODE = (ROW_SUMS, THEOREM_1_LAYER)


def load_run(folder: Path) -> tuple[RunSpec, torch.nn.Module]:
    """A trained run's spec and its model at the best-validation checkpoint, checked to be the
    run's (pdelab.training.trained)."""
    trained = load_trained(folder)
    return trained.run, trained.model


@torch.no_grad()
def probe(run: RunSpec, model: torch.nn.Module) -> list[dict]:
    """The measures of :func:`probe_batch` on EXAMPLES test examples of the run's task."""
    split = load_split(run.data_dir, "test")
    batch = {k: torch.from_numpy(v) for k, v in split.batch(np.arange(EXAMPLES)).items()}
    return probe_batch(model, batch["ids"], batch.get("mask"))


@torch.no_grad()
def probe_batch(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None) -> list:
    """One row per LDN layer of a model on a batch: the kernel measures, the mass drift, and
    the share of (output, input) pairs of real tokens linked after the model's depth, with the
    number of such layers that would link them all. Where the step bound zeroes A_tt, the
    Euler matrices alone say output t ignores input t, but it does not: F(x_t, h_t) and
    psi(h_t, h_s) in K's row read h_t. ``linked_share_self`` composes the supports with the
    diagonal added, the layer's real dependency; ``linked_share`` the Euler matrices only."""
    classifier = getattr(model, "tower", model)  # the retrieval model's shared tower
    ids, mask = classifier.encoder_inputs(ids, mask)
    encoder = classifier.encoder
    taps: dict[str, torch.Tensor] = {}
    encoder(ids, mask, taps=taps)
    real = encoder.token_mask(mask)
    rows, reach, reach_self = [], None, None
    for i, block in enumerate(encoder.blocks):
        if not isinstance(block, LDNBlock) or not block.kernels:
            continue
        x = taps[f"blocks.{i}.input"]
        ops = block.operators(x, real)
        a = euler_matrix(ops)
        u = block.norm(x) if block.pre_norm else x
        keep = real if real is not None else torch.ones(a.shape[:2], dtype=torch.bool)
        pairs = keep[:, :, None] & keep[:, None, :]
        support = (a > 0) | ~pairs  # padding: not counted
        reach = support if reach is None else (support.double() @ reach.double()) > 0
        with_self = support | torch.eye(support.shape[-1], dtype=torch.bool)
        reach_self = (
            with_self if reach_self is None else (with_self.double() @ reach_self.double()) > 0
        )
        layers_needed = [support_power(s, s.shape[-1]) for s in support]
        rows.append(
            kernel_measures(ops)
            | {
                "layer": i,
                "T": int(keep.sum(-1).max()),
                "drift": float(mass_drift(a, u * keep[..., None]).max()),
                "linked_share": float((reach & pairs).sum() / pairs.sum()),
                "linked_share_self": float((reach_self & pairs).sum() / pairs.sum()),
                "layers_needed": float(np.mean([n if n else math.nan for n in layers_needed])),
            }
        )
    return rows


def trained_measures(runs: dict[str, Path]) -> pd.DataFrame:
    rows = []
    for key, folder in runs.items():
        task, variant, seed = key.split("/")
        run, model = load_run(folder)
        for row in probe(run, model):
            rows.append({"task": task, "variant": variant, "seed": int(seed)} | row)
    return pd.DataFrame(rows)


def cost_text(slopes: dict[str, float]) -> str:
    """Sec. 3.8's "scales to long sequences" against the cost of the layer as printed (its
    Gaussian g never zero: every pair scored) and of our banded truncation."""
    return (
        "no cost or complexity is printed. Growth exponent of FLOPs in T (last two lengths; "
        "1 linear, 2 quadratic): the kernel as printed scores all T² pairs, "
        f"{slopes['LDN reference (all T^2 pairs)']:.2f}, as a Transformer block's "
        f"{slopes['Transformer block (SDPA)']:.2f}; our banded truncation, a choice of this "
        f"implementation, {slopes['LDN banded (initial widths 4, 16)']:.2f} at its initial "
        f"widths and {slopes['LDN banded (widths at the cap, 63)']:.2f} at the widths' cap"
    )


def a4_readings(largest: float, norm_inf: float) -> list[Reading]:
    """A.4's ‖H‖ is not defined: as a matrix norm (spectral, or Frobenius, whose largest gain
    under A is the spectral norm of A) the bound fails; token by token, as the proof argues
    (each h_t a convex combination), max_t ‖h_t‖ never grows, since ‖A‖_∞ = 1."""
    grows = f"grows by up to {largest:.3f} (‖A‖₂)"
    return [
        Reading("‖H‖ the spectral norm", grows, FAILS if largest > 1 + 1e-9 else HOLDS),
        Reading(
            "‖H‖ the Frobenius norm",
            f"{grows}, its largest gain being ‖A‖₂",
            FAILS if largest > 1 + 1e-9 else HOLDS,
        ),
        Reading(
            "max_t ‖h_t‖₂, token by token as the proof argues",
            f"never grows: ‖A‖_∞ = {norm_inf:.3f}, each h_t a convex combination",
            HOLDS if norm_inf <= 1 + 1e-9 else FAILS,
        ),
    ]


def _per_length(norms: pd.DataFrame, kernels: str, column: str) -> str:
    part = norms[norms["kernels"] == kernels].sort_values("T")
    return ", ".join(f"{v:.2f}" for v in part[column])


def claims(
    sums: pd.DataFrame,
    dependency: pd.DataFrame,
    norms: pd.DataFrame,
    mass: pd.DataFrame,
    cost: pd.DataFrame,
    trained: pd.DataFrame,
) -> pd.DataFrame:
    """The statements checked: where the paper makes them and its words, what it says, what
    was measured, a verdict of the claims kit's vocabulary (holds, fails) and its reason."""
    f32 = sums[sums["dtype"] == "float32"]
    f64 = sums[sums["dtype"] == "float64"]
    worst = {
        d: float(part[["diffusion_row_sum", "attention_row_sum"]].max().max())
        for d, part in (("float32", f32), ("float64", f64))
    }
    trained_sum = (
        float(trained.filter(like="_row_sum").drop(columns="euler_row_sum_error").max().max())
        if len(trained)
        else math.nan
    )
    counter = theorem_1_counterexample()
    two = dependency[dependency["direction"] == "two_sided"]
    matches = int((two["L"] == two["predicted"]).sum())
    residue = int((two["L_float"] == two["predicted"]).sum())
    zeroed = int(two["zeroed"].sum())
    forward = dependency[dependency["direction"] == "forward"]
    k_only = norms[norms["kernels"] == "K"].sort_values("T")
    lengths = ", ".join(str(t) for t in k_only["T"])
    largest = float(norms["largest"].max())
    at = norms.loc[norms["largest"].idxmax()]
    symmetric = mass[mass["kernel"] == "symmetric K"]
    slopes = growth_exponent(cost)
    linked = (
        ""
        if trained.empty
        else f"; {TRAINED}, pairs linked after their depth: "
        f"{trained['linked_share'].min():.0%}-{trained['linked_share'].max():.0%} by the Euler "
        f"matrices alone, {trained['linked_share_self'].min():.0%}-"
        f"{trained['linked_share_self'].max():.0%} with each token's own input (F and psi "
        "read it where the step bound zeroes A_tt: the Euler matrices understate the "
        "dependency)"
    )
    readings = a4_readings(largest, float(norms["norm_inf"].max()))
    rows = [
        {
            "check": ROW_SUMS,
            "where": "Sec. 3.3",
            "quote": "We design a row-sum-zero kernel",
            "paper": "by construction",
            "ours": "largest row sum / largest degree, in absolute value: "
            f"{worst['float32']:.1e} (float32), "
            f"{worst['float64']:.1e} (float64) over {sums['config'].nunique()} kernel "
            f"configurations; {TRAINED}: "
            + ("not measured" if math.isnan(trained_sum) else f"{trained_sum:.1e}"),
            "verdict": HOLDS if worst["float32"] < FLOAT32_TOLERANCE else FAILS,
            "reason": "",
        },
        {
            "check": THEOREM_1,
            "where": "Sec. A.2",
            "quote": "there exists a positive integer L (dependent on the structure of K)",
            "paper": "an L exists under K_ts ≥ 0 and strong connectivity; no bound on it",
            "ours": f"T = 2, K = {counter['K']}, δt = {counter['dt']} (its hypotheses met: "
            "every K_ts ≥ 0, strongly connected; A.4's step bound allows δt = 1): "
            f"A = I + δt (K − diag(K1)) = {counter['A']}, the swap; no power up to "
            f"{counter['powers']} is positive. The proof calls A the identity plus a "
            "non-negative matrix, but its diagonal is 1 − δt·deg, 0 here",
            "verdict": FAILS if not counter["positive"] else HOLDS,
            "reason": "False as stated: at A.4's largest step a diagonal entry of A is 0 (A is "
            "the swap at T = 2), so the theorem needs a positive diagonal, δt strictly below "
            "A.4's bound.",
        },
        {
            "check": THEOREM_1_LAYER,
            "where": "Sec. A.2",
            "quote": "every output token  $h_i^{(L)}$  depends on every input token",
            "paper": "an L exists; no bound on it",
            "ours": f"A's exact support (float32 band): L = ceil((T − 1) / w) in {matches} of "
            f"{len(two)} cases, w the reach of g (read from A's float32 entries: {residue} of "
            f"{len(two)}); the other {len(two) - matches} are one more, among the {zeroed} "
            "where the step bound zeroes a diagonal entry exactly. The band, and this L, exist "
            "only because the layer truncates g below the float's resolution: the paper's "
            "Gaussian never vanishes, so its K links every pair in one step. Forward-only φ: "
            + ("no L (not strongly connected)" if forward["L"].isna().all() else "an L exists")
            + linked,
            "verdict": HOLDS if two["L"].notna().all() else FAILS,
            "reason": "an L exists in every two-sided case",
        },
        {
            "check": "A.4: ‖H⁽ˡ⁾‖₂ ≤ ‖H⁽ˡ⁻¹⁾‖₂, the diffusion step never grows the states",
            "where": "Sec. A.4",
            "quote": "the update is a convex combination of the hidden states from the "
            "previous layer",
            "paper": "‖H⁽ˡ⁾‖₂ ≤ ‖H⁽ˡ⁻¹⁾‖₂ for K_ts ≥ 0 and δt ≤ 1 / Σ_s K_ts",
            "ours": f"largest ‖I + δt K‖₂ found: {largest:.3f} at T = {int(at['T'])} "
            f"({at['kernels']}), the sharp bound √T = {math.sqrt(at['T']):.2f} for a "
            "row-stochastic A (‖A‖₂ ≤ √(max column sum)), reached by every row weighting one "
            f"column; K alone at T = {lengths}: {_per_length(norms, 'K', 'construction')} "
            f"(√T {_per_length(norms, 'K', 'bound')}); random draws up to "
            f"{norms['random'].max():.2f}, gradient ascent up to {norms['ascent'].max():.2f}; "
            "the infinity norm is 1. ‖A‖₂ ≤ 1 holds iff A is also column-stochastic (doubly "
            f"stochastic): a symmetric K gives ‖A‖₂ = {symmetric['norm_2'].max():.3f}; "
            f"{TRAINED}: "
            + ("not measured" if trained.empty else f"up to {trained['norm_2'].max():.3f}"),
            "verdict": agreed(readings),
            "reason": "the paper does not say which norm ‖H‖ is: as a matrix norm it holds "
            "only when the update is doubly stochastic; token by token it holds",
            "readings": readings_cell(readings),
        },
        {
            "check": "The layer scales to long sequences",
            "where": "Sec. 3.8",
            "quote": "This scales to long sequences",
            "paper": "scales to long sequences (no cost stated, no timing)",
            "ours": cost_text(slopes),
            "verdict": NO_EXPERIMENT,
            "reason": "as printed the layer's cost grows as T², like self-attention's",
        },
    ]
    return pd.DataFrame(rows).assign(
        readings=lambda t: t["readings"].fillna(""),
        own_code=lambda t: t["check"].isin(OWN_CODE),
    )


def theory_data(
    table: pd.DataFrame,
    sums: pd.DataFrame,
    dependency: pd.DataFrame,
    norms: pd.DataFrame,
    cost: pd.DataFrame,
    trained: pd.DataFrame,
) -> pd.DataFrame:
    """The table's numbers in long form (pdelab.report.tidy; task: the check's setting,
    variant: the item measured): the largest row sums per precision, Theorem 1's depth
    against its prediction, the largest ||I + dt K||_2 found per length beside the sharp
    bound sqrt(T), the FLOPs' growth exponent per block, each trained model's measures over
    its seeds, and each check's verdict (1 holds, 0 fails, empty otherwise)."""
    rows = []
    for dtype, part in sums.groupby("dtype", sort=True):
        worst = part[["diffusion_row_sum", "attention_row_sum"]].max().max()
        rows.append(tidy.row(STUDY, "row sums / largest degree", str(dtype), "row_sum", worst))
    two = dependency[dependency["direction"] == "two_sided"]
    rows.append(tidy.row(STUDY, "Theorem 1 on the layer", "cases", "count", len(two)))
    matches = int((two["L"] == two["predicted"]).sum())
    rows.append(tidy.row(STUDY, "Theorem 1 on the layer", "L as predicted", "count", matches))
    for (kernels, length), part in norms.groupby(["kernels", "T"], sort=True):
        item = f"{kernels}, T={int(length)}"
        bound = float(part["bound"].iloc[0])
        largest = part["largest"].max()
        rows.append(tidy.row(STUDY, "A.4: largest ||I + dt K||_2", item, "norm", largest, paper=1))
        rows.append(tidy.row(STUDY, "A.4: sharp bound sqrt(T)", item, "norm", bound))
    for block, slope in growth_exponent(cost).items():
        rows.append(tidy.row(STUDY, "FLOPs' growth exponent in T", block, "slope", slope))
    if len(trained):
        measures = {"norm_2": "norm", "drift": "value", "linked_share": "share"}
        per_run = trained.groupby(["task", "variant", "seed"]).agg(
            {name: "max" for name in measures}
        )
        per_run["linked_share"] *= 100  # a share in percent (pdelab.report.tidy.UNITS)
        for (task, variant), part in per_run.groupby(level=["task", "variant"], sort=False):
            for name, metric in measures.items():
                setting = f"trained {variant}: {name} (largest over layers)"
                rows.append(tidy.over_seeds(STUDY, task, setting, metric, part[name]))
    for r in table.itertuples():
        rows.append(tidy.row(STUDY, "checks", r.check, "holds", tidy.verdict_number(r.verdict)))
    return tidy.frame(rows)


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the report shows it: each reading's result after ours, the verdict with
    its reason in brackets."""
    verdict = [
        f"{v} ({r})" if isinstance(r, str) and r else v
        for v, r in zip(table["verdict"], table["reason"], strict=True)
    ]
    ours = [
        f"{o} Readings: {'; '.join(r.text() for r in readings_of(cell))}." if cell else o
        for o, cell in zip(table["ours"], table["readings"], strict=True)
    ]
    own = table["own_code"] if "own_code" in table else [False] * len(table)
    check = [
        f"{c} (a check of our code)" if bool(o) else c
        for c, o in zip(table["check"], own, strict=True)
    ]
    return table[["where", "paper"]].assign(check=check, ours=ours, verdict=verdict)[
        ["check", "where", "paper", "ours", "verdict"]
    ]


def plot(
    sums: pd.DataFrame,
    dependency: pd.DataFrame,
    norms: pd.DataFrame,
    mass: pd.DataFrame,
    cost: pd.DataFrame,
    trained: pd.DataFrame,
    path: Path,
) -> None:
    """Six panels: row sums, Theorem 1's L, the norm search, mass drift, FLOPs in T, and the
    trained models' global dependency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    ax = axes[0, 0]
    for (dtype, kernel), marker in zip(
        [(d, k) for d in ("float32", "float64") for k in ("diffusion", "attention")],
        "os^v",
        strict=True,
    ):
        part = sums[sums["dtype"] == dtype]
        ax.semilogy(part["config"], part[f"{kernel}_row_sum"], marker, label=f"{kernel}, {dtype}")
    if len(trained):
        ax.semilogy(
            ["trained"] * len(trained), trained["diffusion_row_sum"], "k*", label="trained (K)"
        )
    for dtype in (torch.float32, torch.float64):
        ax.axhline(torch.finfo(dtype).eps, color="grey", lw=0.8, ls=":")
    ax.set(title="(a) max |row sum| / max |K_tt|, random and trained", ylabel="relative row sum")
    ax.tick_params(axis="x", rotation=25, labelsize=7)
    ax.legend(fontsize=7)

    ax = axes[0, 1]
    two = dependency[dependency["direction"] == "two_sided"]
    for sigma, part in two.groupby("sigma"):
        (line,) = ax.plot(part["T"], part["predicted"], "-", label=f"sigma={sigma:g}")
        ax.plot(part["T"], part["L"], "o", color=line.get_color())
    ax.set(
        title="(b) Theorem 1: smallest L with (I + dt K)^L > 0",
        xlabel="T",
        ylabel="L (markers: measured; lines: ceil((T-1)/w))",
        xscale="log",
        yscale="log",
    )
    ax.legend(fontsize=7)

    ax = axes[0, 2]
    for kernels, part in norms.groupby("kernels"):
        ax.plot(part["T"], part["random"], "o--", label=f"{kernels}: best random draw")
        ax.plot(part["T"], part["ascent"], "s-", label=f"{kernels}: gradient ascent")
        ax.plot(part["T"], part["construction"], "x", label=f"{kernels}: rows on one column")
    bound = norms.drop_duplicates("T").sort_values("T")
    ax.plot(bound["T"], bound["bound"], "k:", lw=0.8, label="sqrt(T): the sharp bound")
    ax.axhline(1.0, color="k", lw=0.8, label="A.4's claim: <= 1")
    ax.set(title="(c) largest ||I + dt K||_2 found", xlabel="T", ylabel="spectral norm")
    ax.legend(fontsize=7)

    ax = axes[1, 0]
    order = list(dict.fromkeys(mass["kernel"]))
    values = [mass[mass["kernel"] == k]["drift"].clip(lower=1e-18) for k in order]
    ax.boxplot(values)
    ax.set_xticks(range(1, len(order) + 1), order)
    if len(trained):
        ax.plot([len(order) + 1] * len(trained), trained["drift"].clip(lower=1e-18), "k*")
        ax.set_xticks(range(1, len(order) + 2), [*order, "trained"])
    ax.set(title="(d) drift of the mean token in one step", yscale="log")
    ax.tick_params(axis="x", rotation=20, labelsize=7)

    ax = axes[1, 1]
    for block, part in cost.groupby("block", sort=False):
        ax.loglog(part["T"], part["flops"], "o-", label=block)
    ax.set(title="(e) FLOPs of one block (width 16)", xlabel="T", ylabel="FLOPs")
    ax.legend(fontsize=7)

    ax = axes[1, 2]
    if len(trained):
        last = trained.sort_values("layer").groupby(["task", "seed"]).tail(1)
        labels = [f"{r.task}/{r.seed}" for r in last.itertuples()]
        ax.bar(labels, last["linked_share"])
        ax.set_ylim(0, 1.05)
        ax.tick_params(axis="x", rotation=35, labelsize=7)
    ax.set(
        title="(f) trained: share of pairs linked after the depth",
        ylabel="share of pairs",
    )
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def write_all(out_dir: Path, runs: dict[str, Path], profile: str) -> pd.DataFrame:
    """Every check, the table (md, tex, csv), the measures and the figure."""
    torch.manual_seed(0)
    sums = row_sum_check()
    dependency = pd.concat(
        [
            global_dependency(),
            global_dependency(lengths=(16, 64), sigmas=(4.0,), direction="forward"),
        ]
    )
    norms = pd.concat([norm_search(), norm_search(lengths=(16, 32), kernels="K+D")])
    mass = mass_check()
    cost = cost_in_length()
    trained = trained_measures(runs)
    table = claims(sums, dependency, norms, mass, cost, trained)
    paths = {name: out_dir / rel for name, rel in OUTPUTS.items()}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    measures = pd.concat(
        [
            sums.assign(check="row_sums"),
            dependency.assign(check="global_dependency"),
            norms.assign(check="norm_search"),
            mass.assign(check="mass"),
            cost.assign(check="cost"),
            trained.assign(check="trained"),
        ],
        ignore_index=True,
    )
    for column in measures.columns:  # text columns mixed with the other checks' NaN
        if not pd.api.types.is_numeric_dtype(measures[column]):
            measures[column] = measures[column].astype(str)
    write_parquet(measures, paths["measures"])
    note = (
        f"Checks on the ldn block at random parameters (no training) and on {len(runs)} trained "
        f"models ({PROFILE_NOTES.get(profile, profile)})."
    )
    title = "Linear Diffusion Networks: the theory checked"
    grid = Grid(shown(table), numparse=False)  # the page beside the Markdown: what the report shows
    data = theory_data(table, sums, dependency, norms, cost, trained)
    TableFile.titled(title, note, grid, data).write(paths["table"], paths["tex"], profile)
    with atomic_path(paths["claims"]) as tmp:
        table.to_csv(tmp, index=False)
    plot(sums, dependency, norms, mass, cost, trained, paths["figure"])
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="task/variant/seed=trained run folder")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    parser.add_argument("--profile", help="the run profile (default: params.yaml's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import_mechanisms()
    runs = {k: Path(d) for k, d in (pair.split("=", 1) for pair in args.runs)}
    write_all(args.out_dir, runs, profile_here(args.profile))


if __name__ == "__main__":
    main()
