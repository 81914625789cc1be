"""A paper's settings live in its folder (src/pdelab/papers/<paper>/config.yaml) and merge with
params.yaml when the params are read: params.yaml wins at each key it sets, two papers' files
that set one key differently are refused naming both, a paper cannot set what every paper
shares, and the file behind each key is known (errors and ``pdelab explain`` name it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from pdelab.spec.config import (
    ConfigError,
    Sources,
    load_params,
    load_with_sources,
    origins,
    param_files,
    profile_variant_layers,
    resolve,
)
from pdelab.spec.run_sheet import validate

PARAMS = """\
profile: smoke
profiles:
  smoke:
    variants:
      "*": {train: {epochs: 1}}
variants:
  baseline: {}
"""
PAPERS = ("continuous_time_attention", "diffusion_positions", "fractional_attention")
PAPERS += ("linear_diffusion", "mechanisms")


def project(tmp_path: Path, papers: dict[str, str], params: str = PARAMS) -> Path:
    """A params.yaml and, beside it, paper packages with these config files' texts."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "params.yaml").write_text(params)
    for name, text in papers.items():
        folder = tmp_path / "src" / "pdelab" / "papers" / name
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "config.yaml").write_text(text)
    return tmp_path / "params.yaml"


def config(paper: str) -> str:
    return str(ROOT / "src" / "pdelab" / "papers" / paper / "config.yaml")


def test_the_project_params_are_params_yaml_and_each_papers_config_file() -> None:
    path = ROOT / "params.yaml"
    shared = ROOT / "tasks.yaml"  # the tasks several papers share
    assert param_files(path) == [path, shared, *(Path(config(p)) for p in PAPERS)]
    own = yaml.safe_load(path.read_text())
    assert set(own) == {"profile", "defaults", "data", "profiles", "variants"}
    assert list(own["variants"]) == ["baseline"]  # every paper's reference run
    params, sources = load_with_sources(path)
    assert sources.of("variants.baseline") == str(path)
    assert sources.of("defaults.train.lr") == str(path)
    assert sources.of("variants.after_mlp.diffusion") == config("diffusion_positions")
    assert sources.of("tasks.wikitext") == config("continuous_time_attention")  # its own
    assert sources.of("tasks.listops.model.dim") == str(shared)  # four papers'
    assert sources.of("profiles.smoke.tasks.image") == str(shared)
    assert sources.of("variants.shallow_l2_d8_dp") == config("fractional_attention")  # a grid's
    assert sources.of("profiles.smoke.variants.*patch*") == config("linear_diffusion")
    assert sources.of("studies.mechanisms.rows") == config("mechanisms")
    assert {"positions", "pde_steps", "fna_imdb", "ldn_lra", "mechanisms"} <= set(params["studies"])


@pytest.mark.parametrize(
    ("a", "b", "key"),
    [
        (
            "variants:\n  v: {model: {dim: 8}}\n",
            "variants:\n  v: {model: {dim: 16}}\n",
            "variants.v.model.dim",
        ),
        (
            "tasks:\n  t: {train: {lr: 0.1}}\n",
            "tasks:\n  t: {train: {lr: 0.2}}\n",
            "tasks.t.train.lr",
        ),
        ("studies:\n  s: {kind: accuracy}\n", "studies:\n  s: {kind: lm}\n", "studies.s.kind"),
        (
            "profiles:\n  smoke:\n    tasks:\n      t: {train: {lr: 0.1}}\n",
            "profiles:\n  smoke:\n    tasks:\n      t: {train: {lr: 0.2}}\n",
            "profiles.smoke.tasks.t.train.lr",
        ),
    ],
)
def test_a_leaf_two_papers_set_differently_is_refused_naming_both_files_and_the_key(
    tmp_path: Path, a: str, b: str, key: str
) -> None:
    params = project(tmp_path, {"a_paper": a, "b_paper": b})
    with pytest.raises(ConfigError) as err:
        load_params(params)
    first, second = (str(tmp_path / f"src/pdelab/papers/{p}_paper/config.yaml") for p in "ab")
    assert str(err.value).startswith(f"{key}: set to ")
    assert f" in {first} and to " in str(err.value) and f" in {second}; set it in one" in str(
        err.value
    )


