"""A run's code provenance: a digest of exactly the source its training job executes.

The workflow writes the digest into each run's plan (pdelab.records.staleness), so Snakemake
retrains a run when the code it runs changes, and only then: editing a paper's kernel retrains the
runs whose spec names that kernel, editing the backbone or the training loop retrains every run,
editing the report retrains nothing. The job records the same digest, file by file, in its run.json
(``provenance``), beside the git commit and whether the tree was dirty; ``pdelab status`` names
the files that changed since a run was trained, and a table built from runs of different code
says so.

What a run executes, read from the source (pdelab.records.import_graph; no torch at parse time):

* the core: what ``pdelab.training.train`` imports, transitively, with the packages Python runs on
  the way (``pdelab/__init__.py`` ...), and the launchers that start it (:data:`LAUNCHERS`: the
  warm start, the GPU slot taker), MLflow's logging included: every module a job executes can
  change its numbers (a module-level ``torch.set_default_dtype`` anywhere does);
* every paper's registration: its package ``__init__.py`` and what that imports (the option
  checks), which every job runs when it validates its spec (pdelab.spec.plugins.load_all);
* its task kind's strategy module (pdelab.spec.task_kinds, imported by name in a job);
* the modules that register its attention kernel and encoder block
  (``pdelab.spec.options``: each kernel's and block's ``module``), with what they import.

A job imports nothing else of the project (pdelab.models.factory imports only the run's own
mechanism modules, the trainer only its own task kind's strategy), so the digest holds every
project module a job executes: a test compares it with ``sys.modules`` at the end of a real
job of each paper. Editing a paper's ``__init__.py`` or option checks retrains every run.

A file's digest is that of its code, not its bytes (:func:`code_text`): the syntax tree without
docstrings, written back out (``ast.unparse``), so an edit of a comment, a docstring or the
layout reruns nothing, and any edit that can change what runs reruns what runs it.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from pdelab.records import import_graph
from pdelab.spec import task_kinds
from pdelab.spec.config import PARAMS_FILE, param_files
from pdelab.spec.model import ModelSpec
from pdelab.spec.options import ATTENTION_OPTIONS, BLOCK_OPTIONS, KernelOptions
from pdelab.spec.plugins import load_all
from pdelab.spec.registry import Registry

CORE_ENTRY = "pdelab.training.train"  # the training job's module (python -m pdelab.training.train)
# what starts the job's module (pdelab.runtime.cluster.train_launch): it runs in the job's process
LAUNCHERS = ("pdelab.runtime.warm", "pdelab.runtime.gpu_job")
CORE = (CORE_ENTRY, *LAUNCHERS)
PAPERS_PREFIX = "pdelab.papers"


class RunSpec(Protocol):
    """What the provenance reads of a run (a pdelab.spec.config.RunSpec)."""

    task: str
    model: ModelSpec


@cache
def closure(roots: tuple[str, ...]) -> frozenset[str]:
    """The modules that importing ``roots`` runs: their imports, transitively, and the packages
    above each."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += import_graph.imports(name)
        todo += import_graph.parents(name)
    return frozenset(seen)


@cache
def registrations() -> tuple[str, ...]:
    """Every paper's package (what pdelab.spec.plugins.load_all imports in every job)."""
    depth = PAPERS_PREFIX.count(".") + 1
    return tuple(
        name
        for name, path in import_graph.modules().items()
        if name.startswith(PAPERS_PREFIX + ".")
        and name.count(".") == depth
        and path.name == "__init__.py"
    )


def read_sources() -> None:
    """Parse the imports of the core and of every task kind's strategy, once: a job's import
    does it, so pdelab.runtime.warm's server does it before it forks the jobs (it exits when a
    source file changes, so what it parsed stays true), and a job forked from it parses only its
    paper's mechanism module, if any, and hashes the files."""
    strategies = [task_kinds.TASK_KINDS.get(name).module for name in task_kinds.TASK_KINDS]
    closure((*CORE, *registrations(), *strategies))


def mechanism_modules(run: RunSpec) -> tuple[str, ...]:
    """The modules a run's spec selects beyond the core: its task kind's strategy and the
    modules that register its attention kernel and encoder block."""
    return selected(run.task, run.model.attention, run.model.block)


# the backbone's own kernels and block: every run executes their code already
BACKBONE = {"attention kernel": ("sdpa", "reference"), "encoder block": ("transformer",)}


def registering(registry: Registry[KernelOptions], name: str) -> tuple[str, ...]:
    """The module whose import registers a kernel or block: the one its options name, none
    for the backbone's own, and every paper's mechanism modules for a paper that names none
    (each is then imported, so each is in the digest)."""
    module = registry.get(name).module
    if module or name in BACKBONE[registry.kind]:
        return (module,)
    papers = load_all()
    return tuple(
        f"{papers.get(name).package}.{m}" for name in papers for m in papers.get(name).mechanisms
    )


