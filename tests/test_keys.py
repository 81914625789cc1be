"""Each spec key declared once (pdelab.spec.keys): the generated JSON schema the workflow
validates with, the declarations and the checks that resolve runs agree on every key's default,
type, bounds and choices; a misspelt key or name gets the closest ones."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import ROOT
from pdelab.spec.config import SECTIONS, ConfigError, resolve
from pdelab.spec.keys import Key, declared, just_inside, just_outside
from pdelab.spec.run_sheet import validate
from pdelab.spec.schema import SCHEMA_FILE, params_schema, schema_text

KEYS = [key for section, cls in SECTIONS.items() for key in declared(cls, section).values()]
BOUNDED = [key for key in KEYS if just_outside(key)]
CHOSEN = [key for key in KEYS if key.choices is not None]
# what a key's value needs of another key to resolve at all (heads divide dim)
COMPANIONS = {"model.dim": {"model": {"heads": 1}}}
SCHEMA = params_schema()
JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def run_params(key: Key, value: Any) -> dict[str, Any]:
    """The least params with one run, whose variant sets the key (and diffuses, so that a
    diffusion key is read)."""
    layer: dict[str, Any] = {"diffusion": {"sites": ["after_mlp"]}}
    for section, values in COMPANIONS.get(key.path, {}).items():
        layer.setdefault(section, {}).update(values)
    layer.setdefault(key.section, {})[key.name] = list(value) if isinstance(value, tuple) else value
    return {
        "profile": "p",
        "defaults": {},
        "tasks": {"t": {}},
        "data": {},
        "profiles": {"p": {"device": "cpu", "seeds": [0]}},
        "variants": {"v": layer},
        "studies": {},
    }


def schema_takes(params: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(SCHEMA).is_valid(params)


def test_the_committed_schema_is_the_generated_one() -> None:
    """workflow/schemas/params.schema.yaml is what the declarations make; after changing one,
    run ``python -m pdelab.spec.schema > workflow/schemas/params.schema.yaml``."""
    committed = (ROOT / SCHEMA_FILE).read_text()
    assert committed == schema_text()
    assert yaml.safe_load(committed) == json.loads(json.dumps(SCHEMA))
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_the_project_params_are_valid_under_the_generated_schema(params: dict) -> None:
    jsonschema.validate(params, SCHEMA)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.path)
def test_the_schema_has_each_keys_declared_default_type_and_doc(key: Key) -> None:
    rule = SCHEMA["$defs"][key.section]["properties"][key.name]
    assert key.doc and rule["description"] == key.doc
    if key.default not in ({}, ()) or isinstance(key.default, tuple):
        assert rule.get("default") == json.loads(json.dumps(key.default))
    if key.choices is not None and not isinstance(key.default, tuple):
        assert rule["enum"] == list(key.choices)
    elif key.annotation in JSON_TYPES:
        assert rule["type"] == JSON_TYPES[key.annotation]
        assert type(key.default) is key.annotation
    elif typing.get_origin(key.annotation) is tuple:
        assert rule["type"] == "array"
    elif typing.get_origin(key.annotation) is dict:
        assert rule["type"] == "object"


@pytest.mark.parametrize("key", BOUNDED, ids=lambda k: k.path)
def test_a_value_just_outside_a_bound_is_refused_by_schema_and_resolve(key: Key) -> None:
    """Each bound crossed by the least step: the schema refuses the params, and resolving the
    run fails naming the layer's key."""
    for value in just_outside(key):
        params = run_params(key, value)
        assert not schema_takes(params), (key.path, value)
        with pytest.raises(ConfigError, match=rf"^variants\.v\.{key.section}\.{key.name}"):
            resolve(params, "t", "v", 0, "p")


