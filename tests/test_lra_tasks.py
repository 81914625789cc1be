"""The four other LRA tasks' data modules: stand-ins, real-format readers, errors."""

from __future__ import annotations

import pickle
import tarfile
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdelab.data import image, pathfinder_task, retrieval, text
from pdelab.data.errors import ArchiveLayoutError, UnpinnedSourceError
from pdelab.data.pathfinder import generate_pathfinder, read_pathfinder
from pdelab.data.store import CLS_ID, load_manifest, load_split
from pdelab.spec.config import build

SPECS = {
    "imdb_bytes_lra": text.TextSpec(
        source="standin", n_train=24, n_val=6, n_test=10, max_length=300, seed=1
    ),
    "retrieval": retrieval.RetrievalSpec(
        source="standin", n_train=20, n_val=6, n_test=6, max_length=200, seed=1
    ),
    "pathfinder": pathfinder_task.PathfinderSpec(
        source="standin", difficulty="curv_baseline", n=30, seed=1
    ),
    "image": image.ImageSpec(source="standin", n_train=80, n_val=10, n_test=10, seed=1),
}
MODULES = {
    "imdb_bytes_lra": text,
    "retrieval": retrieval,
    "pathfinder": pathfinder_task,
    "image": image,
}
SIZES = {
    "imdb_bytes_lra": (24, 6, 10),
    "retrieval": (20, 6, 6),
    "pathfinder": (24, 3, 3),
    "image": (80, 10, 10),
}
CLASSES = {"imdb_bytes_lra": 2, "retrieval": 2, "pathfinder": 2, "image": 10}


def build_task(task: str, spec, root: Path, name: str = "out") -> dict:
    raw = root / "raw" / task
    MODULES[task].fetch(spec, raw)
    return MODULES[task].prepare(spec, raw, root / name)


def splits_of(out: Path) -> dict:
    return {s: load_split(out, s, verify=True) for s in ("train", "val", "test")}


@pytest.mark.parametrize("task", SPECS)
def test_standin_shapes_vocab_and_labels(task, tmp_path) -> None:
    spec = SPECS[task]
    manifest = build_task(task, spec, tmp_path)
    assert manifest["task"] == task and manifest["stand_in"] == MODULES[task].STAND_IN
    assert len(manifest["vocab"]) == 258 and manifest["vocab"][:2] == ["<pad>", "<cls>"]
    assert manifest["num_classes"] == CLASSES[task]
    assert load_manifest(tmp_path / "out") == manifest
    splits = splits_of(tmp_path / "out")
    assert tuple(len(s) for s in splits.values()) == SIZES[task]
    for split in splits.values():
        lengths = np.diff(split.offsets)
        assert (np.asarray(split.tokens) > CLS_ID).all() and (np.asarray(split.tokens) < 258).all()
        assert set(np.unique(split.labels)) <= set(range(CLASSES[task]))
        if task in ("pathfinder", "image"):
            assert (lengths == 1024).all()
        else:
            assert (lengths > 0).all() and (lengths <= spec.max_length).all()
        if task == "retrieval":
            lengths2 = np.diff(split.offsets2)
            assert len(lengths2) == len(split) and (lengths2 <= spec.max_length).all()
            assert split.labels.sum() * 2 == len(split)  # exactly balanced
    labels = np.concatenate([s.labels for s in splits.values()])
    if task == "imdb_bytes_lra":
        assert splits["test"].labels.sum() == 5  # the stand-in's test set is balanced
        assert abs(labels.mean() - 0.5) < 0.15
    if task == "pathfinder":
        assert labels.sum() == 15  # the generator balances labels exactly
    if task == "image":
        assert len(np.unique(labels)) == 10 and np.bincount(labels).max() < 25


@pytest.mark.parametrize("task", SPECS)
def test_standin_is_deterministic(task, tmp_path) -> None:
    spec = SPECS[task]
    a = build_task(task, spec, tmp_path / "a")
    b = build_task(task, spec, tmp_path / "b")
    c = build_task(task, replace(spec, seed=2), tmp_path / "c")
    assert a["content_hash"] == b["content_hash"]
    assert a["content_hash"] != c["content_hash"]


