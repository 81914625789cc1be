"""Resolve the params into one fully specified, validated RunSpec per (task, variant, seed).

The params are params.yaml (run profile, defaults, data, run profiles: what every paper shares,
and any key the researcher sets) over tasks.yaml (the tasks several papers share) and each
paper's own config file (src/pdelab/papers/<paper>/config.yaml: its tasks, variants, variant
grids, studies, and what a run profile changes of them), so that adding a paper is one folder.
The files merge key by key: a key two of them set differently is refused, naming both, and
params.yaml's keys win at the leaf; :class:`Sources` keeps the file behind each key for error
messages and ``pdelab explain``.

A run's spec is a deep merge, later layers winning:
    defaults -> tasks[task] -> profiles[profile].overrides -> profiles[profile].tasks[task]
    -> variants[variant] -> profiles[profile].variants[pattern] for each pattern the variant's
    name matches (fnmatch, in file order)
The last layer gives a profile its own settings for a family of variants whose experiment
differs from the task's other runs (one paper's 6-layer model on a task another paper trains at
4 layers), which the task layers cannot say without changing those runs. Every layer is
checked for unknown keys before merging, so an error names the exact key to fix; values (site
names, the diffusion stability budget, ...) are checked after merging and name the layer that
set them. Nothing here imports torch: the Snakefile calls it at parse time.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from pdelab.spec.fields import ConfigError, build, did_you_mean, unknown_name
from pdelab.spec.keys import Refusal, check_declared
from pdelab.spec.model import (
    ENCODER_SITES,
    OMIT_AT_DEFAULT,
    PRECISIONS,
    SECTION_CONFIG,
    SITES,
    DiffusionSpec,
    ModelSpec,
    Precision,
)
from pdelab.spec.options import (
    ATTENTION_OPTIONS,
    BLOCK_OPTIONS,
    check_attention,
    check_block,
    check_smoothing,
)
from pdelab.spec.plugins import config_files, load_all

# re-exported: most callers know them from here
__all__ = [
    "ENCODER_SITES",
    "PRECISIONS",
    "SITES",
    "ConfigError",
    "DiffusionSpec",
    "ModelSpec",
    "build",
]

PARAMS_FILE = Path("params.yaml")  # paths are relative to the workflow's directory
TOP_LEVEL_KEYS = ("profile", "defaults", "tasks", "data", "profiles", "variants", "studies")
# the papers folder, relative to params.yaml's: each paper's config.yaml there merges in (a
# params file with no papers folder beside it, such as a test's snapshot, is read alone)
PAPERS_DIR = Path("src/pdelab/papers")
# beside params.yaml: the tasks several papers share (a paper's own tasks stay in its folder)
SHARED_TASKS_FILE = "tasks.yaml"
# what a paper's config file defines, entry by entry: <section>.<name>, and
# profiles.<profile>.<profile section>.<name> for a run profile that params.yaml defines
NAMED_SECTIONS = ("tasks", "variants", "variant_grids", "studies")
PROFILE_SECTIONS = ("tasks", "variants", "studies")


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


Beta = Annotated[float, Field(ge=0, lt=1)]


@dataclass(frozen=True)
class TrainSpec:
    """What the optimiser (AdamW) and the training loop read of a run."""

    __pydantic_config__ = SECTION_CONFIG

    batch_size: Annotated[int, Field(ge=1, description="sequences per optimiser step")] = 256
    lr: Annotated[float, Field(gt=0, description="AdamW's peak learning rate")] = 1e-3
    betas: Annotated[
        tuple[Beta, Beta],
        Field(description="AdamW's two decay rates"),
        Refusal("expected two numbers in {range} (AdamW's decay rates)"),
    ] = (0.9, 0.98)
    weight_decay: Annotated[float, Field(ge=0, description="AdamW's decoupled weight decay")] = 1e-5
    warmup_steps: Annotated[
        int, Field(ge=0, description="steps of linear warm-up to the peak rate")
    ] = 10_000
    epochs: Annotated[int, Field(ge=1, description="most passes over the training split")] = 50
    patience: Annotated[
        int, Field(ge=1, description="epochs without a better validation score before stopping")
    ] = 10
    grad_clip: Annotated[float, Field(gt=0, description="the gradients' largest norm")] = 1.0
    seq_len: Annotated[
        int,
        Field(ge=0, description="language modelling: tokens per training window; 0 otherwise"),
    ] = 0
    # translation: the training loss also scores the <pad> targets after <eos>, as the
    # official code of some papers does (validation and test losses never do)
    loss_includes_pad: Annotated[
        bool, Field(description="translation: the training loss scores <pad> after <eos> too")
    ] = field(default=False, metadata=OMIT_AT_DEFAULT)
    # fp32, or bf16 autocast for the forward passes (pdelab.training.precision: the mechanisms that
    # need fp32 keep it); torch.compile is how a step runs, not what it is: profiles.<name>.compile
    precision: Annotated[
        Precision,
        Field(description="fp32, or bf16 autocast for forward passes (pdelab.training.precision)"),
    ] = field(default="fp32", metadata=OMIT_AT_DEFAULT)


@dataclass(frozen=True)
class RunSpec:
    """Everything one training run needs; its JSON form is what Snakemake watches for changes."""

    task: str
    variant: str
    seed: int
    profile: str
    device: str
    data_dir: str
    model: ModelSpec = field(default_factory=ModelSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    diffusion: DiffusionSpec = field(default_factory=DiffusionSpec)

    def to_dict(self) -> dict[str, Any]:
        """The spec as its digest reads it: what the model reads, each value in one form
        (a run without a diffusion site writes ``diffusion: {sites: []}`` alone, whatever its
        unread coefficients; see :func:`canonical_diffusion`)."""
        d = asdict(self)
        for section in SECTIONS:
            for f in fields(getattr(self, section)):
                if f.metadata.get("omit_at_default") and d[section][f.name] == _default(f):
                    del d[section][f.name]
        diffusion = canonical_diffusion(self.diffusion)
        d["diffusion"] = {"sites": ()} if not diffusion.sites else asdict(diffusion)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(
            **{k: v for k, v in d.items() if k not in ("model", "train", "diffusion")},
            model=build(ModelSpec, d["model"], "model"),
            train=build(TrainSpec, d["train"], "train"),
            diffusion=canonical_diffusion(
                build(DiffusionSpec, d.get("diffusion") or {}, "diffusion")
            ),
        )


def canonical_diffusion(spec: DiffusionSpec) -> DiffusionSpec:
    """One spec per diffusion the model builds: with no site, the model reads none of the
    block's keys, so they take their defaults (an edit of ``defaults.diffusion.alpha`` retrains
    only the runs that diffuse); a one-element alpha list is its scalar (``alpha: [0.1]`` with
    one stride is ``alpha: 0.1``, the same coefficient)."""
    if not spec.sites:
        return DiffusionSpec()
    if isinstance(spec.alpha, tuple) and len(spec.alpha) == 1:
        return replace(spec, alpha=spec.alpha[0])
    return spec


SECTIONS = {"model": ModelSpec, "train": TrainSpec, "diffusion": DiffusionSpec}


def check_name(name: str, valid: list[str] | tuple[str, ...], where: str) -> None:
    """A name of ``valid``, else an error with the closest names (fields.unknown_name)."""
    if name not in valid:
        raise ConfigError(f"{where}: {unknown_name(name, valid)}")


def _check_layer(layer: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """A layer holds only model/train/diffusion sections with known keys."""
    layer = layer or {}
    if not isinstance(layer, dict):
        raise ConfigError(f"{where}: expected a mapping, got {layer!r}")
    for section, values in layer.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"{where}.{section}: unknown key; {did_you_mean(section, tuple(SECTIONS))}"
                f"valid keys are {', '.join(SECTIONS)}"
            )
        build(SECTIONS[section], values or {}, f"{where}.{section}")
    return layer


def _merge(layers: list[tuple[str, dict[str, Any]]]) -> tuple[dict, dict[str, str]]:
    """Deep-merge section dicts; also return which layer set each 'section.key'."""
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    origin: dict[str, str] = {}
    for where, layer in layers:
        for section, values in layer.items():
            for key, value in (values or {}).items():
                merged[section][key] = value
                origin[f"{section}.{key}"] = f"{where}.{section}.{key}"
    return merged, origin


def check_diffusion(spec: DiffusionSpec, origin: dict[str, str]) -> None:
    """Sites must exist, each once; strides positive (their declarations); coefficients, one
    per stride, inside the stability budget."""
    check_declared(spec, "diffusion", origin)
    where = origin.get("diffusion.sites", "diffusion.sites")
    twice = sorted({site for site in spec.sites if spec.sites.count(site) > 1})
    if twice:
        raise ConfigError(
            f"{where}: site {twice[0]!r} is given twice in {list(spec.sites)}; a site diffuses "
            "once, so name each site once"
        )
    key = origin.get("diffusion.alpha", "diffusion.alpha")
    alphas = spec.alphas()
    if len(alphas) != len(spec.strides):
        raise ConfigError(
            f"{key}: {len(alphas)} coefficients for {len(spec.strides)} strides; give one "
            "alpha per stride or a single total"
        )
    if any(a <= 0 for a in alphas):
        raise ConfigError(f"{key}: diffusion coefficients must be > 0, got {list(alphas)}")
    if sum(alphas) >= 0.5:
        raise ConfigError(
            f"{key} = {list(alphas) if len(alphas) > 1 else alphas[0]}: outside the stability "
            "budget; explicit diffusion is "
            "non-expansive only for alpha < 1/2 (sum over strides < 1/2), got sum "
            f"{sum(alphas):.3g}. Lower it, e.g. alpha: 0.1"
        )


def check_model(spec: ModelSpec, origin: dict[str, str]) -> None:
    """Each key inside its declaration; the registered kernel and block, with their options;
    what spans keys (a block without attention, heads dividing dim)."""
    check_declared(spec, "model", origin)
    load_all()  # paper packages register their kernels' options
    check_name(
        spec.attention, ATTENTION_OPTIONS.names(), origin.get("model.attention", "model.attention")
    )
    try:
        check_attention(spec.attention, spec.attention_options)
    except ValueError as err:
        where = origin.get("model.attention_options", "model.attention_options")
        raise ConfigError(f"{where} (kernel {spec.attention!r}): {err}") from None
    try:
        check_smoothing(spec.smoothing)
    except ValueError as err:
        raise ConfigError(f"{origin.get('model.smoothing', 'model.smoothing')}: {err}") from None
    check_name(spec.block, BLOCK_OPTIONS.names(), origin.get("model.block", "model.block"))
    try:
        check_block(spec.block, spec.block_options)
    except ValueError as err:
        where = origin.get("model.block_options", "model.block_options")
        raise ConfigError(f"{where} (block {spec.block!r}): {err}") from None
    if spec.block != "transformer" and spec.attention != "sdpa":
        raise ConfigError(
            f"{origin.get('model.attention', 'model.attention')}: block {spec.block!r} has no "
            "attention; model.attention is read by the transformer block only"
        )
    if spec.dim % spec.heads:
        raise ConfigError(
            f"{origin.get('model.heads', 'model.heads')}: model.dim {spec.dim} must be "
            f"divisible by model.heads {spec.heads}"
        )


def check_train(spec: TrainSpec, origin: dict[str, str]) -> None:
    """The optimiser's settings are ones AdamW and the loop take: each key inside its
    declaration (TrainSpec), a known precision."""
    check_declared(spec, "train", origin)


def check_block_sites(model: ModelSpec, spec: DiffusionSpec, origin: dict[str, str]) -> None:
    """Sites inside a block exist in the Transformer block only."""
    inside = [site for site in spec.sites if site not in ENCODER_SITES]
    if model.block != "transformer" and inside:
        raise ConfigError(
            f"{origin.get('diffusion.sites', 'diffusion.sites')}: sites {inside} are inside "
            f"the transformer block, and model.block is {model.block!r}; with it only "
            f"{list(ENCODER_SITES)} applies"
        )


class ProfilePatterns(dict):
    """A run profile's ``variants`` block (pattern -> layer), with the variants each paper's
    pattern may reach: a pattern a paper's config file declares is that paper's word about its
    own variants, so another paper's variant whose name happens to match it (a new FNA variant
    named ``*patch*``) is not changed by it; a pattern of params.yaml reaches every variant."""

    reach: dict[str, frozenset[str]]

    def __init__(
        self, layers: Mapping[str, Any], reach: Mapping[str, frozenset[str]] | None = None
    ) -> None:
        super().__init__(layers)
        self.reach = dict(reach or {})


# written as the mapping it is (a test or a tool may dump the params as YAML; the reach is
# the papers' files' to say, so a dumped params file is one file, whose patterns reach all)
for _dumper in {yaml.SafeDumper, yaml.Dumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)}:
    _dumper.add_representer(ProfilePatterns, yaml.representer.SafeRepresenter.represent_dict)


def pattern_reach(params: dict[str, Any], profile: str, pattern: str) -> frozenset[str] | None:
    """The variants a profile's pattern may reach (those its paper declares), or None when
    it is params.yaml's own and reaches every variant."""
    block = params["profiles"][profile].get("variants")
    return block.reach.get(pattern) if isinstance(block, ProfilePatterns) else None


