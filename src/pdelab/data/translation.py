"""English-to-German translation: Multi30K (FNA's Table II), or gettext catalogues offline.

Real data: Multi30K task 1 (Elliott et al. 2016), the three WMT16 archives that the official
code reads through torchtext (pinned in :data:`pdelab.data.catalogue.PINNED`, keys
``multi30k_{train,val,test}``): ``train``, ``val`` and ``test`` (the 2016 Flickr test set)
as line-aligned ``.en`` / ``.de`` text files, 29,000 / 1,014 / 1,000 sentence pairs.

``source``: "download", a folder holding the six files ``{train,val,test}.{en,de}`` or the
three archives under their own names (training.tar.gz, validation.tar.gz,
mmt16_task1_test.tar.gz: checked against the pins), or "standin". ``fetch`` writes the six
files into ``raw_dir/multi30k`` (trailing blank lines dropped: the training and validation
files end with one) and ``prepare`` reads only them; the stand-in is written the same way.

Tokens: the official code splits with spaCy's ``en_core_web_sm`` / ``de_core_news_sm``
tokenizers and lowercases. Those are model downloads, so here a dependency-free rule stands in
(:func:`words`): lowercase, then every run of letters/digits/underscores is a token and every
other non-space character a token of its own (spaCy keeps e.g. "n't" and "z.B." whole, and
splits some words this rule keeps). One vocabulary per language, from the training split only,
as the official code builds them: SPECIALS first (``<pad>`` 0, so padding is the store's
PAD_ID, then ``<unk>``, ``<bos>``, ``<eos>``; the official code numbers them <sos> 0, <eos> 1,
<unk> 2, <pad> 3), then every token seen at least ``min_freq`` times (the official code: 1),
most frequent first, ties in alphabetical order so that every build is identical. Every
sentence is wrapped in ``<bos>`` ... ``<eos>``, source and target alike, as the official code
does. On the real data this gives 9,783 English and 17,915 German vocabulary entries.

Stand-in: pairs from the German message catalogues of pinned Debian packages
(:func:`catalogue_pairs`: msgid -> msgstr of ``usr/share/locale/de/LC_MESSAGES/*.mo``), split
by a seeded permutation into ``n_val`` validation, ``n_test`` test and the rest training pairs.
See :data:`STAND_IN` and :func:`keep_pair` for what is kept: 2,203 pairs of PACKAGES, about 8
English words each (Multi30K's captions: about 12). The packages come from ``apt-get
download`` (debian.py); package files got by hand can be put into ``raw_dir/../downloads``
under their apt names, where they are verified and used.

Storage (``out_dir``): per split ``{split}.src.npy`` and ``{split}.tgt.npy`` (N, longest) token
ids padded with 0, and ``{split}.src_lengths.npy`` / ``{split}.tgt_lengths.npy`` (N,) lengths
with ``<bos>`` and ``<eos>``; ``manifest.json`` holds both vocabularies, their sizes, the
specials and per-split statistics, and a ``content_hash`` over all files, as store.py's does.
"""

from __future__ import annotations

import re
import shutil
import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar
from urllib.parse import urlparse

import numpy as np

from pdelab.data import debian
from pdelab.data.archive import extract
from pdelab.data.catalogue import DEBIAN, PINNED
from pdelab.data.download import fetch as fetch_file
from pdelab.data.errors import ArchiveLayoutError, FetchError, SourceNotFoundError
from pdelab.data.sources import Sources
from pdelab.data.store import (
    SPLITS,
    content_hash,
    map_checked,
    sha256_file,
    subset,
    write_manifest,
)