@cache
def selected(task: str, attention: str, block: str) -> tuple[str, ...]:
    load_all()  # the papers register their kernels' and blocks' options
    found = [
        task_kinds.declared(task).module,
        *registering(ATTENTION_OPTIONS, attention),
        *registering(BLOCK_OPTIONS, block),
    ]
    return tuple(sorted({m for m in found if m}))


def code_text(source: bytes) -> str:
    """What of a module's source can run: its syntax tree without docstrings, written back
    out, so comments, docstrings and layout drop away and every other edit shows."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def code_sha256(source: bytes) -> str:
    """The digest of a Python file's code (:func:`code_text`), kept on disk by the digest of its
    bytes (:func:`cache_dir`): parsing every module again would cost a workflow parse a second
    or two, and a cache keyed by content cannot be fooled by a file's size or date."""
    raw = hashlib.sha256(source).hexdigest()
    kept = cache_dir() / raw
    try:
        return kept.read_text()
    except OSError:
        pass
    found = hashlib.sha256(code_text(source).encode()).hexdigest()
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_name(f".{raw}.{os.getpid()}")
        tmp.write_text(found)
        os.replace(tmp, kept)
    except OSError:  # a read-only home: computed each time
        pass
    return found


def cache_dir() -> Path:
    """``PDELAB_CACHE`` or ``~/.cache/pdelab``, then ``code/``: one file per source version,
    named by the sha256 of its bytes, holding the digest of its code."""
    root = os.environ.get("PDELAB_CACHE") or Path.home() / ".cache" / "pdelab"
    return Path(root) / "code"


@cache
def file_sha256(module: str) -> str:
    """A module's code digest (read once per process: a workflow parse hashes each file once
    for all its runs)."""
    return code_sha256(import_graph.modules()[module].read_bytes())


def source_root() -> str:
    """The folder this pdelab is imported from (``.../src``)."""
    return str(import_graph.SRC)


def source_path(module: str) -> str:
    """A module's file relative to src/ (``pdelab/training/train.py``), the same in every
    checkout."""
    return import_graph.modules()[module].relative_to(import_graph.SRC).as_posix()


@cache
def files_of(mechanisms: tuple[str, ...]) -> dict[str, str]:
    """{source file: sha256} of the core, the papers' registrations and these mechanism
    modules, sorted by file."""
    modules = closure((*CORE, *registrations(), *mechanisms))
    return dict(sorted((source_path(m), file_sha256(m)) for m in modules))


def code_files(run: RunSpec) -> dict[str, str]:
    """{source file: sha256} of every module the run's training job executes."""
    return files_of(mechanism_modules(run))


def digest(files: Mapping[str, str]) -> str:
    """One short digest of a run's code: a param of the train rule, and run.json's
    ``provenance.code_digest``."""
    lines = "".join(f"{path}\0{sha}\n" for path, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def code_digest(run: RunSpec) -> str:
    return digest_of(mechanism_modules(run))


@cache
def digest_of(mechanisms: tuple[str, ...]) -> str:
    return digest(files_of(mechanisms))


def git_state(files: Iterable[str] | None = None) -> tuple[str, bool | None]:
    """(short commit, whether the source differs from it), or ("unknown", None) outside a git
    checkout. With ``files`` (a run's code, paths relative to src/), dirty means one of those
    differs from the commit or is not in it: what a build writes itself (dvc.lock, results)
    or an edit the run does not execute leaves a run clean. Without, any tracked file."""
    try:
        commit = git("rev-parse", "--short", "HEAD")
        if files is None:
            dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        else:
            paths = sorted(files)
            status = git(
                "status", "--porcelain", "--untracked-files=all", "--", *paths, cwd=source_root()
            )
            dirty = bool(status)
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    return commit, dirty


def git(*args: str, cwd: str | None = None) -> str:
    out = subprocess.run(
        ["git", *args], capture_output=True, text=True, timeout=30, check=True, cwd=cwd
    )
    return out.stdout.strip()


def checkout_root(start: Path) -> Path | None:
    """The top of the git checkout holding ``start`` (the first folder upwards with a ``.git``,
    a folder or a worktree's file), or None: found without running git, so that naming the
    uncommitted inputs costs one git call."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def within(root: Path, path: Path) -> str | None:
    """``path`` relative to ``root`` as git names it (``src/pdelab/x.py``), or None outside it;
    a path reached through a symbolic link is tried resolved too."""
    for candidate in (path, path.resolve()):
        if candidate.is_relative_to(root):
            return candidate.relative_to(root).as_posix()
    return None


def uncommitted(paths: Iterable[str | Path], cwd: str | Path | None = None) -> list[str] | None:
    """Which of ``paths`` (files or folders, relative to ``cwd`` or absolute) differ from the
    checkout's HEAD: edited, staged, deleted or untracked (ignored files, data/ and results/,
    are the build's, not the project's), relative to the checkout's top and sorted; [] if none,
    None outside a git checkout ("not a git checkout") or without git. One ``git status`` for
    every path: a run's record pays it once. Paths outside the checkout are not its to name.
    The checkout is the one ``cwd`` (by default the working directory) is in, as for the
    commit :func:`git_state` names."""
    here = Path(os.path.abspath(cwd or os.getcwd()))
    root = checkout_root(here)
    if root is None:
        return None
    inside = sorted(
        {rel for p in paths if (rel := within(root, Path(os.path.abspath(here / p)))) is not None}
    )
    if not inside:
        return []
    try:
        out = subprocess.run(
            # literal: a file named with * or ? is that file; no renames: one path per entry
            ["git", "--literal-pathspecs", "status", "--porcelain", "-z", "--no-renames"]
            + ["--untracked-files=all", "--", *inside],
            cwd=root,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return porcelain_paths(out)


def porcelain_paths(status: bytes) -> list[str]:
    """The paths of ``git status --porcelain -z --no-renames``: entries ``XY path`` ended by a
    NUL, paths relative to the checkout's top, unquoted; sorted, each once."""
    entries = status.split(b"\0")
    return sorted({os.fsdecode(e[3:]) for e in entries if len(e) > 3})


