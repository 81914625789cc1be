"""params.yaml resolution and validation: bad input fails early and names the key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import ROOT
from pdelab.spec.config import ConfigError, RunSpec, load_with_sources, origins, resolve
from pdelab.spec.plugins import PAPERS, load_all
from pdelab.spec.run_sheet import RunKey, run_sheet, validate
from pdelab.spec.studies import STUDY_KEYS, study


def edited(params: dict, path: str, value) -> dict:
    p = copy.deepcopy(params)
    *parents, last = path.split(".")
    node = p
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return p


def test_project_params_are_valid(params) -> None:
    schema = yaml.safe_load(Path(ROOT / "workflow/schemas/params.schema.yaml").read_text())
    jsonschema.validate(params, schema)
    specs = validate(params)
    assert len(specs) == len(run_sheet(params)) == len({(s.task, s.variant, s.seed) for s in specs})


def test_layers_merge_in_order(params) -> None:
    spec = resolve(params, "listops", "after_embedding", 0, "smoke")
    assert spec.model.dim == params["profiles"]["smoke"]["overrides"]["model"]["dim"]
    assert spec.diffusion.sites == ("after_embedding",)
    assert spec.train.betas == (0.9, 0.98)
    paper = resolve(params, "listops", "baseline", 0, "paper")
    assert (paper.model.dim, paper.model.layers, paper.model.heads, paper.model.mlp_dim) == (
        128,
        6,
        8,
        512,
    )
    assert (paper.train.batch_size, paper.train.warmup_steps, paper.train.epochs) == (
        256,
        10000,
        50,
    )


def test_a_profile_layer_follows_the_variant_for_every_pattern_it_matches(params) -> None:
    """profiles.<p>.variants: each matching pattern, in file order, after the variant's own
    layer, in that profile only; other variants and profiles resolve as before."""
    p = edited(params, "variants.probe_a", {"model": {"dim": 40}})
    p = edited(p, "variants.probe_b", {"model": {"dim": 24}})
    p["profiles"]["paper"]["variants"] = {
        "probe_*": {"model": {"dim": 48, "layers": 3}},
        "probe_b": {"model": {"dim": 16}},
    }
    a, b = (resolve(p, "listops", v, 0, "paper") for v in ("probe_a", "probe_b"))
    assert (a.model.dim, a.model.layers) == (48, 3)
    assert (b.model.dim, b.model.layers) == (16, 3)
    smoke = resolve(p, "listops", "probe_a", 0, "smoke")
    assert (smoke.model.dim, smoke.model.layers) == (40, 1)  # the variant over the overrides
    assert resolve(p, "listops", "baseline", 0, "paper") == resolve(
        params, "listops", "baseline", 0, "paper"
    )


def test_a_profile_runs_part_of_a_study_with_its_own_seeds(params) -> None:
    part = {"seeds": {"variants": ["baseline"], "seeds": [7]}}
    p = edited(params, "profiles.smoke.studies", part)
    assert list(study(p, "seeds", "smoke").runs) == [RunKey("listops", "baseline", 7)]
    assert list(study(p, "seeds", "paper").runs) == list(study(params, "seeds", "paper").runs)
    validate(p)


def test_spec_round_trips_through_json(params) -> None:
    spec = resolve(params, "listops", "head_diffusion", 1)
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "studies.positions.variants",
            ["baseline", "nope"],
            r"studies\.positions\.variants.*'nope'.*baseline",
        ),
        (
            "variants.after_mlp.diffusion.alpha",
            0.6,
            r"variants\.after_mlp\.diffusion\.alpha.*stability budget",
        ),
        (
            "variants.after_mlp.diffusion",
            {"alpha": [0.3, 0.3], "strides": [1, 2]},
            r"variants\.after_mlp\.diffusion\.alpha.*sum 0\.6",
        ),
        (
            "profiles.smoke.overrides.model.dimm",
            32,
            r"profiles\.smoke\.overrides\.model\.dimm: unknown key.*dim",
        ),
        (
            "variants.in_attention.diffusion.sites",
            ["in_atention"],
            r"variants\.in_attention\.diffusion\.sites.*in_atention.*after_embedding",
        ),
        ("tasks.listops.trian", {}, r"tasks\.listops\.trian: unknown key"),
        ("profil", "smoke", r"profil: unknown top-level key"),
        ("profile", "papr", r"profile: unknown name 'papr'.*smoke"),
        ("data.smoke.listops.n_trian", 5, r"data\.smoke\.listops\.n_trian: unknown key"),
        (
            "profiles.smoke.overrides.model.heads",
            5,
            r"profiles\.smoke\.overrides\.model\.heads.*divisible",
        ),
        ("defaults.train.lr", "fast", r"defaults\.train\.lr: expected a number"),
        ("defaults.model.patch", -2, r"defaults\.model\.patch.*>= 0"),
        ("defaults.train.lr", "1e-3", r"defaults\.train\.lr: .*write 1\.0e-3"),
        (
            "variants.pde_s4.model.attention_options",
            {"pde": "diffusion", "alpha": 0.6},
            r"variants\.pde_s4\.model\.attention_options.*'alpha'=0\.6.*CFL",
        ),
        (
            "variants.wave_s4.model.attention_options",
            {"pde": "wave", "c": 1.5},
            r"variants\.wave_s4\.model\.attention_options.*'c'=1\.5.*CFL",
        ),
        (
            "variants.pde_s4.model.attention_options",
            {"windw": 3},
            r"attention_options.*'windw' is not taken by kernel 'pde'.*steps",
        ),
        (
            "variants.pde_s4.model.attention",
            "pdee",
            r"variants\.pde_s4\.model\.attention: unknown name 'pdee'.*pde_longformer",
        ),
        (
            "variants.released.model.smoothing",
            {"pde": "diffusion", "alpha": 0.7},
            r"variants\.released\.model\.smoothing: .*outside \[0, 1/2\]",
        ),
        ("variants.released.model.smoothing", "yes", r"smoothing: expected a mapping"),
        (
            "studies.pde_steps.rows",
            {"1": {"as_described": "pde_s3", "leak_free": "pde_s1_causal"}},
            r"studies\.pde_steps: variant 'pde_s3' is not in its variants list",
        ),
        (
            "studies.multiscale.grid",
            {"after_mlp": {"fast_h1": "after_mlp_h3"}},
            r"studies\.multiscale: variant 'after_mlp_h3' is not in its variants list",
        ),
        (
            "studies.multiscale.gird",
            {},
            r"studies\.multiscale\.gird: unknown key for a study of kind 'multiscale' \(paper "
            r"diffusion_positions\); allowed keys: title, kind, .*grid",
        ),
        (
            "studies.pde_types.timing",
            {"repeats": 50},
            r"studies\.pde_types\.timing: unknown key .*'lm' \(paper continuous_time_attention\)",
        ),
        (
            "studies.cost.timing",
            {"repeats": 3},
            r"studies\.cost\.timing\.repeats: 3 is less than the minimum of 6",
        ),
        (
            "studies.cost.timing",
            {"repeat": 50},
            r"studies\.cost\.timing: Additional properties .*'repeat' was unexpected",
        ),
        (
            "profiles.paper.variants",
            {"after_mlp*": {}, "aftr_*": {"model": {"layers": 2}}},
            r"profiles\.paper\.variants\.aftr_\*: matches no variant",
        ),
        (
            "profiles.paper.variants",
            {"after_*": {"model": {"layrs": 2}}},
            r"profiles\.paper\.variants\.after_\*\.model\.layrs: unknown key",
        ),
        (
            "profiles.smoke.studies",
            {"sedes": {"seeds": [0]}},
            r"profiles\.smoke\.studies\.sedes: unknown name 'sedes'.*positions",
        ),
        (
            "profiles.paper.studies",
            {"seeds": {"variants": ["baseline", "after_attention"]}},
            r"profiles\.paper\.studies\.seeds\.variants: 'after_attention' is not in "
            r"studies\.seeds\.variants",
        ),
        (
            "profiles.smoke.studies",
            {"seeds": {"baseline": "baseline"}},
            r"profiles\.smoke\.studies\.seeds\.baseline: key: unknown name.*tasks, variants, seeds",
        ),
        ("studies.pde_steps.key", 4, r"studies\.pde_steps\.key: 4 is not of type 'string'"),
        (
            "studies.pde_classification.columns",
            ["baseline"],
            r"studies\.pde_classification\.columns: \['baseline'\] is not of type 'object'",
        ),
    ],
)
def test_invalid_params_name_the_key(params, path: str, value, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(edited(params, path, value))


def test_a_study_takes_the_keys_of_its_kinds_paper_only(params) -> None:
    """A key another paper reads (rows, of the language-model tables) is refused on a study of
    diffusion_positions, and the error lists exactly the keys that study may have."""
    rows = {"1": {"as_described": "baseline", "leak_free": "baseline"}}
    with pytest.raises(ConfigError) as err:
        validate(edited(params, "studies.positions.rows", rows))
    message = str(err.value)
    head, allowed = message.split("; allowed keys: ")
    assert head == (
        "studies.positions.rows: unknown key for a study of kind 'accuracy' (paper "
        "diffusion_positions)"
    )
    assert allowed.split(", ") == [*STUDY_KEYS, "diagnose", "grid", "timing"]


def test_the_schema_types_the_generic_study_keys_and_each_paper_its_own() -> None:
    schema = yaml.safe_load(Path(ROOT / "workflow/schemas/params.schema.yaml").read_text())
    study = schema["properties"]["studies"]["additionalProperties"]
    assert tuple(study["properties"]) == STUDY_KEYS
    assert study["additionalProperties"] is True  # the papers' keys: checked by run_sheet
    declared = {name: set(PAPERS.get(name).study_keys) for name in load_all()}
    assert declared["diffusion_positions"] == {"diagnose", "grid", "timing"}
    assert declared["continuous_time_attention"] == {"columns", "key", "rows"}
    for name, keys in declared.items():
        assert not keys & set(STUDY_KEYS), name  # a paper cannot redefine a generic key
        for key in keys:
            jsonschema.Draft202012Validator.check_schema(PAPERS.get(name).study_keys[key])


def test_studies_share_runs(params) -> None:
    subset = {"kind": "accuracy", "tasks": ["listops"], "variants": ["baseline"]}
    p = edited(params, "studies.subset", subset)
    assert set(list(study(p, "subset").runs)) <= set(run_sheet(p))
    assert len(run_sheet(p)) == len(run_sheet(params))


def test_kernel_options_are_the_kernels_arguments() -> None:
    """The options registered torch-free (checked before torch loads) match the kernels."""
    import inspect

    from pdelab.models.attention import ATTENTION_KERNELS
    from pdelab.spec.options import ATTENTION_OPTIONS
    from pdelab.spec.plugins import import_mechanisms, load_all

    load_all()
    import_mechanisms()
    assert ATTENTION_OPTIONS.names() == ATTENTION_KERNELS.names()
    for name in ATTENTION_OPTIONS:
        options = ATTENTION_OPTIONS.get(name).names
        kernel = ATTENTION_KERNELS.get(name)
        taken = set()
        for cls in kernel.__mro__:
            if "__init__" in vars(cls) and cls.__module__.startswith("pdelab"):
                taken |= set(inspect.signature(cls.__init__).parameters)
        taken -= {"self", "heads", "head_dim", "dropout", "options"}
        if name == "pde_reference":
            taken.discard("fast")
        assert taken == set(options), name


def test_a_variant_grid_expands_into_variants() -> None:
    from pdelab.spec.config import expand_variant_grids

    params = {
        "variants": {"base": {}},
        "variant_grids": {
            "g_d{dim}_{act}": {
                "layer": {"model": {"layers": 1, "attention_options": {"orthogonal": True}}},
                "axes": {
                    "dim": {8: {"model": {"dim": 8}}, 16: {"model": {"dim": 16}}},
                    "act": {"a": {"model": {"attention_options": {"alpha": 1.2}}}, "b": {}},
                },
            }
        },
    }
    out = expand_variant_grids(params)
    assert list(out["variants"]) == ["base", "g_d8_a", "g_d8_b", "g_d16_a", "g_d16_b"]
    assert out["variants"]["g_d16_a"] == {
        "model": {"layers": 1, "dim": 16, "attention_options": {"orthogonal": True, "alpha": 1.2}}
    }
    assert "variant_grids" not in out


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"axes": {"d": {1: {}}}, "extra": 1}, "expected a mapping with axes"),
        ({"axes": {"d": []}}, r"axes\.d: expected label -> layer"),
        ({"axes": {"e": {1: {}}}}, "names axis 'd', which it lacks"),
        ({"axes": {"d": {"x": {}}}}, "makes variant 'v_x', which is defined already"),
    ],
)
def test_a_bad_variant_grid_is_named(grid: dict, message: str) -> None:
    from pdelab.spec.config import expand_variant_grids

    with pytest.raises(ConfigError, match=message):
        expand_variant_grids({"variants": {"v_x": {}}, "variant_grids": {"v_{d}": grid}})


def test_params_yaml_grids_make_the_shallow_variants(params: dict) -> None:
    shallow = [v for v in params["variants"] if v.startswith("shallow_")]
    assert len(shallow) == 28 + 12 + 12
    assert params["variants"]["shallow_l1_d16_dp_qk"] == {
        "model": {
            "layers": 1,
            "heads": 1,
            "dim": 16,
            "attention": "fna_dp",
            "attention_options": {"orthogonal": True, "tied": True},
        }
    }


def test_the_schema_types_exactly_the_spec_dataclasses() -> None:
    """The schema documents params.yaml; the dataclasses (pdelab.spec.model, pdelab.spec.config)
    define it: their keys and the precisions must agree, so neither drifts from the other."""
    from dataclasses import fields

    from pdelab.spec.config import SECTIONS
    from pdelab.spec.model import PRECISIONS

    schema = yaml.safe_load(Path(ROOT / "workflow/schemas/params.schema.yaml").read_text())
    for section, spec in SECTIONS.items():
        assert set(schema["$defs"][section]["properties"]) == {f.name for f in fields(spec)}
    assert schema["$defs"]["train"]["properties"]["precision"]["enum"] == list(PRECISIONS)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("variants.after_embedding.diffusion.alpha", NAN, r"diffusion\.alpha: expected a finite"),
        ("defaults.train.lr", NAN, r"defaults\.train\.lr: expected a finite number"),
        ("defaults.model.dropout", INF, r"defaults\.model\.dropout: expected a finite"),
        ("defaults.train.grad_clip", NAN, r"defaults\.train\.grad_clip: expected a finite"),
        ("defaults.train.betas", [0.9, NAN], r"defaults\.train\.betas: expected a finite"),
        ("profiles.smoke.seeds", [0, -1], r"profiles\.smoke\.seeds: seed -1 is not an integer"),
        ("profiles.smoke.seeds", [2**33], r"profiles\.smoke\.seeds: seed 8589934592 is not"),
        ("profiles.smoke.seeds", [0, 0], r"profiles\.smoke\.seeds: a seed is given twice"),
        ("studies.seeds.seeds", [1.5], r"studies\.seeds\.seeds: seed 1\.5 is not an integer"),
        ("profiles.paper.studies.seeds", {"seeds": [-3]}, r"profiles\.paper\.studies\.seeds"),
        ("profiles.paper.tasks.listopz", {}, r"profiles\.paper\.tasks\.listopz: task: unknown"),
        ("data.paper.listopz", {}, r"data\.paper: task: unknown name 'listopz'"),
        ("studies.seeds.paper_table", "nope.csv", r"paper_table: 'nope\.csv' is not in"),
        ("data.smoke.listops.n_train", 0, r"data\.smoke\.listops\.n_train: must be at least 1"),
        ("profiles.paper.learning", {"variant": "basline"}, r"learning\.variant: unknown name"),
        ("defaults.train.lr", "1e-3", r"write 1\.0e-3"),
    ],
)
def test_an_invalid_edit_fails_before_any_job_naming_its_key(
    params, path: str, value, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(edited(params, path, value), "smoke")


def test_a_word_for_a_number_gets_no_garbled_hint(params) -> None:
    with pytest.raises(ConfigError) as err:
        validate(edited(params, "defaults.train.lr", "three"), "smoke")
    assert "expected a number, got 'three'" in str(err.value) and "write" not in str(err.value)


def test_a_key_given_twice_is_refused_naming_its_lines(tmp_path: Path) -> None:
    from pdelab.spec.config import load_params

    text = (ROOT / "params.yaml").read_text()
    doubled = text.replace("\nprofile: smoke\n", "\nprofile: smoke\nprofile: paper\n", 1)
    assert doubled != text
    (tmp_path / "params.yaml").write_text(doubled)
    with pytest.raises(ConfigError, match=r"line \d+: key 'profile' is given twice"):
        load_params(tmp_path / "params.yaml")


def test_merge_keys_still_merge(tmp_path: Path) -> None:
    """`<<: *anchor` may repeat a key the mapping sets itself: YAML's merge, not a repeat."""
    from pdelab.spec.config import load_params

    (tmp_path / "params.yaml").write_text(
        "profiles:\n  a: {variants: &v {x: 1, y: 2}}\n  b: {variants: {<<: *v, y: 3}}\n"
    )
    assert load_params(tmp_path / "params.yaml")["profiles"]["b"]["variants"] == {"x": 1, "y": 3}


