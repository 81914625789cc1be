"""The paper profile's data stages, fed fixtures in the real formats, give Table 3's shapes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from pdelab.data.pathfinder import generate_pathfinder
from pdelab.data.store import load_manifest, load_split
from pdelab.spec.config import load_params
from pdelab.spec.data import TASK_DATA, data_spec
from tests.test_lra_tasks import cifar_batch, write_aan, write_imdb

PARAMS = load_params(ROOT / "params.yaml")
# (longest sequence the paper's setting allows, exact length or None, classes): Table 3
SHAPES = {
    "listops": (2000, None, 10),
    "imdb_bytes_lra": (4000, None, 2),
    "retrieval": (4000, None, 2),
    "pathfinder": (1024, 1024, 2),
    "image": (1024, 1024, 10),
}


def fixture(task: str, root: Path) -> dict:
    """Write real-format files for a task; return the spec fields that point at them."""
    if task == "listops":
        return {"n_train": 12, "n_val": 4, "n_test": 4}  # the real generator, paper lengths
    if task == "imdb_bytes_lra":
        write_imdb(root)
        long = root / "aclImdb" / "train" / "pos" / "9_10.txt"
        long.write_text("a long review " * 600)  # > 4000 bytes: must be cut to 4000
        return {"source": str(root), "n_train": 4, "n_val": 2, "n_test": 4}
    if task == "retrieval":
        folder = root / "lra_release" / "lra_release" / "tsv_data"
        write_aan(folder)
        with open(folder / "new_aan_pairs.train.tsv", "ab") as f:
            f.write(b"1\tP9\tQ9\tb'" + b"z" * 5000 + b"'\tb'short'\n")
        return {"source": str(root / "lra_release"), "n_train": 5, "n_val": 2, "n_test": 2}
    if task == "pathfinder":
        generate_pathfinder(
            root / "lra_release" / "pathfinder32", "curv_contour_length_14", 20, seed=0
        )
        return {"source": str(root / "lra_release"), "n": 20}
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, name in enumerate([*(f"data_batch_{b}" for b in range(1, 6)), "test_batch"]):
        cifar_batch(
            folder / name,
            rng.integers(0, 256, (4, 3072), dtype=np.uint8),
            [(i + j) % 10 for j in range(4)],
        )
    return {"source": str(root), "n_train": 16, "n_val": 4, "n_test": 4}


@pytest.mark.parametrize("task", list(SHAPES))
def test_paper_profile_data_has_table_3_shapes(task: str, tmp_path: Path) -> None:
    spec = data_spec(PARAMS, "paper", task)
    spec = replace(spec, **fixture(task, tmp_path / "fixture"))
    module = TASK_DATA.get(task).module
    module.fetch(spec, tmp_path / "raw")
    module.prepare(spec, tmp_path / "raw", tmp_path / "prepared")
    manifest = load_manifest(tmp_path / "prepared")
    longest, exact, classes = SHAPES[task]
    assert manifest["num_classes"] == classes
    if task == "listops":  # the paper profile's own spec is LRA's; the fixture's sizes are not
        assert module.stand_in(data_spec(PARAMS, "paper", task)) == ""
        assert "items" in manifest["stand_in"] and "tokens" not in manifest["stand_in"]
    else:
        assert "stand_in" not in manifest
    for split in ("train", "val", "test"):
        data = load_split(tmp_path / "prepared", split, verify=True)
        lengths = data.lengths()
        assert lengths.max() <= longest
        if exact:
            assert (lengths == exact).all()
    if task in ("imdb_bytes_lra", "retrieval"):  # the long fixture document is cut at exactly 4000
        assert manifest["splits"]["train"]["max_length"] == 4000
    if task == "listops":
        assert load_split(tmp_path / "prepared", "train").lengths().min() > 500