def test_an_entry_two_papers_share_merges_key_by_key(tmp_path: Path) -> None:
    """Two files may each add keys to one entry, and may repeat a value; each key's file is
    the one that set it first."""
    a = "tasks:\n  t: {train: {lr: 0.1}, model: {dim: 8}}\n"
    b = "tasks:\n  t: {train: {lr: 0.1, epochs: 2}}\n"
    params, sources = load_with_sources(project(tmp_path, {"a_paper": a, "b_paper": b}))
    assert params["tasks"]["t"] == {"train": {"lr": 0.1, "epochs": 2}, "model": {"dim": 8}}
    first, second = (str(tmp_path / f"src/pdelab/papers/{p}_paper/config.yaml") for p in "ab")
    assert sources.of("tasks.t.train.lr") == first and sources.of("tasks.t.train.epochs") == second


def test_params_yaml_wins_at_the_leaf_at_every_level(tmp_path: Path) -> None:
    """A key params.yaml sets overrides the paper's at that key only (the rest of the entry
    stays the paper's), in a task, a variant and a run profile's task block alike, and is
    named as params.yaml's."""
    paper = (
        "tasks:\n  t: {train: {lr: 0.1, epochs: 2}}\n"
        "variants:\n  v: {model: {dim: 8, layers: 2}}\n"
        "profiles:\n  smoke:\n    tasks:\n      t: {train: {lr: 0.5, batch_size: 4}}\n"
        '    variants:\n      "*": {train: {epochs: 3}}\n'
    )
    mine = PARAMS.replace(
        "variants:\n  baseline: {}\n",
        "variants:\n  baseline: {}\n  v: {model: {dim: 16}}\ntasks:\n  t: {train: {lr: 0.01}}\n",
    ).replace(
        'profiles:\n  smoke:\n    variants:\n      "*": {train: {epochs: 1}}\n',
        "profiles:\n  smoke:\n    tasks:\n      t: {train: {lr: 0.003}}\n"
        '    variants:\n      "*": {train: {epochs: 1}}\n',
    )
    path = project(tmp_path, {"paper": paper}, mine)
    params, sources = load_with_sources(path)
    assert params["tasks"]["t"] == {"train": {"lr": 0.01, "epochs": 2}}
    assert params["variants"]["v"] == {"model": {"dim": 16, "layers": 2}}
    assert params["profiles"]["smoke"]["tasks"]["t"] == {"train": {"lr": 0.003, "batch_size": 4}}
    assert params["profiles"]["smoke"]["variants"]["*"] == {"train": {"epochs": 1}}
    own = str(path)
    paper_file = str(tmp_path / "src/pdelab/papers/paper/config.yaml")
    assert (
        sources.of("tasks.t.train.lr") == own and sources.of("tasks.t.train.epochs") == paper_file
    )
    assert sources.of("profiles.smoke.tasks.t.train.lr") == own
    assert sources.of("profiles.smoke.tasks.t.train.batch_size") == paper_file
    assert (
        sources.of("variants.v.model.dim") == own
        and sources.of("variants.v.model.layers") == paper_file
    )