def test_a_nan_inside_a_kernels_options_is_refused(params) -> None:
    options = {"alpha": NAN, "orthogonal": True}
    p = edited(params, "variants.shallow_l1_d8_a12.model.attention_options", options)
    with pytest.raises(ConfigError, match=r"attention_options\.alpha: expected a finite number"):
        validate(p, "paper")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("defaults.train.betas", [0.9, 1.5], r"defaults\.train\.betas: expected two numbers in"),
        ("tasks.listops.train.betas", [-0.1, 0.9], r"tasks\.listops\.train\.betas: expected two"),
        ("tasks.listops.train.batch_size", 32.5, r"tasks\.listops\.train\.batch_size: expected an"),
        ("defaults.train.epochs", 2.5, r"defaults\.train\.epochs: expected an integer, got 2\.5"),
        ("data.smoke.listops.min_length", 50, r"data\.smoke\.listops\.min_length: .*no length"),
        ("data.smoke.listops.max_length", 5, r"data\.smoke\.listops\.min_length: .*no length"),
        ("data.smoke.listops.max_depth", 2.5, r"data\.smoke\.listops\.max_depth: expected an int"),
        ("data.smoke.listops.max_depth", 0, r"data\.smoke\.listops\.max_depth: must be at least"),
        ("data.smoke.listops.max_args", 1, r"data\.smoke\.listops\.max_args: must be at least 2"),
        ("data.smoke.image.side", 0, r"data\.smoke\.image\.side: must divide 32"),
        ("data.smoke.image.side", 5, r"data\.smoke\.image\.side: must divide 32"),
        (
            "data.smoke.pathfinder.val_fraction",
            0.9,
            r"pathfinder\.test_fraction: the held-out fractions sum to 1",
        ),
        ("data.smoke.pathfinder.test_fraction", 0, r"pathfinder\.test_fraction: a fraction in"),
        ("data.smoke.retrieval.p_topic", 1.5, r"retrieval\.p_topic: a probability in \[0, 1\]"),
        ("data.smoke.imdb_bytes_lra.max_length", 0, r"imdb_bytes_lra\.max_length: must be at"),
        ("data.smoke.listops.seed", -1, r"data\.smoke\.listops\.seed: must be at least 0"),
        ("profiles.smoke.seeds", list(range(10**6)), r"profiles\.smoke\.seeds: 1,000,000 seeds"),
        ("studies.seeds.seeds", list(range(2000)), r"studies\.seeds\.seeds: 2,000 seeds"),
        (
            "variants.after_mlp.diffusion.sites",
            ["after_mlp", "after_mlp"],
            r"variants\.after_mlp\.diffusion\.sites: site 'after_mlp' is given twice",
        ),
        (
            "variants.pde_s4.model.attention_options",
            {"pde": "diffusion", "learnable": "false"},
            r"variants\.pde_s4\.model\.attention_options .*'learnable'='false' must be true",
        ),
        (
            "variants.pde_s4.model.attention_options",
            {"pde": "diffusion", "fast": "no"},
            r"variants\.pde_s4\.model\.attention_options .*'fast'='no' must be true or false",
        ),
        (
            "variants.released.model.smoothing",
            {"pde": "diffusion", "causal": "yes"},
            r"variants\.released\.model\.smoothing: option 'causal'='yes' must be true",
        ),
    ],
)
def test_a_value_that_fails_in_a_job_is_refused_before_any_job(
    params, path: str, value, message: str
) -> None:
    """Values each job would fail on (AdamW's betas, a fractional batch size, a generator that
    never finishes, an image side of 0, a wrong-typed kernel flag) name their key at once."""
    with pytest.raises(ConfigError, match=message):
        validate(edited(params, path, value), "smoke")