@pytest.mark.parametrize("key", BOUNDED, ids=lambda k: k.path)
def test_a_value_at_or_just_inside_a_bound_is_taken_by_both(key: Key) -> None:
    for value in just_inside(key):
        params = run_params(key, value)
        assert schema_takes(params), (key.path, value)
        got = getattr(getattr(resolve(params, "t", "v", 0, "p"), key.section), key.name)
        one = isinstance(value, tuple) and len(value) == 1 and key.bounds is not None
        assert got == (value[0] if one else value)  # a one-item alpha list is its scalar


@pytest.mark.parametrize("key", CHOSEN, ids=lambda k: k.path)
def test_each_choice_is_taken_and_no_other_by_both(key: Key) -> None:
    listed = isinstance(key.default, tuple)
    for choice in key.choices or ():
        value = (choice,) if listed else choice
        params = run_params(key, value)
        assert schema_takes(params), (key.path, value)
        assert getattr(getattr(resolve(params, "t", "v", 0, "p"), key.section), key.name) == value
    other = ("nope",) if listed else "nope"
    params = run_params(key, other)
    assert not schema_takes(params)
    with pytest.raises(ConfigError, match=rf"{key.section}\.{key.name}: unknown name 'nope'"):
        resolve(params, "t", "v", 0, "p")


def test_every_key_is_declared_with_a_doc_and_every_bound_is_probed() -> None:
    assert {key.path for key in KEYS} == {
        f"{section}.{name}"
        for section, rule in SCHEMA["$defs"].items()
        if section in SECTIONS
        for name in rule["properties"]
    }
    bounded = {
        f"{section}.{name}"
        for section in SECTIONS
        for name, rule in SCHEMA["$defs"][section]["properties"].items()
        if "minimum" in json.dumps(rule) or "exclusiveMinimum" in json.dumps(rule)
    }
    assert bounded == {key.path for key in BOUNDED}


def edited(params: dict, path: str, value: Any) -> dict:
    p = copy.deepcopy(params)
    *parents, last = path.split(".")
    node = p
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return p


@pytest.mark.parametrize(
    ("path", "value", "closest"),
    [
        ("defaults.model.dimm", 32, "'dim'"),
        ("defaults.train.learning_rate", 0.1, None),
        ("defaults.trian", {}, "'train'"),
        ("tasks.listops.diffusion.stride", [1], "'strides'"),
    ],
)
def test_a_misspelt_key_gets_the_closest_keys(params, path: str, value, closest) -> None:
    with pytest.raises(ConfigError, match="unknown key") as err:
        validate(edited(params, path, value), "smoke")
    message = str(err.value)
    assert message.startswith(f"{path}: unknown key; ")
    if closest is None:
        assert "did you mean" not in message and "valid keys are" in message
    else:
        assert f"did you mean {closest}?" in message


def test_a_misspelt_variant_in_a_study_gets_the_closest_three_and_the_count(params) -> None:
    """A study's variants list checks each name against every variant (over a hundred): the
    error names the closest three and how many there are, not all of them."""
    names = list(params["variants"])
    assert len(names) > 100
    typo = ["baseline", "baselin_T512"]
    with pytest.raises(ConfigError) as err:
        validate(edited(params, "studies.positions.variants", typo), "smoke")
    message = str(err.value)
    assert message.startswith("studies.positions.variants: unknown name 'baselin_T512'; ")
    assert "did you mean 'baseline_T512', " in message
    assert f"{len(names)} valid names" in message
    assert sum(f" {name}," in f" {message}," for name in names) <= 6
    assert len(message) < 300


def test_an_unrelated_name_gets_the_count_and_no_suggestion(params) -> None:
    with pytest.raises(ConfigError) as err:
        validate(edited(params, "studies.positions.variants", ["zzzzzz"]), "smoke")
    message = str(err.value)
    assert "did you mean" not in message and "none is close" in message
    assert f"{len(params['variants'])} valid names" in message


def test_the_schema_module_writes_the_file(tmp_path: Path) -> None:
    """``python -m pdelab.spec.schema`` prints exactly the schema text."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pdelab.spec.schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert out == schema_text()
