"""Continuous-Time Attention's data: IMDb, AG News and SST-2 (word level), byte-level IMDb at
2,048 and WikiText-103. Real-format fixtures are served from 127.0.0.1 (the ``server`` fixture
of conftest.py) and pinned by their md5, as the real files are; then fetch -> prepare."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from pdelab.data import text, textcls, tokenizer, wikitext
from pdelab.data.__main__ import main as data_main
from pdelab.data.catalogue import PINNED
from pdelab.data.download import Source, fetch
from pdelab.data.errors import ArchiveLayoutError, ChecksumError, UnpinnedSourceError
from pdelab.data.store import CLS_ID, RESERVED, load_manifest, load_split, sha256_file
from pdelab.spec.config import ConfigError, build
from pdelab.spec.data import TASK_DATA, data_spec

NEW_TASKS = ("imdb_wordpiece", "ag_news", "sst2", "imdb_bytes", "wikitext")
WORDPIECE_TASKS = ("imdb_wordpiece", "ag_news", "sst2")  # textcls.py, one dataset each
CLASSES = {"imdb_wordpiece": 2, "ag_news": 4, "sst2": 2, "imdb_bytes": 2, "wikitext": 0}
TEST_ONLY = "quixotically"  # a word only in test texts: never in a vocabulary
PANGRAM = "the quick brown fox jumps over the lazy dog"  # every letter is in the training text

# Smoke-sized data blocks for the spec tests (the project's own blocks run end to end below).
SMOKE = {
    "imdb_wordpiece": {"source": "standin", "n_train": 400, "n_val": 100, "n_test": 100,
                       "max_length": 256, "vocab_size": 4000, "seed": 0},
    "ag_news": {"source": "standin", "n_train": 600, "n_val": 150, "n_test": 150,
                "max_length": 128, "vocab_size": 3000, "seed": 0},
    "sst2": {"source": "standin", "n_train": 600, "n_val": 150, "n_test": 150,
             "max_length": 64, "vocab_size": 2000, "seed": 0},
    "imdb_bytes": {"source": "standin", "n_train": 160, "n_val": 40, "n_test": 40,
                   "max_length": 2048, "seed": 0},
    "wikitext": {"source": "standin", "train_fraction": 1.0, "vocab_size": 2000, "seed": 0},
}  # fmt: skip
# ... and the paper-profile blocks: the specs' defaults, spelled out.
PAPER = {
    "imdb_wordpiece": {"source": "download", "n_train": 22500, "n_val": 2500, "n_test": 25000,
                       "max_length": 512, "vocab_size": 30522, "seed": 0},
    "ag_news": {"source": "download", "n_train": 108000, "n_val": 12000, "n_test": 7600,
                "max_length": 512, "vocab_size": 30522, "seed": 0},
    "sst2": {"source": "download", "n_train": 66477, "n_val": 872, "n_test": 872,
             "max_length": 512, "vocab_size": 30522, "seed": 0},
    "imdb_bytes": {"source": "download", "n_train": 22500, "n_val": 2500, "n_test": 25000,
                   "max_length": 2048, "seed": 0},
    "wikitext": {"source": "download", "train_fraction": 0.03, "n_val_docs": 0,
                 "n_test_docs": 0, "max_doc_tokens": 0, "vocab_size": 30522, "seed": 0},
}  # fmt: skip


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def serve_md5(server, path: str, data: bytes, filename: str) -> Source:
    """Serve ``data`` and pin it by md5 only, as PINNED pins the real files."""
    server.serve(path, data)
    return Source(url=server.url(path), sha256=None, md5=md5(data), filename=filename)


def tar_gz(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        for name, body in files.items():
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zip_bytes(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in files.items():
            zf.writestr(name, body)
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# Fixtures in the real formats
# --------------------------------------------------------------------------------------------

ADJECTIVES = {0: ("dull", "awful", "clumsy", "tired"), 1: ("great", "superb", "warm", "fresh")}


def review(split: str, label: int, i: int) -> str:
    adj = ADJECTIVES[label][i % 4]
    extra = f" Then {TEST_ONLY} it costs 5 \u20ac." if split == "test" else f" {PANGRAM}."
    return (
        f"  A {adj} film, number {i} of the {split} set.<br /><br />The cast was {adj} "
        f"and caf\u00e9 scenes ran {i + 2} minutes!{extra}\n"
    )


def imdb_archive() -> bytes:
    files = {}
    for split, n in (("train", 6), ("test", 3)):
        for label, polarity in enumerate(("neg", "pos")):
            for i in range(n):
                rating = 8 if label else 3
                files[f"aclImdb/{split}/{polarity}/{i}_{rating}.txt"] = review(split, label, i)
    files["aclImdb/train/unsup/0_0.txt"] = "unlabelled"
    files["aclImdb/imdb.vocab"] = "the\n"
    return tar_gz(files)


AG_CLASSES = ("the government met", "the team won", "shares rose", "a new chip")


def ag_news_csv(split: str) -> str:
    rows = []
    n = 3 if split == "train" else 1
    for i in range(n):
        for c in range(4):
            title = f"{AG_CLASSES[c].title()} ({split} {i})"
            tail = f"{TEST_ONLY} \u20ac" if split == "test" else PANGRAM
            body = f"Reuters - {AG_CLASSES[c]} on day {i}, #39;quoted\\ {tail}."
            rows.append(f'"{c + 1}","{title}","{body}"\n')
    return "".join(rows)


def sst2_tsv(split: str) -> str:
    n = 5 if split == "train" else 2
    rows = ["sentence\tlabel\n"]
    for i in range(n):
        for label in (0, 1):
            tail = f"{TEST_ONLY} \u20ac" if split == "dev" else PANGRAM
            rows.append(f"a {ADJECTIVES[label][i % 4]} , {i} hour film {tail} \t{label}\n")
    return "".join(rows)


def sst2_archive() -> bytes:
    return zip_bytes(
        {
            "SST-2/train.tsv": sst2_tsv("train"),
            "SST-2/dev.tsv": sst2_tsv("dev"),
            "SST-2/test.tsv": "index\tsentence\n0\tno label here \n",
            "SST-2/original/README.txt": "the original treebank",
            "__MACOSX/SST-2/._train.tsv": "resource fork",  # stray copy some zips carry
        }
    )


def wiki_article(title: str, i: int, split: str) -> str:
    tail = f"{TEST_ONLY} \u20ac" if split == "test" else PANGRAM
    return (
        f" \n = {title} = \n \n"
        f" {title} is a <unk> game of {1990 + i} , developed by Sega @-@ Media . {tail} \n \n"
        " = = Gameplay = = \n \n"
        f" Players control unit {i} ; the game uses real @-@ time battles . \n \n"
        " = = = Plot = = = \n \n"
        f" The story ( set in {i} AD ) follows the squad . \n \n"
    )


WIKI_TITLES = {
    "train": [f"Valkyria Chronicles {n}" for n in ("I", "II", "III", "IV", "V", "VI")],
    "valid": ["Tower Building", "Little Rock Arsenal"],
    "test": ["Robert Boulter", "Du Fu"],
}


def wiki_tokens(split: str) -> str:
    return "".join(wiki_article(t, i, split) for i, t in enumerate(WIKI_TITLES[split]))


def wikitext_archive() -> bytes:
    return zip_bytes({f"wikitext-103/wiki.{s}.tokens": wiki_tokens(s) for s in WIKI_TITLES})


def serve_real(task: str, server, monkeypatch) -> dict[str, Source]:
    """Serve the task's fixture files and pin them in PINNED (by md5, as the real ones)."""
    if task in ("imdb_wordpiece", "imdb_bytes"):
        pins = {"imdb": serve_md5(server, "/aclImdb_v1.tar.gz", imdb_archive(), "imdb.tar.gz")}
    elif task == "ag_news":
        pins = {
            f"ag_news_{s}": serve_md5(server, f"/{s}.csv", ag_news_csv(s).encode(), f"ag_{s}.csv")
            for s in ("train", "test")
        }
    elif task == "sst2":
        pins = {"sst2": serve_md5(server, "/SST-2.zip", sst2_archive(), "SST-2.zip")}
    else:
        pins = {"wikitext103": serve_md5(server, "/wt103.zip", wikitext_archive(), "wt.zip")}
    for key, source in pins.items():
        monkeypatch.setitem(PINNED, key, source)
    return pins


