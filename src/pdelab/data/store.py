"""Prepared datasets on disk: ragged token arrays in .npy plus a small manifest.

Each split is three arrays: ``{split}.tokens.npy`` (all sequences concatenated), ``{split}
.offsets.npy`` (N + 1 boundaries) and ``{split}.labels.npy``; no padding is stored, batches are
padded to their own longest sequence. Pair tasks (retrieval) add the second document of each
pair as ``{split}.tokens2.npy`` and ``{split}.offsets2.npy``. ``manifest.json`` lists every
file's sha256 and size and one ``content_hash`` over the hashes; it holds no timestamps, so
identical data gives an identical manifest and Snakemake (which checksums small inputs)
retrains only when the data changed.

Every load checks each file's size against the manifest (a stat: free), so a truncated or
replaced file stops a job at once with an error naming the file and the repair, instead of a
numpy error deep in a memory map; ``python -m pdelab.data verify`` (run by every data job)
and every training, probe, report and status reader (:func:`verified_manifest`) also checks the
hashes, each file hashed again only when its size, times or inode changed since it was last
found as its manifest says (a same-size swap cannot keep its inode and change time).

The hashes found are kept beside the folder (:func:`verified_path`), and trusted only while that
file is the one :func:`write_verified` wrote: its own stat key is noted in a second file
(:func:`seal_path`) just after it is written. A cache rewritten by anything else (by hand, a
copy, a script that writes a swapped file's new stat key beside its old hash) has another
change time, which a write always moves forward and no one can set back, so it no longer
matches its note and every file is hashed again: a rewrite of the cache alone cannot hide a
changed file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pdelab.records.atomic import write_text

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"
PAD_ID, CLS_ID = 0, 1
RESERVED = ("<pad>", "<cls>")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(
        np.uint8 if vocab_size <= 256 else np.uint16 if vocab_size <= 65536 else np.int32
    )


def _ragged(sequences: Sequence[np.ndarray], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(concatenated tokens, N + 1 offsets)."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate(list(sequences)).astype(dtype) if len(sequences) else np.zeros(0, dtype)
    return tokens, offsets


def write_prepared(
    out_dir: Path,
    splits: dict[
        str,
        tuple[Sequence[np.ndarray], np.ndarray]
        | tuple[Sequence[np.ndarray], np.ndarray, Sequence[np.ndarray]],
    ],
    vocab: Sequence[str],
    num_classes: int,
    info: dict[str, Any],
    extra_files: Sequence[str] = (),
) -> dict[str, Any]:
    """Write ``{split: (sequences, labels[, second_sequences])}`` and the manifest.

    Token ids index ``vocab``, whose first two entries are RESERVED (padding and CLS).
    ``info`` goes into the manifest: at least ``task``, and ``stand_in`` (a sentence naming
    what stands in for the real data) when the data is not the paper's. ``extra_files`` names
    files the caller already wrote into ``out_dir`` that belong to the data (a trained
    tokenizer): they are checksummed with the arrays, so ``content_hash`` changes with them.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = _dtype(len(vocab))
    files: dict[str, str] = {name: sha256_file(out_dir / name) for name in extra_files}
    stats: dict[str, Any] = {}
    for split, (sequences, labels, *pair) in splits.items():
        arrays = {"labels": np.asarray(labels, dtype=np.int64)}
        arrays["tokens"], arrays["offsets"] = _ragged(sequences, dtype)
        if pair:
            arrays["tokens2"], arrays["offsets2"] = _ragged(pair[0], dtype)
        for name, array in arrays.items():
            path = out_dir / f"{split}.{name}.npy"
            np.save(path, array, allow_pickle=False)
            files[path.name] = sha256_file(path)
        lengths = np.diff(arrays["offsets"])
        if pair:
            lengths = np.maximum(lengths, np.diff(arrays["offsets2"]))
        stats[split] = {
            "examples": len(lengths),
            "max_length": int(lengths.max(initial=0)),
            "mean_length": round(float(lengths.mean()) if len(lengths) else 0.0, 2),
        }
    manifest = {
        "content_hash": content_hash(files),
        "vocab": list(vocab),
        "num_classes": int(num_classes),
        "splits": stats,
        "files": files,
        "pairs": any(len(v) == 3 for v in splits.values()),
        **info,
    }
    return write_manifest(out_dir, manifest)


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest`` with the size of every file it lists (``files``: name -> sha256)."""
    manifest = {**manifest, "sizes": {n: (out_dir / n).stat().st_size for n in manifest["files"]}}
    write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


class CorruptDataError(ValueError):
    """A prepared file differs from its manifest: truncated, replaced or missing."""


def repair_hint(data_dir: Path) -> str:
    """The commands that restore a prepared folder: from DVC's cache, or by preparing again."""
    parts = data_dir.parts
    task = parts[-1]
    stage = f"dvc repro prepare@{task}" if parts[-2:-1] == ("prepared",) else "dvc repro"
    return (
        f"restore it with `dvc checkout {data_dir}` (from DVC's cache) or rebuild it with "
        f"`{stage}`, then run the workflow again"
    )