def profile_variant_layers(
    params: dict[str, Any], profile: str, variant: str
) -> list[tuple[str, dict[str, Any]]]:
    """The layers ``profiles.<profile>.variants`` gives a variant: every pattern its name
    matches (fnmatch: ``*``, ``?``, ``[...]``), in file order, so a later pattern wins; a
    paper's pattern only for that paper's variants (:class:`ProfilePatterns`)."""
    layers = []
    for pattern, layer in (params["profiles"][profile].get("variants") or {}).items():
        reach = pattern_reach(params, profile, pattern)
        if fnmatch.fnmatchcase(variant, pattern) and (reach is None or variant in reach):
            where = f"profiles.{profile}.variants.{pattern}"
            layers.append((where, _check_layer(layer, where)))
    return layers


def check_profile_variants(params: dict[str, Any]) -> None:
    """Every pattern of every profile's ``variants`` block matches a variant it may reach and
    holds known keys: a pattern that matches none is a typo that would silently leave its
    settings out, and another profile's blocks are checked too, not only when that profile
    runs."""
    names = tuple(params.get("variants", {}))
    for profile, block in params.get("profiles", {}).items():
        for pattern, layer in (block.get("variants") or {}).items():
            where = f"profiles.{profile}.variants.{pattern}"
            matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
            if not matched:
                raise ConfigError(
                    f"{where}: matches no variant; a key here is a variant's name or a pattern "
                    "of names (fnmatch: *, ?, [...])"
                )
            reach = pattern_reach(params, profile, pattern)
            if reach is not None and not any(name in reach for name in matched):
                raise ConfigError(
                    f"{where}: matches no variant of the paper whose config file declares it "
                    f"(only other files' variants: {', '.join(matched)}); a paper's pattern "
                    "reaches only the variants that paper declares: name one of them, or move "
                    "the pattern to params.yaml to reach every paper's"
                )
            _check_layer(layer, where)


