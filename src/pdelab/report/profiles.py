"""The run profiles in the report's words, so that a table's caption, its HTML page and REPORT.md
name the profile that made them in one wording (the lowest report module: the table and page
modules both read it). Each profile describes itself (``profiles.<name>.description`` in
params.yaml): no code names a profile."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

NO_PROFILE = "Made without training: the same under every run profile."


def profiles_here() -> dict[str, Any]:
    """The run profiles of the params.yaml here (the workflow's directory, as every path of
    the project is relative to it); none where there is no params.yaml. Read on every call,
    parsed once per content."""
    from pdelab.spec.config import PARAMS_FILE, param_files

    if not PARAMS_FILE.exists():
        return {}
    return _profiles_in(tuple(f.read_bytes() for f in param_files(PARAMS_FILE)))


@lru_cache(maxsize=4)
def _profiles_in(contents: tuple[bytes, ...]) -> dict[str, Any]:
    from pdelab.spec.config import PARAMS_FILE, load_params

    return dict(load_params(PARAMS_FILE).get("profiles") or {})


class ProfileNotes(Mapping[str, str]):
    """profile -> "<name> profile: <its description>", for the profiles that describe
    themselves; ``.get(name, default)`` for any other."""

    def __getitem__(self, profile: str) -> str:
        block = profiles_here().get(profile)
        if not isinstance(block, dict) or not block.get("description"):
            raise KeyError(profile)
        return f"{profile} profile: {block['description']}"

    def __iter__(self) -> Iterator[str]:
        return iter(p for p in profiles_here() if p in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, profile: object) -> bool:
        try:
            self[str(profile)]
        except KeyError:
            return False
        return True


PROFILE_NOTES = ProfileNotes()


def profile_line(profile: str | None) -> str:
    """Which run profile made a table (None: one made without training), as its page says it."""
    if profile is None:
        return NO_PROFILE
    return f"Made by the {PROFILE_NOTES.get(profile, f'{profile} profile')}."


def profile_here(profile: str | None) -> str:
    """A command's ``--profile``, or the profile params.yaml here selects."""
    from pdelab.spec.config import active_profile, load_params

    return profile or active_profile(load_params())