REAL_SPECS = {
    "imdb_wordpiece": textcls.ImdbSpec(n_train=8, n_val=4, n_test=6, max_length=64, vocab_size=300),
    "ag_news": textcls.AgNewsSpec(n_train=9, n_val=3, n_test=4, max_length=64, vocab_size=300),
    "sst2": textcls.Sst2Spec(n_train=8, n_val=2, n_test=4, max_length=64, vocab_size=300),
    "imdb_bytes": text.ImdbBytesSpec(n_train=8, n_val=4, n_test=6, max_length=120),
    "wikitext": wikitext.WikiTextSpec(train_fraction=0.5, n_test_docs=1, vocab_size=400),
}
SIZES = {
    "imdb_wordpiece": (8, 4, 6),
    "ag_news": (9, 3, 4),
    "sst2": (8, 2, 4),
    "imdb_bytes": (8, 4, 6),
}


def build_task(task: str, spec, root: Path, name: str = "out") -> dict:
    module = TASK_DATA.get(task).module
    raw = root / "data" / "raw" / task
    module.fetch(spec, raw)
    return module.prepare(spec, raw, root / name)


def splits_of(out: Path) -> dict:
    return {s: load_split(out, s, verify=True) for s in ("train", "val", "test")}


def sequences(split) -> list[list[int]]:
    return [
        split.tokens[a:b].tolist()
        for a, b in zip(split.offsets[:-1], split.offsets[1:], strict=True)
    ]


