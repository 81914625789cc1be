"""Task multi30k: Multi30K En->De from fixtures served on 127.0.0.1, and its offline stand-in,
English-German pairs from gettext catalogues (.mo files written here, in tiny packages handed
out by the fake apt-get of test_debian.py)."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdelab.data import translation, translation_fetch
from pdelab.data.catalogue import DEBIAN, PINNED
from pdelab.data.errors import ArchiveLayoutError, ChecksumError
from pdelab.data.translation import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIALS,
    UNK_ID,
    Multi30kSpec,
    load_pairs,
    words,
)
from pdelab.data.translation_fetch import catalogue_pairs, keep_pair, read_mo
from pdelab.spec.data import TASK_DATA, data_spec
from tests.test_debian import FakeApt, deb_bytes, pin

# --------------------------------------------------------------------------------------------
# Fixtures in the real formats
# --------------------------------------------------------------------------------------------


def mo_bytes(entries: dict[str, str]) -> bytes:
    """A GNU .mo catalogue (what msgfmt writes): little-endian header, the tables of original
    and translated strings sorted by original, NUL-terminated strings; no hash table."""
    entries = {"": "Content-Type: text/plain; charset=UTF-8\n", **entries}
    keys = sorted(entries, key=lambda k: k.encode())
    n, originals = len(keys), 28
    translations = originals + 8 * n
    at = translations + 8 * n
    tables, blob = [b"", b""], b""
    for column, strings in enumerate(([k for k in keys], [entries[k] for k in keys])):
        for text in strings:
            data = text.encode()
            tables[column] += struct.pack("<2I", len(data), at + len(blob))
            blob += data + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, n, originals, translations, 0, at)
    return header + tables[0] + tables[1] + blob


SENTENCES = {  # kept, after cleaning
    "Whether the widget is visible": "Ob das Widget sichtbar ist",
    "The width of the border around the label": "Die Breite des Rahmens um die Beschriftung",
    "_Open the selected file": "Die ausgewählte Datei _öffnen",
    "Sa_ve the current document": "Das aktuelle Dokument _speichern",
    "Use a cairo_surface_t for drawing": "Einen cairo_surface_t zum Zeichnen verwenden",
    "Show the &File menu": "Das &Datei-Menü anzeigen",
    "The color of the selected text": "Die Farbe des ausgewählten Textes",
}
DROPPED = {  # why each is not a sentence pair
    "Could not open %s for reading": "Konnte %s nicht zum Lesen öffnen",  # printf
    "Copied %1$d of %2$d files": "%1$d von %2$d Dateien kopiert",  # positional printf
    "Unknown option {0} was given": "Unbekannte Option {0} angegeben",  # brace field
    "The %(name)s file is missing": "Die Datei %(name)s fehlt",  # Python mapping
    "Press <b>Enter</b> to go on": "Drücken Sie <b>Eingabe</b> zum Fortfahren",  # markup
    "First line of help\nSecond line of help": "Erste Zeile\nZweite Zeile",  # multi-line
    "Open the file": "",  # untranslated
    "GNOME Shell Extensions": "GNOME Shell Extensions",  # identical
    "Save file": "Datei speichern",  # 2 words
    " ".join(["word"] * 31): " ".join(["Wort"] * 31),  # 31 words
}


def catalogue(extra: dict[str, str] | None = None) -> bytes:
    return mo_bytes({**SENTENCES, **DROPPED, **(extra or {})})


@pytest.fixture
def apt(tmp_path, monkeypatch) -> FakeApt:
    return FakeApt(tmp_path / "fake-apt", monkeypatch)


LOCALE = "usr/share/locale/de/LC_MESSAGES"


def many_pairs(n: int, offset: int = 0) -> dict[str, str]:
    """``n`` distinct learnable pairs: English and German number words in a frame."""
    en = ["red", "green", "blue", "black", "white", "gray", "yellow", "brown", "pink", "cyan"]
    de = ["rot", "grün", "blau", "schwarz", "weiß", "grau", "gelb", "braun", "rosa", "türkis"]
    return {
        f"Set the {en[i % 10]} color number {i + offset}": (
            f"Die Farbe {de[i % 10]} Nummer {i + offset} setzen"
        )
        for i in range(n)
    }


@pytest.fixture
def packages(monkeypatch, apt) -> tuple[str, ...]:
    """Two pinned fixture packages with German catalogues (and an iso_ one to be skipped)."""
    contents = {
        "pkg-one": {
            f"{LOCALE}/one.mo": catalogue(many_pairs(30)),
            f"{LOCALE}/iso_3166-1.mo": mo_bytes({"Germany and Austria both": "Deutschland x"}),
            "usr/share/locale/fr/LC_MESSAGES/one.mo": b"not German: never read",
        },
        "pkg-two": {f"{LOCALE}/two.mo": mo_bytes(many_pairs(25, offset=20))},  # 10 repeated
    }
    for name, files in contents.items():
        data = deb_bytes(files, name=name)
        package = pin(name, data)
        monkeypatch.setitem(DEBIAN, name, package)
        apt.offer(package, data)
    return tuple(contents)


def standin(tmp_path: Path, packages: tuple[str, ...], **fields) -> tuple[Multi30kSpec, dict]:
    values = {"source": "standin", "n_train": 37, "n_val": 5, "n_test": 10, "packages": packages}
    spec = Multi30kSpec(**{**values, **fields})
    translation_fetch.fetch(spec, tmp_path / "raw")
    return spec, translation.prepare(spec, tmp_path / "raw", tmp_path / "prepared")


CAPTIONS = {
    "train": [
        (
            "Two young, White males are outside near many bushes.",
            "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        ),
        (
            "A little girl climbing into a wooden playhouse.",
            "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
        ),
        (
            "A man in a blue shirt is standing on a ladder.",
            "Ein Mann in einem blauen Hemd steht auf einer Leiter.",
        ),
        (
            "Two men are at the stove preparing food.",
            "Zwei Männer stehen am Herd und bereiten Essen zu.",
        ),
    ],
    "val": [
        (
            "A group of men are loading cotton onto a truck",
            "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
        ),
    ],
    "test": [
        (
            "A man in an orange hat starring at something.",
            "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
        ),
        (
            "A quixotic girl in a blue shirt.",
            "Ein schrulliges Mädchen in einem blauen Hemd.",
        ),
    ],
}
ARCHIVES = {"train": "training", "val": "validation", "test": "mmt16_task1_test"}


def archive(split: str) -> bytes:
    """The WMT16 archive of a split: {split}.en and {split}.de at the top, one sentence a line;
    the training and validation files end with a blank line, as the real ones do."""
    blank = "" if split == "test" else "\n"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        for column, language in enumerate(("en", "de")):
            text = "".join(f"{pair[column]}\n" for pair in CAPTIONS[split]) + blank
            info = tarfile.TarInfo(f"{split}.{language}")
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


@pytest.fixture
def served(server, monkeypatch) -> dict[str, bytes]:
    """The three archives on 127.0.0.1, pinned in PINNED as the real ones are."""
    data = {}
    for split, name in ARCHIVES.items():
        data[split] = archive(split)
        source = server.serve(f"/{name}.tar.gz", data[split])
        key = f"multi30k_{split}"
        monkeypatch.setitem(PINNED, key, replace(source, filename=PINNED[key].filename))
    return data


def real(tmp_path: Path, **fields) -> dict:
    spec = Multi30kSpec(**{"n_train": 4, "n_val": 1, "n_test": 2, **fields})
    translation_fetch.fetch(spec, tmp_path / "raw")
    return translation.prepare(spec, tmp_path / "raw", tmp_path / "prepared")


# --------------------------------------------------------------------------------------------
# The catalogues and their filters
# --------------------------------------------------------------------------------------------


def test_read_mo_agrees_with_our_writer_and_msgfmt(tmp_path) -> None:
    entries = {"Whether the widget is visible": "Ob das Widget sichtbar ist", "Zoom": "Zoom"}
    assert read_mo(mo_bytes(entries), "x")[1:] == sorted(entries.items())
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt is not installed")
    po = tmp_path / "de.po"
    po.write_text(
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgctxt "menu"\nmsgid "Open the file"\nmsgstr "Die Datei öffnen"\n\n'
        'msgid "One file was copied"\nmsgid_plural "%d files were copied"\n'
        'msgstr[0] "Eine Datei wurde kopiert"\nmsgstr[1] "%d Dateien wurden kopiert"\n',
        encoding="utf-8",
    )
    subprocess.run(["msgfmt", "-o", str(tmp_path / "de.mo"), str(po)], check=True)
    pairs = read_mo((tmp_path / "de.mo").read_bytes(), "de.mo")
    assert ("Open the file", "Die Datei öffnen") in pairs  # the context is dropped
    assert ("One file was copied", "Eine Datei wurde kopiert") in pairs  # singular forms


def test_bad_catalogues_name_the_problem() -> None:
    with pytest.raises(ValueError, match=r"x.mo: not a GNU .mo catalogue"):
        read_mo(b"\x00" * 40, "x.mo")
    with pytest.raises(ValueError, match=r"too short"):
        read_mo(b"\xde\x12\x04\x95", "x.mo")
    broken = bytearray(mo_bytes({"A long enough sentence": "Ein lang genuger Satz"}))
    broken[28 + 8 : 28 + 16] = struct.pack("<2I", 10, 10**6)  # entry 1 points past the end
    with pytest.raises(ValueError, match=r"entry 1 points past the end"):
        read_mo(bytes(broken), "x.mo")


def test_filters_keep_sentences_only_and_strip_accelerators() -> None:
    assert [keep_pair(k, v) for k, v in DROPPED.items()] == [None] * len(DROPPED)
    kept = dict(keep_pair(k, v) for k, v in SENTENCES.items())
    assert kept["Open the selected file"] == "Die ausgewählte Datei öffnen"
    assert kept["Save the current document"] == "Das aktuelle Dokument speichern"
    assert kept["Use a cairo_surface_t for drawing"].startswith("Einen cairo_surface_t")
    assert kept["Show the File menu"] == "Das Datei-Menü anzeigen"
    assert keep_pair("Drag&Drop  is  on", "Drag&&Drop ist an") == (
        "Drag&Drop is on",
        "Drag&Drop ist an",
    )
    pairs = catalogue_pairs(
        [
            ("a/one.mo", catalogue()),
            ("a/iso_639.mo", mo_bytes({"Low German and Saxon": "Niederdeutsch und so"})),
            ("b/two.mo", mo_bytes({"Whether the WIDGET is visible": "Anders übersetzt"})),
        ]
    )
    # iso_* skipped; of two pairs with the same English tokens the first is kept
    assert sorted(pairs) == sorted(kept.items()) and len(pairs) == len(kept)


def test_tokens_and_vocabularies() -> None:
    assert words("Zwei junge, weiße Männer!") == ["zwei", "junge", ",", "weiße", "männer", "!"]
    assert words("Don't stop: 3.5 km") == ["don", "'", "t", "stop", ":", "3", ".", "5", "km"]
    vocab = translation.build_vocab([["b", "a", "c"], ["a", "c"], ["a"]], min_freq=2)
    assert vocab == [*SPECIALS, "a", "c"]
    ids, lengths = translation.encode([["a"], ["c", "zzz", "a"]], vocab)
    assert ids.tolist() == [[BOS_ID, 4, EOS_ID, PAD_ID, PAD_ID], [BOS_ID, 5, UNK_ID, 4, EOS_ID]]
    assert lengths.tolist() == [3, 5]
    with pytest.raises(ValueError, match=r"min_freq must be at least 1"):
        translation.build_vocab([], min_freq=0)


# --------------------------------------------------------------------------------------------
# The stand-in, end to end
# --------------------------------------------------------------------------------------------


def test_standin_from_pinned_packages(tmp_path, packages, apt) -> None:
    spec, manifest = standin(tmp_path, packages)
    assert apt.calls() == [f"download {DEBIAN[p].spec}" for p in packages]
    raw = tmp_path / "raw" / "multi30k"
    lines = {f.name: f.read_text().splitlines() for f in raw.iterdir()}
    # 7 clean sentences + 30 + 25 colour pairs, of which 10 repeat: 52 pairs in all
    assert {len(lines[f"{s}.en"]) for s in ("val", "test")} == {5, 10}
    assert len(lines["train.en"]) == 52 - 15 and len(lines["train.de"]) == 37
    everything = [*lines["train.en"], *lines["val.en"], *lines["test.en"]]
    assert len(set(everything)) == 52 and "Save the current document" in everything
    expected = {**SENTENCES, **many_pairs(30), **many_pairs(25, offset=20)}
    expected_pairs = {keep_pair(en, de) for en, de in expected.items()}
    for split in ("train", "val", "test"):  # line-aligned: every line pair is a catalogue pair
        assert set(zip(lines[f"{split}.en"], lines[f"{split}.de"], strict=True)) <= expected_pairs

    assert manifest["task"] == "multi30k" and manifest["kind"] == "translation"
    assert manifest["stand_in"] and manifest["languages"] == {"src": "en", "tgt": "de"}
    assert [p["name"] for p in manifest["source_packages"]] == list(packages)
    assert manifest["vocab_sizes"] == {s: len(manifest[f"{s}_vocab"]) for s in ("src", "tgt")}
    assert manifest["src_vocab"][:4] == list(SPECIALS)
    assert manifest["splits"]["train"]["examples"] == 37
    train = load_pairs(tmp_path / "prepared", "train", verify=True)
    assert train.src.shape == (37, train.src_lengths.max()) and len(train) == 37
    for ids, lengths in ((train.src, train.src_lengths), (train.tgt, train.tgt_lengths)):
        assert (ids[:, 0] == BOS_ID).all()
        assert (ids[np.arange(len(ids)), lengths - 1] == EOS_ID).all()
        assert all((row[n:] == PAD_ID).all() for row, n in zip(ids, lengths, strict=True))
        assert not (ids == UNK_ID).any()  # every training token is in its vocabulary


def test_standin_split_is_seeded_and_builds_are_identical(tmp_path, packages) -> None:
    first = standin(tmp_path / "a", packages)[1]
    assert standin(tmp_path / "b", packages)[1]["content_hash"] == first["content_hash"]
    other = standin(tmp_path / "c", packages, seed=1)[1]
    assert other["content_hash"] != first["content_hash"]
    test = {s: (tmp_path / s / "raw/multi30k/test.en").read_text() for s in ("a", "c")}
    assert test["a"] != test["c"]
    with pytest.raises(ValueError, match=r"n_train \+ n_val \+ n_test = 100.*give 52 pairs"):
        standin(tmp_path / "d", packages, n_train=85)
    with pytest.raises(ValueError, match=r"packages \['nonesuch'\] are not pinned"):
        standin(tmp_path / "e", ("nonesuch",))


# --------------------------------------------------------------------------------------------
# Real Multi30K, downloaded from 127.0.0.1
# --------------------------------------------------------------------------------------------


def test_download_and_prepare_multi30k(tmp_path, served) -> None:
    manifest = real(tmp_path)
    raw = tmp_path / "raw" / "multi30k"
    assert raw.joinpath("train.en").read_text().endswith("preparing food.\n")
    assert len(raw.joinpath("train.de").read_text().splitlines()) == 4  # blank line dropped
    assert {s: v["examples"] for s, v in manifest["splits"].items()} == {
        "train": 4,
        "val": 1,
        "test": 2,
    }
    assert "stand_in" not in manifest and manifest["tokenizer_note"]
    src_vocab, tgt_vocab = manifest["src_vocab"], manifest["tgt_vocab"]
    assert "bushes" in src_vocab and "büsche" in tgt_vocab and "quixotic" not in src_vocab
    test = load_pairs(tmp_path / "prepared", "test", verify=True)
    quixotic = test.src[1, : test.src_lengths[1]].tolist()
    assert quixotic == [BOS_ID, src_vocab.index("a"), UNK_ID, *(
        src_vocab.index(w) for w in ("girl", "in", "a", "blue", "shirt", ".")
    ), EOS_ID]  # fmt: skip
    assert manifest["splits"]["test"]["src_unk"] == int((test.src == UNK_ID).sum()) > 1


def test_corrupt_download_fails_its_checksum(tmp_path, served, server) -> None:
    data = server.routes["/validation.tar.gz"].data
    server.routes["/validation.tar.gz"].data = data[:50] + bytes([data[50] ^ 0xFF]) + data[51:]
    with pytest.raises(ChecksumError, match=r"multi30k_validation.tar.gz: sha256 mismatch") as e:
        real(tmp_path)
    assert "update the pin in pdelab.data.catalogue.PINNED" in str(e.value)


def test_local_archives_or_files(tmp_path, served) -> None:
    folder = tmp_path / "by-hand"
    folder.mkdir()
    for split, name in ARCHIVES.items():
        (folder / f"{name}.tar.gz").write_bytes(served[split])
    downloaded = real(tmp_path / "a")["content_hash"]
    assert real(tmp_path / "b", source=str(folder))["content_hash"] == downloaded
    texts = tmp_path / "a" / "raw" / "multi30k"
    assert real(tmp_path / "c", source=str(texts))["content_hash"] == downloaded
    with pytest.raises(ArchiveLayoutError, match=r"must be 'standin', 'download', or a folder"):
        real(tmp_path / "d", source=str(tmp_path / "nowhere"))


def test_misaligned_or_empty_lines_are_refused(tmp_path, served) -> None:
    real(tmp_path)
    raw = tmp_path / "raw" / "multi30k"
    spec = Multi30kSpec(n_train=4, n_val=1, n_test=2)
    with open(raw / "val.de", "a", encoding="utf-8") as f:
        f.write("Ein Satz zu viel.\n")
    with pytest.raises(ValueError, match=r"val.en has 1 lines but val.de 2"):
        translation.prepare(spec, tmp_path / "raw", tmp_path / "out")
    (raw / "val.de").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"val.de:1: empty sentence"):
        translation.prepare(spec, tmp_path / "raw", tmp_path / "out")


def test_project_blocks(params) -> None:
    assert TASK_DATA.get("multi30k").module is translation
    smoke = data_spec(params, "smoke", "multi30k")
    paper = data_spec(params, "paper", "multi30k")
    assert smoke.source == "standin" and smoke.n_test >= 100
    assert set(smoke.packages) <= set(DEBIAN)
    assert (paper.source, paper.n_train, paper.n_val, paper.n_test) == (
        "download",
        29000,
        1014,
        1000,
    )


def test_no_training_job_imports_the_downloader() -> None:
    """A job imports what it runs: the training core and every task kind's strategy (the
    translation one reads translation.py's arrays) import neither the downloader nor the fetch
    that uses it, so an edit to download.py retrains no run."""
    from pdelab.records import provenance
    from pdelab.spec.task_kinds import TASK_KINDS

    strategies = [TASK_KINDS.get(name).module for name in TASK_KINDS]
    assert "pdelab.training.translation" in strategies
    for root in (provenance.CORE_ENTRY, *strategies):
        imported = provenance.closure((root,))
        assert not {"pdelab.data.download", "pdelab.data.translation_fetch"} & imported, root
    assert "pdelab.data.pairs" in provenance.closure(("pdelab.training.translation",))
    # what a reader of the prepared pairs needs, alone: no spec, catalogue or fetch
    read_side = {m for m in provenance.closure(("pdelab.data.pairs",)) if m.startswith("pdelab.")}
    assert read_side <= {"pdelab.data", "pdelab.data.pairs", "pdelab.data.store"} | {
        "pdelab.records",
        "pdelab.records.atomic",
    }
