"""Linear Diffusion Networks' theory checks: zero row sums over every kernel configuration,
Theorem 1's L against the band, A.4's norm claim refuted by search, the mean token's drift,
FLOPs in T, the trained-model probe, and the rule that writes them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from pdelab.models.transformer import Classifier
from pdelab.papers.linear_diffusion import THEORY_OUTPUTS, theory, theory_report
from pdelab.papers.linear_diffusion.layer import LDNBlock
from pdelab.report.claims import (
    AMBIGUOUS,
    FAILS,
    FINDING_VERDICTS,
    HOLDS,
    NO_EXPERIMENT,
    readings_of,
)
from pdelab.spec.plugins import import_mechanisms

RULES = Path(theory.__file__).with_name("rules.smk")
import_mechanisms()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sums() -> pd.DataFrame:
    return theory.row_sum_check(t=32, c=8, seeds=2)


@pytest.mark.parametrize("config", list(theory.ROW_SUM_CONFIGS))
def test_rows_sum_to_zero_and_the_step_is_stochastic(sums, config: str) -> None:
    for dtype, tol in (("float64", 1e-13), ("float32", 1e-5)):
        part = sums[(sums["config"] == config) & (sums["dtype"] == dtype)]
        assert len(part) == 2
        assert (part[["diffusion_row_sum", "attention_row_sum"]] < tol).all().all()
        assert (part[["diffusion_min_offdiag", "attention_min_offdiag"]] >= 0).all().all()
        assert (part[["diffusion_step_bound", "attention_step_bound"]] <= 1 + tol).all().all()
        assert (part["euler_min"] >= -tol).all() and (part["euler_row_sum_error"] < 10 * tol).all()
        assert ((part["norm_inf"] - 1).abs() < 10 * tol).all()


def test_the_unguarded_step_is_not_stochastic() -> None:
    """Without the step bound a large step gives negative diagonal entries (the check can
    fail)."""
    torch.manual_seed(0)
    layer = LDNBlock(8, step_bound=False, dt=50.0, dt_att=50.0).double()
    ops = layer.operators(theory.layernormed(1, 32, 8, torch.float64, 0))
    assert theory.kernel_measures(ops)["euler_min"] < -1


def test_support_power_counts_the_hops_of_a_band() -> None:
    t = 20
    i = torch.arange(t)
    for w in (1, 3, 7, 19):
        band = (i[:, None] - i[None, :]).abs() <= w
        assert theory.support_power(band, t) == math.ceil((t - 1) / w)
    forward = (i[:, None] - i[None, :] >= 0) & ((i[:, None] - i[None, :]) <= 3)
    assert theory.support_power(forward, t) == 0  # not strongly connected: no power


def test_theorem_1_measured_against_the_band() -> None:
    frame = theory.global_dependency(lengths=(16, 64), sigmas=(1.0, 4.0))
    assert (frame["reach"] == [5, 5, 22, 22]).all()  # float32: g >= eps up to ~5.6 sigma
    assert (frame["L"] == frame["predicted"]).all() and not frame["zeroed"].any()
    forward = theory.global_dependency(lengths=(16,), sigmas=(2.0,), direction="forward")
    assert forward["L"].isna().all() and forward["predicted"].isna().all()


def test_theorem_1_as_stated_has_a_counterexample() -> None:
    """Every K_ts >= 0 (the theorem's own hypothesis, the diagonal included), strongly
    connected, dt = 1 <= 1 / sum_s K_ts: A = I + dt (K - diag(K 1)) is the swap matrix and
    no power of it is positive."""
    found = theory.theorem_1_counterexample(max_power=10)
    assert found["A"] == [[0, 1], [1, 0]] and found["positive"] == []
    assert all(v >= 0 for row in found["K"] for v in row)
    assert found["dt"] <= min(1 / sum(row) for row in found["K"])


def test_the_exact_support_sees_the_diagonal_the_step_bound_zeroes() -> None:
    """sigma 8 at T = 16: the band covers every pair (w = 45) but the step bound is active, so
    the row of the largest degree has A_tt = 0 exactly and A itself is not positive: L = 2,
    not ceil((T - 1) / w) = 1, whatever residue A's float32 entries keep there."""
    frame = theory.global_dependency(lengths=(16,), sigmas=(8.0,))
    row = frame.iloc[0]
    assert row["zeroed"] and row["predicted"] == 1 and row["L"] == 2
    torch.manual_seed(0)
    layer = LDNBlock(8, attention=False, sigma=8.0)
    x = theory.layernormed(1, 16, 8, torch.float32, 0)
    support = theory.exact_support(layer, x)[0]
    assert (~support.diagonal()).sum() == 1 and support.fill_diagonal_(True).all()
    guarded = LDNBlock(8, attention=False, sigma=8.0, step_bound=False)
    assert theory.exact_support(guarded, x).diagonal(dim1=-2, dim2=-1).all()


def test_a4_norm_reaches_the_sharp_bound_sqrt_t() -> None:
    """Every row weighting one column: A close to 1 e_j^T, ||A||_2 = sqrt(T) to float64's
    precision (7.99 or more at T = 64), A stochastic and non-negative; a doubly stochastic A
    (a symmetric K) keeps ||A||_2 = 1, the layer's own K does not."""
    norm, bound = theory.sharp_norm(64)
    assert bound == 8.0 and 7.99 <= norm <= bound + 1e-9
    for kernels in ("K", "K+D"):
        layer, x = theory.hub_layer(16, kernels=kernels)
        with torch.no_grad():
            a = theory.euler_matrix(layer.operators(x))[0]
        assert (a >= 0).all() and ((a.sum(-1) - 1).abs() < 1e-12).all()
        assert float(torch.linalg.matrix_norm(a, ord=2)) > 4.0 - 1e-9
    mass = theory.mass_check(t=16, c=8, seeds=1).set_index("kernel")
    assert abs(mass.loc["symmetric K", "norm_2"] - 1) < 1e-12
    assert mass.loc["default K", "norm_2"] > 1 + 1e-6


def test_a4_norm_claim_fails_for_kernels_the_layer_produces() -> None:
    frame = theory.norm_search(lengths=(8, 16), draws=2, steps=30)
    assert (frame["ascent"] >= frame["random"]).all()
    assert frame["ascent"].max() > 1.05  # ||I + dt K||_2 > 1: A.4's conclusion fails
    assert ((frame["norm_inf"] - 1).abs() < 1e-9).all()  # the infinity norm is 1
    assert (frame["euler_min"] >= -1e-12).all()  # and A stays non-negative throughout
    assert (frame["ascent"] <= frame["max_column_sum"].pow(0.5) + 1e-9).all()
    assert ((frame["construction"] - frame["bound"]).abs() < 1e-9).all()  # the search finds it
    assert (frame["largest"] == frame[["ascent", "construction"]].max(axis=1)).all()


def test_the_mean_token_is_kept_only_by_a_symmetric_kernel() -> None:
    frame = theory.mass_check(t=24, c=8, seeds=2).groupby("kernel")
    worst = frame[["column_sum_error", "drift"]].max()
    assert worst.loc["symmetric K", "column_sum_error"] < 1e-12
    assert worst.loc["symmetric K", "drift"] < 1e-12
    for name in ("default K", "default K + D", "forward-only K"):
        assert worst.loc[name, "drift"] > 1e-3, name


def test_flops_grow_linearly_in_t_only_at_fixed_widths() -> None:
    frame = theory.cost_in_length(lengths=(256, 512), c=8)
    slopes = theory.growth_exponent(frame)
    assert slopes["LDN banded (initial widths 4, 16)"] < 1.3
    assert slopes["LDN reference (all T^2 pairs)"] > 1.8
    assert slopes["Transformer block (SDPA)"] > 1.3  # attention is counted (math backend)


def test_the_probe_measures_a_models_layers() -> None:
    torch.manual_seed(0)
    model = Classifier(
        2, vocab_size=20, max_len=40, dim=8, layers=2, heads=1, mlp_dim=8, block="ldn",
        block_options={"sigma": 1.0, "sigma_att": 1.0},
    ).eval()  # fmt: skip
    ids = torch.randint(2, 20, (3, 40))
    mask = torch.ones(3, 40, dtype=torch.bool)
    mask[1, 30:] = False
    rows = theory_report.probe_batch(model, ids, mask)
    assert [r["layer"] for r in rows] == [0, 1]
    for r in rows:
        assert r["diffusion_row_sum"] < 1e-5 and r["attention_row_sum"] < 1e-5
        assert r["euler_min"] >= -1e-6 and abs(r["norm_inf"] - 1) < 1e-5
    # reach 5 + 5 per layer: two layers link |t - s| <= 10 only, far from all 40 x 40
    assert rows[0]["linked_share"] < rows[1]["linked_share"] < 0.6
    assert all(r["linked_share_self"] >= r["linked_share"] for r in rows)
    assert 29 / 5 <= rows[0]["layers_needed"] <= math.ceil(39 / 5) + 1  # T = 40, or 30 real


def test_the_step_bound_hides_a_dependency_the_euler_matrix_omits() -> None:
    """Where the step bound zeroes A_tt, the Euler matrix says output t ignores input t, but
    the layer's Jacobian (through F and psi, which read h_t) does not: the support to compose
    is A's with the diagonal."""
    torch.manual_seed(0)
    layer = LDNBlock(4, dt=50.0, dt_att=50.0, sigma=1.0, sigma_att=1.0).double().eval()
    x = theory.layernormed(1, 12, 4, torch.float64, 0)
    tokens = theory.layernormed(1, 12, 4, torch.float64, 1)
    support = theory.exact_support(layer, x)[0]
    zeroed = (~support.diagonal()).nonzero().flatten().tolist()
    assert zeroed  # the bound is active and zeroes a diagonal entry
    jac = torch.autograd.functional.jacobian(lambda h: layer(h, None, tokens=tokens), x)
    for t in zeroed:
        assert jac[0, t, :, 0, t, :].abs().max() > 1e-3
    for name in ("diffusion", "attention"):  # without F, psi still reads h_t
        layer.local = None
        jac = torch.autograd.functional.jacobian(lambda h: layer(h, None), x)
        assert jac[0, zeroed[0], :, 0, zeroed[0], :].abs().max() > 1e-6, name


@pytest.mark.slow
def test_the_cli_writes_every_output_and_the_rule_declares_them(tmp_path: Path) -> None:
    table = theory_report.write_all(tmp_path, {}, "smoke")
    for name in theory_report.OUTPUTS.values():
        assert (tmp_path / name).stat().st_size > 0, name
    assert theory_report.OUTPUTS == THEORY_OUTPUTS
    assert set(table["verdict"]) <= set(FINDING_VERDICTS)  # the claims kit's words only
    verdicts = dict(zip(table["check"].str[:9], table["verdict"], strict=True))
    assert verdicts["Row sums "] == HOLDS
    rows = table.set_index("check")
    stated = rows.loc[theory_report.THEOREM_1]
    assert stated["verdict"] == FAILS and "the swap" in stated["ours"]  # the counterexample
    assert "K = [[0, 1], [1, 0]]" in stated["ours"] and "every K_ts ≥ 0" in stated["ours"]
    layer = rows.loc["Theorem 1 on the layer (two-sided φ, step bound on)"]
    assert layer["verdict"] == HOLDS and "in 18 of 20 cases" in layer["ours"]
    assert "truncates g" in layer["ours"]
    a4 = rows[rows.index.str.startswith("A.4")].iloc[0]
    assert "8.000 at T = 64" in a4["ours"] and "√T = 8.00" in a4["ours"]
    assert "doubly stochastic" in a4["ours"]
    md = (tmp_path / THEORY_OUTPUTS["table"]).read_text()
    assert "not a reproduction" in md and "0 trained models" in md
    text = RULES.read_text()
    for name in THEORY_OUTPUTS.values():
        assert f'"results/{name}"' in text, name
    assert "--out-dir results" in text


def _trained_rows() -> pd.DataFrame:
    """The probe's rows of one small untrained LDN classifier, standing in for a trained run."""
    torch.manual_seed(0)
    model = Classifier(
        2, vocab_size=20, max_len=16, dim=8, layers=1, heads=1, mlp_dim=8, block="ldn"
    ).eval()
    rows = theory_report.probe_batch(model, torch.randint(2, 20, (2, 16)), None)
    return pd.DataFrame([{"task": "listops", "variant": "ldn", "seed": 0} | r for r in rows])


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """The theory checks written once, with one model's probe as this profile's."""
    out = tmp_path_factory.mktemp("theory")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(theory_report, "trained_measures", lambda runs: _trained_rows())
        table = theory_report.write_all(out, {"listops/ldn/0": out}, "smoke")
    return table.set_index("check"), out


def test_trained_values_are_quoted_as_this_profiles_never_judged(written) -> None:
    """The findings hold in any profile: their verdicts rest on random and constructed kernels,
    and every trained model's value in a cell is named as this profile's."""
    table, _ = written
    for check in ("Row sums of K and D are zero", "Theorem 1 on the layer (two-sided φ, step "
                  "bound on)"):  # fmt: skip
        assert theory_report.TRAINED in table.loc[check, "ours"], check
    assert "; trained models" not in " ".join(table["ours"])
    a4 = table[table.index.str.startswith("A.4")].iloc[0]
    assert f"{theory_report.TRAINED}: up to" in a4["ours"]


def test_a4_is_ambiguous_as_printed_with_each_norms_reading(written) -> None:
    """A.4 leaves ‖H‖ undefined: as the spectral or Frobenius norm the bound fails, token by
    token (the proof's convex combinations) it holds; the row is ambiguous as printed and
    shows each reading, in the CSV and in the table."""
    table, out = written
    a4 = table[table.index.str.startswith("A.4")].iloc[0]
    assert a4["verdict"] == AMBIGUOUS
    readings = {r.name: r for r in readings_of(a4["readings"])}
    assert readings["‖H‖ the spectral norm"].verdict == FAILS
    assert readings["‖H‖ the Frobenius norm"].verdict == FAILS
    token = readings["max_t ‖h_t‖₂, token by token as the proof argues"]
    assert token.verdict == HOLDS and "‖A‖_∞ = 1.000" in token.result
    md = (out / THEORY_OUTPUTS["table"]).read_text()
    assert "Readings: ‖H‖ the spectral norm: grows by up to 8.000" in md


def test_the_cost_row_is_the_papers_claim_as_written(written) -> None:
    """Sec. 3.8 says the layer scales to long sequences; it never claims linear cost. The row
    reads the kernel as printed (all T² pairs: quadratic) and names the banded path ours."""
    table, _ = written
    assert not table.index.str.contains("inear").any()
    row = table.loc["The layer scales to long sequences"]
    assert row["quote"] == "This scales to long sequences" and row["verdict"] == NO_EXPERIMENT
    assert "scores all T² pairs, 1.9" in row["ours"] and "our banded truncation" in row["ours"]
    assert "T²" in row["reason"]


def test_the_table_states_only_what_the_paper_claims(written) -> None:
    """The paper claims zero row sums, never column sums: no row judges the mean token's
    drift (it stays a measure and a panel). Theorem 1's row is titled as A.2 states it, with
    A.1's operator and both hypotheses, not as I + δt K with K ≥ 0."""
    table, out = written
    assert not table.index.str.contains("Mass|mean token").any()
    assert theory_report.THEOREM_1 in table.index
    for title in (theory_report.THEOREM_1, "K − diag(K1)", "K_ts ≥ 0", "strongly connected"):
        assert title in theory_report.THEOREM_1
    assert not any("I + δt K is" in check for check in table.index)
    assert len(theory_report.THEOREM_1) <= 100  # the report's cell: shown whole
    md = (out / THEORY_OUTPUTS["table"]).read_text()
    assert "mean token" not in md and "A = I + δt (K − diag(K1))" in md


def test_checks_of_the_layer_are_marked_as_our_code(written) -> None:
    """Row sums and Theorem 1 on the layer measure pdelab's implementation: the CSV marks
    them (the audit passes it on), the table names them so; the paper's own statements not."""
    table, out = written
    own = table["own_code"].astype(bool)
    assert set(own[own].index) == {theory_report.ROW_SUMS, theory_report.THEOREM_1_LAYER}
    csv = pd.read_csv(out / THEORY_OUTPUTS["claims"]).set_index("check")
    assert bool(csv.loc[theory_report.ROW_SUMS, "own_code"])
    assert not bool(csv.loc[theory_report.THEOREM_1, "own_code"])
    md = (out / THEORY_OUTPUTS["table"]).read_text()
    assert f"{theory_report.THEOREM_1_LAYER} (a check of our code)" in md