def dataset_of(task: str) -> str:
    """The dataset a WordPiece task reads: the key of textcls.py's tables."""
    return TASK_DATA.get(task).spec_class.dataset


def raw_texts(task: str, raw: Path) -> dict[str, tuple[list[str], np.ndarray]]:
    read, train_name, test_name = textcls.READERS[dataset_of(task)]
    root = raw / textcls.RAW[dataset_of(task)]
    return {"train": read(root, train_name), "test": read(root, test_name)}


# --------------------------------------------------------------------------------------------
# Registration and specs
# --------------------------------------------------------------------------------------------


def test_every_new_task_is_registered_with_its_spec() -> None:
    assert set(NEW_TASKS) <= set(TASK_DATA.names())
    assert TASK_DATA.get("imdb_bytes").module is text
    assert TASK_DATA.get("imdb_bytes_lra").spec_class is text.TextSpec  # unchanged
    for task in (*WORDPIECE_TASKS, "imdb_bytes", "imdb_bytes_lra"):
        assert TASK_DATA.get(task).spec_class.task == task  # the name its manifest records
    datasets = {task: dataset_of(task) for task in WORDPIECE_TASKS}
    assert datasets == {"imdb_wordpiece": "imdb", "ag_news": "ag_news", "sst2": "sst2"}


@pytest.mark.parametrize("task", NEW_TASKS)
def test_specs_build_from_params_and_reject_unknown_keys(task: str) -> None:
    cls = TASK_DATA.get(task).spec_class
    assert cls().source == "download"  # the defaults are the paper profile
    assert data_spec({"data": {"paper": PAPER}}, "paper", task) == cls()
    params = {"data": {"smoke": {task: SMOKE[task]}}}
    assert data_spec(params, "smoke", task) == cls(**SMOKE[task])
    with pytest.raises(ConfigError, match=rf"data\.smoke\.{task}\.dataset: unknown key"):
        build(cls, {"dataset": "sst2"}, f"data.smoke.{task}")