def run_inputs(run: RunSpec) -> list[str]:
    """What a run is made from that the checkout holds: every source file its job executes
    (:func:`code_files`), the params.yaml of the working directory (the workflow's folder) and
    the papers' config files merged into it. Its prepared data are DVC's, not git's (data/ is
    ignored), and named by their own digest (``identity.data_hash``)."""
    code = [os.path.join(source_root(), f) for f in code_files(run)]
    return [*code, *params_inputs()]


def project_inputs() -> list[str]:
    """What any result of the project is made from: params.yaml, the papers' config files and
    the whole source folder (the report names edits of these beside its commit)."""
    return [*params_inputs(), source_root()]


def params_inputs() -> list[str]:
    """params.yaml and the papers' config files, as absolute paths: the papers folder is
    listed by pkgutil, which keeps one finder per folder name it was given, so a relative one
    would be listed where it was first read, not in today's working directory."""
    return [str(p) for p in param_files(Path(os.path.abspath(PARAMS_FILE)))]


SHOWN_EDITS = 5  # files a commit phrase names before "and N more"


def edits_phrase(edited: Sequence[str] | None, shown: int = SHOWN_EDITS) -> str:
    """What follows a commit when some inputs differ from it: `` plus uncommitted edits to
    a, b (2 files)``, at most ``shown`` named then ``and N more``; "" for none (or unknown:
    outside a git checkout the commit is "unknown" already)."""
    if not edited:
        return ""
    names = ", ".join(edited[:shown])
    more = f" and {len(edited) - shown} more" if len(edited) > shown else ""
    count = f"{len(edited)} file" + ("s" if len(edited) > 1 else "")
    return f" plus uncommitted edits to {names}{more} ({count})"


def commit_phrase(commit: str, edited: Sequence[str] | None) -> str:
    """``commit 5cf4f64``, or ``commit 5cf4f64 plus uncommitted edits to params.yaml (1 file)``:
    a commit named for results made from a tree that differs from it would be named wrongly."""
    return f"commit {commit}{edits_phrase(edited)}"


def record(run: RunSpec, commit: str, dirty: bool | None) -> dict[str, Any]:
    """run.json's ``provenance`` block: the code digest and its files, the commit, dirty, and
    ``uncommitted``: the run's inputs (:func:`run_inputs`) that differed from the commit when
    the job ended (None outside a git checkout), so a record says which ones, not only that
    some did."""
    files = code_files(run)
    return {
        "code_digest": digest(files),
        "git_commit": commit,
        "git_dirty": dirty,
        "code": files,
        "uncommitted": uncommitted(run_inputs(run)),
    }


def changed_files(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The source files whose digest differs (added, removed or edited), sorted."""
    return sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))


def versions(records: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """Across several runs' ``provenance.code`` blocks: each file recorded in more than one
    version, with how many (a table built from runs of different code names them)."""
    seen: dict[str, set[str]] = {}
    for files in records:
        for path, sha in files.items():
            seen.setdefault(path, set()).add(sha)
    return {p: len(s) for p, s in sorted(seen.items()) if len(s) > 1}
