"""Put a task's data back from DVC's run cache instead of preparing it again.

Every ``dvc commit`` of the workflow (pdelab.runtime.dvc_stages) records the fetch and prepare
stages in DVC's run cache, keyed by the stage's command, the content of its dependencies (the
data code, the raw folder) and its params values. When a data param is set back to a value a
commit recorded, DVC finds that entry and checks the folders out of its cache, as
``dvc repro`` does; the data job then verifies them like data it prepared itself. Anything
short of a full hit (another run profile than params.yaml's, a lock held by another DVC
process, an entry whose files the cache no longer holds) means "prepare as usual"."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

STAGES = ("fetch", "prepare")  # dvc.yaml's two stages of a task, in order


def restore(params_file: Path | str, profile: str, task: str) -> bool:
    """Check out ``task``'s raw and prepared folders from DVC's run cache; whether both were.

    DVC resolves dvc.yaml's stages for the profile params.yaml selects only, so any other
    profile is never restored."""
    selected = yaml.safe_load(Path(params_file).read_text()).get("profile")
    if selected != profile or not Path(".dvc").is_dir():
        return False
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    logging.getLogger("dvc").setLevel(logging.WARNING)  # its "checking out" lines, not ours
    try:
        with Repo() as repo, repo.lock:
            for stage in STAGES:
                (found,) = repo.stage.collect(f"{stage}@{task}")
                repo.stage_cache.restore(found)
    except (DvcException, ValueError):  # no entry, files gone from the cache, a lock held
        return False
    return True