def test_paper_defaults() -> None:
    assert (textcls.ImdbSpec().n_train, textcls.ImdbSpec().n_val) == (22_500, 2_500)
    assert textcls.AgNewsSpec().n_train + textcls.AgNewsSpec().n_val == 120_000
    assert textcls.Sst2Spec().n_train + textcls.Sst2Spec().n_val == 67_349
    assert {textcls.ImdbSpec().vocab_size, wikitext.WikiTextSpec().vocab_size} == {30_522}
    assert text.ImdbBytesSpec().max_length == 2048 and text.TextSpec().max_length == 4000
    assert wikitext.WikiTextSpec().train_fraction == 0.03


def test_pins_are_the_published_md5s() -> None:
    expected = {  # torchtext's pins (pytorch/text, torchtext/datasets/*.py)
        "ag_news_train": "b1a00f826fdfbd249f79597b59e1dc12",
        "ag_news_test": "d52ea96a97a2d943681189a97654912d",
        "sst2": "9f81648d4199384278b86e315dac217c",
        "wikitext103": "9ddaacaf6af0710eda8c456decff7832",
    }
    for key, digest in expected.items():
        assert PINNED[key].md5 == digest and PINNED[key].sha256 is None and PINNED[key].pinned
    assert PINNED["sst2"].url == "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"
    assert PINNED["wikitext103"].url.endswith("/wikitext/wikitext-103-v1.zip")
    assert PINNED["ag_news_test"].url.endswith("/data/ag_news_csv/test.csv")
    assert len({PINNED[key].filename for key in expected}) == 4  # one shared cache folder


# --------------------------------------------------------------------------------------------
# md5 pins in download.fetch
# --------------------------------------------------------------------------------------------


def test_md5_pin_verifies_and_prints_the_sha256_to_pin(tmp_path, server, capsys) -> None:
    data = ag_news_csv("train").encode()
    source = serve_md5(server, "/train.csv", data, "ag_news_train.csv")
    path = fetch(source, tmp_path, progress=False, timeout=5)
    assert path.read_bytes() == data
    assert hashlib.sha256(data).hexdigest() in capsys.readouterr().out
    n = len(server.requests)
    assert fetch(source, tmp_path, progress=False, timeout=5) == path  # verified, no network
    assert len(server.requests) == n


def test_md5_mismatch_names_algorithm_digests_and_remedy(tmp_path, server) -> None:
    data = sst2_archive()
    good = md5(data)
    server.serve("/SST-2.zip", data[:-1] + bytes([data[-1] ^ 1]))  # one corrupt byte
    source = Source(url=server.url("/SST-2.zip"), sha256=None, md5=good, filename="SST-2.zip")
    with pytest.raises(ChecksumError) as err:
        fetch(source, tmp_path, progress=False, timeout=5)
    message = str(err.value)
    actual = md5(server.routes["/SST-2.zip"].data)
    assert "md5 mismatch" in message and good in message and actual in message
    assert "corrupt" in message and "Run the fetch again" in message and "PINNED" in message
    assert list(tmp_path.iterdir()) == []

    both = replace(source, sha256="0" * 64, md5=actual)  # md5 right, sha256 wrong
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        fetch(both, tmp_path, progress=False, timeout=5)

    mine = tmp_path / "mine.zip"
    mine.write_bytes(data)
    wrong = replace(source, md5="f" * 32)
    with pytest.raises(ChecksumError, match=r"md5 mismatch.*f{32}"):
        fetch(wrong, tmp_path / "dl", local_path=mine)
    assert fetch(source, tmp_path / "dl", local_path=mine).read_bytes() == data


def test_a_source_with_neither_pin_is_refused(tmp_path) -> None:
    source = Source(url="http://127.0.0.1:9/x.zip", sha256=None, md5=None, filename="x.zip")
    assert not source.pinned
    with pytest.raises(UnpinnedSourceError, match="no sha256 \\(or md5\\)"):
        fetch(source, tmp_path)