def test_a_variant_a_grid_makes_twice_names_both_files(tmp_path: Path) -> None:
    grid = "variant_grids:\n  'g{d}':\n    axes: {d: {1: {}}}\n"
    params = project(tmp_path, {"a_paper": grid, "b_paper": "variants:\n  g1: {}\n"})
    with pytest.raises(ConfigError) as err:
        load_params(params)
    assert "variant_grids.g{d}: makes variant 'g1', which is defined already" in str(err.value)
    assert "a_paper/config.yaml, the variant in " in str(err.value)
    assert str(err.value).endswith("b_paper/config.yaml)")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults: {}\n", r"config\.yaml: defaults: not a key of a paper's config file"),
        ("data: {}\n", r"data is shared by every paper, in params\.yaml"),
        ("profiles:\n  smoke: {device: cuda}\n", r"profiles\.smoke\.device: a paper's config"),
        ("profiles:\n  gpu: {studies: {}}\n", r"profiles\.gpu: no such run profile in .*params"),
        ("variants: [a, b]\n", r"config\.yaml: variants: expected a mapping"),
        ("variants:\n  a: {}\n  a: {}\n", r"config\.yaml: line 3: key 'a' is given twice"),
    ],
)
def test_a_paper_config_holds_only_a_papers_entries(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_params(project(tmp_path, {"paper": text}))


def test_only_paper_packages_merge_and_a_lone_params_file_is_read_alone(tmp_path: Path) -> None:
    """As pdelab.spec.plugins finds papers: a folder without __init__.py is no paper; a params file
    with no papers folder beside it (a test's snapshot) is the whole params."""
    params = project(tmp_path, {"paper": "variants:\n  v: {}\n"})
    notes = tmp_path / "src/pdelab/papers/notes"
    notes.mkdir()
    (notes / "config.yaml").write_text("variants:\n  w: {}\n")
    assert list(load_params(params)["variants"]) == ["baseline", "v"]
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "params.yaml").write_text(PARAMS)
    assert list(load_params(tmp_path / "alone" / "params.yaml")["variants"]) == ["baseline"]


def test_a_run_profiles_own_patterns_come_after_the_papers(tmp_path: Path, params) -> None:
    """A pattern of params.yaml wins over a paper's: paper_mini trains every variant of the
    paper run profile's layers for one epoch."""
    text = 'profiles:\n  smoke:\n    variants:\n      "v*": {train: {epochs: 9}}\n'
    merged = load_params(project(tmp_path, {"paper": text}))
    assert list(merged["profiles"]["smoke"]["variants"]) == ["v*", "*"]
    assert list(params["profiles"]["paper_mini"]["variants"])[-1] == "*"
    assert resolve(params, "imdb_wordpiece", "fna", 0, "paper").train.epochs == 20
    assert resolve(params, "imdb_wordpiece", "fna", 0, "paper_mini").train.epochs == 1


@pytest.mark.parametrize(
    ("key", "value", "file"),
    [
        ("variants.after_embedding.diffusion.alpha", 0.6, "diffusion_positions"),
        ("studies.fna_imdb.tail_probe", ["nope"], "fractional_attention"),
        ("profiles.smoke.tasks.wikitext.train.lr", -1.0, "continuous_time_attention"),
        ("defaults.model.norm", "side", None),
    ],
)
def test_an_invalid_key_is_named_with_its_file(params, key: str, value, file) -> None:
    _, sources = load_with_sources(ROOT / "params.yaml")
    bad = copy.deepcopy(params)
    *path, last = key.split(".")
    node = bad
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(ConfigError) as err:
        validate(bad, "smoke")
    where = config(file) if file else str(ROOT / "params.yaml")
    assert sources.locate(str(err.value)).startswith(f"{where}: {key.rsplit('.', 1)[0]}")


def test_a_run_profiles_unknown_task_is_named_with_the_papers_file(tmp_path: Path) -> None:
    text = "tasks:\n  t: {}\nprofiles:\n  smoke:\n    tasks:\n      tx: {}\n"
    params, sources = load_with_sources(project(tmp_path, {"paper": text}))
    with pytest.raises(ConfigError) as err:
        validate(params, "smoke")
    assert sources.locate(str(err.value)).startswith(
        f"{tmp_path / 'src/pdelab/papers/paper/config.yaml'}: profiles.smoke.tasks.tx: task: "
        "unknown name 'tx'"
    )


def test_a_message_that_names_no_key_is_left_as_it_is() -> None:
    sources = Sources("params.yaml", {"variants.v": "p/config.yaml"})
    assert sources.locate("task: unknown name 'x'") == "task: unknown name 'x'"
    assert sources.locate("variants.v.model: bad") == "p/config.yaml: variants.v.model: bad"
    assert sources.locate("profile: unknown name") == "params.yaml: profile: unknown name"