@pytest.mark.parametrize(
    ("path", "whole", "written"),
    [
        ("tasks.listops.train.epochs", 3, 3.0),
        ("tasks.listops.train.batch_size", 32, 32.0),
        ("tasks.listops.train.lr", 1.0, 1),
        ("variants.after_mlp.diffusion.strides", [1, 2], [1.0, 2]),
        ("variants.after_mlp.diffusion.alpha", [0.1, 0.2], [0.1, 0.2]),
        ("variants.after_mlp.diffusion.alpha", 0.25, 0.25),
    ],
)
def test_one_number_written_two_ways_is_one_run(params, path: str, whole, written) -> None:
    """A number's spelling (3 or 3.0) is not a setting: both resolve to one spec, whose JSON
    (what Snakemake and the records compare) is the same, with integer keys as ints."""
    if "strides" in path or isinstance(whole, list):
        params = edited(params, "variants.after_mlp.diffusion.strides", [1, 2])
    one = resolve(edited(params, path, whole), "listops", "after_mlp", 0, "smoke")
    two = resolve(edited(params, path, written), "listops", "after_mlp", 0, "smoke")
    assert one.to_json() == two.to_json()
    assert isinstance(two.train.batch_size, int) and isinstance(two.train.epochs, int)
    assert all(isinstance(h, int) for h in two.diffusion.strides)


