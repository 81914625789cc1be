"""Graph breaks and recompiles of a run profile's training step, found on CPU before a GPU.

    python -m pdelab.plan.compile_check --profile paper [--only 'retrieval/*' ...] [--json]

Why: on a GPU a compiled step pays for every graph break (a return to Python between graphs,
and usually a host sync: the GPU idles while the CPU reads a value) and for every recompile
(seconds to minutes each, and a model that recompiles per batch never runs compiled). Both
show on CPU, at any size, since they come from the Python code and not from the sizes.

For each selected model the check builds it at a small size on CPU (:data:`SHRUNK`: width,
depth, heads, sequence length, vocabulary and batch cut; the mechanism, its options, the task
kind and the data's format kept), then

* runs ``torch._dynamo.explain`` on the training forward and loss (the task kind's
  ``loss(model, inputs, labels, include_pad)``, pdelab.spec.task_kinds), listing each graph
  break with its reason and the file:line where it happens;
* compiles the same step with ``torch.compile`` (backend ``aot_eager``: Dynamo and AOT
  autograd's backward, no code generation) and runs forward and backward on two batches whose
  lengths fall in one length bucket (pdelab.training.shape_buckets): the first padded, the
  second of full-length sequences (so a step that asks whether a batch is padded shows). A
  recompile is any frame compiled during the second step, again or for the first time (the
  first compiles what it needs: an encoder-decoder's code at both sentence lengths); each is
  listed with the guard that failed. FNA's FlexAttention exists only on a GPU: on a CPU a
  compiled FNA kernel takes its reference path, and benchmarks/gpu_check.sh checks flex.

The exit status is 1 on any break, recompile or error. By default one model of each (task
kind, mechanism family) of the profile is checked (:func:`mechanism_family`); ``--only``
checks every distinct model whose "task/variant" matches one of its patterns (fnmatch's, as
``pdelab plan --only``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pdelab.data.pairs import BOS_ID, EOS_ID, SPECIALS
from pdelab.data.store import PIXEL_VOCAB, RESERVED
from pdelab.models.factory import build_model
from pdelab.models.transformer import checkpoint_blocks
from pdelab.plan.rehearsal import Model
from pdelab.plan.rehearsal import plan as distinct_models
from pdelab.plan.shapes import TaskShape
from pdelab.spec import task_kinds
from pdelab.spec.config import PARAMS_FILE, RunSpec, active_profile, load_params
from pdelab.training.shape_buckets import bucket_length, rungs

BACKENDS = ("aot_eager", "eager")
SHOWN = 8  # recompiles listed per model in the text output (--json has all)


@dataclass(frozen=True)
class Shrink:
    """The small size a model is checked at: caps on its width, depth, heads and MLP, on its
    sequences (text tokens, an image's side, a translation's sentences), its vocabularies and
    the batch. Breaks and recompiles come from the code's Python, which a size does not
    change; the paper's sizes would take minutes and gigabytes per model on a CPU."""

    dim: int = 32
    heads: int = 2
    layers: int = 2
    mlp_dim: int = 64
    tokens: int = 64
    image_side: int = 8
    sentence: int = 24
    vocab: int = 512
    batch: int = 4

    def describe(self) -> str:
        return (
            f"sizes shrunk for the CPU: dim <= {self.dim}, heads <= {self.heads}, layers <= "
            f"{self.layers}, mlp_dim <= {self.mlp_dim}, sequences <= {self.tokens} tokens "
            f"(images {self.image_side}x{self.image_side} pixels, sentences <= "
            f"{self.sentence}), vocabularies <= {self.vocab}, batch {self.batch}; each "
            "model's mechanism, options, task kind and data format as the profile's"
        )


SHRUNK = Shrink()


def task_kind(shape: TaskShape) -> str:
    """The task kind as the step's inputs differ: LRA's document pairs and images (never
    padded, pdelab.models.factory.unpadded) apart from the other classification tasks."""
    if shape.kind == "classification" and shape.pairs:
        return "pair classification"
    if shape.kind == "classification" and shape.vocab == PIXEL_VOCAB:
        return "image classification"
    return shape.kind


def mechanism_family(run: RunSpec) -> str:
    """The code path a model's spec selects: its encoder block (when not the Transformer's)
    and attention kernel, the diffusion sites, the released smoothing and the patch
    embedding, e.g. "sdpa", "sdpa+diffusion[after_mlp]", "ldn", "pde", "fna+patch"."""
    m = run.model
    parts = [m.attention] if m.block == "transformer" else [m.block]
    if m.block != "transformer" and m.attention != "sdpa":
        parts.append(m.attention)
    if run.diffusion.sites:
        parts.append(f"diffusion[{','.join(run.diffusion.sites)}]")
    if m.smoothing:
        parts.append("smoothing")
    if m.patch:
        parts.append("patch")
    return "+".join(parts)