def project_with_variant(tmp_path: Path, paper: str, variant: str) -> Path:
    """This project's params.yaml and paper config files, with a new variant (an empty layer)
    added to one paper's."""
    texts = {}
    for name in PAPERS:
        text = Path(config(name)).read_text()
        if name == paper:
            text = text.replace("\nvariants:\n", f"\nvariants:\n  {variant}: {{}}\n", 1)
        texts[name] = text
    path = project(tmp_path, texts, (ROOT / "params.yaml").read_text())
    (tmp_path / "tasks.yaml").write_text((ROOT / "tasks.yaml").read_text())
    return path


@pytest.mark.parametrize(
    ("profile", "pattern", "owner", "paper", "variant", "task"),
    [
        ("smoke", "*patch*", "patch_vit", "fractional_attention", "fna_patch", "image"),
        ("smoke", "*patch*", "ldn_patch", "diffusion_positions", "after_mlp_patch", "image"),
        ("paper", "vit_*", "vit_fna", "linear_diffusion", "vit_ldn", "image"),
        ("paper", "shallow_*", "shallow_l1_d8_dp", "mechanisms", "shallow_mix", "imdb_wordpiece"),
    ],
)
def test_a_papers_pattern_reaches_only_that_papers_variants(
    tmp_path: Path, profile: str, pattern: str, owner: str, paper: str, variant: str, task: str
) -> None:
    """linear_diffusion's ``profiles.smoke.variants."*patch*"`` (lr 3e-3, mean pooling) is its
    word about its own patch models: another paper's new variant whose name matches it trains
    as that paper's baseline does, while the pattern's own variants keep their setting."""
    params, sources = load_with_sources(project_with_variant(tmp_path, paper, variant))
    assert sources.of(f"variants.{variant}") == str(
        tmp_path / f"src/pdelab/papers/{paper}/config.yaml"
    )
    where = f"profiles.{profile}.variants.{pattern}"
    assert not [o for o in origins(params, task, variant, profile).values() if where in o]
    assert (
        resolve(params, task, variant, 0, profile).train
        == resolve(params, task, "baseline", 0, profile).train
    )
    assert [o for o in origins(params, task, owner, profile).values() if where in o]


def test_a_papers_pattern_that_matches_only_another_papers_variants_is_refused(
    tmp_path: Path,
) -> None:
    """A paper's pattern matching none of its own variants names the variants of other files
    it matches, and the fix."""
    text = 'variants:\n  own: {}\nprofiles:\n  smoke:\n    variants:\n      "base*": {}\n'
    params = load_params(project(tmp_path, {"paper": text}))
    with pytest.raises(
        ConfigError,
        match=r"profiles\.smoke\.variants\.base\*: matches no "
        r"variant of the paper .*\(only other files' variants: baseline\)",
    ):
        validate(params, "smoke")
    moved = "variants:\n  own: {}\n"
    params = load_params(
        project(tmp_path / "b", {"paper": moved}, PARAMS.replace('"*"', '"base*"'))
    )
    assert [w for w, _ in profile_variant_layers(params, "smoke", "baseline")] == [
        "profiles.smoke.variants.base*"
    ]  # params.yaml's own pattern reaches every paper's variants


def test_params_yaml_wins_at_the_leaf_of_a_variant_a_papers_grid_makes(tmp_path: Path) -> None:
    """A variant made by a paper's grid is an entry like any other: a key params.yaml sets for
    it wins at that key, the grid's other keys stay, and explain names each file."""
    grid = (
        "variant_grids:\n  'g{d}':\n    layer: {train: {lr: 0.1, epochs: 2}}\n"
        "    axes: {d: {8: {model: {dim: 8}}, 16: {model: {dim: 16}}}}\n"
    )
    mine = PARAMS.replace("  baseline: {}\n", "  baseline: {}\n  g8: {train: {lr: 0.003}}\n")
    path = project(tmp_path, {"paper": grid}, mine)
    params, sources = load_with_sources(path)
    assert params["variants"]["g8"] == {"train": {"lr": 0.003, "epochs": 2}, "model": {"dim": 8}}
    assert params["variants"]["g16"]["train"]["lr"] == 0.1
    paper = str(tmp_path / "src/pdelab/papers/paper/config.yaml")
    assert sources.of("variants.g8.train.lr") == str(path)
    assert sources.of("variants.g8.train.epochs") == paper