@pytest.mark.parametrize("task", SPECS)
def test_specs_build_from_params(task) -> None:
    cls = type(SPECS[task])
    assert build(cls, {"source": "standin", "seed": 3}, f"data.smoke.{task}").seed == 3
    assert cls().source == "download"  # the defaults are the paper profile


def test_text_standin_label_is_the_majority_polarity(tmp_path) -> None:
    spec = SPECS["imdb_bytes_lra"]
    text.fetch(spec, tmp_path)
    lexicon = text.pseudo_words(np.random.default_rng(spec.seed), text.N_NEUTRAL + 2 * text.N_POLAR)
    negative, positive = set(lexicon[text.N_NEUTRAL :: 2]), set(lexicon[text.N_NEUTRAL + 1 :: 2])
    for label, polarity in enumerate(("neg", "pos")):
        for path in (tmp_path / "aclImdb" / "train" / polarity).iterdir():
            words = path.read_text().replace(".", "").split()
            pos, neg = sum(w in positive for w in words), sum(w in negative for w in words)
            assert pos + neg in (3, 5, 7) and (pos > neg) == bool(label)
            assert len(path.read_bytes()) <= spec.max_length


# --------------------------------------------------------------------------------------------
# Real formats, from small fixtures
# --------------------------------------------------------------------------------------------


def write_imdb(root: Path) -> None:
    for split, n in (("train", 3), ("test", 2)):
        for polarity in ("pos", "neg"):
            folder = root / "aclImdb" / split / polarity
            folder.mkdir(parents=True)
            for i in range(n):
                body = f"  {split} {polarity} review {i}: caf\u00e9 " + "x" * (30 * i) + "\n"
                (folder / f"{i}_{8 if polarity == 'pos' else 2}.txt").write_text(body)
    (root / "aclImdb" / "train" / "unsup").mkdir()
    (root / "aclImdb" / "train" / "unsup" / "0_0.txt").write_text("unlabelled")
    (root / "aclImdb" / "imdb.vocab").write_text("the\n")


@pytest.mark.parametrize("nested", [True, False])
def test_text_reads_the_aclimdb_layout(nested, tmp_path) -> None:
    write_imdb(tmp_path / "dl")
    source = tmp_path / "dl" if nested else tmp_path / "dl" / "aclImdb"
    spec = text.TextSpec(source=str(source), n_train=4, n_val=2, n_test=4, max_length=50)
    manifest = build_task("imdb_bytes_lra", spec, tmp_path)
    assert "stand_in" not in manifest and manifest["task"] == "imdb_bytes_lra"
    assert not (tmp_path / "raw" / "imdb_bytes_lra" / "aclImdb" / "train" / "unsup").exists()
    splits = splits_of(tmp_path / "out")
    assert [len(s) for s in splits.values()] == [4, 2, 4]
    assert splits["train"].labels.sum() + splits["val"].labels.sum() == 3  # pos = 1
    assert list(splits["test"].labels) == [0, 0, 1, 1]  # all test reviews, neg then pos
    # test/neg/1_2.txt: whitespace stripped as tfds does, UTF-8 bytes, truncated to 50
    expected = ("test neg review 1: caf\u00e9 " + "x" * 30).encode()[:50]
    second = splits["test"].batch(np.array([1]))["ids"][0]
    assert len(second) == 50 and bytes((second - 2).astype(np.uint8)) == expected


def write_aan(folder: Path) -> dict[str, list[bytes]]:
    folder.mkdir(parents=True)
    rows = {}
    for split, n in (("train", 4), ("eval", 2), ("test", 2)):
        rows[split] = [
            f"{i % 2}\tP{i}\tQ{i}\tb'{split} doc {i} A\\n' {'a' * 40 * i}\tb'doc {i} B'".encode()
            for i in range(n)
        ]
        (folder / f"new_aan_pairs.{split}.tsv").write_bytes(b"\n".join(rows[split]) + b"\n")
    return rows