# --------------------------------------------------------------------------------------------
# Real formats: download -> verify -> extract -> prepare
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", NEW_TASKS)
def test_download_and_prepare_the_real_format(task, tmp_path, server, monkeypatch) -> None:
    serve_real(task, server, monkeypatch)
    spec = REAL_SPECS[task]
    manifest = build_task(task, spec, tmp_path)
    assert manifest["task"] == task and "stand_in" not in manifest
    assert manifest["num_classes"] == CLASSES[task]
    assert load_manifest(tmp_path / "out") == manifest
    splits = splits_of(tmp_path / "out")
    raw = tmp_path / "data" / "raw" / task
    downloads = sorted(p.name for p in (tmp_path / "data" / "raw" / "downloads").iterdir())
    assert not [name for name in downloads if name.endswith(".part")]

    if task == "imdb_bytes":  # bytes, no tokenizer: the text module under its own name
        assert len(manifest["vocab"]) == 258 and "tokenizer" not in manifest
        lengths = np.concatenate([s.lengths() for s in splits.values()])
        assert (lengths == 120).all()  # every review is longer than 120 bytes: all cut
        assert list(splits["test"].labels) == [0, 0, 0, 1, 1, 1]
        return

    vocab = manifest["vocab"]
    assert vocab[:3] == [*RESERVED, "<unk>"] and TEST_ONLY not in vocab
    assert len(vocab) <= spec.vocab_size
    files = manifest["files"]
    assert files["tokenizer.json"] == sha256_file(tmp_path / "out" / "tokenizer.json")
    expected_hash = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    assert manifest["content_hash"] == expected_hash  # the tokenizer is part of the data
    tok = tokenizer.load(tmp_path / "out")
    assert tokenizer.vocab_of(tok) == vocab
    for split in splits.values():
        assert (np.asarray(split.tokens) > CLS_ID).all()  # no pad/cls inside sequences

    if task == "wikitext":
        assert manifest["kind"] == "lm"
        assert [len(s) for s in splits.values()] == [3, 2, 1]
        for name, split in splits.items():
            assert not split.labels.any()
            assert manifest["tokens"][name] == int(split.lengths().sum())
        articles = wikitext.read_articles(raw / "wikitext-103" / "wiki.train.tokens")
        chosen = [tok.decode(ids) for ids in sequences(splits["train"])]
        # whole articles, in file order, sections included; nothing windowed
        picked = [a for a in articles if tokenizer.words(a) in map(tokenizer.words, chosen)]
        assert len(picked) == 3
        for article, ids in zip(picked, sequences(splits["train"]), strict=True):
            assert ids == tok.encode(article, add_special_tokens=False).ids
            assert {"gameplay", "plot"} <= set(tokenizer.words(tok.decode(ids)))
            assert ids.count(tokenizer.UNK_ID) == 1  # WikiText's own <unk> marker
        # the tokenizer saw the training articles only
        assert tokenizer.learn_vocab(tokenizer.word_counts(picked), spec.vocab_size) == vocab
        return

    assert manifest["kind"] == "classification"
    assert manifest["labels"] == list(textcls.LABELS[dataset_of(task)])
    assert tuple(len(s) for s in splits.values()) == SIZES[task]
    texts = raw_texts(task, raw)
    test_texts, test_labels = texts["test"]
    assert list(splits["test"].labels) == list(test_labels)  # all of them, in file order
    if task == "imdb_wordpiece":
        assert list(test_labels) == [0, 0, 0, 1, 1, 1]
    if task == "ag_news":
        assert list(test_labels) == [0, 1, 2, 3] and "Reuters - " in test_texts[0]
    train_labels = np.concatenate([splits["train"].labels, splits["val"].labels])
    assert sorted(train_labels) == sorted(texts["train"][1])

    # Round trip: decoding gives the normalized words back; "€" was never seen: <unk>.
    for text_, ids in zip(test_texts, sequences(splits["test"]), strict=True):
        assert tokenizer.UNK_ID in ids
        expected = [w for w in tokenizer.words(text_) if w != "\u20ac"]
        assert tokenizer.words(tok.decode(ids)) == expected
    # The tokenizer saw the training split only (not val, not test).
    by_words = {tuple(tokenizer.words(t)): t for t in texts["train"][0]}
    train_texts = [
        by_words[tuple(tokenizer.words(tok.decode(i)))] for i in sequences(splits["train"])
    ]
    assert tokenizer.learn_vocab(tokenizer.word_counts(train_texts), spec.vocab_size) == vocab
    with_val = train_texts + [
        by_words[tuple(tokenizer.words(tok.decode(i)))] for i in sequences(splits["val"])
    ]
    assert set(train_texts) < set(with_val)