@dataclass(frozen=True)
class Selected:
    """One model to check: a distinct model of the profile, its task kind and family, and
    how many distinct models of the profile it stands for."""

    model: Model
    kind: str
    family: str
    stands_for: int = 1

    @property
    def name(self) -> str:
        return self.model.name


def select(params: dict[str, Any], profile: str, only: Sequence[str] = ()) -> list[Selected]:
    """Every distinct model matching ``only``; without patterns, the first model (in the run
    sheet's order) of each (task kind, mechanism family)."""
    models, _ = distinct_models(params, profile, only)
    chosen = [Selected(m, task_kind(m.shape), mechanism_family(m.run)) for m in models]
    if only:
        return chosen
    groups: dict[tuple[str, str], list[Selected]] = {}
    for one in chosen:
        groups.setdefault((one.kind, one.family), []).append(one)
    return [replace(group[0], stands_for=len(group)) for group in groups.values()]


def shrunk(model: Model, size: Shrink = SHRUNK) -> tuple[RunSpec, TaskShape]:
    """The model's run and task shapes at ``size``: the model spec's width, depth, heads and
    MLP, the data's lengths and vocabularies cut; everything else as it is."""
    run, shape = model.run, model.shape
    m = run.model
    dim = min(m.dim, size.dim)
    heads = min(m.heads, size.heads)
    heads = heads if dim % heads == 0 else 1
    layers, mlp_dim = min(m.layers, size.layers), min(m.mlp_dim, size.mlp_dim)
    spec = replace(m, dim=dim, heads=heads, layers=layers, mlp_dim=mlp_dim)
    train = replace(run.train, seq_len=min(run.train.seq_len, size.tokens))
    small = replace(run, model=spec, train=train, device="cpu")
    vocab = shape.vocab if shape.vocab == PIXEL_VOCAB else shape.vocab[: size.vocab]
    if shape.kind == "translation":
        cut = replace(
            shape,
            vocab=vocab,
            tgt_vocab=shape.tgt_vocab[: size.vocab],
            max_length=min(shape.max_length, size.sentence),
            src_max_length=min(shape.src_max_length, size.sentence),
        )
    elif shape.vocab == PIXEL_VOCAB:
        side, patch = math.isqrt(shape.max_length), max(1, m.patch)
        small_side = patch * max(2, size.image_side // patch)
        cut = replace(shape, max_length=min(side, small_side) ** 2)
    else:
        cut = replace(shape, vocab=vocab, max_length=min(shape.max_length, size.tokens))
    return small, cut


Batch = tuple[dict[str, Tensor], Tensor]


def padded(rows: list[np.ndarray], width: int) -> Tensor:
    """(B, width) int64 ids, each row followed by padding (id 0)."""
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def two_batches(run: RunSpec, shape: TaskShape, size: int, seed: int = 0) -> list[Batch]:
    """Two batches in the trainer's format whose lengths fall in one bucket
    (pdelab.training.shape_buckets) and are padded to it: the first's longest sequence just
    above the rung below, its others shorter; the second's all at the bucket's length (no
    padding). Language modelling: the first holds one short window (a document's last),
    the second only full ones. Images are never padded: two batches of full images."""
    rng = np.random.default_rng(seed)
    fixed = shape.kind == "classification" and shape.vocab == PIXEL_VOCAB

    def lengths(cap: int, full: bool) -> list[int]:
        """``size`` sequence lengths: all ``cap``, or the longest just above the rung
        below ``cap``'s bucket and the rest spread below it."""
        if full or fixed:
            return [cap] * size
        below = [r for r in rungs(cap) if r < bucket_length(cap, cap)]
        longest = below[-1] + 1 if below else cap
        return [longest, *rng.integers(max(2, longest // 4), longest + 1, size - 1).tolist()]

    def tokens(n: int, vocab: int, first: int) -> np.ndarray:
        return rng.integers(first, vocab, n)

    out = []
    for full in (False, True):
        if shape.kind == "translation":
            words = len(SPECIALS)  # the first id of a word, after <pad> <unk> <bos> <eos>
            src = [tokens(n, len(shape.vocab), words) for n in lengths(shape.src_max_length, full)]
            tgt = [
                np.concatenate([[BOS_ID], tokens(n - 2, len(shape.tgt_vocab), words), [EOS_ID]])
                for n in lengths(shape.max_length, full)
            ]
            src_ids = padded(src, bucket_length(max(map(len, src)), shape.src_max_length))
            tgt_ids = padded(tgt, bucket_length(max(map(len, tgt)), shape.max_length))
            inputs = {"src": src_ids, "src_mask": src_ids != 0, "tgt": tgt_ids[:, :-1]}
            out.append((inputs, tgt_ids[:, 1:]))
            continue
        first = len(RESERVED)  # the first id of a token, after padding and CLS
        if shape.kind == "lm":
            window = run.train.seq_len + 1
            rows = [tokens(n, len(shape.vocab), first) for n in lengths(window, full)]
            rows[1:] = [tokens(window, len(shape.vocab), first) for _ in rows[1:]]
            out.append(({"ids": padded(rows, window)}, torch.zeros(size)))
            continue
        rows = [tokens(n, len(shape.vocab), first) for n in lengths(shape.max_length, full)]
        width = bucket_length(max(map(len, rows)), shape.max_length)
        inputs = {"ids": padded(rows, width)}
        inputs["mask"] = inputs["ids"] != 0
        if shape.pairs:  # both documents padded to the pair's bucket, as Split.lengths has it
            second = [tokens(n, len(shape.vocab), first) for n in lengths(width, full)]
            inputs |= {"ids2": padded(second, width)}
            inputs["mask2"] = inputs["ids2"] != 0
        labels = torch.from_numpy(rng.integers(0, max(1, shape.num_classes), size))
        out.append((inputs, labels))
    return out


@dataclass(frozen=True)
class Break:
    """One graph break site: Dynamo's reason (its first line), where it happens (the
    innermost frame of the traced code) and how many times it broke there."""

    reason: str
    where: str
    code: str
    count: int


@dataclass
class Checked:
    """What the check found of one model."""

    name: str
    kind: str
    family: str
    stands_for: int = 1
    graphs: int = 0
    break_count: int = 0
    breaks: list[Break] = field(default_factory=list)
    recompiles: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not (self.break_count or self.recompiles or self.error)

    def lines(self) -> list[str]:
        status = "ok  " if self.ok else "FAIL"
        more = f"  (1 of {self.stands_for})" if self.stands_for > 1 else ""
        head = (
            f"{status} {self.kind:<21} {self.family:<36} {self.name:<36} "
            f"graphs {self.graphs:>2}  breaks {self.break_count:>2}  "
            f"recompiles {len(self.recompiles):>2}{more}"
        )
        out = [head]
        if self.error:
            out.append(f"       error: {self.error}")
        for b in self.breaks:
            out.append(f"       break x{b.count} at {b.where}: {b.reason}")
            if b.code:
                out.append(f"           {b.code}")
        out += [f"       recompile: {r}" for r in self.recompiles[:SHOWN]]
        if len(self.recompiles) > SHOWN:
            out.append(f"       ... and {len(self.recompiles) - SHOWN} more recompiles (--json)")
        return out


def relative(filename: str) -> str:
    """A source path from its package root (``pdelab/...``, ``torch/...``) where it has one."""
    parts = Path(filename).parts
    for root in ("pdelab", "torch", "tests"):
        if root in parts:
            return str(Path(*parts[len(parts) - parts[::-1].index(root) - 1 :]))
    return filename


def frame_site(frame: traceback.FrameSummary) -> str:
    return f"{relative(frame.filename)}:{frame.lineno} in {frame.name}"


@contextlib.contextmanager
def quiet_dynamo() -> Iterator[None]:
    """Dynamo's warnings (a traceback per graph break) kept off stderr: the check lists them."""
    logger = logging.getLogger("torch._dynamo")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


Step = Callable[[dict[str, Tensor], Tensor], Any]


def graph_breaks(step: Step, batch: Batch) -> tuple[int, int, list[Break]]:
    """(graphs, breaks, the break sites) of ``step`` on ``batch``, by ``torch._dynamo.explain``:
    its count is the graphs less one, so one break inside k nested frames counts up to k + 1
    (each frame around it is split too), while its site is listed once."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(*batch)
    sites: Counter[tuple[str, str, str]] = Counter()
    for reason in explained.break_reasons:
        first = reason.reason.strip().split("\n")[0]
        frame = reason.user_stack[-1] if reason.user_stack else None
        where = frame_site(frame) if frame else "?"
        code = (frame.line or "").strip() if frame else ""
        sites[first, where, code] += 1
    found = [Break(r, w, c, n) for (r, w, c), n in sites.items()]
    return explained.graph_count, max(0, explained.graph_break_count), found


def recompiles(step: Step, batches: Sequence[Batch], backend: str = "aot_eager") -> list[str]:
    """Frames compiled again while ``step`` (compiled) runs forward and backward on each
    batch, or compiled first after the first batch: each as "file:line in function: why"."""
    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    torch._dynamo.reset()
    clear_compilation_metrics()
    compiled = torch.compile(step, backend=backend)
    found: list[str] = []
    for i, (inputs, labels) in enumerate(batches):
        before = len(get_compilation_metrics())
        loss = compiled(inputs, labels)[0]
        loss.backward()
        for metrics in list(get_compilation_metrics())[before:]:
            if not metrics.co_name:  # a backward graph's compile: its frame is counted already
                continue
            if not i:  # the first batch compiles what it needs (encoder and decoder shapes)
                continue
            why = metrics.recompile_reason or "first compiled on this batch, not the first"
            if why:
                site = f"{relative(metrics.co_filename or '?')}:{metrics.co_firstlineno}"
                found.append(f"{site} in {metrics.co_name}: {guard(why)}")
    return found


def guard(reason: str) -> str:
    """The first failed guard of a recompile reason, on one line, with the source line it
    guards where Dynamo names one (its comment), not the stack that follows."""
    first = reason.strip().split("\n")[0]
    check, _, code = first.partition("#")
    code = code.split("  # ")[0].strip()
    return " ".join(check.split()) + (f"  [{code}]" if code else "")


def check(
    one: Selected, size: Shrink = SHRUNK, backend: str = "aot_eager", checkpointed: bool = False
) -> Checked:
    """One model's graph breaks and recompiles at ``size`` (``checkpointed``: its blocks'
    activations recomputed in the backward, as a card's fit may choose, pdelab.plan.card_fit);
    never raises for the model's own errors, which the result names."""
    out = Checked(one.name, one.kind, one.family, one.stands_for)
    try:
        run, shape = shrunk(one.model, size)
        manifest = shape.manifest()
        strategy = task_kinds.of_data(run.task, manifest).strategy()
        torch.manual_seed(0)
        network = build_model(run, manifest)
        network.train()
        checkpoint_blocks(network, checkpointed)
        include_pad = run.train.loss_includes_pad

        def step(inputs: dict[str, Tensor], labels: Tensor) -> Any:
            return strategy.loss(network, inputs, labels, include_pad)

        batches = two_batches(run, shape, size.batch)
        with quiet_dynamo():
            out.graphs, out.break_count, out.breaks = graph_breaks(step, batches[0])
            out.recompiles = recompiles(step, batches, backend)
    except Exception as error:  # the model's own error is the finding
        frames = [f for f in traceback.extract_tb(error.__traceback__) if "pdelab" in f.filename]
        at = f" (at {frame_site(frames[-1])})" if frames else ""
        out.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}{at}"
    finally:
        torch._dynamo.reset()
    return out


def main(argv: list[str] | None = None) -> int:
    """Check the selected models of a run profile; 1 on any graph break, recompile or error."""
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.plan.compile_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--profile", help="the run profile (default: params.yaml's)")
    parser.add_argument("--params", type=Path, default=PARAMS_FILE)
    parser.add_argument(
        "--only", action="append", default=[], help='"task/variant" patterns, e.g. "image/*"'
    )
    parser.add_argument("--backend", choices=BACKENDS, default="aot_eager")
    parser.add_argument(
        "--checkpointed",
        action="store_true",
        help="with activation checkpointing of every block (as a card's fit may choose)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    profile = active_profile(params, args.profile)
    chosen = select(params, profile, args.only)
    if not chosen:
        print(f"no model of run profile {profile} matches {args.only}", file=sys.stderr)
        return 1
    text = sys.stderr if args.json else sys.stdout  # --json: stdout holds the document alone
    print(f"compile check of run profile {profile}: {len(chosen)} models", file=text)
    print(f"({SHRUNK.describe()})", file=text)
    results = []
    for one in chosen:
        checked = check(one, SHRUNK, args.backend, args.checkpointed)
        results.append(checked)
        print("\n".join(checked.lines()), file=text, flush=True)
    failed = [r for r in results if not r.ok]
    if args.json:
        document = {
            "profile": profile,
            "backend": args.backend,
            "checkpointed": args.checkpointed,
            "shrunk": asdict(SHRUNK) | {"note": SHRUNK.describe()},
            "models": [asdict(r) | {"ok": r.ok} for r in results],
            "failed": len(failed),
        }
        print(json.dumps(document, indent=1))
    clean = len(results) - len(failed)
    print(f"{clean} of {len(results)} models compile without a graph break or recompile", file=text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
