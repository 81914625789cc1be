"""Each key of a run's spec declared once: its type, default, bounds and one-line doc.

The spec classes (pdelab.spec.model.ModelSpec, DiffusionSpec, pdelab.spec.config.TrainSpec)
stay plain frozen dataclasses, so ``dataclasses.fields``, ``asdict`` and ``replace`` read them
as before and a spec's JSON (its digest) is unchanged; each field's annotation carries its
declaration as pydantic 2 metadata::

    dim: Annotated[int, Field(ge=1, description="width of each token's vector")] = 128

From these, :func:`declared` reads every key's bounds and choices (a ``Literal`` type), which
:func:`check_declared` enforces with messages naming the layer that set the key, and
pdelab.spec.schema writes the JSON schema the workflow validates the params with. A check that
spans keys (heads divide dim, one coefficient per stride) stays code beside the spec; a key it
covers alone is marked :class:`CheckedInCode`, and its bounds serve the schema.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

from pydantic.fields import FieldInfo

from pdelab.spec.fields import ConfigError, unknown_name


@dataclass(frozen=True)
class Refusal:
    """The words a refused value of this key gets, instead of the generic ones: ``{range}``
    is the declared bounds (``[0, 1)``, ``>= 0``), ``{default}`` the key's default."""

    text: str


@dataclass(frozen=True)
class CheckedInCode:
    """The key's values are checked by code that reads other keys too (``why`` names it); its
    declared bounds still type the schema."""

    why: str


@dataclass(frozen=True)
class Bounds:
    """A number's declared interval (pydantic's ge/gt/le/lt)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def holds(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    @property
    def low(self) -> float | None:
        return self.ge if self.gt is None else self.gt

    @property
    def high(self) -> float | None:
        return self.le if self.lt is None else self.lt

    def text(self) -> str:
        """``[0, 1)`` for an interval, ``>= 1`` or ``> 0`` for a lower bound alone."""
        if self.low is not None and self.high is not None:
            opening, closing = "[" if self.gt is None else "(", "]" if self.lt is None else ")"
            return f"{opening}{_number(self.low)}, {_number(self.high)}{closing}"
        if self.high is None:
            return f"{'>=' if self.gt is None else '>'} {_number(self.low)}"
        return f"{'<=' if self.lt is None else '<'} {_number(self.high)}"

    def refusal(self) -> str:
        """The generic words for a value outside: ``must be at least 1``, ``must be > 0``."""
        if self.high is None and self.gt is None:
            return f"must be at least {_number(self.ge)}"
        if self.high is None:
            return f"must be > {_number(self.gt)}"
        return f"expected a number in {self.text()}"


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Key:
    """One key of a spec section, as its annotation declares it."""

    section: str
    name: str
    annotation: Any  # the value's type, without its metadata
    default: Any
    doc: str
    bounds: Bounds | None  # of the value (a number)
    items: Bounds | None  # of each item (a list of numbers)
    length: int | None  # a fixed number of items (tuple[float, float]: 2)
    min_items: int | None
    choices: tuple[Any, ...] | None  # a Literal's values, for the value or each item
    refusal: str | None
    in_code: str | None  # CheckedInCode's why

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"


def _info(annotation: Any) -> FieldInfo:
    return FieldInfo.from_annotation(annotation)


def _bounds(info: FieldInfo) -> Bounds | None:
    found = {
        name: getattr(constraint, name)
        for constraint in info.metadata
        for name in ("ge", "gt", "le", "lt")
        if getattr(constraint, name, None) is not None
    }
    return Bounds(**found) if found else None


def _min_items(info: FieldInfo) -> int | None:
    lengths = [m.min_length for m in info.metadata if getattr(m, "min_length", None) is not None]
    return lengths[0] if lengths else None


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else None


def _marker(info: FieldInfo, kind: type) -> Any:
    return next((m for m in info.metadata if isinstance(m, kind)), None)


@functools.cache
def declared(cls: type, section: str) -> dict[str, Key]:
    """Every key of a spec class, in field order, as its annotation declares it."""
    hints = typing.get_type_hints(cls, include_extras=True)
    keys = {}
    for f in fields(cls):
        info = _info(hints[f.name])
        value_type = info.annotation
        bounds, items, length, min_items, choices = _bounds(info), None, None, None, None
        arms = [_info(arm) for arm in typing.get_args(value_type)]
        if typing.get_origin(value_type) in (typing.Union, types.UnionType):
            # a number or a list of them (diffusion.alpha): the number's bounds, the list's items
            scalar = next(arm for arm in arms if typing.get_origin(arm.annotation) is not tuple)
            listed = next(arm for arm in arms if typing.get_origin(arm.annotation) is tuple)
            bounds, min_items = _bounds(scalar), _min_items(listed)
            items = _bounds(_info(typing.get_args(listed.annotation)[0]))
        elif typing.get_origin(value_type) is tuple:
            args = typing.get_args(value_type)
            length = None if len(args) == 2 and args[1] is Ellipsis else len(args)
            items, choices, min_items = (
                _bounds(arms[0]),
                _choices(arms[0].annotation),
                _min_items(info),
            )
        else:
            choices = _choices(value_type)
        refusal, in_code = _marker(info, Refusal), _marker(info, CheckedInCode)
        keys[f.name] = Key(
            section=section,
            name=f.name,
            annotation=value_type,
            default=f.default_factory() if f.default is MISSING else f.default,  # type: ignore[misc]
            doc=info.description or "",
            bounds=bounds,
            items=items,
            length=length,
            min_items=min_items,
            choices=choices,
            refusal=None if refusal is None else refusal.text,
            in_code=None if in_code is None else in_code.why,
        )
    return keys


def check_declared(spec: Any, section: str, origin: dict[str, str]) -> None:
    """Each key of a built spec section inside its declaration (choices, bounds, items); the
    error names the layer that set the key (``origin``), or the section's key when none did."""
    for key in declared(type(spec), section).values():
        if key.in_code is None:
            check_value(key, getattr(spec, key.name), origin.get(key.path, key.path))