@pytest.mark.parametrize("task", NEW_TASKS)
def test_real_builds_are_deterministic(task, tmp_path, server, monkeypatch) -> None:
    serve_real(task, server, monkeypatch)
    spec = REAL_SPECS[task]
    a = build_task(task, spec, tmp_path / "a")
    b = build_task(task, spec, tmp_path / "b")
    assert a["content_hash"] == b["content_hash"]
    if task != "imdb_bytes":
        tok_a = (tmp_path / "a" / "out" / "tokenizer.json").read_bytes()
        assert tok_a == (tmp_path / "b" / "out" / "tokenizer.json").read_bytes()
        c = build_task(task, replace(spec, vocab_size=len(a["vocab"]) - 20), tmp_path / "c")
        assert c["files"]["tokenizer.json"] != a["files"]["tokenizer.json"]
        assert c["content_hash"] != a["content_hash"]


@pytest.mark.parametrize("task", NEW_TASKS)
def test_corrupt_download_fails_its_checksum(task, tmp_path, server, monkeypatch) -> None:
    pins = serve_real(task, server, monkeypatch)
    key, source = next(iter(pins.items()))
    path = source.url.removeprefix(server.base)
    data = server.routes[path].data
    server.routes[path].data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    with pytest.raises(ChecksumError) as err:
        build_task(task, REAL_SPECS[task], tmp_path)
    assert f"md5 mismatch for {source.url}: expected {source.md5}" in str(err.value)
    assert not (tmp_path / "data" / "raw" / "downloads" / source.filename).exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", WORDPIECE_TASKS)
def test_a_folder_source_and_truncation(task, tmp_path) -> None:
    folder = tmp_path / "mine"
    if task == "imdb_wordpiece":
        with tarfile.open(fileobj=io.BytesIO(imdb_archive())) as tf:
            tf.extractall(folder, filter="data")
    elif task == "ag_news":
        (folder / "ag_news_csv").mkdir(parents=True)  # the layout of Zhang et al.'s archive
        for split in ("train", "test"):
            (folder / "ag_news_csv" / f"{split}.csv").write_text(ag_news_csv(split))
    else:
        with zipfile.ZipFile(io.BytesIO(sst2_archive())) as zf:
            zf.extractall(folder)
    spec = replace(REAL_SPECS[task], source=str(folder), max_length=6)
    manifest = build_task(task, spec, tmp_path)
    assert manifest["task"] == task and "stand_in" not in manifest
    for split in splits_of(tmp_path / "out").values():
        assert split.lengths().max() == 6  # every text here has more than 6 tokens

    with pytest.raises(ArchiveLayoutError, match="source .*expected"):
        build_task(task, replace(spec, source=str(tmp_path / "out")), tmp_path / "x")


def test_wikitext_article_parsing(tmp_path) -> None:
    assert wikitext.is_title(" = Valkyria Chronicles III = \n")
    assert not wikitext.is_title(" = = Gameplay = = \n")
    assert not wikitext.is_title(" = = = Plot = = = \n")
    assert not wikitext.is_title(" x = y = \n") and not wikitext.is_title(" \n")
    path = tmp_path / "wiki.train.tokens"
    path.write_text(wiki_tokens("train"))
    articles = wikitext.read_articles(path)
    assert len(articles) == 6 == wikitext.count_articles(path)
    first = articles[0].splitlines()
    assert first[0] == "= Valkyria Chronicles I ="
    assert "= = Gameplay = =" in first and "= = = Plot = = =" in first
    assert all(line.strip() for line in first)  # blank lines dropped
    assert wikitext.read_articles(path, np.array([1, 4])) == [articles[1], articles[4]]