def test_retrieval_reads_lra_tsvs(tmp_path) -> None:
    rows = write_aan(tmp_path / "lra_release" / "lra_release" / "tsv_data")
    spec = retrieval.RetrievalSpec(
        source=str(tmp_path / "lra_release"), n_train=4, n_val=2, n_test=2, max_length=60
    )
    manifest = build_task("retrieval", spec, tmp_path)
    assert "stand_in" not in manifest and manifest["pairs"] is True
    train = load_split(tmp_path / "out", "train", verify=True)
    assert list(train.labels) == [0, 1, 0, 1]
    batch = train.batch(np.arange(4))
    text1, text2 = rows["train"][3].split(b"\t")[3:]
    ids = batch["ids"][3][batch["mask"][3]]
    assert bytes((ids - 2).astype(np.uint8)) == text1[:60] and len(ids) == 60  # raw field bytes
    ids2 = batch["ids2"][3][batch["mask2"][3]]
    assert bytes((ids2 - 2).astype(np.uint8)) == text2


def test_retrieval_from_the_release_archive_needs_allow_unpinned(tmp_path) -> None:
    write_aan(tmp_path / "lra_release" / "tsv_data")
    archive = tmp_path / "lra_release.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "lra_release", arcname="lra_release")
    spec = retrieval.RetrievalSpec(source=str(archive), n_train=3, n_val=2, n_test=2)
    with pytest.raises(UnpinnedSourceError, match="allow_unpinned: true"):
        retrieval.fetch(spec, tmp_path / "raw" / "retrieval")
    manifest = build_task("retrieval", replace(spec, allow_unpinned=True), tmp_path)
    assert manifest["splits"]["train"]["examples"] == 3  # a seeded sample of the 4


def test_retrieval_rejects_a_header_row(tmp_path) -> None:
    write_aan(tmp_path / "tsv_data")
    path = tmp_path / "tsv_data" / "new_aan_pairs.eval.tsv"
    path.write_bytes(b"label\tid1\tid2\ttext1\ttext2\n" + path.read_bytes())
    with pytest.raises(ValueError, match="no header"):
        retrieval.read_pairs(path, 10)


def test_pathfinder_reads_the_release_layout_and_skips_broken_images(tmp_path) -> None:
    root = tmp_path / "lra_release" / "pathfinder32"
    base = generate_pathfinder(root, "curv_baseline", 20, seed=5)
    (base / "imgs" / "0" / "sample_20.png").write_bytes(b"")  # like the release's sample_172
    with open(base / "metadata" / "0.npy", "a") as f:
        f.write("imgs/0 sample_20.png 20 1 1.0 6 2 2 0.5 1 1\n")
    spec = pathfinder_task.PathfinderSpec(
        source=str(tmp_path / "lra_release"), difficulty="curv_baseline", n=1000
    )
    with pytest.warns(UserWarning, match="sample_20.png"):
        manifest = build_task("pathfinder", spec, tmp_path)
    assert "stand_in" not in manifest and manifest["difficulty"] == "curv_baseline"
    splits = splits_of(tmp_path / "out")
    assert [len(s) for s in splits.values()] == [16, 2, 2]  # n caps; 80/10/10 of the 20
    with pytest.warns(UserWarning):
        images, labels = read_pathfinder(root, "curv_baseline", skip_unreadable=True)
    expected = {(bytes(x.reshape(-1)), y) for x, y in zip(images, labels, strict=True)}
    stored = set()
    for split in splits.values():
        ids = split.batch(np.arange(len(split)))["ids"]
        stored |= {
            (bytes((x - 2).astype(np.uint8)), y) for x, y in zip(ids, split.labels, strict=True)
        }
    assert stored == expected


def cifar_batch(path: Path, data: np.ndarray, labels: list[int]) -> None:
    batch = {b"batch_label": b"x", b"labels": labels, b"data": data, b"filenames": []}
    path.write_bytes(pickle.dumps(batch, protocol=2))


