"""pdelab.plan.compile_check: it finds graph breaks (with file:line) and recompiles, and every
mechanism family of the smoke and paper profiles (the papers' own kernels and blocks
included), shrunk, compiles its training step without either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor

from pdelab.models import factory
from pdelab.models.attention import SDPAKernel
from pdelab.plan import compile_check
from pdelab.plan.compile_check import Checked, Selected
from pdelab.spec.config import load_params

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
PROFILES = ("smoke", "paper")
CHECKED: dict[tuple[str, bool], Checked] = {}  # each family checked once for all its tests


def checked(one: Selected, checkpointed: bool = False) -> Checked:
    """compile_check.check of one model, once per test session."""
    key = (one.name, checkpointed)
    if key not in CHECKED:
        CHECKED[key] = compile_check.check(one, checkpointed=checkpointed)
    return CHECKED[key]


def profile_families() -> dict[tuple[str, str], Selected]:
    """One model of each (task kind, mechanism family) of the profiles, the first profile's
    where both have it."""
    params, found = load_params(PARAMS), {}
    for profile in PROFILES:
        for one in compile_check.select(params, profile):
            found.setdefault((one.kind, one.family), one)
    return found


FAMILIES = profile_families()


def families() -> list[object]:
    """The families as test parameters, named "task kind/family"."""
    return [pytest.param(one, id=f"{kind}/{family}") for (kind, family), one in FAMILIES.items()]


@pytest.mark.parametrize("selected", families())
def test_each_family_compiles_without_a_break_or_recompile(selected: Selected) -> None:
    found = checked(selected)
    assert not found.error, found.error
    assert found.graphs == 1 and found.break_count == 0, "\n".join(found.lines())
    assert found.recompiles == [], "\n".join(found.lines())


@pytest.mark.parametrize(
    "name", ["listops/in_attention", "retrieval/baseline", "wikitext/baseline"]
)
def test_checkpointed_blocks_compile_without_a_break_or_recompile(name: str) -> None:
    [one] = compile_check.select(load_params(PARAMS), "smoke", [name])
    found = checked(one, checkpointed=True)
    assert found.ok, "\n".join(found.lines())


def test_the_default_selection_is_one_model_per_task_kind_and_family() -> None:
    chosen = compile_check.select(load_params(PARAMS), "smoke")
    keys = [(one.kind, one.family) for one in chosen]
    assert len(keys) == len(set(keys))
    kinds = {one.kind for one in chosen}
    assert {"classification", "pair classification", "image classification", "lm"} <= kinds
    assert {"translation"} <= kinds
    families = {one.family for one in chosen}
    assert {"sdpa", "sdpa+diffusion[after_mlp]", "sdpa+smoothing", "ldn", "pde"} <= families


def test_only_selects_every_matching_model() -> None:
    chosen = compile_check.select(load_params(PARAMS), "smoke", ["listops/*_h*"])
    assert chosen and all(one.name.startswith("listops/") for one in chosen)
    assert len({one.name for one in chosen}) == len(chosen) > 1


def step_with_host_read(x: Tensor, mask: Tensor) -> Tensor:
    if bool(mask.all()):  # a host sync: a graph break, and a branch the batch decides
        return (x * 2).sum()
    return (x * mask).sum()


def test_a_host_read_is_found_as_a_break_at_its_line() -> None:
    batch = ({"x": torch.randn(2, 8, requires_grad=True)}, torch.ones(2, 8, dtype=torch.bool))
    graphs, breaks, sites = compile_check.graph_breaks(
        lambda inputs, mask: step_with_host_read(inputs["x"], mask), batch
    )
    assert breaks >= 1 and graphs >= 1
    line = step_with_host_read.__code__.co_firstlineno + 1
    assert any(site.where.startswith(f"tests/test_compile_check.py:{line}") for site in sites)


def test_a_branch_on_the_batch_is_found_as_a_recompile() -> None:
    x = torch.randn(2, 8, requires_grad=True)
    padded = torch.ones(2, 8, dtype=torch.bool)
    padded[0, 5:] = False
    batches = [({"x": x}, padded), ({"x": x}, torch.ones(2, 8, dtype=torch.bool))]

    def step(inputs: dict[str, Tensor], mask: Tensor) -> tuple[Tensor]:
        return (step_with_host_read(inputs["x"], mask),)

    with compile_check.quiet_dynamo():
        found = compile_check.recompiles(step, batches)
    assert found and all("step_with_host_read" in r or "resume" in r for r in found)


def test_the_json_output_names_each_model_and_the_exit_status_follows_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--params", str(PARAMS), "--profile", "smoke", "--only", "listops/baseline", "--json"]
    assert compile_check.main(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["profile"] == "smoke" and document["failed"] == 0
    assert "shrunk" in document["shrunk"]["note"]
    [model] = document["models"]
    assert model["name"] == "listops/baseline" and model["ok"] and model["breaks"] == []

    broken = Checked("listops/baseline", "classification", "sdpa", graphs=2, break_count=1)
    monkeypatch.setattr(compile_check, "check", lambda *a, **k: broken)
    assert compile_check.main(args) == 1
    assert json.loads(capsys.readouterr().out)["models"][0]["ok"] is False


def test_an_image_model_passes_no_mask_to_attention_decided_from_its_manifest() -> None:
    """Images are never padded (pdelab.models.factory.unpadded): their attention gets no mask,
    so SDPA may take its flash kernel, without reading a batch's values; the logits are those
    of the same weights reading the all-real mask, and a padded batch is refused."""
    image = FAMILIES["image classification", "sdpa"]
    run, shape = compile_check.shrunk(image.model)
    manifest = shape.manifest()
    assert factory.unpadded(manifest)
    text = FAMILIES["classification", "sdpa"]
    assert not factory.unpadded(compile_check.shrunk(text.model)[1].manifest())
    torch.manual_seed(0)
    model = factory.build_model(run, manifest).to(torch.float64).eval()
    seen: list[Tensor | None] = []
    for kernel in (m for m in model.modules() if isinstance(m, SDPAKernel)):
        kernel.register_forward_pre_hook(
            lambda _, args, kwargs: seen.append(kwargs["key_padding_mask"]), with_kwargs=True
        )
    inputs, _ = compile_check.two_batches(run, shape, 2)[0]
    logits = model(**inputs)
    assert seen and all(mask is None for mask in seen)
    model.encoder.unpadded = False  # the same weights, reading the mask
    assert torch.allclose(model(**inputs), logits, rtol=0, atol=1e-12)
    model.encoder.unpadded = True
    inputs["mask"][0, -1] = False
    with pytest.raises(RuntimeError, match="unpadded encoder was given a padded batch"):
        model(**inputs)
