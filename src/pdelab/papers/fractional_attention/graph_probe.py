"""Figs 4 and 5 of Fractional Neural Attention, measured on the trained one-layer models.

* Fig 4 / A3, edge ablation: each test batch has a random share p of its (query, key) edges
  removed in layer 0 (one Bernoulli(p) mask per batch, drawn from a generator seeded with the
  batch index and shared by the batch, as the official dynamic_inference.py), and the test
  accuracy is taken at p = 0, 0.1, ..., 1. Removing edges keeps the remaining weights of a row
  and renormalises them, which is the kernel computed on the kept keys alone (for FNA's L1 rows
  and for the softmax alike). A row with no kept key has two conventions (the spec's confound):
  ``published``, the official code's, where DP's all-masked logits (-1e9) give a uniform row
  over every key, padding included, and FNA's a zero row; and ``same_null``, a zero row for
  both. At p = 1 a zero row leaves the layer's residual alone: the attention is absent.
* Fig 5a: the spectral gap of the attention matrix (graphs.spectral_gap), averaged over
  training sequences cropped to their real length, against the model's test accuracy.
* Fig 5b: the diffusion map of one sequence from a Q = K model (symmetric scores, the
  official rebuild with kappa * sqrt(0.1) and the diagonal kept: graphs.diffusion_map).
* Fig 5c-e: hop counts of the minimum-weight paths on 1/A (graphs.hop_counts): one adjacent
  pair, the maximum over the sequence, and the mean against the sequence length.

``python -m pdelab.papers.fractional_attention.graph_probe --out-dir results KEY=DIR ...``
(KEY = task/variant/seed, DIR the trained run's folder) writes GRAPH_OUTPUTS. Runs that are
not one layer with one head are skipped (the paper's analyses are of those models).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from pdelab.data.store import load_split
from pdelab.papers.fractional_attention import GRAPH_OUTPUTS
from pdelab.papers.fractional_attention.attention import DotProductAttention, _FNAKernel
from pdelab.papers.fractional_attention.graphs import diffusion_map, hop_counts, spectral_gap
from pdelab.papers.fractional_attention.runs import parse_key
from pdelab.papers.fractional_attention.tail import load_run
from pdelab.records.run import check_run, write_parquet
from pdelab.report import tidy
from pdelab.report.profiles import PROFILE_NOTES, profile_here
from pdelab.report.table_file import Grid, TableFile
from pdelab.spec.config import RunSpec

REMOVAL = np.round(np.linspace(0.0, 1.0, 11), 1)  # Fig 4's p
NULLS = ("published", "same_null")
DIFFUSION_EPS = 0.1  # the official rebuild of the kernel for Fig 5b: kappa * sqrt(eps)


def mechanism_of(kernel: nn.Module) -> str:
    """fna (alpha < 2), la (alpha = 2) or dp: how the figures group the models."""
    if isinstance(kernel, DotProductAttention):
        return "dp"
    if isinstance(kernel, _FNAKernel):
        return "la" if kernel.geo.gaussian else "fna"
    raise TypeError(f"{type(kernel).__name__} is not an FNA or DP kernel")


def attention_weights(
    kernel: nn.Module, q: Tensor, k: Tensor, key_padding_mask: Tensor | None
) -> Tensor:
    """A (B, H, T, T) as the kernel computes it, materialised: FNA's L1-normalised Phi, or
    DP's softmax(q.k / sqrt(d_H)) on the same projections (k = q when tied)."""
    if isinstance(kernel, _FNAKernel):
        return kernel.weights(q, k, key_padding_mask, causal=False)
    if isinstance(kernel, DotProductAttention):
        k = q if kernel.tied else k
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if key_padding_mask is not None:
            logits = logits.masked_fill(~key_padding_mask[:, None, None, :], -math.inf)
        return torch.softmax(logits, dim=-1).nan_to_num(0.0)
    raise TypeError(f"{type(kernel).__name__} is not an FNA or DP kernel")


class RemovedEdges(nn.Module):
    """A kernel with the (query, key) edges of ``removed`` (T, T) taken out of every row."""

    def __init__(self, kernel: nn.Module, removed: Tensor, null: str) -> None:
        super().__init__()
        if null not in NULLS:
            raise ValueError(f"null must be one of {NULLS}, got {null!r}")
        self.kernel, self.removed, self.null = kernel, removed, null
        self.uniform_null = null == "published" and isinstance(kernel, DotProductAttention)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        t = q.shape[-2]
        a = attention_weights(self.kernel, q, k, key_padding_mask)
        a = a.masked_fill(self.removed[:t, :t], 0.0)
        total = a.sum(-1, keepdim=True)
        empty = total == 0  # no key left that is real and kept
        a = a / total.masked_fill(empty, 1.0)
        if self.uniform_null:  # softmax of a row of -1e9 everywhere: 1/T on every key
            a = a.masked_fill(empty, 1.0 / t)
        return a @ v


