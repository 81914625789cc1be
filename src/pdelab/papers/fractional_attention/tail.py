"""Does a trained FNA model ever reach the power-law tail? z = dist / kappa, measured.

Phi(z) = (1 + z)^-(d_M + alpha) has its heavy tail for z >~ 1. For z << 1 it is
exp(-(d_M + alpha) z) to first order, a Laplace kernel, and the text rule puts kappa at
sqrt(d_H) / (2^(1/d_H) - 1) (258 at d_H = 32), so trained distances may never leave that
regime (spec, pitfall 7). For every trained model named here this module runs test examples
through the model's own forward, takes each FNA layer's queries and keys from what its
attention reads (the encoder's taps), and measures z over every real (query, key) pair: its
distribution (log-spaced histogram, quantiles), the share of pairs beyond z = 0.1 and z = 1,
and how far the model's attention rows are from the rows the Laplace kernel gives on the same
distances (mean total variation). The accuracy side of the question is the ``laplace`` variant
trained from scratch.

``python -m pdelab.papers.fractional_attention.tail --out-dir results KEY=DIR ...`` (KEY =
task/variant/seed, DIR the trained run's folder) writes TAIL_OUTPUTS under the out dir.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from pdelab.data.store import load_split
from pdelab.papers.fractional_attention import NEAR_Z, TAIL_OUTPUTS, TAIL_Z, TV_LAPLACE
from pdelab.papers.fractional_attention.attention import FNAAttention, FNAReference, Geometry
from pdelab.papers.fractional_attention.runs import parse_key
from pdelab.records.run import write_parquet
from pdelab.report import tidy
from pdelab.report.profiles import PROFILE_NOTES, profile_here
from pdelab.report.table_file import Grid, TableFile
from pdelab.spec.config import RunSpec
from pdelab.training.precision import full_precision
from pdelab.training.trained import load_trained

EDGES = np.logspace(-6, 3, 181)  # z bins, 20 a decade; z outside them is clipped into the ends


@dataclass
class LayerTally:
    """Running counts of one layer over the batches (z itself is never kept: T^2 per head)."""

    kappa: float
    exponent: float
    head_dim: int
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES) - 1, np.int64))
    pairs: int = 0
    near: int = 0  # z > NEAR_Z
    tail: int = 0  # z > TAIL_Z
    z_max: float = 0.0
    tv_sum: float = 0.0
    rows: int = 0

    def add(self, z: Tensor, pairs: Tensor, tv: Tensor, rows: Tensor) -> None:
        values = z[pairs].double().cpu().numpy()
        self.counts += np.histogram(np.clip(values, EDGES[0], EDGES[-1]), EDGES)[0]
        self.pairs += values.size
        self.near += int((values > NEAR_Z).sum())
        self.tail += int((values > TAIL_Z).sum())
        self.z_max = max(self.z_max, float(values.max(initial=0.0)))
        self.tv_sum += float(tv[rows].sum())
        self.rows += int(rows.sum())

    def quantile(self, q: float) -> float:
        """From the histogram: the upper edge of the bin holding the q-th pair."""
        if not self.pairs:
            return math.nan
        where = int(np.searchsorted(np.cumsum(self.counts), q * self.pairs))
        return float(EDGES[min(where + 1, len(EDGES) - 1)])


def distances(kernel: FNAAttention | FNAReference, q: Tensor, k: Tensor) -> Tensor:
    """(B, H, T, T) distances as the kernel takes them (the sphere's geodesic; 0 on a tied
    diagonal), computed directly rather than through |q|^2 + |k|^2 - 2 q.k."""
    q, k = kernel.prepare(q, k)
    if kernel.geo.spherical:
        dist = torch.acos((q @ k.transpose(-2, -1)).clamp(-1.0, 1.0))
    else:
        dist = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist")
    if kernel.geo.tied:
        eye = torch.eye(dist.shape[-1], dtype=torch.bool, device=dist.device)
        dist = dist.masked_fill(eye, 0.0)
    return dist


def laplace_distance(z: Tensor, allowed: Tensor, geo: Geometry) -> tuple[Tensor, Tensor]:
    """Per row, the total variation between the power law's weights and the Laplace kernel's
    on the same z (both normalised over the allowed keys), and which rows have a key."""
    power = (-geo.exponent * torch.log1p(z)).masked_fill(~allowed, -math.inf)
    laplace = (-geo.exponent * z).masked_fill(~allowed, -math.inf)
    rows = allowed.any(-1)
    diff = torch.softmax(power, -1) - torch.softmax(laplace, -1)
    return 0.5 * diff.nan_to_num(0.0).abs().sum(-1), rows


@torch.no_grad()
@full_precision()  # measured distances, in fp32 without TF32 whatever the caller runs in
def probe(model: torch.nn.Module, ids: Tensor, mask: Tensor, tallies: dict[int, LayerTally]):
    """One batch through the model; each FNA layer's z joins its tally."""
    ids, mask = model.encoder_inputs(ids, mask)
    taps: dict[str, Tensor] = {}
    encoder = model.encoder
    encoder(ids, mask, taps=taps)
    real = encoder.token_mask(mask)
    for i, block in enumerate(encoder.blocks):
        kernel = block.attn.kernel
        if not isinstance(kernel, FNAAttention | FNAReference) or kernel.geo.gaussian:
            continue
        q, k, _ = block.attn.project(taps[f"blocks.{i}.attention_read"])
        z = distances(kernel, q, k) / kernel.geo.kappa
        allowed = (real[:, None, :, None] & real[:, None, None, :]).expand_as(z)
        if kernel.zero_diagonal:
            allowed = allowed & ~torch.eye(z.shape[-1], dtype=torch.bool, device=z.device)
        pairs = allowed.clone()
        if kernel.geo.tied:  # a tied diagonal is 0 by construction, not a learned distance
            pairs &= ~torch.eye(z.shape[-1], dtype=torch.bool, device=z.device)
        tv, rows = laplace_distance(z, allowed, kernel.geo)
        rows &= real[:, None, :]
        tally = tallies.setdefault(
            i, LayerTally(kernel.geo.kappa, kernel.geo.exponent, kernel.head_dim)
        )
        tally.add(z, pairs, tv, rows)