def check_files(
    data_dir: Path | str,
    manifest: dict[str, Any],
    names: Sequence[str] | None = None,
    hashes: bool = False,
) -> None:
    """Every listed file (all of the manifest's, or ``names``) exists with the manifest's size
    and, with ``hashes``, its sha256; else a CorruptDataError that says which and what to run."""
    data_dir = Path(data_dir)
    sizes = manifest.get("sizes", {})  # manifests written before sizes were recorded: none
    cache = read_verified(data_dir) if hashes else {}
    checked = dict(cache)
    for name in manifest["files"] if names is None else names:
        path = data_dir / name
        found = path.stat().st_size if path.exists() else None
        problem = None
        if found is None:
            problem = "is missing"
        elif name in sizes and found != sizes[name]:
            problem = (
                f"has {found:,} bytes, its manifest says {sizes[name]:,} (truncated or replaced)"
            )
        elif hashes:
            expected, key = manifest["files"][name], file_key(path)
            known = cache.get(name)
            digest = known[1] if known and known[0] == key else sha256_file(path)
            if digest != expected:
                problem = (
                    f"fails its checksum: sha256 {digest[:16]}..., the manifest says "
                    f"{expected[:16]}..."
                )
            checked[name] = [key, digest]
        if problem:
            raise CorruptDataError(f"{path} {problem}: {repair_hint(data_dir)}")
    if hashes and checked != cache:
        write_verified(data_dir, checked)


def verified_path(data_dir: Path) -> Path:
    """Where the hashes of a prepared folder's files are kept, beside the folder (not in it:
    the folder is DVC's output)."""
    return data_dir.parent / f".{data_dir.name}.verified.json"


def built_path(data_dir: Path) -> Path:
    """Where the data job notes the content hash of the folder it prepared and verified."""
    return Path(data_dir).parent / f".{Path(data_dir).name}.built.json"


def mark_built(data_dir: Path | str, manifest: dict[str, Any]) -> None:
    write_text(built_path(Path(data_dir)), json.dumps({"content_hash": manifest["content_hash"]}))


def built_here(data_dir: Path | str) -> bool:
    """Whether a prepared folder is the one this project's data job prepared last (its files
    as that job verified them), not one changed or replaced by hand since."""
    try:
        noted = json.loads(built_path(Path(data_dir)).read_text())["content_hash"]
        return verified_manifest(data_dir)["content_hash"] == noted
    except (OSError, ValueError, KeyError):
        return False


def file_key(path: Path) -> list[int]:
    """What a file's cached hash is valid for: size, modification and change times, inode and
    device. A file swapped for another of the same size, even with its modification time put
    back, has another inode or change time (which no one can set), so it is hashed again."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def seal_path(data_dir: Path) -> Path:
    """Where the stat key of the verified-hash cache is noted, as :func:`write_verified`
    left it."""
    return data_dir.parent / f".{data_dir.name}.verified.seal"


def read_verified(data_dir: Path) -> dict[str, list[Any]]:
    """The hashes kept by :func:`write_verified`, or none when the cache is not the file it
    wrote (its stat key differs from the one noted just after the write: rewritten, copied or
    edited since), so that every file is hashed again."""
    cache = verified_path(data_dir)
    try:
        sealed = json.loads(seal_path(data_dir).read_text())
        if sealed != file_key(cache):
            return {}
        found = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def write_verified(data_dir: Path, checked: dict[str, list[Any]]) -> None:
    """Keep the hashes just checked, and note the cache file's stat key as written (a folder
    that cannot be written is hashed next time)."""
    cache = verified_path(data_dir)
    with contextlib.suppress(OSError):
        seal_path(data_dir).unlink(missing_ok=True)  # no note while the cache is rewritten
        write_text(cache, json.dumps(checked, sort_keys=True))
        write_text(seal_path(data_dir), json.dumps(file_key(cache)))


def _pad(tokens: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> np.ndarray:
    starts, ends = offsets[index], offsets[index + 1]
    ids = np.full((len(index), int((ends - starts).max())), PAD_ID, dtype=np.int64)
    for row, (s, e) in enumerate(zip(starts, ends, strict=True)):
        ids[row, : e - s] = tokens[s:e]
    return ids


@dataclass
class Split:
    """One split held as ragged arrays; ``batch`` pads a selection to its longest sequence."""

    tokens: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    tokens2: np.ndarray | None = None
    offsets2: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def lengths(self) -> np.ndarray:
        lengths = np.diff(self.offsets)
        return lengths if self.offsets2 is None else np.maximum(lengths, np.diff(self.offsets2))

    def batch(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """ids (B, T) int64 padded with PAD_ID, mask (B, T) bool, labels (B,); for pairs also
        ids2 and mask2 (the second documents)."""
        ids = _pad(self.tokens, self.offsets, index)
        out = {"ids": ids, "mask": ids != PAD_ID, "labels": self.labels[index]}
        if self.tokens2 is not None:
            ids2 = _pad(self.tokens2, self.offsets2, index)
            out.update(ids2=ids2, mask2=ids2 != PAD_ID)
        return out


def load_manifest(data_dir: Path | str) -> dict[str, Any]:
    path = Path(data_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: prepare the data first (snakemake builds it, or "
            "`dvc repro` for the data stages alone)"
        )
    return json.loads(path.read_text())


def content_hash(files: dict[str, str]) -> str:
    """One digest of a prepared folder: over its files' sha256 (the manifest's ``files``)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def verified_manifest(data_dir: Path | str) -> dict[str, Any]:
    """The manifest of a folder whose every file was just hashed and found as it lists, and
    whose ``content_hash`` is the digest of those hashes: a run that records it has recorded
    the bytes it reads (once per file per job; a flipped bit of the same size stops the job
    here, naming the file and the repair)."""
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir)
    if content_hash(manifest["files"]) != manifest.get("content_hash"):
        raise CorruptDataError(
            f"{data_dir / MANIFEST}: its content_hash is not the digest of the files it lists "
            f"(edited by hand?): {repair_hint(data_dir)}"
        )
    check_files(data_dir, manifest, hashes=True)
    return manifest


