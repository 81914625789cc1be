"""Fetch Multi30K (FNA's Table II) into ``raw_dir/multi30k``: the pinned archives, a folder of
the user's own, or the stand-in made from German gettext catalogues of pinned Debian packages.

The data job (``python -m pdelab.data``) alone imports this module (the task's
:class:`~pdelab.data.sources.Sources` names it in ``fetched_by``): the downloader and the
package reader it uses are no part of the code of a job that reads the prepared arrays
(translation.py), so an edit to them retrains nothing. What each source holds, the stand-in's
cleaning and the files written: translation.py's docstring.
"""

from __future__ import annotations

import re
import shutil
import struct
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import numpy as np

from pdelab.data import debian
from pdelab.data.archive import extract
from pdelab.data.catalogue import DEBIAN, PINNED
from pdelab.data.download import fetch as fetch_file
from pdelab.data.errors import ArchiveLayoutError, FetchError, SourceNotFoundError
from pdelab.data.store import SPLITS
from pdelab.data.translation import (
    ARCHIVES,
    EXPECTED,
    LANGUAGES,
    MAX_WORDS,
    MIN_WORDS,
    UPSTREAM,
    Multi30kSpec,
    read_lines,
    words,
    write_lines,
)

LOCALE = "usr/share/locale/de/LC_MESSAGES"


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