@torch.no_grad()
def ablation_accuracy(
    model: nn.Module, split, p: float, null: str, batch_size: int, device: torch.device
) -> float:
    """Test accuracy with a share p of layer 0's edges removed (one mask per batch)."""
    attn = model.encoder.blocks[0].attn
    kernel, correct = attn.kernel, 0
    n = len(split)
    for number, start in enumerate(range(0, n, batch_size)):
        batch = split.batch(np.arange(start, min(start + batch_size, n)))
        ids = torch.from_numpy(batch["ids"]).to(device)
        mask = torch.from_numpy(batch["mask"]).to(device)
        t = model.encoder_inputs(ids, mask)[0].shape[1]
        gen = torch.Generator().manual_seed(number)
        removed = (torch.rand(t, t, generator=gen) < p).to(device)
        attn.kernel = RemovedEdges(kernel, removed, null)
        try:
            logits = model(ids, mask)
        finally:
            attn.kernel = kernel
        labels = torch.from_numpy(batch["labels"]).to(device)
        correct += int((logits.argmax(-1) == labels).sum())
    return correct / n


@torch.no_grad()
def sequence_attention(
    model: nn.Module, ids: np.ndarray, rebuild: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Layer 0's attention (T, T) of one unpadded sequence, in float64, and with ``rebuild``
    the symmetric scores of the official Fig 5b rebuild (kappa * sqrt(eps), the diagonal
    kept; Q = K FNA only, else empty)."""
    device = next(model.parameters()).device
    x = torch.from_numpy(np.asarray(ids, dtype=np.int64)[None]).to(device)
    mask = torch.ones_like(x, dtype=torch.bool)
    x, mask = model.encoder_inputs(x, mask)
    taps: dict[str, Tensor] = {}
    model.encoder(x, mask, taps=taps)
    attn = model.encoder.blocks[0].attn
    q, k, _ = attn.project(taps["blocks.0.attention_read"])
    a = attention_weights(attn.kernel, q.double(), k.double(), None)[0, 0].cpu().numpy()
    scores = np.empty((0, 0))
    if rebuild and isinstance(attn.kernel, _FNAKernel) and attn.kernel.tied:
        qq, _ = attn.kernel.prepare(q.double(), k.double())
        dist = torch.cdist(qq, qq, compute_mode="donot_use_mm_for_euclid_dist")[0, 0]
        geo = attn.kernel.geo
        scores = geo.phi(dist / (geo.kappa * math.sqrt(DIFFUSION_EPS))).cpu().numpy()
    return a, scores


def sequences_by_length(split, lengths: set[int]) -> dict[int, np.ndarray]:
    """The first training sequence of each length that has one (Fig 5e's selection)."""
    found: dict[int, np.ndarray] = {}
    for i, n in enumerate(np.diff(split.offsets)):
        if int(n) in lengths and int(n) not in found:
            found[int(n)] = np.asarray(split.tokens[split.offsets[i] : split.offsets[i + 1]])
            if len(found) == len(lengths):
                break
    return found


def probe_run(
    key: str, folder: Path, sequences: int, batch_size: int, device: torch.device
) -> dict[str, pd.DataFrame] | None:
    """Every measure of one trained run, or None if it is not a one-layer, one-head model."""
    run, model = load_run(folder, device)
    if run.model.layers != 1 or run.model.heads != 1:
        return None
    task, variant, seed = parse_key(key)
    kernel = model.encoder.blocks[0].attn.kernel
    identity = {
        "task": task,
        "variant": variant,
        "seed": seed,
        "mechanism": mechanism_of(kernel),
        "alpha": getattr(kernel, "alpha", math.nan) if mechanism_of(kernel) != "dp" else math.nan,
        "dim": run.model.dim,
        "tied": bool(getattr(kernel, "tied", False)),
    }
    test = load_split(run.data_dir, "test")
    ablation = pd.DataFrame(
        [
            identity
            | {
                "p": float(p),
                "null": null,
                "acc": ablation_accuracy(model, test, p, null, batch_size, device),
            }
            for null in NULLS
            for p in REMOVAL
        ]
    )
    train = load_split(run.data_dir, "train")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(train), size=min(sequences, len(train)), replace=False)
    gaps = [
        spectral_gap(sequence_attention(model, train.batch(np.array([i]))["ids"][0])[0])
        for i in picked
    ]
    gap = pd.DataFrame(
        [
            identity
            | {"gap": float(np.mean(gaps)), "gap_std": float(np.std(gaps)), "sequences": len(gaps)}
        ]
    )
    lengths = np.diff(train.offsets)  # Fig 5e's grid of lengths; the last is the longest
    grid = sorted({int(n) for n in np.linspace(lengths.min(), lengths.max(), 6).round()})
    hops_rows, scores = [], np.empty((0, 0))
    for length, ids in sequences_by_length(train, set(grid)).items():
        longest = length == grid[-1]  # Fig 5b's diffusion map reads the longest sequence
        a, rebuilt = sequence_attention(model, ids, rebuild=longest)
        scores = rebuilt if longest else scores
        hops = hop_counts(a)
        off = hops[~np.eye(len(hops), dtype=bool)]
        finite = off[np.isfinite(off)]
        middle = len(hops) // 2
        hops_rows.append(
            identity
            | {
                "length": length,
                "max_hops": float(off.max()),
                "mean_hops": float(finite.mean()) if finite.size else math.nan,
                "std_hops": float(finite.std()) if finite.size else math.nan,
                "pair_hops": float(hops[middle - 1, middle]),  # Fig 5c: two adjacent tokens
            }
        )
    result = {"ablation": ablation, "gaps": gap, "hops": pd.DataFrame(hops_rows)}
    if scores.size:
        points = diffusion_map(scores)
        result["diffusion"] = pd.DataFrame(
            identity
            | {"token": np.arange(len(points)), "psi_1": points[:, 0], "psi_2": points[:, 1]}
        )
    return result


def collect(results: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """One frame per measure over every probed run (empty frames when nothing was probed)."""
    names = ("ablation", "gaps", "hops", "diffusion")
    return {
        name: pd.concat([r[name] for r in results if name in r], ignore_index=True)
        if any(name in r for r in results)
        else pd.DataFrame()
        for name in names
    }


def model_label(row: pd.Series | tuple) -> str:
    """'FNA a=1.2 d8 Q=K' style labels for tables and legends."""
    mech = row.mechanism.upper()
    alpha = f" a={row.alpha:g}" if row.mechanism == "fna" else ""
    return f"{mech}{alpha} d{row.dim}{' Q=K' if row.tied else ''}"


def same_model(frame: pd.DataFrame, ident: dict) -> pd.Series:
    """Rows of the model ``ident`` names (DP's alpha is NaN, which == never matches)."""
    match = pd.Series(True, index=frame.index)
    for key, value in ident.items():
        column = frame[key]
        match &= column.isna() if pd.isna(value) else column == value
    return match


def summary_table(frames: dict[str, pd.DataFrame], majority: dict[str, float]) -> pd.DataFrame:
    """Per model (over seeds): accuracy at p = 0 and p = 1 under both nulls, the mean spectral
    gap, and the hop counts of its longest probed sequence."""
    ablation, gaps, hops = frames["ablation"], frames["gaps"], frames["hops"]
    if ablation.empty:
        return pd.DataFrame({"note": ["no one-layer, one-head model was probed"]})
    keys = ["task", "mechanism", "alpha", "dim", "tied"]
    rows = []
    for group, block in ablation.groupby(keys, sort=False, dropna=False):
        ident = dict(zip(keys, group, strict=True))
        label = model_label(pd.Series(ident))

        def acc(p: float, null: str, block: pd.DataFrame = block) -> str:
            values = block[(block["p"] == p) & (block["null"] == null)]["acc"] * 100
            return f"{values.mean():.1f} ± {values.std(ddof=1) if len(values) > 1 else 0:.1f}"

        g, h = (frame[same_model(frame, ident)] if len(frame) else frame for frame in (gaps, hops))
        longest = h[h["length"] == h["length"].max()] if len(h) else h
        rows.append(
            {
                "task": ident["task"],
                "model": label,
                "seeds": block["seed"].nunique(),
                "acc p=0": acc(0.0, "published"),
                "acc p=1 (published null)": acc(1.0, "published"),
                "acc p=1 (same null)": acc(1.0, "same_null"),
                "majority": f"{majority.get(ident['task'], math.nan) * 100:.1f}",
                "spectral gap": f"{g['gap'].mean():.3f}" if len(g) else "",
                "length": int(longest["length"].iloc[0]) if len(longest) else "",
                "max hops": f"{longest['max_hops'].mean():.1f}" if len(longest) else "",
                "mean hops": f"{longest['mean_hops'].mean():.2f}" if len(longest) else "",
            }
        )
    return pd.DataFrame(rows)


STUDY = "fna_graphs"  # the tidy CSV's study (pdelab.report.tidy)
# Fig 5c-e's hop counts the paper prints (fna_shortest_paths.csv), per mechanism and alpha
PAPER_HOPS = {("fna", 1.2): "fna_alpha_1.2", ("la", 2.0): "la_alpha_2", ("dp", None): "dp"}


def paper_max_hops(mechanism: str, alpha: float) -> float:
    """The longest shortest path the paper prints for a model of this mechanism and alpha
    (NaN for any other model)."""
    from pdelab.papers.fractional_attention.tables import paper_table

    key = (mechanism, None if mechanism == "dp" else round(float(alpha), 3))
    row = PAPER_HOPS.get(key)
    hops = paper_table("fna_shortest_paths.csv")["max_shortest_path"]
    return float(hops[row]) if row in hops.index else math.nan


def graph_data(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The table's numbers in long form (pdelab.report.tidy), per task and model (variant:
    the run's variant, then what is measured): test accuracy at p = 0 and p = 1 under both
    nulls, the spectral gap, and the hop counts of the longest probed sequence, each a mean
    with its 95% interval over the seeds (accuracy in percent); the paper's longest path
    beside ours where it prints one (one sequence, its own length)."""
    ablation, gaps, hops = frames["ablation"], frames["gaps"], frames["hops"]
    rows = []
    if ablation.empty:
        return tidy.frame(rows)
    for (task, variant), block in ablation.groupby(["task", "variant"], sort=False):
        for p, null in ((0.0, "published"), (1.0, "published"), (1.0, "same_null")):
            at = block[(block["p"] == p) & (block["null"] == null)].groupby("seed")["acc"]
            item = f"{variant}: p={p:g}, {null} null"
            rows.append(tidy.over_seeds(STUDY, task, item, "accuracy", at.mean() * 100))
        mine = {"task": task, "variant": variant}
        g = gaps[same_model(gaps, mine)] if len(gaps) else gaps
        if len(g):
            gap = g.groupby("seed")["gap"].mean()
            rows.append(tidy.over_seeds(STUDY, task, variant, "spectral_gap", gap))
        h = hops[same_model(hops, mine)] if len(hops) else hops
        if len(h):
            longest = h[h["length"] == h["length"].max()].groupby("seed")
            first = block.iloc[0]
            paper = paper_max_hops(first["mechanism"], first["alpha"])
            item = f"{variant}: length {int(h['length'].max())}"
            rows.append(
                tidy.over_seeds(STUDY, task, item, "hops_max", longest["max_hops"].mean(), paper)
            )
            rows.append(
                tidy.over_seeds(STUDY, task, item, "hops_mean", longest["mean_hops"].mean())
            )
    return tidy.frame(rows)


NOTE = (
    "Trained one-layer, one-head models (Figs 4-5). Edge ablation: a share p of layer 0's "
    "(query, key) edges removed per test batch; a row left without keys is uniform over every "
    "key for DP and zero for FNA as the official code has it (published null), or zero for "
    "both (same null: the attention is absent at p = 1). Spectral gap: first minus second "
    "eigenvalue (by real part) of the attention of training sequences, averaged. Hops: the "
    "minimum-weight paths on 1/A of the longest training sequence, off the diagonal."
)


def write_outputs(
    out_dir: Path, frames: dict[str, pd.DataFrame], majority: dict[str, float], profile: str
) -> list[Path]:
    """GRAPH_OUTPUTS: the measures (Parquet), the summary table (md, tex) and two figures."""
    paths = {k: out_dir / v for k, v in GRAPH_OUTPUTS.items()}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    for name in ("ablation", "gaps", "hops", "diffusion"):
        write_parquet(frames[name], paths[name])
    table = summary_table(frames, majority)
    title = "Fractional Neural Attention: attention graphs of the trained shallow models"
    header = f"{NOTE} Ours: {PROFILE_NOTES.get(profile, f'profile {profile}')}."
    grid = Grid(table, numparse=False)  # the page beside the Markdown: what the report shows
    made = TableFile.titled(title, header, grid, graph_data(frames))
    made.write(paths["table"], paths["tex"], profile)
    ablation_plot(frames["ablation"], majority, paths["ablation_figure"], profile)
    graph_plot(frames, paths["graph_figure"], profile)
    return list(paths.values())


def ablation_plot(
    ablation: pd.DataFrame, majority: dict[str, float], path: Path, profile: str
) -> None:
    """Fig 4 / A3: test accuracy against p, one line per model, a panel per null."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, null in zip(axes, NULLS, strict=True):
        if len(ablation):
            shown = ablation[ablation["null"] == null]
            keys = ["mechanism", "alpha", "dim", "tied"]
            for _, block in shown.groupby(keys, sort=False, dropna=False):
                curve = block.groupby("p")["acc"].agg(["mean", "std"]).fillna(0.0) * 100
                ax.errorbar(
                    curve.index,
                    curve["mean"],
                    yerr=curve["std"],
                    capsize=2,
                    label=model_label(block.iloc[0]),
                )
            for task in shown["task"].unique():
                ax.axhline(majority.get(task, math.nan) * 100, color="gray", ls=":", lw=1)
        ax.set(title=f"{null.replace('_', ' ')} null", xlabel="share of edges removed p")
    axes[0].set_ylabel("test accuracy (%)")
    axes[-1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"Edge ablation of layer 0 (Fig 4 / A3; {profile} profile; dotted: majority)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def graph_plot(frames: dict[str, pd.DataFrame], path: Path, profile: str) -> None:
    """Fig 5: (a) gap vs test accuracy, (b) a diffusion map, (d) max hops and (e) mean hops
    against the sequence length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    gaps, hops, diffusion = frames["gaps"], frames["hops"], frames["diffusion"]
    ablation = frames["ablation"]
    keys = ["mechanism", "alpha", "dim", "tied"]
    if len(gaps):
        acc = ablation[(ablation["p"] == 0) & (ablation["null"] == "published")]
        merged = gaps.merge(acc[["task", "variant", "seed", "acc"]], on=["task", "variant", "seed"])
        for _, block in merged.groupby(keys, sort=False, dropna=False):
            axes[0].errorbar(
                block["gap"].mean(),
                block["acc"].mean() * 100,
                xerr=block["gap"].std(ddof=0),
                yerr=block["acc"].std(ddof=0) * 100,
                fmt="o",
                capsize=2,
                label=model_label(block.iloc[0]),
            )
        axes[0].legend(fontsize=6, frameon=False)
    axes[0].set(
        title="a: spectral gap vs accuracy", xlabel="mean spectral gap", ylabel="test accuracy (%)"
    )
    if len(diffusion):
        for _, block in diffusion.groupby(["variant", "seed"], sort=False):
            if block["seed"].iloc[0] != diffusion["seed"].min():
                continue
            axes[1].scatter(block["psi_1"], block["psi_2"], s=6, label=model_label(block.iloc[0]))
        axes[1].legend(fontsize=6, frameon=False)
    axes[1].set(title="b: diffusion map (Q = K)", xlabel="psi_1", ylabel="psi_2")
    if len(hops):
        for _, block in hops.groupby(keys, sort=False, dropna=False):
            curve = block.groupby("length")[["max_hops", "mean_hops"]].mean()
            label = model_label(block.iloc[0])
            axes[2].plot(curve.index, curve["max_hops"], marker="o", label=label)
            axes[3].plot(curve.index, curve["mean_hops"], marker="o", label=label)
        axes[3].legend(fontsize=6, frameon=False)
    axes[2].set(title="d: max hops", xlabel="sequence length", ylabel="hops")
    axes[3].set(title="e: mean hops", xlabel="sequence length", ylabel="hops")
    fig.suptitle(f"Attention graphs of trained one-layer models (Fig 5; {profile} profile)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def majority_rates(folders: list[Path]) -> dict[str, float]:
    """Each task's majority-class rate on its test labels (the chance line)."""
    rates: dict[str, float] = {}
    for folder in folders:
        run = RunSpec.from_dict(check_run(folder)["spec"])
        if run.task not in rates:  # the labels as the manifest lists them (sha256 checked)
            labels = np.asarray(load_split(run.data_dir, "test", verify=True).labels)
            rates[run.task] = float(np.bincount(labels).max() / len(labels))
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="task/variant/seed=run folder")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    parser.add_argument("--profile", help="the run profile (default: params.yaml's)")
    parser.add_argument("--sequences", type=int, default=100, help="for the spectral gap")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    runs = {key: Path(folder) for key, folder in (p.split("=", 1) for p in args.runs)}
    probed = [probe_run(k, f, args.sequences, args.batch_size, device) for k, f in runs.items()]
    frames = collect([r for r in probed if r is not None])
    majority = majority_rates(list(runs.values()))
    if len(frames["ablation"]):  # the chance line the audit judges p = 1 against
        frames["ablation"]["majority"] = frames["ablation"]["task"].map(majority)
    for path in write_outputs(args.out_dir, frames, majority, profile_here(args.profile)):
        print(path)


if __name__ == "__main__":
    main()