def test_image_reads_cifar_batches_and_converts_like_tensorflow(tmp_path) -> None:
    folder = tmp_path / "dl" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, name in enumerate([*image.BATCHES, "test_batch"]):
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        if i == 0:  # image 0, pixels 0-3 (R, G, B planes of 1024 each)
            for pixel, rgb in enumerate([(0, 255, 0), (255, 255, 255), (255, 0, 0), (10, 20, 30)]):
                data[0, [pixel, 1024 + pixel, 2048 + pixel]] = rgb
        cifar_batch(folder / name, data, [(i + j) % 10 for j in range(4)])
    (folder / "batches.meta").write_bytes(b"")
    spec = image.ImageSpec(source=str(tmp_path / "dl"), n_train=16, n_val=4, n_test=4)
    manifest = build_task("image", spec, tmp_path)
    assert "stand_in" not in manifest and manifest["num_classes"] == 10
    splits = splits_of(tmp_path / "out")
    first = splits["train"].batch(np.array([0]))["ids"][0]
    # TF: floor(255.5 * gray / 255); green 149.69 -> 149 (rounding would give 150)
    assert list(first[:4] - 2) == [149, 255, 76, 18]
    assert list(splits["val"].labels) == [4, 5, 6, 7]  # the last training batch
    assert list(splits["test"].labels) == [5, 6, 7, 8]


def test_image_refuses_pickles_with_other_classes(tmp_path) -> None:
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": OrderedDict()}))
    with pytest.raises(ValueError, match="not a CIFAR-10 python batch"):
        image.read_batch(tmp_path / "data_batch_1")


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("imdb_bytes_lra", "aclImdb/{train,test}/{pos,neg}"),
        ("retrieval", "new_aan_pairs.{train,eval,test}.tsv"),
        ("pathfinder", "pathfinder32/curv_baseline"),
        ("image", "cifar-10-batches-py/{data_batch_1..5,test_batch}"),
    ],
)
@pytest.mark.parametrize("exists", [True, False])
def test_a_wrong_folder_names_what_was_expected(task, expected, exists, tmp_path) -> None:
    wrong = tmp_path / "wrong"
    if exists:
        (wrong / "something" / "else").mkdir(parents=True)
        (wrong / "readme.txt").write_text("not the data")
    spec = replace(SPECS[task], source=str(wrong))
    with pytest.raises(ArchiveLayoutError) as err:
        MODULES[task].fetch(spec, tmp_path / "raw" / task)
    assert expected in str(err.value) and "'standin'" in str(err.value)
    if exists:
        assert "something" in str(err.value)  # what was found instead


def test_incomplete_release_folders_are_reported(tmp_path) -> None:
    write_imdb(tmp_path / "dl")
    for path in (tmp_path / "dl" / "aclImdb" / "test" / "neg").iterdir():
        path.unlink()
    (tmp_path / "dl" / "aclImdb" / "test" / "neg").rmdir()
    spec = replace(SPECS["imdb_bytes_lra"], source=str(tmp_path / "dl"))
    with pytest.raises(ArchiveLayoutError, match="test/neg: missing"):
        text.fetch(spec, tmp_path / "raw")
    write_aan(tmp_path / "tsv_data")
    (tmp_path / "tsv_data" / "new_aan_pairs.test.tsv").unlink()
    spec = replace(SPECS["retrieval"], source=str(tmp_path / "tsv_data"))
    with pytest.raises(ArchiveLayoutError, match=r"new_aan_pairs\.test\.tsv: missing"):
        retrieval.fetch(spec, tmp_path / "raw2")


# --------------------------------------------------------------------------------------------
# The smoke profile's small stand-ins
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_length", [text.PLANTED_BYTES, 96, 300])
def test_short_text_standin_keeps_every_planted_word(max_length, tmp_path) -> None:
    """Down to PLANTED_BYTES a review has room for all its planted words, so it is never cut
    and its label is still the polarity planted more often."""
    spec = replace(SPECS["imdb_bytes_lra"], max_length=max_length)
    text.fetch(spec, tmp_path)
    lexicon = text.pseudo_words(np.random.default_rng(spec.seed), text.N_NEUTRAL + 2 * text.N_POLAR)
    negative, positive = set(lexicon[text.N_NEUTRAL :: 2]), set(lexicon[text.N_NEUTRAL + 1 :: 2])
    for label, polarity in enumerate(("neg", "pos")):
        for path in (tmp_path / "aclImdb" / "train" / polarity).iterdir():
            words = path.read_text().replace(".", "").split()
            pos, neg = sum(w in positive for w in words), sum(w in negative for w in words)
            assert pos + neg in (3, 5, 7) and (pos > neg) == bool(label)
            assert len(path.read_bytes()) <= max_length
    with pytest.raises(ValueError, match=f"max_length >= {text.PLANTED_BYTES}"):
        text.fetch(replace(spec, max_length=text.PLANTED_BYTES - 1), tmp_path / "short")