def load_split(
    data_dir: Path | str,
    split: str,
    verify: bool = False,
    manifest: dict[str, Any] | None = None,
) -> Split:
    """Memory-map one split after checking its files' sizes (with verify, their sha256)."""
    data_dir = Path(data_dir)
    names = [
        f"{split}.{name}.npy"
        for name in ("tokens", "offsets", "labels", "tokens2", "offsets2")
        if not name.endswith("2") or (data_dir / f"{split}.{name}.npy").exists()
    ]
    return Split(**map_checked(data_dir, names, verify, manifest))


def map_checked(
    data_dir: Path, names: Sequence[str], verify: bool, manifest: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """``{split}.{array}.npy`` files memory-mapped by array name, after :func:`check_files`
    against ``manifest`` (read from ``data_dir`` when the caller has not read it already)."""
    check_files(data_dir, manifest or load_manifest(data_dir), names, hashes=verify)
    return {
        n.split(".")[1]: np.load(data_dir / n, mmap_mode="r", allow_pickle=False) for n in names
    }


# Token ids shared by the byte-level (text, retrieval) and pixel (pathfinder, image) tasks.
BYTE_VOCAB = (*RESERVED, *(chr(b) if 0x21 <= b <= 0x7E else f"<0x{b:02X}>" for b in range(256)))


def byte_tokens(data: bytes, max_length: int) -> np.ndarray:
    """Token ids of the first ``max_length`` bytes: byte b -> b + 2 (uint16, to save memory)."""
    return np.frombuffer(data[:max_length], dtype=np.uint8).astype(np.uint16) + len(RESERVED)


def subset(available: int, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """Indices of ``n`` of ``available`` items in their order: all, or a seeded sample."""
    if not 0 <= n <= available:
        raise ValueError(f"{what}: {n} examples asked for, but the data has {available}")
    return np.arange(n) if n == available else np.sort(rng.choice(available, n, replace=False))


def split_train_val(
    available: int, n_train: int, n_val: int, rng: np.random.Generator, what: str
) -> dict[str, np.ndarray]:
    """Sorted indices of ``n_train`` training and ``n_val`` validation examples, disjoint, cut
    from one seeded permutation of the ``available`` training examples."""
    if n_train + n_val > available:
        raise ValueError(
            f"{what}: n_train + n_val = {n_train + n_val}, but the training data has only "
            f"{available} examples"
        )
    order = rng.permutation(available)
    return {"train": np.sort(order[n_val : n_val + n_train]), "val": np.sort(order[:n_val])}


PIXEL_VOCAB = (*RESERVED, *(str(v) for v in range(256)))


def pixel_tokens(images: np.ndarray) -> np.ndarray:
    """(N, H, W) or (N, H * W) uint8 intensities -> (N, H * W) token ids v + 2 (uint16)."""
    return images.reshape(len(images), -1).astype(np.uint16) + len(RESERVED)
