"""The ListOps generator (LRA's algorithm), its tokenizer, and the prepared store."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from pdelab.data import listops
from pdelab.data.errors import ArchiveLayoutError, SourceNotFoundError
from pdelab.data.listops import ListOpsSpec, evaluate, generate, prepare, tokenize
from pdelab.data.store import CLS_ID, PAD_ID, load_manifest, load_split

SMALL = ListOpsSpec(n_train=120, n_val=20, n_test=20, min_length=10, max_length=60, seed=3)


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("[MAX 2 9 ]", 9),
        ("[MIN 4 7 [MAX 1 8 ] ]", 4),
        ("[MED 1 2 3 4 ]", 2),  # integer median: int(2.5)
        ("[MED 7 1 5 ]", 5),
        ("[SM 5 6 7 ]", 8),
        ("[SM 9 [MAX 2 3 ] [MIN 8 4 9 ] ]", 6),
        ("( ( ( [MAX 2 ) 9 ) ] )", 9),
    ],
)
def test_hand_checked_labels(source: str, value: int) -> None:
    assert evaluate(tokenize(source)) == value


def test_tokenize_drops_parentheses_and_keeps_closing_bracket() -> None:
    assert tokenize("( ( [SM 1 ) ] )") == ["[SM", "1", "]"]


def test_lengths_strictly_between_bounds_and_examples_distinct() -> None:
    data = generate(SMALL)
    assert [len(data[s]) for s in ("train", "val", "test")] == [120, 20, 20]
    sources = [src for rows in data.values() for src, _ in rows]
    assert len(set(sources)) == len(sources)
    for src, target in data["train"]:
        assert SMALL.min_length < len(tokenize(src)) < SMALL.max_length
        assert target == evaluate(tokenize(src)) and 0 <= target <= 9


def test_generator_is_deterministic() -> None:
    assert generate(SMALL) == generate(SMALL)
    assert generate(SMALL) != generate(replace(SMALL, seed=4))


def test_source_string_has_lra_format() -> None:
    tree = ("[MAX", (2, 9))
    assert listops.to_source(tree) == "( ( ( [MAX 2 ) 9 ) ] )"


def test_prepare_reads_release_format_with_and_without_header(tmp_path) -> None:
    raw = tmp_path / "raw"
    listops.fetch(SMALL, raw)
    header = (raw / "basic_val.tsv").read_text().splitlines()
    assert header[0] == "Source\tTarget"
    (raw / "basic_val.tsv").write_text("\n".join(header[1:]) + "\n")  # drop the header
    manifest = prepare(SMALL, raw, tmp_path / "a")
    assert manifest["splits"]["val"]["examples"] == 20
    split = load_split(tmp_path / "a", "train", verify=True)
    batch = split.batch(np.arange(5))
    ids, mask = batch["ids"], batch["mask"]
    assert ids.shape[0] == 5 and set(batch) == {"ids", "mask", "labels"}
    assert (ids[mask] > CLS_ID).all() and (ids[~mask] == PAD_ID).all()
    assert len(listops.VOCAB) == 17 and manifest["num_classes"] == 10
    # identical data -> byte-identical manifest (no timestamps), so nothing retrains
    again = prepare(SMALL, raw, tmp_path / "b")
    assert json.dumps(again) == json.dumps(manifest)
    assert load_manifest(tmp_path / "b") == manifest


def test_fetch_copies_a_release_folder_and_rejects_a_wrong_one(tmp_path) -> None:
    listops.fetch(SMALL, tmp_path / "release")
    listops.fetch(replace(SMALL, source=str(tmp_path / "release")), tmp_path / "copy")
    assert (tmp_path / "copy" / "basic_test.tsv").read_bytes() == (
        tmp_path / "release" / "basic_test.tsv"
    ).read_bytes()
    with pytest.raises(SourceNotFoundError, match="nowhere does not exist.*listops-1000"):
        listops.fetch(replace(SMALL, source=str(tmp_path / "nowhere")), tmp_path / "x")
    with pytest.raises(ArchiveLayoutError, match=r"basic_train\.tsv not found.*listops-1000"):
        listops.fetch(replace(SMALL, source=str(tmp_path)), tmp_path / "y")


def test_corrupted_file_fails_its_checksum(tmp_path) -> None:
    listops.fetch(SMALL, tmp_path / "raw")
    prepare(SMALL, tmp_path / "raw", tmp_path / "p")
    path = tmp_path / "p" / "train.labels.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        load_split(tmp_path / "p", "train", verify=True)


def test_a_smaller_listops_is_named_a_stand_in(tmp_path) -> None:
    """Short, shallow trees are a different task from LRA's: the manifest says so, naming each
    setting beside LRA's; LRA's own settings (or the release's files) are no stand-in."""
    named = listops.stand_in(SMALL)
    assert "11-59 tokens (LRA: 501-1,999)" in named
    assert "120/20/20 train/val/test items (LRA: 96,000/2,000/2,000)" in named
    assert "depth" not in named  # unchanged settings are not listed
    assert listops.stand_in(ListOpsSpec()) == ""
    assert listops.stand_in(replace(SMALL, source=str(tmp_path))) == ""
    raw = tmp_path / "raw"
    listops.fetch(SMALL, raw)
    assert prepare(SMALL, raw, tmp_path / "a")["stand_in"] == named
