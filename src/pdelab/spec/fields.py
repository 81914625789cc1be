"""Building spec dataclasses from params.yaml mappings, with errors that name the key.

Shared by pdelab.spec.config (run specs) and pdelab.data (data specs); it imports neither, so
the two never import each other.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """An invalid params.yaml; the message names the key and how to fix it."""


def build(cls: type, values: dict[str, Any], where: str) -> Any:
    """Build a spec dataclass, rejecting unknown keys and values of the wrong type."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {values!r}")
    valid = {f.name: f for f in fields(cls)}
    for key, value in values.items():
        if key not in valid:
            raise ConfigError(
                f"{where}.{key}: unknown key; {did_you_mean(key, valid)}"
                f"valid keys are {', '.join(valid)}"
            )
        default = getattr(cls(), key)
        if isinstance(default, dict) and not isinstance(value, dict):
            raise ConfigError(f"{where}.{key}: expected a mapping, got {value!r}")
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
        numeric = isinstance(default, int | float) and not isinstance(default, bool)
        if numeric and (isinstance(value, bool) or not isinstance(value, int | float | list)):
            hint = ""
            if isinstance(value, str) and re.fullmatch(r"[+-]?\d+e[+-]?\d+", value):
                hint = f" (YAML reads {value} as text: write {value.replace('e', '.0e', 1)})"
            raise ConfigError(f"{where}.{key}: expected a number, got {value!r}{hint}")
        if not finite(value):
            raise ConfigError(f"{where}.{key}: expected a finite number, got {value!r}")
    return cls(**{k: normalise(v, getattr(cls(), k), f"{where}.{k}") for k, v in values.items()})


# a list of names longer than this is not printed whole in an error: its closest names are
LISTED_NAMES = 20


def did_you_mean(name: Any, valid: Sequence[Any]) -> str:
    """``did you mean 'dim'? `` for the closest names of ``valid`` (up to 3), or nothing
    when none is close (difflib's ratio of 0.6)."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=3)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {listed}? "


def unknown_name(name: Any, valid: Sequence[Any]) -> str:
    """Why a name is refused: the closest names, and the valid ones: all of them in a short
    list; in a long one (a study's variants: over a hundred) their count and the first three,
    which show how they are written."""
    names = [str(v) for v in valid]
    hint = did_you_mean(name, names)
    if len(names) <= LISTED_NAMES:
        return f"unknown name {name!r}; {hint}valid: {', '.join(names)}"
    return (
        f"unknown name {name!r}; {hint or 'none is close. '}{len(names)} valid names: "
        f"{', '.join(names[:3])}, ..."
    )


def normalise(value: Any, default: Any, where: str) -> Any:
    """A value in its key's canonical form, so that one setting is one spec (``epochs: 3`` and
    ``epochs: 3.0`` are the same run): an integer key takes an integral number as an int and
    refuses a fraction, a real key takes any number as a float, and a list is a tuple whose
    items follow the default's items. Other values (names, flags, mappings) pass as given."""
    if isinstance(value, list):
        item = default[0] if isinstance(default, tuple) and default else default
        return tuple(normalise(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(default, bool):
        return value
    if isinstance(default, int):
        if value != int(value):
            raise ConfigError(f"{where}: expected an integer, got {value!r}; write a whole number")
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


def finite(value: Any) -> bool:
    """False for a NaN or an infinity (YAML's .nan, .inf) anywhere in a value, lists and
    mappings (a kernel's options) included: no setting can mean one."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(finite(v) for v in value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    return True