def active_profile(params: dict[str, Any], profile: str | None = None) -> str:
    profile = profile or params.get("profile")
    check_name(str(profile), tuple(params.get("profiles", {})), "profile")
    return str(profile)


TRACKING_MODES = ("live", "batch")
# torch.compile of a step (pdelab.training.compiled): declared here, torch-free, for the checks
COMPILE_MODES = ("off", "auto", "default", "reduce-overhead")


def tracking_mode(params: dict[str, Any], profile: str | None = None) -> str:
    """How a profile's runs reach MLflow (``profiles.<name>.tracking``, default live): ``live``,
    each training job logs as it goes; ``batch``, jobs write only their records and a sync
    logs them afterwards, which spares every job the mlflow import and the store's lock.
    Not part of a run's spec: switching it retrains nothing."""
    profile = active_profile(params, profile)
    mode = params["profiles"][profile].get("tracking", "live")
    check_name(str(mode), TRACKING_MODES, f"profiles.{profile}.tracking")
    return str(mode)


def compile_mode(params: dict[str, Any], profile: str | None = None) -> str:
    """How a profile's training steps are compiled (``profiles.<name>.compile``, default off:
    pdelab.training.compiled). Not part of a run's spec: switching it retrains nothing."""
    profile = active_profile(params, profile)
    mode = params["profiles"][profile].get("compile", "off")
    mode = "off" if mode is False else mode  # YAML reads a bare `off` as false
    check_name(str(mode), COMPILE_MODES, f"profiles.{profile}.compile")
    return str(mode)