def load_run(folder: Path, device: torch.device) -> tuple[RunSpec, torch.nn.Module]:
    """A trained classifier from its run folder: the spec it ran, its best-validation weights,
    checked to be the run's (pdelab.training.trained)."""
    trained = load_trained(folder, device)
    return trained.run, trained.model


def measure(
    folder: Path, examples: int, batch_size: int, device: torch.device
) -> dict[int, LayerTally]:
    """Tallies per FNA layer over the first ``examples`` test examples of the run's task."""
    run, model = load_run(folder, device)
    split = load_split(run.data_dir, "test")
    tallies: dict[int, LayerTally] = {}
    index = np.arange(min(examples, len(split)))
    for start in range(0, len(index), batch_size):
        batch = split.batch(index[start : start + batch_size])
        ids = torch.from_numpy(batch["ids"]).to(device)
        probe(model, ids, torch.from_numpy(batch["mask"]).to(device), tallies)
    return tallies


def frames(runs: dict[str, dict[int, LayerTally]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per run and layer: kappa, quantiles, shares, TV; per run: the histogram over layers)."""
    stats, hist = [], []
    for key, tallies in runs.items():
        task, variant, seed = parse_key(key)
        identity = {"task": task, "variant": variant, "seed": seed}
        for layer, t in sorted(tallies.items()):
            stats.append(
                identity
                | {
                    "layer": layer,
                    "head_dim": t.head_dim,
                    "kappa": t.kappa,
                    "exponent": t.exponent,
                    "pairs": t.pairs,
                    "z_median": t.quantile(0.5),
                    "z_p99": t.quantile(0.99),
                    "z_max": t.z_max,
                    "share_above_0.1": t.near / t.pairs if t.pairs else math.nan,
                    "share_above_1": t.tail / t.pairs if t.pairs else math.nan,
                    "tv_laplace": t.tv_sum / t.rows if t.rows else math.nan,
                }
            )
        counts = sum((t.counts for t in tallies.values()), np.zeros(len(EDGES) - 1, np.int64))
        hist.append(
            pd.DataFrame({"bin_low": EDGES[:-1], "bin_high": EDGES[1:], "count": counts}).assign(
                **identity
            )
        )
    stat_frame = pd.DataFrame(stats)
    hist_frame = pd.concat(hist, ignore_index=True) if hist else pd.DataFrame()
    return stat_frame, hist_frame


def summary_table(stats: pd.DataFrame) -> pd.DataFrame:
    """Per task and variant, over seeds and layers: the scale, where z lies, how much of it
    reaches the tail, and how far the rows are from the Laplace kernel's."""
    rows = []
    for (task, variant), block in stats.groupby(["task", "variant"], sort=False):
        pairs = block["pairs"].sum()
        rows.append(
            {
                "task": task,
                "variant": variant,
                "seeds": block["seed"].nunique(),
                "layers": block["layer"].nunique(),
                "d_H": int(block["head_dim"].iloc[0]),
                "kappa": f"{block['kappa'].iloc[0]:.4g}",
                "median z": f"{block['z_median'].median():.3g}",
                "p99 z": f"{block['z_p99'].max():.3g}",
                "max z": f"{block['z_max'].max():.3g}",
                "pairs z > 0.1": f"{(block['share_above_0.1'] * block['pairs']).sum() / pairs:.2%}",
                "pairs z > 1": f"{(block['share_above_1'] * block['pairs']).sum() / pairs:.2%}",
                "TV(power, Laplace)": f"{block['tv_laplace'].mean():.3g}",
            }
        )
    return pd.DataFrame(rows)


STUDY = "fna_tail"  # the tidy CSV's study (pdelab.report.tidy)
# the per-layer measures in the tidy CSV -> (metric, scale into its unit)
TIDY_MEASURES = {
    "kappa": ("kappa", 1.0),
    "z_median": ("z_median", 1.0),
    "z_p99": ("z_p99", 1.0),
    "z_max": ("z_max", 1.0),
    "share_above_0.1": ("share", 100.0),
    "share_above_1": ("share", 100.0),
    "tv_laplace": ("tv_laplace", 1.0),
}


def tail_data(stats: pd.DataFrame) -> pd.DataFrame:
    """The table's numbers in long form (pdelab.report.tidy): per task and variant each
    measure of a run (its layers pooled: a share weighted by their pairs, z_p99 and z_max the
    largest, the others the mean), then its mean, 95% interval and n over the seeds. A share
    is in percent; variant reads ``variant: measure`` where two measures share a metric."""
    rows = []
    if stats.empty:
        return tidy.frame(rows)
    for (task, variant), block in stats.groupby(["task", "variant"], sort=False):
        per_seed = {}
        for seed, run in block.groupby("seed", sort=True):
            pairs = run["pairs"].sum()
            per_seed[seed] = {
                "kappa": run["kappa"].mean(),
                "z_median": run["z_median"].median(),
                "z_p99": run["z_p99"].max(),
                "z_max": run["z_max"].max(),
                "share_above_0.1": (run["share_above_0.1"] * run["pairs"]).sum() / pairs,
                "share_above_1": (run["share_above_1"] * run["pairs"]).sum() / pairs,
                "tv_laplace": run["tv_laplace"].mean(),
            }
        seeds = pd.DataFrame.from_dict(per_seed, orient="index")
        for name, (metric, scale) in TIDY_MEASURES.items():
            item = variant if metric == name else f"{variant}: {name}"
            rows.append(tidy.over_seeds(STUDY, task, item, metric, seeds[name] * scale))
    return tidy.frame(rows)


NOTE = (
    "z = dist / kappa over every real (query, key) pair of each FNA layer of the trained "
    "models (alpha < 2), on test examples; the tail of (1 + z)^-(d_H + alpha) begins near "
    f"z = {TAIL_Z:g}, and below it the kernel is exp(-(d_H + alpha) z) to first order. TV: the "
    "mean total variation between each attention row and the row the Laplace kernel gives on "
    f"the same distances (below {TV_LAPLACE:g}: the model runs on the Laplace kernel in effect). "
    "A tied diagonal (distance 0 by construction) is left out of the pairs."
)


def write_outputs(
    out_dir: Path, stats: pd.DataFrame, hist: pd.DataFrame, profile: str
) -> list[Path]:
    """TAIL_OUTPUTS: both frames, the summary table (md, tex) and the histogram figure."""
    paths = {k: out_dir / v for k, v in TAIL_OUTPUTS.items()}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet(stats, paths["stats"])
    write_parquet(hist, paths["histogram"])
    table = summary_table(stats) if len(stats) else pd.DataFrame({"note": ["no FNA layer"]})
    title = "Fractional Neural Attention: z = dist / kappa in trained models"
    header = f"{NOTE} Ours: {PROFILE_NOTES.get(profile, f'profile {profile}')}."
    grid = Grid(table, numparse=False)  # the page beside the Markdown: what the report shows
    made = TableFile.titled(title, header, grid, tail_data(stats))
    made.write(paths["table"], paths["tex"], profile)
    plot(hist, stats, paths["figure"], profile)
    return list(paths.values())


def plot(hist: pd.DataFrame, stats: pd.DataFrame, path: Path, profile: str) -> None:
    """The share of pairs per log-z bin, one line per task and variant, with z = 1 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if len(hist):
        for (task, variant), block in hist.groupby(["task", "variant"], sort=False):
            counts = block.groupby("bin_low", sort=True)["count"].sum()
            share = counts / max(counts.sum(), 1)
            kappa = stats[(stats["task"] == task) & (stats["variant"] == variant)]["kappa"]
            ax.step(
                counts.index,
                share,
                where="post",
                label=f"{task} {variant} (kappa {kappa.iloc[0]:.3g})",
            )
        seen = hist[hist["count"] > 0]
        if len(seen):  # the bins that hold pairs, and the tail's start
            ax.set_xlim(seen["bin_low"].min() / 3, max(10 * TAIL_Z, seen["bin_high"].max() * 3))
    ax.axvline(TAIL_Z, color="black", ls="--", lw=0.8)
    ax.text(TAIL_Z, ax.get_ylim()[1] * 0.95, " tail", va="top")
    ax.set(
        xscale="log",
        xlabel="z = dist / kappa",
        ylabel="share of (query, key) pairs",
        title=f"Where trained FNA layers put z ({profile} profile)",
    )
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="task/variant/seed=run folder")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    parser.add_argument("--profile", help="the run profile (default: params.yaml's)")
    parser.add_argument("--examples", type=int, default=64, help="test examples per run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    runs = dict(pair.split("=", 1) for pair in args.runs)
    tallies = {
        key: measure(Path(folder), args.examples, args.batch_size, device)
        for key, folder in runs.items()
    }
    stats, hist = frames(tallies)
    for path in write_outputs(args.out_dir, stats, hist, profile_here(args.profile)):
        print(path)


if __name__ == "__main__":
    main()
