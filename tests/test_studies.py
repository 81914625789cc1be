"""The typed study (pdelab.spec.studies): resolved once per run profile, its study kind required,
and every variant it trains shown in its table."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pdelab.report.__main__ import main
from pdelab.spec.config import ConfigError, load_params
from pdelab.spec.display_names import display_name
from pdelab.spec.run_sheet import validate
from pdelab.spec.studies import Study, rule_params, studies_of, study

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_PARAMS = yaml.safe_load((GOLDEN / "params.yaml").read_text())
NEW = "extra_variant"


def test_studies_resolve_for_a_run_profile() -> None:
    params = load_params("params.yaml")
    studies = studies_of(params, "smoke")
    assert list(studies) == list(params["studies"])
    seeds = studies["seeds"]
    assert isinstance(seeds, Study) and seeds.kind == "seeds" and seeds.baseline == "baseline"
    assert seeds.seeds == tuple(params["studies"]["seeds"]["seeds"])
    assert seeds["variants"] == list(seeds.variants)  # as a mapping: its params.yaml block
    assert seeds.paper.name == "diffusion_positions"


def test_a_study_kind_is_required() -> None:
    params = copy.deepcopy(load_params("params.yaml"))
    del params["studies"]["seeds"]["kind"]
    with pytest.raises(ConfigError, match=r"studies\.seeds\.kind: missing; .*accuracy"):
        validate(params, "smoke")


def test_a_study_kind_must_be_registered() -> None:
    params = copy.deepcopy(load_params("params.yaml"))
    params["studies"]["seeds"]["kind"] = "seedz"
    with pytest.raises(ConfigError, match=r"studies\.seeds\.kind: unknown name 'seedz'"):
        study(params, "seeds", "smoke")


def test_rule_params_leave_out_a_key_at_its_earlier_meaning() -> None:
    """`kind: accuracy` was implicit before the study kind became required: a study block
    that states it has the same rule params as before, so its finished table stays current."""
    params = load_params("params.yaml")
    positions = study(params, "positions", "smoke")
    assert '"kind"' not in rule_params(positions)
    assert '"kind": "seeds"' in rule_params(study(params, "seeds", "smoke"))


@pytest.mark.parametrize("name", list(GOLDEN_PARAMS["studies"]))
def test_a_variant_added_to_a_study_shows_in_its_table(name: str, tmp_path: Path) -> None:
    """Add a variant to the study (a copy of its first one, with runs of its own) and write
    its table: the new variant has a row, a column or a line under the table."""
    params = copy.deepcopy(GOLDEN_PARAMS)
    block = params["studies"][name]
    first = block["variants"][0]
    params["variants"][NEW] = copy.deepcopy(params["variants"][first])
    block["variants"].append(NEW)
    for profile in params["profiles"].values():  # a profile that runs part of it runs it too
        own = (profile.get("studies") or {}).get(name) or {}
        if "variants" in own:
            own["variants"].append(NEW)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    summary = pd.read_parquet(GOLDEN / "summary.parquet")
    added = summary[summary["variant"] == first].assign(variant=NEW)
    pd.concat([summary, added]).to_parquet(tmp_path / "summary.parquet")
    shutil.copytree(GOLDEN / "cost", tmp_path / "cost")
    (tmp_path / "tables").mkdir()
    md, tex = tmp_path / "tables" / f"{name}.md", tmp_path / "tables" / f"{name}.tex"
    main(
        [
            "study",
            name,
            "--params",
            str(tmp_path / "params.yaml"),
            "--summary",
            str(tmp_path / "summary.parquet"),
            "--md",
            str(md),
            "--tex",
            str(tex),
            "--figure",
            str(tmp_path / f"{name}.png"),
        ]
    )
    assert NEW in md.read_text()
    unstacked = tex.read_text().replace(r" \\{} ", " ")  # a long header stacks its words
    assert display_name(NEW) in unstacked  # LaTeX names it in words ("extra variant")
