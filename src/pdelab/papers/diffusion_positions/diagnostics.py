"""Roughness and the diffusion-attention commutator, measured in trained models.

where-to-add-pde-diffusion explains its position results with two quantities it never measures
("we do not directly measure commutator norms in this work"): the Dirichlet energy E(Z_j) at an
insertion point (Theorem 4.7: inserting S_alpha after f_j moves the output by at most
alpha * sqrt(2 E(Z_j)) times the downstream Lipschitz product) and the commutator
[S_alpha, A](X) = S(A(X)) - A(S(X)) of diffusion with attention (Prop. 4.8, Eq. 13, App. B.5).
This module measures both on a fixed batch: the first N examples of the validation split.

Roughness, per example over pairs of real tokens, then averaged over examples:
``energy`` E(Z) = 1/2 sum_i ||Z_{i+1} - Z_i||^2 (the paper's, length- and width-dependent);
``roughness`` = E / (pairs * channels), half the mean squared neighbour difference, comparable
across lengths and widths; ``roughness_scalefree`` = E / ||Z - mean_i Z||_F^2 in [0, 2), the
share of high-frequency modes, comparable across the growing pre-LN residual stream. Points,
each taken *before* its own site's diffusion (the Z_j of Theorem 4.7): ``embedding`` (token +
position embeddings; P1), ``attention_input`` X, ``after_attention`` h = X + Attn(X) (P7),
``mlp_output`` g (P2), ``block_output`` X2 (P3). ``site_active`` marks the points where the
run's variant applies diffusion (before_layernorm: the LayerNorm inputs; in_attention: X).

Commutator, per layer. A is the layer's attention sublayer (qkv projection, kernel, output
projection; eval mode) on the tensor it reads (X post-norm, LN1(X) pre-norm); S_alpha = I +
sum_k alpha_k Delta_{N, h_k} with no LayerNorm, masked like the model's (no edge touches
padding). Three forms, Frobenius norms over real tokens:

* ``exact``    S(A(X)) - A(S(X)) (Prop. 4.8).
* ``linear``   Eq. (13)/(35): attention frozen as a mixing operator at X, A(X) ~ A(X) X. With
  heads and projections the frozen map is Y -> sum_h A_h(X) Y W_V^h W_O^h + const, so the form
  is sum_h alpha (Delta_N A_h - A_h Delta_N) X W_V^h W_O^h: per head, combined through each
  head's own value-output map. (Averaging A_h over heads would test a matrix the layer never
  applies: sum_h A_h X W_h != mean_h(A_h) X W unless every W_h agrees.) It is computed without
  T x T matrices as S(A(X)) - A_X(S(X)), the kernel re-run with the queries and keys of X and
  the values of S(X): exact for every registered kernel, as all are linear in V.
* ``tangent``  the first-order term of ``exact`` in alpha, (S - I) A(X) - J_A(X)[(S - I) X]
  (central difference, float64). It is ``linear`` plus the routing-sensitivity term
  -sum_h dA_h[(S - I) X] X W_h that Eq. (13) drops, so exact/tangent -> 1 as alpha -> 0 for any
  attention, while exact/linear -> 1 only where the attention weights do not move with X.

``_rel`` columns divide by ||A(X)||_F per example. S is the variant's own diffusion where it
has one near the layer (``alpha_source`` names the module: the block's sites, post-attention
first, then in-attention / head diffusion, then the embedding's), else alpha = 0.1, stride 1
(``reference``); ``_ref`` columns use the reference S for every variant, so variants compare at
one operator (the commutator scales with alpha). The whole model runs as a float64 copy.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tabulate import tabulate
from torch import Tensor, nn

from pdelab.config import RunSpec
from pdelab.data.store import MANIFEST, load_manifest, load_split
from pdelab.models.diffusion import dirichlet_energy, neumann_laplacian
from pdelab.models.transformer import Block, Classifier, Encoder, PairClassifier, SelfAttention
from pdelab.train import BEST, build_model

POINTS = ("embedding", "attention_input", "after_attention", "mlp_output", "block_output")
BLOCK_POINTS = POINTS[1:]
REFERENCE_ALPHA, REFERENCE_STRIDES = 0.1, (1,)
# A block's diffusion modules in the order the layer's own S is picked from: the post-attention
# site first, since S o A there is exactly the composition the commutator compares to A o S.
BLOCK_SITES = ("after_attention", "layer_diffusion", "after_mlp", "before_ln1", "before_ln2")
ROUGHNESS = ("energy", "roughness", "roughness_scalefree")
TINY = 1e-300


@dataclass(frozen=True)
class Operator:
    """S_alpha = I + sum_k alpha_k Delta_{N, h_k} along dim 1: the theory's operator, no LN."""

    alphas: tuple[float, ...]
    strides: tuple[int, ...]
    source: str = "reference"

    @property
    def alpha(self) -> float:
        return float(sum(self.alphas))

    def scaled(self, factor: float) -> Operator:
        return Operator(tuple(a * factor for a in self.alphas), self.strides, self.source)

    def delta(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """(S - I) x; the mask cuts every edge that touches padding, as the model's S does."""
        out = torch.zeros_like(x)
        for a, h in zip(self.alphas, self.strides, strict=True):
            out = out + a * neumann_laplacian(x, h, mask)
        return out

    def __call__(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return x + self.delta(x, mask)


def reference_operator() -> Operator:
    return Operator((REFERENCE_ALPHA,), REFERENCE_STRIDES, "reference")


def layer_operator(encoder: Encoder, layer: int) -> Operator:
    """The diffusion the variant applies in or before this layer, else the reference S.

    head_diffusion's coefficients act along heads in the model; here they act along tokens.
    """
    block = encoder.blocks[layer]
    found = [
        (f"blocks.{layer}.{s}", block.diffusion[s]) for s in BLOCK_SITES if s in block.diffusion
    ]
    for name in ("value_diffusion", "head_diffusion"):
        if (module := getattr(block.attn, name)) is not None:
            found.append((f"blocks.{layer}.attn.{name}", module))
    if encoder.embed_diffusion is not None:
        found.append(("embed_diffusion", encoder.embed_diffusion))
    if not found:
        return reference_operator()
    name, module = found[0]
    alphas = tuple(float(a) for a in module.alphas().detach().double())
    return Operator(alphas, tuple(module.strides), name)


# --------------------------------------------------------------------------------------------
# Forward passes re-implemented from the modules' own parts, exposing what the theory names
# --------------------------------------------------------------------------------------------


def _heads(attn: SelfAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    b, t, _ = x.shape
    q, k, v = attn.qkv(x).view(b, t, 3, attn.heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    return q, k, v


def attention(
    attn: SelfAttention,
    x: Tensor,
    mask: Tensor | None,
    causal: bool = False,
    routing: Tensor | None = None,
) -> Tensor:
    """SelfAttention.forward step by step. With ``routing`` the queries and keys come from that
    input, so the attention weights are frozen at it while values still come from x: the
    linearization A(routing) x of Eq. (13), with the layer's own projections around it."""
    b, t, c = x.shape
    q, k, v = _heads(attn, x)
    if routing is not None:
        q, k, _ = _heads(attn, routing)
    if attn.value_diffusion is not None:
        flat = v.reshape(b * attn.heads, t, attn.head_dim)
        flat_mask = None if mask is None else mask.repeat_interleave(attn.heads, dim=0)
        v = attn.value_diffusion(flat, flat_mask).view(b, attn.heads, t, attn.head_dim)
    y = attn.kernel(q, k, v, key_padding_mask=mask, causal=causal)
    if attn.head_diffusion is not None:
        per_token = y.permute(0, 2, 1, 3).reshape(b * t, attn.heads, attn.head_dim)
        y = attn.head_diffusion(per_token).view(b, t, attn.heads, attn.head_dim)
    else:
        y = y.transpose(1, 2)
    return attn.out(y.reshape(b, t, c))


def block_forward(
    block: Block, x: Tensor, mask: Tensor | None, causal: bool = False
) -> tuple[Tensor, dict[str, Tensor]]:
    """Block.forward with the block's own submodules, in the same order (so bit-identical);
    also returns the insertion points, each before its site's diffusion, and ``attn_in``."""
    site = block.site
    if block.pre_norm:
        attn_in = block.ln1(site("before_ln1", x, mask))
        h = x + block.drop(block.attn(attn_in, mask, causal))
        h_site = site("after_attention", h, mask)
        g = h_site + block.drop(block.mlp(block.ln2(site("before_ln2", h_site, mask))))
        x2 = site("after_mlp", g, mask)
    else:
        attn_in = x
        h = x + block.drop(block.attn(x, mask, causal))
        x1 = block.ln1(site("before_ln1", site("after_attention", h, mask), mask))
        g = x1 + block.drop(block.mlp(x1))
        x2 = block.ln2(site("before_ln2", site("after_mlp", g, mask), mask))
    out = site("layer_diffusion", x2, mask)
    points = {"attention_input": x, "after_attention": h, "mlp_output": g, "block_output": x2}
    return out, {**points, "attn_in": attn_in}


def trace(
    encoder: Encoder, ids: Tensor, mask: Tensor | None, causal: bool = False
) -> tuple[Tensor, list[tuple[int, str, Tensor]], list[Tensor]]:
    """Encoder.forward step by step: (output, [(layer, point, Z)], each layer's attention input).
    The embedding point belongs to layer 0."""
    t = ids.shape[1]
    x = encoder.tokens(ids) + encoder.positions(torch.arange(t, device=ids.device))
    points = [(0, "embedding", x)]
    if encoder.embed_diffusion is not None:
        x = encoder.embed_diffusion(x, mask)
    x = encoder.drop(x)
    attn_inputs = []
    for layer, block in enumerate(encoder.blocks):
        x, found = block_forward(block, x, mask, causal)
        attn_inputs.append(found["attn_in"])
        points += [(layer, name, found[name]) for name in BLOCK_POINTS]
    return encoder.final_norm(x), points, attn_inputs


def encoder_inputs(
    model: nn.Module, ids: Tensor, mask: Tensor | None
) -> tuple[Encoder, Tensor, Tensor | None]:
    """The encoder and its input as the model builds it: a PairClassifier's (shared) tower on
    the first documents, with the CLS token prepended under cls pooling (Classifier.embed)."""
    if isinstance(model, Encoder):
        return model, ids, mask
    tower = model.tower if isinstance(model, PairClassifier) else model
    if not isinstance(tower, Classifier):
        raise TypeError(f"expected an Encoder, Classifier or PairClassifier, got {type(model)}")
    if tower.pooling == "cls":
        ids = torch.cat([torch.full_like(ids[:, :1], Classifier.CLS_ID), ids], dim=1)
        if mask is not None:
            mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)
    return tower.encoder, ids, mask


def active_points(encoder: Encoder, layer: int) -> dict[str, bool]:
    """Which points of this layer the variant diffuses (before_layernorm: the LN inputs)."""
    block = encoder.blocks[layer]
    d, pre = block.diffusion, block.pre_norm
    return {
        "embedding": layer == 0 and encoder.embed_diffusion is not None,
        "attention_input": (pre and "before_ln1" in d) or block.attn.value_diffusion is not None,
        "after_attention": "after_attention" in d or ("before_ln2" if pre else "before_ln1") in d,
        "mlp_output": "after_mlp" in d or (not pre and "before_ln2" in d),
        "block_output": "layer_diffusion" in d,
    }


# --------------------------------------------------------------------------------------------
# The two diagnostics, per example
# --------------------------------------------------------------------------------------------


def _real(x: Tensor, mask: Tensor | None) -> Tensor:
    return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask


def roughness(z: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """Per-example (B,) Dirichlet energy of z (B, T, D) over real-token pairs: raw ``energy``,
    ``roughness`` per pair and channel, and ``roughness_scalefree`` (energy over variance)."""
    real = _real(z, mask)
    energy = dirichlet_energy(z, real)
    pairs = (real[:, 1:] & real[:, :-1]).sum(dim=1).to(z.dtype)
    w = real.unsqueeze(-1).to(z.dtype)
    mean = (z * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
    spread = ((z - mean) * w).pow(2).sum(dim=(1, 2))
    nan = torch.full_like(energy, float("nan"))
    return {
        "energy": energy,
        "roughness": torch.where(pairs > 0, energy / (pairs * z.shape[-1]).clamp_min(1.0), nan),
        "roughness_scalefree": torch.where(spread > 0, energy / spread.clamp_min(TINY), nan),
    }


def frobenius(y: Tensor, mask: Tensor | None = None) -> Tensor:
    """Per-example ||y||_F over real tokens only: padded rows are not part of the sequence."""
    return (y * _real(y, mask).unsqueeze(-1).to(y.dtype)).pow(2).sum(dim=(1, 2)).sqrt()


@torch.no_grad()
def commutators(
    attn: SelfAttention,
    x: Tensor,
    mask: Tensor | None,
    op: Operator,
    causal: bool = False,
    tangent: bool = True,
    fd_step: float = 1e-5,
) -> dict[str, Tensor]:
    """Per-example norms of the exact, linearized (frozen routing, Eq. 13) and first-order
    (``tangent``) commutators of S_alpha with this attention at x, and ||A(x)||_F."""
    ax = attention(attn, x, mask, causal)
    sx = op(x, mask)
    s_ax = op(ax, mask)
    out = {
        "attention_norm": frobenius(ax, mask),
        "exact": frobenius(s_ax - attention(attn, sx, mask, causal), mask),
        "linear": frobenius(s_ax - attention(attn, sx, mask, causal, routing=x), mask),
    }
    if tangent:  # J_A(x)[d] by a central difference, O(step^2): needs float64
        d = op.delta(x, mask)
        step = fd_step * float(x.norm()) / max(float(d.norm()), TINY)
        jd = attention(attn, x + step * d, mask, causal) - attention(
            attn, x - step * d, mask, causal
        )
        out["tangent"] = frobenius(op.delta(ax, mask) - jd / (2 * step), mask)
    return out


# --------------------------------------------------------------------------------------------
# A model, a run
# --------------------------------------------------------------------------------------------


def _chunks(mask: Tensor | None, n: int, heads: int, budget: int) -> Iterator[slice]:
    """Example ranges whose (H, T, T) float64 attention scores fit the byte budget."""
    t = mask.shape[1] if mask is not None else 1
    size = max(1, budget // max(1, heads * t * t * 8))
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


@torch.no_grad()
def diagnose_model(
    model: nn.Module,
    ids: Tensor,
    mask: Tensor | None,
    *,
    dtype: torch.dtype = torch.float64,
    budget_bytes: int = 2**28,
) -> pd.DataFrame:
    """Rows (layer, point): roughness averaged over the batch's examples, and that layer's
    commutators (repeated on each of its rows). Runs a ``dtype`` copy of the model in eval mode
    in chunks of examples, each cut to its own longest sequence (padding changes nothing)."""
    model = copy.deepcopy(model).to(dtype).eval()
    encoder, ids, mask = encoder_inputs(model, ids, mask)
    layers = len(encoder.blocks)
    own = [layer_operator(encoder, j) for j in range(layers)]
    ref = reference_operator()
    rough: dict[tuple[int, str], dict[str, list[Tensor]]] = defaultdict(lambda: defaultdict(list))
    comm: dict[int, dict[str, list[Tensor]]] = defaultdict(lambda: defaultdict(list))
    heads = encoder.blocks[0].attn.heads if layers else 1
    for rows in _chunks(mask, len(ids), heads, budget_bytes):
        i, m = ids[rows], None if mask is None else mask[rows]
        if m is not None:
            t = int(m.sum(dim=1).max())
            i, m = i[:, :t], m[:, :t]
        _, points, attn_inputs = trace(encoder, i, m)
        for layer, point, z in points:
            for key, value in roughness(z, m).items():
                rough[(layer, point)][key].append(value)
        for j, (block, x) in enumerate(zip(encoder.blocks, attn_inputs, strict=True)):
            found = commutators(block.attn, x, m, own[j])
            at_ref = found
            if own[j].source != "reference":
                at_ref = commutators(block.attn, x, m, ref, tangent=False)
            found |= {f"{form}_ref": at_ref[form] for form in ("exact", "linear")}
            for key, value in found.items():
                comm[j][key].append(value)

    def mean(values: list[Tensor]) -> float:
        return float(np.nanmean(torch.cat(values).double().numpy()))

    rows_out = []
    for j in range(layers):
        c = {k: torch.cat(v) for k, v in comm[j].items()}
        norm = c.pop("attention_norm").clamp_min(TINY)
        stats: dict[str, float | str] = {}
        for key, value in c.items():
            stats[f"commutator_{key}"] = float(value.mean())
            stats[f"commutator_{key}_rel"] = float((value / norm).mean())
        stats |= {
            "attention_norm": float(norm.mean()),
            "alpha_used": own[j].alpha,
            "strides_used": ",".join(str(h) for h in own[j].strides),
            "alpha_source": own[j].source,
        }
        active = active_points(encoder, j)
        for point in POINTS if j == 0 else BLOCK_POINTS:
            depth = 0 if point == "embedding" else 1 + 4 * j + BLOCK_POINTS.index(point)
            r = rough[(j, point)]
            rows_out.append(
                {
                    "layer": j,
                    "point": point,
                    "depth": depth,
                    "site_active": active[point],
                    **{k: mean(r[k]) for k in ROUGHNESS},
                    **stats,
                    "n_examples": len(ids),
                }
            )
    return pd.DataFrame(rows_out)


def find_data_dir(run: RunSpec, run_dir: Path, data_dir: Path | None = None) -> Path:
    """The run's prepared data: ``data_dir`` if given, else spec.data_dir as written (absolute,
    or relative to the working directory or to any folder above the run's)."""
    if data_dir is not None:
        return Path(data_dir)
    path = Path(run.data_dir)
    for base in (Path.cwd(), *Path(run_dir).resolve().parents):
        if (base / path / MANIFEST).exists():
            return base / path
    return path  # load_manifest then says what is missing


def load_run(run_dir: Path, data_dir: Path | None = None) -> tuple[dict, nn.Module, Path]:
    """(run.json record, the model at its best-validation weights, the data folder)."""
    run_dir = Path(run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    run = RunSpec.from_dict(record["spec"])
    data = find_data_dir(run, run_dir, data_dir)
    model = build_model(run, load_manifest(data))
    model.load_state_dict(torch.load(run_dir / BEST, map_location="cpu", weights_only=True))
    return record, model.eval(), data


def diagnose_run(
    run_dir: Path, n_examples: int = 64, data_dir: Path | None = None, split: str = "val"
) -> pd.DataFrame:
    """diagnose_model on the first ``n_examples`` of the split (the first documents of a pair
    task), with the run's task, variant, seed, norm and diffusion sites in front."""
    record, model, data = load_run(run_dir, data_dir)
    spec = record["spec"]
    examples = load_split(data, split)
    batch = examples.batch(np.arange(min(n_examples, len(examples))))
    diag = diagnose_model(model, torch.from_numpy(batch["ids"]), torch.from_numpy(batch["mask"]))
    front = {
        "task": spec["task"],
        "variant": spec["variant"],
        "seed": int(spec["seed"]),
        "norm": spec["model"]["norm"],
        "sites": ",".join(spec["diffusion"]["sites"]),
        "split": split,
    }
    for pos, (key, value) in enumerate(front.items()):
        diag.insert(pos, key, value)
    return diag


def summary_from_runs(run_dirs: Sequence[Path]) -> pd.DataFrame:
    """task, variant, seed, status, test_acc from each run.json's result."""
    keys = ["task", "variant", "seed", "status", "test_acc"]
    rows = []
    for run_dir in run_dirs:
        result = json.loads((Path(run_dir) / "run.json").read_text()).get("result") or {}
        if all(k in result for k in keys):
            rows.append({k: result[k] for k in keys})
    return pd.DataFrame(rows, columns=keys)


# --------------------------------------------------------------------------------------------
# Against accuracy
# --------------------------------------------------------------------------------------------

FEATURES = {
    "roughness_mean": "mean roughness over all points (variant's model)",
    "roughness_scalefree_mean": "mean scale-free roughness (variant's model)",
    "commutator_exact_rel": "mean relative exact commutator over layers, alpha = 0.1",
    "commutator_linear_rel": "mean linearized (Eq. 13) relative commutator, alpha = 0.1",
    "site_roughness_baseline": "baseline's roughness at the variant's insertion points (Thm 4.7)",
}


def accuracy_deltas(summary: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Per (task, variant): mean test accuracy of the ok runs minus the baseline's (same task)."""
    ok = summary[summary["status"] == "ok"]
    acc = ok.groupby(["task", "variant"], as_index=False)["test_acc"].mean()
    base = acc[acc["variant"] == baseline].set_index("task")["test_acc"]
    acc["delta_acc"] = acc["test_acc"] - acc["task"].map(base)
    return acc[acc["variant"] != baseline]


def variant_features(diag: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """One row per (task, variant) with the FEATURES, seeds averaged."""
    per_layer = diag.drop_duplicates(["task", "variant", "seed", "layer"])
    keys = ["task", "variant"]
    feats = diag.groupby(keys).agg(
        roughness_mean=("roughness", "mean"),
        roughness_scalefree_mean=("roughness_scalefree", "mean"),
    )
    comm = per_layer.groupby(keys).agg(
        commutator_exact_rel=("commutator_exact_ref_rel", "mean"),
        commutator_linear_rel=("commutator_linear_ref_rel", "mean"),
    )
    feats = feats.join(comm).reset_index()
    base = diag[diag["variant"] == baseline].groupby(["task", "layer", "point"])["roughness"].mean()
    site_rough = []
    for task, variant in zip(feats["task"], feats["variant"], strict=True):
        rows = diag[(diag["task"] == task) & (diag["variant"] == variant) & diag["site_active"]]
        values = [
            base.get((task, j, p), np.nan)
            for j, p in zip(rows["layer"], rows["point"], strict=True)
        ]
        site_rough.append(float(np.mean(values)) if values else np.nan)
    feats["site_roughness_baseline"] = site_rough
    return feats


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    return pd.Series(x).rank().to_numpy()


def correlations(
    diag: pd.DataFrame, summary: pd.DataFrame, baseline: str = "baseline"
) -> pd.DataFrame:
    """Pearson and Spearman of each FEATURE against the accuracy change from the baseline,
    over (task, variant) points, per task and pooled over tasks ("all"); NaN when n < 3."""
    data = variant_features(diag, baseline).merge(
        accuracy_deltas(summary, baseline), on=["task", "variant"]
    )
    scopes = [("all", data)] + [(t, data[data["task"] == t]) for t in sorted(data["task"].unique())]
    rows = []
    for scope, frame in scopes:
        for feature, meaning in FEATURES.items():
            both = frame[[feature, "delta_acc"]].dropna()
            x, y = both[feature].to_numpy(float), both["delta_acc"].to_numpy(float)
            rows.append(
                {
                    "scope": scope,
                    "feature": feature,
                    "n": len(both),
                    "pearson": _corr(x, y),
                    "spearman": _corr(_ranks(x), _ranks(y)) if len(x) else float("nan"),
                    "meaning": meaning,
                }
            )
    return pd.DataFrame(rows)


def write_table(frame: pd.DataFrame, path: Path, title: str = "", floatfmt: str = ".3f") -> None:
    """A DataFrame (e.g. correlations) as a GitHub Markdown table; NaN prints as n/a."""
    md = tabulate(
        frame,
        headers="keys",
        tablefmt="github",
        showindex=False,
        floatfmt=floatfmt,
        missingval="n/a",
    )
    Path(path).write_text(
        (f"**{title}**\n\n" if title else "") + md.replace(" nan ", " n/a ") + "\n"
    )


def plot(
    diag: pd.DataFrame, summary: pd.DataFrame, out_png: Path, baseline: str = "baseline"
) -> None:
    """Per task: roughness across depth and the relative commutator (alpha = 0.1) across layers,
    one line per variant (seed mean; rings mark where the variant diffuses); bottom row: each
    variant's diagnostics against its test-accuracy change from the baseline, all tasks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(diag["task"].unique())
    variants = list(dict.fromkeys(diag["variant"]))
    colors = {v: plt.get_cmap("tab10")(i % 10) for i, v in enumerate(variants)}
    fig = plt.figure(figsize=(14, 3.6 * (len(tasks) + 1)))
    grid = fig.add_gridspec(len(tasks) + 1, 3)
    ref = "commutator_exact_ref_rel"
    for row, task in enumerate(tasks):
        ax_r, ax_c = fig.add_subplot(grid[row, :2]), fig.add_subplot(grid[row, 2])
        block = diag[diag["task"] == task]
        for variant in variants:
            v = block[block["variant"] == variant]
            if v.empty:
                continue
            r = v.groupby("depth").agg(
                roughness=("roughness", "mean"), active=("site_active", "any")
            )
            ax_r.plot(r.index, r["roughness"], "-o", ms=3, color=colors[variant], label=variant)
            hit = r[r["active"]]
            ax_r.scatter(
                hit.index, hit["roughness"], s=70, facecolors="none", edgecolors=[colors[variant]]
            )
            c = v.drop_duplicates(["seed", "layer"]).groupby("layer")[ref].mean()
            ax_c.plot(c.index, c.values, "-o", ms=3, color=colors[variant], label=variant)
        ticks = block.drop_duplicates("depth").sort_values("depth")
        ax_r.set_xticks(
            ticks["depth"],
            [
                p if p == "embedding" else f"L{j}.{p}"
                for j, p in zip(ticks["layer"], ticks["point"], strict=True)
            ],
            rotation=60,
            ha="right",
            fontsize=7,
        )
        ax_r.set_yscale("log")
        ax_r.set_ylabel("roughness E / (pairs x d)")
        ax_r.set_title(f"{task}: roughness across depth (before each site's diffusion)")
        ax_c.set_xticks(sorted(block["layer"].unique()))
        ax_c.set_xlabel("layer")
        ax_c.set_ylabel("||[S, A]X|| / ||A(X)||")
        ax_c.set_title(f"{task}: exact commutator, alpha = {REFERENCE_ALPHA}")
        for ax in (ax_r, ax_c):
            ax.grid(alpha=0.3)
        ax_r.legend(fontsize=7, ncol=2)
    feats = variant_features(diag, baseline).merge(
        accuracy_deltas(summary, baseline), on=["task", "variant"]
    )
    corr = correlations(diag, summary, baseline).query("scope == 'all'").set_index("feature")
    for col, feature in enumerate(
        ("roughness_mean", "commutator_exact_rel", "site_roughness_baseline")
    ):
        ax = fig.add_subplot(grid[len(tasks), col])
        for variant, v in feats.groupby("variant"):
            ax.scatter(v[feature], 100 * v["delta_acc"], color=colors.get(variant), label=variant)
        c = corr.loc[feature]
        ax.set_title(
            f"all tasks: Pearson {c['pearson']:.2f}, Spearman {c['spearman']:.2f} (n = {c['n']})",
            fontsize=9,
        )
        ax.set_xlabel(FEATURES[feature], fontsize=8)
        ax.set_ylabel("test acc - baseline (points)")
        ax.axhline(0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.diagnostics",
        description="Roughness and diffusion-attention commutators of trained runs.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, help="folders with run.json, best.pt")
    parser.add_argument("--out", type=Path, default=Path("diagnostics.parquet"))
    parser.add_argument("--n-examples", type=int, default=64)
    parser.add_argument("--split", default="val")
    parser.add_argument("--data-dir", type=Path, help="prepared data (default: the run's)")
    parser.add_argument(
        "--summary",
        type=Path,
        help="parquet/csv: task, variant, seed, status, "
        "test_acc (default: the runs' own run.json results)",
    )
    parser.add_argument("--png", type=Path, help="also write the figure here")
    parser.add_argument("--table", type=Path, help="also write the correlation table here")
    parser.add_argument("--baseline", default="baseline")
    args = parser.parse_args(argv)
    frames = []
    for run_dir in args.run_dirs:
        try:
            frames.append(diagnose_run(run_dir, args.n_examples, args.data_dir, args.split))
        except FileNotFoundError as err:  # a diverged run has no best.pt: skip, say so
            warnings.warn(f"skipping {run_dir}: {err}", stacklevel=1)
    if not frames:
        sys.exit("no run could be diagnosed")
    diag = pd.concat(frames, ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    diag.to_parquet(args.out, index=False)
    print(f"wrote {len(diag)} rows to {args.out}", file=sys.stderr)
    if args.png or args.table:
        if args.summary is None:
            summary = summary_from_runs(args.run_dirs)
        elif args.summary.suffix == ".csv":
            summary = pd.read_csv(args.summary)
        else:
            summary = pd.read_parquet(args.summary)
        if args.png:
            plot(diag, summary, args.png, args.baseline)
        if args.table:
            write_table(
                correlations(diag, summary, args.baseline),
                args.table,
                "Diagnostics against test-accuracy change from the baseline",
            )


if __name__ == "__main__":
    main()