def registered_options() -> list[tuple[str, str, str]]:
    """(kind, kernel or block, option) for every option of every registered kernel and block,
    and of the hidden-state smoothing."""
    from pdelab.spec.options import ATTENTION_OPTIONS, BLOCK_OPTIONS, SMOOTHING_OPTIONS

    load_all()
    found = [("smoothing", "", option) for option in SMOOTHING_OPTIONS]
    for kind, registry in (("attention", ATTENTION_OPTIONS), ("block", BLOCK_OPTIONS)):
        for name in registry.names():
            found += [(kind, name, option) for option in registry.get(name).names]
    return found


@pytest.mark.parametrize("wrong", ["false", [1]])
@pytest.mark.parametrize(("kind", "name", "option"), registered_options())
def test_every_kernel_option_refuses_a_value_of_the_wrong_type(
    kind: str, name: str, option: str, wrong
) -> None:
    """No option of any kernel, block or the smoothing takes a word or a list where it reads a
    flag, a number or a name: the check names the option instead of the job failing later (or
    ``learnable: "false"`` making a trainable coefficient)."""
    from pdelab.spec.options import check_attention, check_block, check_smoothing

    with pytest.raises(ValueError, match=repr(option)):
        if kind == "attention":
            check_attention(name, {option: wrong})
        elif kind == "block":
            check_block(name, {option: wrong})
        else:
            check_smoothing({option: wrong})


