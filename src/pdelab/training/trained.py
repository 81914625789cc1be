"""A trained run loaded back from its folder, for the papers' probes: its run.json, spec, data
folder and best-validation model, each checked to be the run's before a number is read from it.

The checks (pdelab.records.run): the folder's records are all one run's (``check_run``); best.pt
carries that run's identity (``checkpoint.load_best``); the prepared data on disk hashes to the
bytes the run trained on (``verified_manifest``), so a probe never measures a model on data it
was not trained on, or another run's weights, without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pdelab.data.store import MANIFEST, verified_manifest
from pdelab.models.factory import build_model
from pdelab.records.run import ForeignRecord, check_run
from pdelab.spec.config import RunSpec
from pdelab.training import checkpoint

BEST = (
    "best.pt"  # the best-validation weights a run folder holds (pdelab.training.train writes them)
)


@dataclass(frozen=True)
class Trained:
    record: dict[str, Any]  # run.json
    run: RunSpec
    data_dir: Path
    manifest: dict[str, Any]
    model: nn.Module  # at its best-validation weights, in eval mode


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


def load_trained(
    folder: Path | str, device: torch.device | str = "cpu", data_dir: Path | None = None
) -> Trained:
    """A run folder's model at its best-validation weights, after every check above."""
    folder = Path(folder)
    record = check_run(folder)
    ident = record["identity"]
    run = RunSpec.from_dict(record["spec"])
    data = find_data_dir(run, folder, data_dir)
    manifest = verified_manifest(data)
    if manifest["content_hash"] != ident["data_hash"]:
        raise ForeignRecord(
            f"{folder} was trained on data {ident['data_hash'][:12]}, but {data} holds data "
            f"{manifest['content_hash'][:12]}: the run is stale; run `snakemake` to train it "
            "on this data (or point data_dir at the data it was trained on)"
        )
    model = build_model(run, manifest).to(device)
    model.load_state_dict(checkpoint.load_best(folder / BEST, ident, device))
    return Trained(record, run, data, manifest, model.eval())