def gpu_memory_gb(params: dict[str, Any], profile: str | None = None) -> float | None:
    """The GPU memory (GB) a profile's jobs get (``profiles.<name>.gpu_memory_gb``; None: not
    declared): the cost plan fits each job's micro-batch to it (pdelab.plan.card_fit). Not part
    of a run's spec: another card retrains nothing."""
    profile = active_profile(params, profile)
    value = params["profiles"][profile].get("gpu_memory_gb")
    if value is None:
        return None
    if not positive_number(value):
        raise ConfigError(
            f"profiles.{profile}.gpu_memory_gb: expected the card's memory in GB (a positive "
            f"number, e.g. 24, 40 or 80), got {value!r}"
        )
    return float(value)


def positive_number(value: Any) -> bool:
    """A finite number > 0 (not a flag, a NaN or an infinity)."""
    number = not isinstance(value, bool) and isinstance(value, int | float)
    return number and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class MultiGpu:
    """``profiles.<name>.multi_gpu``: a training job whose hours on one GPU exceed
    ``over_hours`` trains on several GPUs of one node, at most ``max_gpus`` (the cost plan
    proposes how many: pdelab.plan.cost.proposed_gpus)."""

    over_hours: float
    max_gpus: int


def multi_gpu(params: dict[str, Any], profile: str | None = None) -> MultiGpu | None:
    """A run profile's threshold for jobs on several GPUs (None: every job on one). Not part
    of a run's spec: the GPUs a job trains on change how it is computed, not what it is."""
    profile = active_profile(params, profile)
    value = params["profiles"][profile].get("multi_gpu")
    if value is None:
        return None
    where = f"profiles.{profile}.multi_gpu"
    if not isinstance(value, dict) or set(value) != {"over_hours", "max_gpus"}:
        raise ConfigError(
            f"{where}: expected {{over_hours: H, max_gpus: N}} (a job over H GPU-hours on one "
            f"GPU trains on up to N GPUs of one node), got {value!r}"
        )
    hours, gpus = value["over_hours"], value["max_gpus"]
    if not positive_number(hours):
        raise ConfigError(f"{where}.over_hours: expected a positive number of hours, got {hours!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"{where}.max_gpus: expected a whole number of GPUs >= 1, got {gpus!r}")
    return MultiGpu(float(hours), gpus)


def data_dir(profile: str, task: str) -> str:
    """Where the prepared data of a task lives (written by DVC's prepare stage)."""
    return f"data/{profile}/prepared/{task}"


def layers_of(
    params: dict[str, Any], task: str, variant: str, profile: str
) -> list[tuple[str, dict[str, Any]]]:
    """The layers a run's spec merges, in order, each named by its key in the params (the
    file that holds it: :class:`Sources`)."""
    check_name(task, tuple(params.get("tasks", {})), "task")
    check_name(variant, tuple(params.get("variants", {})), "variant")
    prof = params["profiles"][profile]
    return [
        ("defaults", _check_layer(params.get("defaults"), "defaults")),
        (f"tasks.{task}", _check_layer(params["tasks"][task], f"tasks.{task}")),
        (
            f"profiles.{profile}.overrides",
            _check_layer(prof.get("overrides"), f"profiles.{profile}.overrides"),
        ),
        (
            f"profiles.{profile}.tasks.{task}",
            _check_layer((prof.get("tasks") or {}).get(task), f"profiles.{profile}.tasks.{task}"),
        ),
        (f"variants.{variant}", _check_layer(params["variants"][variant], f"variants.{variant}")),
        *profile_variant_layers(params, profile, variant),
    ]


def origins(
    params: dict[str, Any], task: str, variant: str, profile: str | None = None
) -> dict[str, str]:
    """The layer that set each "section.key" last, for every key a layer sets
    (keys no layer sets hold the spec's default)."""
    return _merge(layers_of(params, task, variant, active_profile(params, profile)))[1]


def resolve(
    params: dict[str, Any], task: str, variant: str, seed: int, profile: str | None = None
) -> RunSpec:
    """The fully specified run; raises ConfigError naming the offending key."""
    profile = active_profile(params, profile)
    merged, origin = _merge(layers_of(params, task, variant, profile))
    model = build(ModelSpec, merged["model"], "model")
    diffusion = build(DiffusionSpec, merged["diffusion"], "diffusion")
    check_model(model, origin)
    check_diffusion(diffusion, origin)
    check_block_sites(model, diffusion, origin)
    train = build(TrainSpec, merged["train"], "train")
    check_train(train, origin)
    return RunSpec(
        task=task,
        variant=variant,
        seed=int(seed),
        profile=profile,
        device=str(params["profiles"][profile].get("device", "cpu")),
        data_dir=data_dir(profile, task),
        model=model,
        train=train,
        diffusion=canonical_diffusion(diffusion),
    )


@dataclass(frozen=True)
class Sources:
    """The file each entry of the merged params came from ("variants.fna" -> fractional
    attention's config.yaml); a key no entry holds (defaults, data, a run profile's own
    settings) is the params file's."""

    params: str  # the params.yaml read
    entries: Mapping[str, str] = field(default_factory=dict)

    def of(self, key: str) -> str:
        """The file that sets a dotted key, e.g. ``variants.fna.model.dim``."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.entries.get(".".join(parts[:n]))
            if found is not None:
                return found
        return self.params

    def locate(self, message: str) -> str:
        """A ConfigError's message prefixed with the file of the key it starts with, so that
        an error names the file to edit as well as the key."""
        key = re.split(r"[\s:=]", message, maxsplit=1)[0]
        if key.split(".")[0] not in (*TOP_LEVEL_KEYS, "variant_grids"):
            return message
        return f"{self.of(key)}: {message}"


def paper_config_files(path: Path | str = PARAMS_FILE) -> list[Path]:
    """The papers' config files that merge into this params file: those of the papers folder
    beside it, in the order pdelab.spec.plugins imports the papers."""
    return config_files(Path(path).parent / PAPERS_DIR)


def param_files(path: Path | str = PARAMS_FILE) -> list[Path]:
    """Every file the params are read from: params.yaml, then tasks.yaml and each paper's
    config file (what a rule that reads the whole params takes as inputs)."""
    return [Path(path), *config_layer_files(path)]


def load_params(path: Path | str = PARAMS_FILE) -> dict[str, Any]:
    """params.yaml merged with each paper's config file, the variant grids expanded into
    ``variants``. (DVC reads params.yaml alone: its data stages depend only on what stays there.)

    Every file goes through libyaml's parser where PyYAML has it (every job and every workflow
    parse reads them), refusing a key given twice in one mapping (YAML would keep the last
    silently, and DVC refuses such a file), and a key two config files set differently."""
    return load_with_sources(path)[0]


def load_with_sources(path: Path | str = PARAMS_FILE) -> tuple[dict[str, Any], Sources]:
    """:func:`load_params`, and the file each entry came from.

    The config files (tasks.yaml beside params.yaml, then each paper's config.yaml) merge
    first, entry by entry: an entry two of them define merges key by key, and a leaf two set
    differently is refused, naming both files. params.yaml is the researcher's layer on top:
    any key it sets wins at that key only, at every level (a task's ``train.lr``, a run
    profile's task block), the rest of the entry staying the config file's. Then each run
    profile that ``extends:`` another takes that profile's blocks under its own."""
    mine = read_yaml(path)
    entries: dict[str, str] = {}
    if not isinstance(mine, dict):
        return mine, Sources(str(path))
    configs: dict[str, Any] = {}
    for file in config_layer_files(path):
        merge_config(configs, read_yaml(file), str(file), mine, str(path), entries)
    params = under(configs, mine, "", str(path), entries)
    extend_profiles(params, entries)
    for name, block in (params.get("profiles") or {}).items():
        patterns = block.get("variants") if isinstance(block, dict) else None
        if isinstance(patterns, dict):  # the papers' patterns first, then params.yaml's (which
            # win: a run profile's own word, e.g. paper_mini's one epoch for every variant)
            own = {k for k in patterns if f"profiles.{name}.variants.{k}" not in entries}
            block["variants"] = {k: patterns[k] for k in sorted(patterns, key=lambda k: k in own)}
    params = expand_variant_grids(params, entries, str(path))
    scope_paper_patterns(params, entries)
    return params, Sources(str(path), entries)


def config_layer_files(path: Path | str = PARAMS_FILE) -> list[Path]:
    """The config files under params.yaml, in merge order: the tasks several papers share
    (tasks.yaml beside params.yaml), then each paper's config.yaml."""
    shared = Path(path).parent / SHARED_TASKS_FILE
    return [*([shared] if shared.is_file() else []), *paper_config_files(path)]


def merge_config(
    configs: dict[str, Any],
    config: Any,
    file: str,
    mine: dict[str, Any],
    params_file: str,
    entries: dict[str, str],
) -> None:
    """Add one config file's entries to ``configs`` (what the config files define together),
    recording the file of each entry, and of each key a later file adds to an entry, in
    ``entries``; a leaf two files set differently is refused, naming both."""
    for path, value in paper_entries(mapping(config, file), file, mine, params_file):
        *section, name = path
        into = configs
        for part in section:
            into = into.setdefault(part, {})
        key = ".".join(map(str, path))
        if name in into:
            into[name] = merge_leaves(into[name], value, key, file, entries)
        else:
            into[name] = copy.deepcopy(value)
            entries[key] = file


def merge_leaves(into: Any, value: Any, key: str, file: str, entries: dict[str, str]) -> Any:
    """Two config files' values of one key, merged key by key; a leaf set to two values is
    refused, naming both files."""
    if isinstance(into, dict) and isinstance(value, dict):
        for k, v in value.items():
            sub = f"{key}.{k}"
            if k in into:
                into[k] = merge_leaves(into[k], v, sub, file, entries)
            else:
                into[k] = copy.deepcopy(v)
                entries[sub] = file
        return into
    if into != value:
        first = Sources("", entries).of(key)
        raise ConfigError(
            f"{key}: set to {into!r} in {first} and to {value!r} in {file}; set it in one of "
            "them (or in params.yaml, which wins over both)"
        )
    return into


def under(
    configs: Any,
    mine: Any,
    key: str,
    params_file: str,
    entries: dict[str, str],
    inside: bool = False,
) -> Any:
    """params.yaml's value over the config files': params.yaml's keys first and winning at
    each leaf, the config files' other keys kept. Each key params.yaml sets at or inside a
    config file's entry (``inside``) is recorded as params.yaml's, so ``pdelab explain`` and
    the errors name the file that sets it."""
    if isinstance(configs, dict) and isinstance(mine, dict):
        merged = {}
        for k, v in mine.items():
            sub = f"{key}.{k}" if key else str(k)
            if k in configs:
                within = inside or sub in entries
                merged[k] = under(configs[k], v, sub, params_file, entries, within)
            else:
                merged[k] = v
                if inside:  # a key params.yaml adds to a config file's entry
                    entries[sub] = params_file
        for k, v in configs.items():
            merged.setdefault(k, v)
        return merged
    if inside:  # a value of params.yaml's replaces the config file's, keys and all
        for k in [k for k in entries if k.startswith(f"{key}.")]:
            del entries[k]
        entries[key] = params_file
    return copy.deepcopy(mine)


def extend_profiles(params: dict[str, Any], entries: dict[str, str]) -> None:
    """Each run profile with ``extends: <profile>``: that profile's settings and every
    paper's blocks for it (tasks, variant patterns, studies), under the profile's own keys,
    and its data block where it declares none, so that a second paper-scale profile is one
    block of params.yaml. Chains resolve in order; a cycle or an unknown name is refused."""
    profiles = params.get("profiles") or {}
    done: dict[str, dict[str, Any]] = {}

    def resolved(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in done:
            return done[name]
        block = profiles[name] if isinstance(profiles[name], dict) else {}
        base_name = block.get("extends")
        if base_name is None:
            done[name] = block
            return block
        where = f"profiles.{name}.extends"
        check_name(str(base_name), tuple(profiles), where)
        if base_name in chain:
            raise ConfigError(f"{where}: {' -> '.join((*chain, base_name))} is a cycle")
        base = resolved(str(base_name), (*chain, str(base_name)))
        own = {k: v for k, v in block.items() if k != "extends"}
        merged = _deep_merge(copy.deepcopy(dict(base)), own)
        merged["extends"] = base_name
        prefix = f"profiles.{base_name}."
        for k in list(entries):  # the base's entries are the extending profile's too
            if k.startswith(prefix):
                entries.setdefault(f"profiles.{name}.{k[len(prefix) :]}", entries[k])
        data = params.setdefault("data", {})
        if name not in data and base_name in data:
            data[name] = copy.deepcopy(data[base_name])
        done[name] = merged
        return merged

    for name in list(profiles):
        profiles[name] = resolved(name, (name,))


def scope_paper_patterns(params: dict[str, Any], entries: Mapping[str, str]) -> None:
    """Give each run profile's ``variants`` block the variants each paper's pattern may reach:
    those its own config file declares (``entries``: the file of each entry, grids' variants
    included), so that one paper's pattern never changes another paper's runs."""
    declared: dict[str, set[str]] = {}
    for name in params.get("variants") or {}:
        if (file := entries.get(f"variants.{name}")) is not None:
            declared.setdefault(file, set()).add(name)
    for profile, block in (params.get("profiles") or {}).items():
        patterns = block.get("variants") if isinstance(block, dict) else None
        if not isinstance(patterns, dict):
            continue
        reach = {
            pattern: frozenset(declared.get(file, ()))
            for pattern in patterns
            if (file := entries.get(f"profiles.{profile}.variants.{pattern}")) is not None
        }
        block["variants"] = ProfilePatterns(patterns, reach)


def read_yaml(path: Path | str) -> Any:
    """One params file, each key once per mapping, no alias inside its own anchor."""
    with open(path) as f:
        data = yaml.load(f, Loader=UniqueKeyLoader)
    check_acyclic(data, str(path))
    return data


def paper_entries(
    paper: dict[str, Any], file: str, params: dict[str, Any], params_file: str
) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(key path, value) of every entry a paper's config file defines, its keys checked: a
    paper adds to the run profiles that params.yaml defines, never a run profile's own keys."""
    allowed = (*NAMED_SECTIONS, "profiles")
    for key, value in paper.items():
        if key not in allowed:
            raise ConfigError(
                f"{file}: {key}: not a key of a paper's config file, which holds "
                f"{', '.join(allowed)}; {key} is shared by every paper, in params.yaml"
            )
        if key != "profiles":
            for name, entry in mapping(value, f"{file}: {key}").items():
                yield (key, name), entry
            continue
        for profile, block in mapping(value, f"{file}: profiles").items():
            if profile not in (params.get("profiles") or {}):
                raise ConfigError(
                    f"{file}: profiles.{profile}: no such run profile in {params_file}; a paper "
                    "adds to the run profiles params.yaml defines"
                )
            for section, names in mapping(block, f"{file}: profiles.{profile}").items():
                if section not in PROFILE_SECTIONS:
                    raise ConfigError(
                        f"{file}: profiles.{profile}.{section}: a paper's config file sets a run "
                        f"profile's {', '.join(PROFILE_SECTIONS)} only; {section} is the run "
                        "profile's own, in params.yaml"
                    )
                where = f"{file}: profiles.{profile}.{section}"
                for name, entry in mapping(names, where).items():
                    yield ("profiles", profile, section, name), entry


def mapping(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    return value


def check_acyclic(node: Any, where: str, inside: tuple[int, ...] = ()) -> None:
    """Refuse a YAML alias used inside its own anchored node (``a: &x [*x]``): the value would
    hold itself, and every reader would recurse without end."""
    if not isinstance(node, dict | list):
        return
    if id(node) in inside:
        raise ConfigError(
            f"{where}: an alias refers to the node it is anchored on, so the value holds itself; "
            "anchor a node and use its alias outside it"
        )
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        check_acyclic(
            value,
            f"{where}.{key}" if isinstance(node, dict) else f"{where}[{key}]",
            (*inside, id(node)),
        )


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, with a mapping's keys checked for repeats (merge keys ``<<`` may
    repeat what they merge: the mapping's own key wins, as YAML means)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(
                    f"{key_node.start_mark.name}: line {line}: key {key!r} is given twice in one "
                    f"mapping (first at line {seen[key]}); keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _deep_merge(into: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = _deep_merge(dict(into[key]), value)
        else:
            into[key] = value
    return into


def leaves(value: Any, key: str) -> Iterator[str]:
    """The dotted keys of a nested mapping's leaves, under ``key``."""
    if not isinstance(value, dict) or not value:
        yield key
        return
    for k, v in value.items():
        yield from leaves(v, f"{key}.{k}")


def expand_variant_grids(
    params: dict[str, Any], entries: dict[str, str] | None = None, params_file: str = "params.yaml"
) -> dict[str, Any]:
    """``variant_grids``: a family of variants declared once, as a name pattern, a layer every
    member shares and axes of labelled layers; each combination of labels (in the axes'
    order, the last varying fastest) is a variant named by the pattern, its layer the shared
    one deep-merged with its labels' layers. The grids are replaced by the variants they
    make, after the variants typed out; a name given twice is an error naming both (and both
    files, from ``entries``: the file of each entry, which the variants made are added to),
    but for params.yaml's keys for a variant a paper's grid makes, which win at the leaf."""
    entries = {} if entries is None else entries
    grids = params.pop("variant_grids", None) or {}
    variants = dict(params.get("variants") or {})
    for pattern, grid in grids.items():
        where = f"variant_grids.{pattern}"
        file = entries.get(where, params_file)
        if not isinstance(grid, dict) or set(grid) - {"layer", "axes"} or "axes" not in grid:
            raise ConfigError(f"{where}: expected a mapping with axes (and a shared layer)")
        combos: list[tuple[dict[str, str], dict[str, Any]]] = [({}, grid.get("layer") or {})]
        for axis, labels in grid["axes"].items():
            if not isinstance(labels, dict) or not labels:
                raise ConfigError(f"{where}.axes.{axis}: expected label -> layer mappings")
            combos = [
                (
                    {**names, axis: str(label)},
                    _deep_merge(copy.deepcopy(layer), copy.deepcopy(extra)),
                )
                for names, layer in combos
                for label, extra in labels.items()
            ]
        for names, layer in combos:
            try:
                name = pattern.format(**names)
            except KeyError as err:
                raise ConfigError(
                    f"{where}: the pattern names axis {err}, which it lacks"
                ) from None
            other = entries.get(f"variants.{name}", params_file)
            if name in variants and other == params_file and file != params_file:
                # params.yaml's keys for a variant a paper's grid makes: they win at the leaf
                for leaf in leaves(variants[name], f"variants.{name}"):
                    entries[leaf] = params_file
                layer = _deep_merge(layer, variants[name])
            elif name in variants:
                raise ConfigError(
                    f"{where}: makes variant {name!r}, which is defined already (the grid in "
                    f"{file}, the variant in {other})"
                )
            variants[name] = layer
            if where in entries:
                entries[f"variants.{name}"] = file
    if grids:
        params["variants"] = variants
    return params