def test_a_yaml_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    from pdelab.spec.config import load_params

    text = (ROOT / "params.yaml").read_text()
    looped = text.replace("\nprofile: smoke\n", "\nprofile: smoke\nloop: &loop [1, *loop]\n", 1)
    assert looped != text
    (tmp_path / "params.yaml").write_text(looped)
    with pytest.raises(ConfigError, match=r"params\.yaml\.loop\[1\]: an alias refers to the node"):
        load_params(tmp_path / "params.yaml")


def _digests(params: dict) -> dict[RunKey, str]:
    return {RunKey(s.task, s.variant, s.seed): s.to_json() for s in validate(params, "smoke")}


@pytest.mark.parametrize(
    ("path", "value", "retrains"),
    [
        ("defaults.diffusion.alpha", [0.1], "none"),  # the same coefficient, written as a list
        ("defaults.diffusion.alpha", 0.2, "diffusing"),
        ("defaults.diffusion.layernorm", False, "diffusing"),
        ("defaults.diffusion.learnable", False, "diffusing"),
        ("defaults.diffusion.strides", [1, 2], "diffusing"),
    ],
)
def test_a_diffusion_key_retrains_only_the_runs_that_diffuse(
    params, path: str, value, retrains: str
) -> None:
    """A run without a diffusion site reads none of the diffusion block, so its spec (and
    digest) leaves the block's coefficients out; a one-element alpha list is its scalar."""
    before, after = _digests(params), _digests(edited(params, path, value))
    assert before.keys() == after.keys()
    changed = {key for key in before if before[key] != after[key]}
    key = path.removeprefix("defaults.")
    diffusing = {  # the runs that diffuse with the defaults' value of the key
        RunKey(s.task, s.variant, s.seed)
        for s in validate(params, "smoke")
        if s.diffusion.sites and origins(params, s.task, s.variant, "smoke")[key] == path
    }
    assert diffusing and len(diffusing) < len(before)
    assert changed == (diffusing if retrains == "diffusing" else set())
    for spec in validate(params, "smoke"):
        if not spec.diffusion.sites:
            assert spec.to_dict()["diffusion"] == {"sites": ()}