LANGUAGES = {"src": "en", "tgt": "de"}
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIALS))
ARCHIVES = {"train": "multi30k_train", "val": "multi30k_val", "test": "multi30k_test"}
EXPECTED = "{train,val,test}.{en,de} (line-aligned, the Multi30K task-1 archives' files)"
# the archives under their upstream names, as a folder given as source may hold them
UPSTREAM = {s: PurePosixPath(urlparse(PINNED[k].url).path).name for s, k in ARCHIVES.items()}
TOKENIZER_NOTE = (
    "lowercased and split into runs of letters/digits and single punctuation characters "
    "(spaCy's en_core_web_sm / de_core_news_sm tokenizers, which the paper used, are model "
    "downloads)"
)
# The stand-in's packages (pinned in catalogue.DEBIAN): their German catalogues hold short
# descriptive sentences (widget properties, settings). Chosen over git's and PostgreSQL's
# larger catalogues because they are Architecture: all (one pin for every machine) and rarely
# replaced in Debian's point releases, which would make a pinned version vanish.
PACKAGES = ("libgtk-3-common", "libgtk2.0-common", "gsettings-desktop-schemas")
LOCALE = "usr/share/locale/de/LC_MESSAGES"
MIN_WORDS, MAX_WORDS = 3, 30
STAND_IN = (
    "English-German message pairs from the German gettext catalogues of Debian packages "
    "(GNOME's toolkit and settings) stand in for Multi30K's image captions: msgid -> msgstr, "
    "without iso_* catalogues, format strings, markup, multi-line and untranslated messages "
    f"and identical pairs, accelerators stripped, {MIN_WORDS}-{MAX_WORDS} words on both sides, "
    "one pair per English sentence"
)


@dataclass(frozen=True)
class Multi30kSpec:
    """Data parameters; the defaults are the paper's (every Multi30K sentence pair)."""

    sources: ClassVar[Sources] = Sources(
        downloads=tuple(ARCHIVES.values()),
        layout=f"{EXPECTED}, or the archives {', '.join(UPSTREAM.values())}",
        archive=False,
        standin_packages=True,
    )

    source: str = "download"
    n_train: int = 29_000
    n_val: int = 1_014
    n_test: int = 1_000
    min_freq: int = 1  # tokens seen fewer times in training become <unk>
    packages: tuple[str, ...] = PACKAGES  # the stand-in only: Debian packages read (in order)
    seed: int = 0


# --------------------------------------------------------------------------------------------
# Tokens and vocabularies
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """The tokens of ``text``: lowercased, runs of word characters and single other marks."""
    return _TOKEN.findall(text.lower())


def build_vocab(sentences: Iterable[Sequence[str]], min_freq: int) -> list[str]:
    """SPECIALS, then the tokens seen at least ``min_freq`` times, most frequent first (ties
    alphabetical)."""
    if min_freq < 1:
        raise ValueError(f"translation: min_freq must be at least 1, got {min_freq}")
    counts = Counter(token for sentence in sentences for token in sentence)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [*SPECIALS, *(t for t, n in ranked if n >= min_freq and t not in SPECIALS)]