def check_value(key: Key, value: Any, where: str) -> None:
    """One value of a key against its declaration; ConfigError naming ``where`` if outside."""
    if key.choices is not None:
        for name in value if isinstance(value, tuple) else (value,):
            if name not in key.choices:
                raise ConfigError(f"{where}: {unknown_name(name, key.choices)}")
    inside = True
    if key.bounds is not None:
        inside = key.bounds.holds(value)
    if key.items is not None or key.length is not None or key.min_items is not None:
        inside = (
            (key.length is None or len(value) == key.length)
            and (key.min_items is None or len(value) >= key.min_items)
            and (key.items is None or all(key.items.holds(v) for v in value))
        )
    if not inside:
        raise ConfigError(f"{where}: {refusal(key)}, got {_shown(value)}")


def refusal(key: Key) -> str:
    """What a value outside the key's declaration is told: its own words, or the generic."""
    bounds = key.bounds or key.items
    if key.refusal is not None:
        text = bounds.text() if bounds is not None else ""
        return key.refusal.format(range=text, default=_shown(key.default))
    assert bounds is not None, key.path
    return bounds.refusal()


def _shown(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def just_outside(key: Key) -> list[Any]:
    """Values of the key that its declaration refuses by the least: each finite bound crossed
    (a tuple key's items, one at a time), for tests that the schema and the checks agree."""
    return [value for value, inside in _probes(key) if not inside]


def just_inside(key: Key) -> list[Any]:
    """Values at or just inside each bound, which the declaration takes."""
    return [value for value, inside in _probes(key) if inside]


def _probes(key: Key) -> list[tuple[Any, bool]]:
    step = 1 if _is_int(key) else 1e-9
    probes = [] if key.bounds is None else _edges(key.bounds, step)
    if key.items is not None:  # the last item of the default list moved to each edge
        listed = list(key.default) if isinstance(key.default, tuple) else []
        probes += [(tuple([*listed[:-1], v]), ok) for v, ok in _edges(key.items, step)]
    if key.min_items:  # one item too few
        listed = key.default if isinstance(key.default, tuple) else ()
        probes.append((tuple(listed[: key.min_items - 1]), False))
    if key.length is not None:  # one item too many
        probes.append((tuple(key.default) + key.default[-1:], False))
    return probes


def _edges(bounds: Bounds, step: float) -> list[tuple[float, bool]]:
    """(value, inside) at and across each finite bound, ``step`` away."""
    values: list[tuple[float, bool]] = []
    for edge, closed, sign in (
        (bounds.ge, True, -1),
        (bounds.gt, False, -1),
        (bounds.le, True, 1),
        (bounds.lt, False, 1),
    ):
        if edge is None or not math.isfinite(edge):
            continue
        inside = edge if closed else edge - sign * step
        outside = edge + sign * step if closed else edge
        values += [(inside, True), (outside, False)]
    return values


def _is_int(key: Key) -> bool:
    annotation = key.annotation
    if typing.get_origin(annotation) is tuple:
        annotation = _info(typing.get_args(annotation)[0]).annotation
    return annotation is int