@pytest.mark.parametrize(
    "diffusion",
    [
        {"sites": []},
        {"sites": [], "alpha": 0.3, "layernorm": False, "strides": [1, 2]},
        {"sites": ["after_mlp"], "alpha": [0.2]},
        {"sites": ["after_mlp"], "alpha": 0.2},
    ],
)
def test_a_spec_written_in_either_form_reads_back_as_one(params, diffusion: dict) -> None:
    """A record or plan written in the older form (every diffusion key) reads as the spec
    written now, so a reader compares meanings."""
    spec = resolve(params, "listops", "after_mlp", 0, "smoke")
    body = spec.to_dict()
    body["diffusion"] = diffusion
    read = RunSpec.from_dict(json.loads(json.dumps(body)))
    assert RunSpec.from_dict(json.loads(read.to_json())) == read
    if diffusion["sites"]:
        assert read.diffusion.alpha == 0.2 and read.to_dict()["diffusion"]["alpha"] == 0.2
    else:
        assert read.to_dict()["diffusion"] == {"sites": ()}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    ("key", "file"),
    [
        ("profiles.smoke.learning.min_gain", None),  # .nan here switched the learning check off
        ("profiles.smoke.learning.max_ppl_ratio", None),
        ("profiles.paper.gpu_memory_gb", None),  # another run profile's, checked too
        ("profiles.paper.multi_gpu.over_hours", None),
        ("variants.after_mlp.diffusion.alpha", "diffusion_positions"),
        ("tasks.wikitext.train.seq_len", "continuous_time_attention"),
        ("data.smoke.listops.n_train", None),
    ],
)
def test_a_number_that_is_not_finite_is_refused_naming_file_and_key(
    params, key: str, file: str | None, value: float
) -> None:
    """YAML's .nan and .inf are numbers to the parser; no param means one, and a comparison
    with a NaN is false, so a check reading one would pass everything."""
    _, sources = load_with_sources(ROOT / "params.yaml")
    with pytest.raises(ConfigError, match="expected a finite number") as err:
        validate(edited(params, key, value), "smoke")
    where = ROOT / "src/pdelab/papers" / file / "config.yaml" if file else ROOT / "params.yaml"
    assert sources.locate(str(err.value)).startswith(f"{where}: {key}")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("profiles.smoke.learning.min_gain", -0.1, r"min_gain: expected a number in \[0, 1\]"),
        ("profiles.smoke.learning.min_gain", 1.5, r"min_gain: expected a number in \[0, 1\]"),
        ("profiles.paper.learning.min_test_items", 0, "min_test_items: expected a whole number"),
        ("profiles.smoke.learning.min_test_items", 2.5, "min_test_items: expected a whole"),
        ("profiles.smoke.learning.max_ppl_ratio", 0, r"max_ppl_ratio: expected a number in \(0"),
        ("profiles.smoke.learning.min_bleu_gain", -1, "min_bleu_gain: expected a number in"),
        ("data.smoke.wikitext.vocab_size", 3, "vocab_size: must be at least 4, more than the 3"),
        ("data.smoke.imdb_wordpiece.vocab_size", 2, "vocab_size: must be at least 4"),
        ("profiles.smoke.overrides.model.heads", 0, "model.heads: must be at least 1, got 0"),
        ("profiles.smoke.overrides.model.layers", 0, "model.layers: must be at least 1"),
        ("profiles.smoke.overrides.model.dim", -32, "model.dim: must be at least 1"),
        ("profiles.smoke.overrides.model.dropout", 1.0, r"dropout: a dropout rate in \[0, 1\)"),
        ("profiles.smoke.tasks.listops.train.weight_decay", -1e-5, "weight_decay: must be at"),
    ],
)
def test_a_number_out_of_its_range_is_refused_before_any_job(
    params, key: str, value, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(edited(params, key, value), "smoke")


def test_the_vocabulary_floor_is_the_tokenizers_reserved_tokens() -> None:
    """spec.data cannot import the tokenizer (a layer up, and the tokenizers package): its
    copy of the reserved tokens is pinned to the tokenizer's here."""
    from pdelab.data import tokenizer
    from pdelab.spec.data import AT_LEAST, TOKENIZER_SPECIALS

    assert TOKENIZER_SPECIALS == tokenizer.SPECIALS
    assert AT_LEAST["vocab_size"][0] == len(tokenizer.SPECIALS) + 1
    with pytest.raises(ValueError, match="vocab_size must exceed"):
        tokenizer.train(["a b"], AT_LEAST["vocab_size"][0] - 1)