def encode(
    sentences: Sequence[Sequence[str]], vocab: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(ids (N, longest) padded with PAD_ID, lengths (N,)): each sentence as <bos> ... <eos>."""
    index = {token: i for i, token in enumerate(vocab)}
    lengths = np.array([len(s) + 2 for s in sentences], dtype=np.int64)
    dtype = np.uint16 if len(vocab) <= 1 << 16 else np.int32
    ids = np.full((len(sentences), int(lengths.max(initial=2))), PAD_ID, dtype=dtype)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence) + 2] = [
            BOS_ID,
            *(index.get(token, UNK_ID) for token in sentence),
            EOS_ID,
        ]
    return ids, lengths


# --------------------------------------------------------------------------------------------
# The stand-in: gettext catalogues
# --------------------------------------------------------------------------------------------


def read_mo(data: bytes, where: object) -> list[tuple[str, str]]:
    """(msgid, msgstr) of every entry of a GNU ``.mo`` catalogue, in file order; a context
    (``msgctxt``) is dropped and plural entries give their singular forms."""
    if len(data) < 20:
        raise ValueError(f"{where}: too short to be a .mo catalogue ({len(data)} bytes)")
    magic = struct.unpack("<I", data[:4])[0]
    order = {0x950412DE: "<", 0xDE120495: ">"}.get(magic)
    if order is None:
        raise ValueError(f"{where}: not a GNU .mo catalogue (magic number {magic:#x})")
    count, originals, translations = struct.unpack(f"{order}3I", data[8:20])

    def string(table: int, i: int) -> str:
        length, offset = struct.unpack(f"{order}2I", data[table + 8 * i : table + 8 * i + 8])
        if offset + length > len(data):
            raise ValueError(f"{where}: entry {i} points past the end of the file")
        return data[offset : offset + length].decode("utf-8", errors="replace")

    try:
        entries = [(string(originals, i), string(translations, i)) for i in range(count)]
    except struct.error as err:
        raise ValueError(f"{where}: truncated .mo string table ({err})") from None
    return [
        (msgid.split("\x04")[-1].split("\0")[0], msgstr.split("\0")[0]) for msgid, msgstr in entries
    ]


# printf conversions (%s, %1$d, %-10s, %'d, %lu, %%), Python's %(name)s, brace fields ({0},
# {name}) and markup tags (<b>): a sentence with any of them is a template, not a sentence.
_FORMAT = re.compile(
    r"%(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn%]"
    r"|%\([^)]*\)|\{[^{}]*\}|<[^<>]+>"
)
_MULTILINE = re.compile(r"[\n\t\r]")
_UNDERSCORED = re.compile(r"\w*_\w*")
_AMPERSAND = re.compile(r"(?<![^\W\d_])(?<!&)&(?=[^\W\d_])")


def strip_accelerators(msgid: str, msgstr: str) -> tuple[str, str]:
    """Both texts without keyboard accelerators. An underscore before a letter marks GTK's
    mnemonic: dropped at the start of a word (``_Open``) and inside one (``Sa_ve``), unless the
    word has several underscores or stands unchanged on both sides (an identifier such as
    ``GTK_THEME`` or ``cairo_surface_t``). An ``&`` before a letter and not inside a word marks
    a Qt/KDE accelerator (``&File``; ``Drag&Drop`` stays); ``&&`` is a literal ``&``."""
    shared = set(_UNDERSCORED.findall(msgid)) & set(_UNDERSCORED.findall(msgstr))

    def word(match: re.Match[str]) -> str:
        token = match.group(0)
        at = token.find("_")
        if token.count("_") != 1 or not token[at + 1 : at + 2].isalpha():
            return token
        if at > 0 and token in shared:
            return token
        return token[:at] + token[at + 1 :]

    def strip(text: str) -> str:
        text = _UNDERSCORED.sub(word, text)
        text = _AMPERSAND.sub("", text)
        return text.replace("&&", "&").replace("\ufeff", "")

    return strip(msgid), strip(msgstr)


def keep_pair(msgid: str, msgstr: str) -> tuple[str, str] | None:
    """The cleaned (English, German) sentence pair, or None when the entry is not one:
    untranslated, a format string, markup, several lines, identical on both sides after
    cleaning, or fewer than MIN_WORDS / more than MAX_WORDS words on either side."""
    if not msgid or not msgstr:
        return None
    if any(_FORMAT.search(s) or _MULTILINE.search(s) for s in (msgid, msgstr)):
        return None
    en, de = (" ".join(s.split()) for s in strip_accelerators(msgid, msgstr))
    if en.casefold() == de.casefold():
        return None
    if not all(MIN_WORDS <= len(s.split()) <= MAX_WORDS for s in (en, de)):
        return None
    return en, de


def catalogue_pairs(catalogues: Iterable[tuple[str, bytes]]) -> list[tuple[str, str]]:
    """The kept pairs of ``(name, .mo bytes)`` catalogues, taken in the given order; ``iso_*``
    catalogues (ISO code lists: names, not sentences) are skipped, and of several pairs with
    the same English tokens only the first is kept (one target per source, and no sentence
    in two splits)."""
    seen: set[tuple[str, ...]] = set()
    pairs = []
    for name, data in catalogues:
        if PurePosixPath(name).name.startswith("iso_"):
            continue
        for msgid, msgstr in read_mo(data, name):
            pair = keep_pair(msgid, msgstr)
            key = tuple(words(pair[0])) if pair else ()
            if pair and key not in seen:
                seen.add(key)
                pairs.append(pair)
    return pairs


def package_catalogues(spec: Multi30kSpec, raw_dir: Path) -> list[tuple[str, bytes]]:
    """The German ``.mo`` catalogues of each package of ``spec.packages`` (in that order,
    each package's catalogues by name), read from the verified ``.deb`` files (see
    debian.fetch_deb: ``apt-get download``, or copies already in ``raw_dir/../downloads``)."""
    unknown = [p for p in spec.packages if p not in DEBIAN]
    if unknown or not spec.packages:
        raise ValueError(
            f"multi30k: packages {unknown or '[]'} are not pinned; choose among "
            f"{sorted(DEBIAN)} (pdelab.data.catalogue.DEBIAN)"
        )
    catalogues = []
    for name in spec.packages:
        deb = debian.fetch_deb(DEBIAN[name], raw_dir.parent / "downloads")
        found = debian.deb_members(deb, f"{LOCALE}/*.mo")
        if not found:
            raise FetchError(f"{deb}: holds no German catalogues ({LOCALE}/*.mo)")
        catalogues += sorted(found.items())
    return catalogues


def write_standin(spec: Multi30kSpec, raw_dir: Path, dest: Path) -> None:
    """The catalogue pairs as Multi30K's six files, split by a seeded permutation (each split
    in catalogue order)."""
    pairs = catalogue_pairs(package_catalogues(spec, raw_dir))
    held = spec.n_val + spec.n_test
    if held + spec.n_train > len(pairs):
        raise ValueError(
            f"multi30k stand-in: n_train + n_val + n_test = {held + spec.n_train}, but the "
            f"catalogues of {', '.join(spec.packages)} give {len(pairs)} pairs"
        )
    order = np.random.default_rng(spec.seed).permutation(len(pairs))
    parts = {"val": order[: spec.n_val], "test": order[spec.n_val : held], "train": order[held:]}
    dest.mkdir(parents=True)
    for split, index in parts.items():
        for side, language in LANGUAGES.items():
            lines = [pairs[i][side == "tgt"] for i in np.sort(index)]
            write_lines(dest / f"{split}.{language}", lines)


# --------------------------------------------------------------------------------------------
# Real data
# --------------------------------------------------------------------------------------------


def _text_files() -> list[str]:
    return [f"{split}.{language}" for split in SPLITS for language in LANGUAGES.values()]


def real_files(source: str, raw_dir: Path) -> dict[str, Path]:
    """The six text files named by ``source`` (downloading and unpacking when asked to)."""
    path = Path(source).expanduser()
    if source != "download" and path.is_dir() and all((path / f).is_file() for f in _text_files()):
        return {name: path / name for name in _text_files()}
    if source != "download" and not (
        path.is_dir() and all((path / name).is_file() for name in UPSTREAM.values())
    ):
        missing = "" if path.exists() else f" ({path} does not exist)"
        raise (ArchiveLayoutError if path.exists() else SourceNotFoundError)(
            f"multi30k: source {source!r} must be 'standin', 'download', or a folder holding "
            f"{Multi30kSpec.sources.layout}{missing}"
        )
    cache = raw_dir.parent / "downloads"
    files = {}
    for split, key in ARCHIVES.items():
        local = None if source == "download" else path / UPSTREAM[split]
        archive = fetch_file(PINNED[key], cache, local_path=local)
        unpacked = extract(archive, cache / key)
        for language in LANGUAGES.values():
            name = f"{split}.{language}"
            if not (unpacked / name).is_file():
                raise ArchiveLayoutError(f"{archive}: holds no {name}; expected {EXPECTED}")
            files[name] = unpacked / name
    return files


def fetch(spec: Multi30kSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/multi30k`` with the six line-aligned files: real or the stand-in."""
    dest = raw_dir / "multi30k"
    shutil.rmtree(dest, ignore_errors=True)
    if spec.source == "standin":
        write_standin(spec, raw_dir, dest)
        return
    files = real_files(spec.source, raw_dir)
    dest.mkdir(parents=True)
    for name, path in files.items():
        lines = read_lines(path)
        while lines and not lines[-1].strip():
            lines.pop()
        write_lines(dest / name, lines)


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, split at "\\n" only (a sentence may hold other line
    separators such as U+2028, which str.splitlines would split at)."""
    text = path.read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def read_pairs(root: Path, split: str) -> tuple[list[str], list[str]]:
    """The source and target sentences of a split, checked to be line-aligned and non-empty."""
    sides = []
    for language in LANGUAGES.values():
        path = root / f"{split}.{language}"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; expected {EXPECTED}")
        lines = read_lines(path)
        empty = next((i for i, line in enumerate(lines, start=1) if not line.strip()), None)
        if empty is not None:
            raise ValueError(f"{path}:{empty}: empty sentence; every line must hold one")
        sides.append(lines)
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"{root}: {split}.en has {len(sides[0])} lines but {split}.de {len(sides[1])}; "
            "the two files must be line-aligned translations"
        )
    return sides[0], sides[1]


# --------------------------------------------------------------------------------------------
# Prepare and load
# --------------------------------------------------------------------------------------------


def prepare(spec: Multi30kSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Padded <bos> ... <eos> ids of both languages per split; the vocabularies come from the
    training split (seeded subsets of ``n_*`` pairs when fewer than a split holds)."""
    root = raw_dir / "multi30k"
    rng = np.random.default_rng(spec.seed)
    wanted = {"train": spec.n_train, "val": spec.n_val, "test": spec.n_test}
    tokens: dict[str, dict[str, list[list[str]]]] = {}
    available = {}
    for split in SPLITS:
        src, tgt = read_pairs(root, split)
        available[split] = len(src)
        chosen = subset(len(src), wanted[split], rng, f"multi30k {split}")
        tokens[split] = {
            "src": [words(src[i]) for i in chosen],
            "tgt": [words(tgt[i]) for i in chosen],
        }
    vocabs = {side: build_vocab(tokens["train"][side], spec.min_freq) for side in LANGUAGES}
    out_dir.mkdir(parents=True, exist_ok=True)
    files, stats = {}, {}
    for split in SPLITS:
        stats[split] = {"examples": len(tokens[split]["src"]), "available": available[split]}
        for side in LANGUAGES:
            ids, lengths = encode(tokens[split][side], vocabs[side])
            for name, array in ((side, ids), (f"{side}_lengths", lengths)):
                path = out_dir / f"{split}.{name}.npy"
                np.save(path, array, allow_pickle=False)
                files[path.name] = sha256_file(path)
            stats[split][f"{side}_max_length"] = int(lengths.max(initial=0))
            stats[split][f"{side}_mean_length"] = round(float(lengths.mean()), 2)
            stats[split][f"{side}_unk"] = int((ids == UNK_ID).sum())
        stats[split]["max_length"] = max(
            stats[split]["src_max_length"], stats[split]["tgt_max_length"]
        )
    manifest: dict[str, Any] = {
        "content_hash": content_hash(files),
        "files": files,
        "splits": stats,
        "task": "multi30k",
        "kind": "translation",
        "num_classes": 0,
        "languages": dict(LANGUAGES),
        "specials": list(SPECIALS),
        "src_vocab": vocabs["src"],
        "tgt_vocab": vocabs["tgt"],
        "vocab_sizes": {side: len(vocab) for side, vocab in vocabs.items()},
        "min_freq": spec.min_freq,
        "tokenizer_note": TOKENIZER_NOTE,
    }
    if spec.source == "standin":
        manifest["stand_in"] = STAND_IN
        manifest["source_packages"] = [
            {"name": p, "version": DEBIAN[p].version} for p in spec.packages
        ]
    return write_manifest(out_dir, manifest)


@dataclass
class PairSplit:
    """One split of a prepared translation task: padded ids and lengths of both sides."""

    src: np.ndarray
    src_lengths: np.ndarray
    tgt: np.ndarray
    tgt_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.src_lengths)


def load_pairs(
    data_dir: Path | str,
    split: str,
    verify: bool = False,
    manifest: dict[str, Any] | None = None,
) -> PairSplit:
    """Memory-map one split after checking its files' sizes (with verify, their sha256)."""
    data_dir = Path(data_dir)
    names = [f"{split}.{name}.npy" for name in ("src", "src_lengths", "tgt", "tgt_lengths")]
    return PairSplit(**map_checked(data_dir, names, verify, manifest))