# --------------------------------------------------------------------------------------------
# Stand-ins
# --------------------------------------------------------------------------------------------

STANDIN_SPECS = {
    "imdb_wordpiece": textcls.ImdbSpec(
        source="standin", n_train=24, n_val=6, n_test=10, max_length=128, vocab_size=2000
    ),
    "ag_news": textcls.AgNewsSpec(
        source="standin", n_train=40, n_val=8, n_test=12, max_length=128, vocab_size=600
    ),
    "sst2": textcls.Sst2Spec(
        source="standin", n_train=30, n_val=10, n_test=10, max_length=64, vocab_size=1500
    ),
    "imdb_bytes": text.ImdbBytesSpec(source="standin", n_train=24, n_val=6, n_test=10),
    "wikitext": wikitext.WikiTextSpec(source="standin", train_fraction=1.0, vocab_size=800),
}


def stand_in_of(task: str) -> str:
    module = TASK_DATA.get(task).module
    return module.STAND_IN[dataset_of(task)] if module is textcls else module.STAND_IN


@pytest.mark.parametrize("task", NEW_TASKS)
def test_standin_builds_in_the_real_format(task, tmp_path) -> None:
    spec = STANDIN_SPECS[task]
    manifest = build_task(task, spec, tmp_path)
    assert manifest["task"] == task and manifest["stand_in"].startswith(stand_in_of(task))
    assert manifest["num_classes"] == CLASSES[task]
    splits = splits_of(tmp_path / "out")
    raw = tmp_path / "data" / "raw" / task
    if task == "wikitext":
        assert manifest["kind"] == "lm" and "pydoc_data.topics" in manifest["stand_in"]
        assert [len(s) for s in splits.values()] == [63, 8, 8]  # the 79 help topics
        files = {s: raw / "wikitext-103" / f for s, f in wikitext.FILES.items()}
        assert sum(wikitext.count_articles(f) for f in files.values()) == 79
        every = "".join(f.read_text() for f in files.values())
        assert '= The "assert" statement =' in every
        assert manifest["tokens"]["train"] > 50_000  # real prose, ~465 KB in all
        tok = tokenizer.load(tmp_path / "out")
        article = wikitext.read_articles(files["val"])[0]
        assert tokenizer.words(tok.decode(sequences(splits["val"])[0])) == tokenizer.words(article)
        return
    if task == "imdb_bytes":
        assert (raw / "aclImdb" / "train" / "pos").is_dir()
        assert all((s.lengths() <= 2048).all() for s in splits.values())
        return
    assert manifest["kind"] == "classification"
    real_file = {"imdb_wordpiece": "aclImdb/test/pos", "ag_news": "ag_news_csv/test.csv"}
    assert (raw / real_file.get(task, "SST-2/dev.tsv")).exists()
    sizes = (spec.n_train, spec.n_val, spec.n_test)
    assert tuple(len(s) for s in splits.values()) == sizes
    labels = np.concatenate([s.labels for s in splits.values()])
    assert set(labels) == set(range(CLASSES[task]))  # every class, roughly balanced
    assert np.bincount(labels).max() <= 2 * np.bincount(labels).min()