def test_image_standin_at_side_8_is_load_digits_itself(tmp_path) -> None:
    from sklearn.datasets import load_digits

    spec = replace(SPECS["image"], side=8)
    manifest = build_task("image", spec, tmp_path)
    assert manifest["side"] == 8 and "native 8x8" in manifest["stand_in"]
    digits = load_digits()
    native = {
        (bytes(np.round(x * (255 / 16)).astype(np.uint8).reshape(-1)), int(y))
        for x, y in zip(digits.images, digits.target, strict=True)
    }
    for split in splits_of(tmp_path / "out").values():
        ids = split.batch(np.arange(len(split)))["ids"]
        assert ids.shape[1] == 64
        for x, y in zip(ids, split.labels, strict=True):
            assert (bytes((x - 2).astype(np.uint8)), int(y)) in native
    # the default reads every pixel: the paper's 1,024 tokens, and no side in the manifest
    assert "side" not in build_task("image", SPECS["image"], tmp_path, "full")
    with pytest.raises(ValueError, match="side must divide 32"):
        build_task("image", replace(spec, side=12), tmp_path, "bad")


def test_image_side_subsamples_real_batches(tmp_path) -> None:
    images = np.arange(2 * 1024).reshape(2, 1024) % 251
    out = image.subsample(images, 16)
    assert out.shape == (2, 256)
    assert out[1].tolist() == images[1].reshape(32, 32)[::2, ::2].reshape(-1).tolist()
    assert np.array_equal(image.subsample(images, 32), images)


def test_retrieval_standin_knobs(tmp_path) -> None:
    spec = replace(SPECS["retrieval"], topics=2, topic_words=3, p_topic=1.0, max_length=96)
    manifest = build_task("retrieval", spec, tmp_path)
    assert "from 2 topic-specific" in manifest["stand_in"]
    assert retrieval.stand_in(retrieval.RetrievalSpec()) == retrieval.STAND_IN
    lexicon = text.pseudo_words(np.random.default_rng(spec.seed), retrieval.N_BACKGROUND + 6)
    topics = [set(lexicon[retrieval.N_BACKGROUND + 3 * t :][:3]) for t in range(2)]
    rows = (tmp_path / "raw" / "retrieval" / retrieval.tsv_name("train")).read_text()
    for row in rows.splitlines():
        label, _, _, first, second = row.split("\t")
        # p_topic 1: every word is a topic word, so each document names its topic
        which = [
            {t for t, words in enumerate(topics) if set(doc.replace(".", "").split()) <= words}
            for doc in (first, second)
        ]
        assert len(which[0]) == len(which[1]) == 1
        assert (which[0] == which[1]) == (label == "1")
    with pytest.raises(ValueError, match="topics >= 2"):
        build_task("retrieval", replace(spec, topics=1), tmp_path, "bad")


def test_pathfinder_small_level_end_to_end(tmp_path) -> None:
    spec = pathfinder_task.PathfinderSpec(
        source="standin", difficulty="small10_contour_length_1", n=40, seed=1
    )
    manifest = build_task("pathfinder", spec, tmp_path)
    assert manifest["difficulty"] == "small10_contour_length_1"
    assert "10x10 images" in manifest["stand_in"]
    splits = splits_of(tmp_path / "out")
    assert [len(s) for s in splits.values()] == [32, 4, 4]
    assert all((np.diff(s.offsets) == 100).all() for s in splits.values())
    with pytest.raises(ValueError, match="pdelab's own level"):
        pathfinder_task.fetch(replace(spec, source="download"), tmp_path / "raw2")
