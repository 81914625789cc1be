"""The environment a run was trained in, recorded beside its code (run.json's ``environment``,
MLflow's ``env.*`` tags).

A run's numbers depend on more than its spec, code and data: the interpreter, torch and its CUDA,
numpy, the thread count (``threads: 1 -> 2`` moves a loss in the 8th digit) and the device.
None of these retrains anything by itself (a run is not its environment: the same spec, code
and data on another machine is the same experiment), but each is written down, so
``pdelab status`` can name a run made in another environment than today's and a table can
say when its runs' environments differ.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

# the keys two environments are compared on (``packages`` is compared separately, by name)
COMPARED = ("python", "torch", "cuda", "numpy", "threads", "device")


def imported_packages(modules: Iterable[str] | None = None) -> dict[str, str]:
    """{package: version} of the third-party packages imported so far (the standard library
    and pdelab aside), each looked up under its import name (a package installed under
    another name than it imports as, PyYAML's ``yaml``, is left out)."""
    names = {m.partition(".")[0] for m in (sys.modules if modules is None else modules)}
    names -= {*sys.stdlib_module_names, "pdelab"}
    found: dict[str, str] = {}
    for name in sorted(n for n in names if not n.startswith("_")):
        try:
            found[name] = metadata.version(name)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return found


def environment(device: str) -> dict[str, Any]:
    """What this process trains with: interpreter, torch, CUDA, numpy, threads, the device
    and the packages it imported (call at the end of a job, when all are imported)."""
    import numpy
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "numpy": numpy.__version__,
        "threads": torch.get_num_threads(),
        "device": device,
        "platform": platform.platform(),
        "packages": imported_packages(),
    }


def versions() -> dict[str, str]:
    """This interpreter's Python, torch and numpy versions, read from the installed metadata
    (no torch import: ``pdelab status`` compares them with each run's)."""
    found = {"python": platform.python_version()}
    for name in ("torch", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def differences(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for each compared key ``new`` has (and each package both have)
    that differs; a record without an environment (made before runs recorded one) differs in
    ``environment: unrecorded``."""
    if not old:
        return ["environment: unrecorded"]
    keys = [k for k in COMPARED if k in new]
    found = [f"{k}: {old.get(k)} -> {new.get(k)}" for k in keys if old.get(k) != new.get(k)]
    before, now = old.get("packages") or {}, new.get("packages") or {}
    for name in sorted(set(before) & set(now)):
        if before[name] != now[name]:
            found.append(f"{name}: {before[name]} -> {now[name]}")
    return found


def tags(env: Mapping[str, Any] | None) -> dict[str, str]:
    """MLflow tags ``env.<key>`` of an environment's scalar entries (the packages stay
    in run.json, an artifact)."""
    return {f"env.{k}": str(v) for k, v in (env or {}).items() if k != "packages"}