@pytest.mark.parametrize("task", WORDPIECE_TASKS)
def test_standin_label_is_the_planted_majority_and_survives_tokenization(task, tmp_path) -> None:
    spec = STANDIN_SPECS[task]
    build_task(task, spec, tmp_path)
    lexicon = textcls.planted_words(dataset_of(task))
    background = set(textcls.background()[0])
    assert not background & {w for words in lexicon for w in words}
    tok = tokenizer.load(tmp_path / "out")
    splits = splits_of(tmp_path / "out")
    for name, (texts, labels) in raw_texts(task, tmp_path / "data" / "raw" / task).items():
        for text_, label in zip(texts, labels, strict=True):
            words = tokenizer.words(text_)
            counts = [sum(w in lexicon[c] for w in words) for c in range(len(lexicon))]
            assert counts[label] > max(counts[:label] + counts[label + 1 :])
            planted = {"imdb_wordpiece": (3, 5, 7), "ag_news": (3, 5)}.get(task, (1, 3))
            assert sum(counts) in planted
            if name == "train" and task == "sst2":
                assert 10 <= len(words) <= 30
    # The planted words reach the model: a bag of planted words is a perfect classifier.
    for split in splits.values():
        for ids, label in zip(sequences(split), split.labels, strict=True):
            words = tokenizer.words(tok.decode(ids))
            counts = [sum(w in lexicon[c] for w in words) for c in range(len(lexicon))]
            assert int(np.argmax(counts)) == label


@pytest.mark.parametrize("task", NEW_TASKS)
def test_standin_is_deterministic(task, tmp_path) -> None:
    spec = STANDIN_SPECS[task]
    a = build_task(task, spec, tmp_path / "a")
    b = build_task(task, spec, tmp_path / "b")
    c = build_task(task, replace(spec, seed=1), tmp_path / "c")
    assert a["content_hash"] == b["content_hash"] != c["content_hash"]


def test_tokenizer_is_deterministic_and_bert_like() -> None:
    from pydoc_data.topics import topics

    texts = [topics[k] for k in sorted(topics)[:30]]
    vocab = tokenizer.vocab_of(tokenizer.train(texts, 700))
    assert vocab == tokenizer.vocab_of(tokenizer.train(list(reversed(texts)), 700))
    assert len(vocab) == 700 and vocab[:3] == ["<pad>", "<cls>", "<unk>"]
    assert any(t.startswith("##") for t in vocab) and len(set(vocab)) == len(vocab)
    tok = tokenizer.build(vocab)
    ids = tokenizer.encode(tok, ["The ASSERT Statement, naïve!"], max_length=3)[0]
    assert ids.tolist() == tok.encode("the assert statement", add_special_tokens=False).ids[:3]
    assert tok.encode("<unk>", add_special_tokens=False).ids == [tokenizer.UNK_ID]
    with pytest.raises(ValueError, match="must start with"):
        tokenizer.build(vocab[1:])


def test_tokenizer_alphabet_both_forms_and_cap() -> None:
    counts = tokenizer.word_counts(["ab ba abba", "ab æon"])  # "æ" is rarest
    vocab = tokenizer.learn_vocab(counts, 100, max_alphabet=4)
    assert vocab[3:11] == ["a", "b", "n", "o", "##a", "##b", "##n", "##o"]
    assert "æ" not in vocab and "##on" not in vocab  # the word "æon" is left out
    tok = tokenizer.build(vocab)
    assert tok.encode("bob noon", add_special_tokens=False).tokens[0] == "b"  # never seen
    assert tok.encode("æon", add_special_tokens=False).ids == [tokenizer.UNK_ID]


# --------------------------------------------------------------------------------------------
# The command line, with the project's smoke-profile blocks (params.yaml)
# --------------------------------------------------------------------------------------------


def test_smoke_blocks_through_the_command_line(tmp_path, monkeypatch, params) -> None:
    smoke = {task: params["data"]["smoke"][task] for task in NEW_TASKS}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"data": {"smoke": smoke}}))
    monkeypatch.chdir(tmp_path)
    for task in NEW_TASKS:
        data_main(["fetch", task, "--profile", "smoke", "--params", str(path)])
        start = time.perf_counter()
        data_main(["prepare", task, "--profile", "smoke", "--params", str(path)])
        assert time.perf_counter() - start < 10
        manifest = load_manifest(tmp_path / "data" / "smoke" / "prepared" / task)
        assert manifest["task"] == task and manifest["stand_in"]
        if task != "wikitext":
            assert manifest["splits"]["train"]["examples"] == smoke[task]["n_train"]
            assert manifest["splits"]["train"]["max_length"] <= smoke[task]["max_length"]
