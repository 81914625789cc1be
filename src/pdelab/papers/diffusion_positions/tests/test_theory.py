"""Layer I checks of where-to-add-pde-diffusion: closed forms vs the operator pdelab runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from pdelab.models.diffusion import laplacian_matrix
from pdelab.papers.diffusion_positions import theory, theory_report


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Many tiny dense problems: extra BLAS threads only spin on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def replicate() -> pd.DataFrame:
    return theory.replicate_padding_check()


def test_spectrum_matches_closed_form() -> None:
    table = theory.spectrum_check()
    assert list(table["L"]) == list(theory.LENGTHS)
    assert (table["max_abs_error"] < 1e-12).all()


def test_kappa_closed_form_matches_operator_and_is_below_one() -> None:
    table = theory.contraction_check()
    assert (table["abs_error"] < 1e-12).all()
    assert (table["norm"] <= 1 + 1e-12).all() and (table["norm"] >= 1 - 1e-12).all()
    inside = table[(table["alpha"] > 0) & (table["alpha"] < 0.5) & (table["L"] >= 2)]
    assert len(inside) > 50 and (inside["kappa"] < 1).all()
    # |1 - 4a sin^2| peaks at k = 1 for every alpha <= 1/2, so Eq. 28's 1 + alpha*lambda_1 holds
    assert np.allclose(table["kappa_closed"], table["kappa_paper"], atol=1e-12)
    # ... while Eq. 27's "0 <= 1 - 4 alpha <= mu_k" fails for alpha > 1/4: the top multiplier
    # 1 - 4 alpha cos^2(pi / 2L) turns negative once alpha > 1 / (4 cos^2(pi / 2L)) -> 1/4
    top = 1 - 4 * table["alpha"] * np.cos(np.pi / (2 * table["L"])) ** 2
    assert np.allclose(table["min_mu"], top, atol=1e-12)
    assert (table["min_mu"] > -1 - 1e-12).all()
    assert (table.loc[table["alpha"] <= 0.25, "min_mu"] >= -1e-12).all()
    long = table[(table["L"] >= 16) & (table["alpha"] >= 0.3) & (table["alpha"] < 0.5)]
    assert len(long) > 10 and (long["min_mu"] < 0).all()


def test_kappa_formula_spot_values() -> None:
    assert theory.kappa_closed_form(0.25, 2) == pytest.approx(0.5)
    assert theory.kappa_closed_form(0.1, 16) == pytest.approx(1 - 0.4 * math.sin(math.pi / 32) ** 2)


def test_energy_dissipates_on_random_inputs_and_decays_monotonically() -> None:
    check = theory.energy_dissipation_check().set_index("config")
    single = [name for name, (strides, _) in theory.ENERGY_CONFIGS.items() if strides == (1,)]
    for name in [*single, "h=1,2,4, a=0.16 each"]:
        assert check.loc[name, "fraction_dissipating"] == 1.0
        assert check.loc[name, "max_sampled_ratio"] < 1
        assert check.loc[name, "worst_case_gain"] <= 1 + 1e-12
    decay = theory.energy_decay(steps=30)
    for name in [*single, "h=1,2,4, a=0.16 each"]:
        part = decay[decay["config"] == name]
        assert part["monotone"].all()
        assert part["mean_ratio"].is_monotonic_decreasing
        assert part["mean_ratio"].iloc[-1] < 0.05


def test_stride_one_energy_is_not_dissipated_by_every_multiscale_budget() -> None:
    """Cor. 4.5 (multi-scale dissipates E) holds for the paper's even split but not in general:
    a stride-4-heavy split and a stride-2-only step can raise the stride-1 energy."""
    gains = theory.energy_gain_table()
    assert (gains.loc["h=1,2,4, a=0.16 each"] < 1).all()
    assert (gains.loc["h=1,2,4, a=(0.04,0.04,0.40)"] > 1.08).all()
    assert (gains.loc["h=2, a=0.1"] > 1.005).all()
    # the worst case is attained: a concrete x whose energy grows under one step
    n, strides, alphas = 16, (1, 2, 4), (0.04, 0.04, 0.40)
    op = theory.step_matrix(n, strides, alphas)
    m = -laplacian_matrix(n, 1)
    w, v = torch.linalg.eigh(m)
    half = v[:, 1:] / torch.sqrt(w[1:])
    _, vec = torch.linalg.eigh(half.T @ op.T @ m @ op @ half)
    x = half @ vec[:, -1]
    assert (op @ x) @ m @ (op @ x) > 1.2 * (x @ m @ x)


@pytest.mark.parametrize("name", list(theory.FREQUENCY_CONFIGS))
def test_frequency_response_matches_closed_form(name: str) -> None:
    strides, alphas = theory.FREQUENCY_CONFIGS[name]
    resp = theory.frequency_response(strides, alphas)
    assert (resp["abs_error"] < 1e-12).all() and (resp["residual"] < 1e-10).all()
    assert resp["closed"].max() <= 1 + 1e-12 and resp["closed"].min() >= -1
    assert resp["closed"].iloc[0] == pytest.approx(1.0)  # the constant passes


def test_strided_scales_are_combs_and_multiscale_damps_nyquist() -> None:
    h = theory.frequency_response_closed
    assert h(np.pi, (2,), (0.48,)) == pytest.approx(1.0)
    assert h(np.pi, (4,), (0.48,)) == pytest.approx(1.0)
    assert h(np.pi / 2, (4,), (0.48,)) == pytest.approx(1.0)
    assert h(np.pi, *theory.MULTISCALE) == pytest.approx(1 - 4 * 0.16)
    bands = theory.band_energy(*theory.MULTISCALE)
    assert bands["Low"] > max(bands["Mid-L"], bands["Mid-H"], bands["High"])
    assert all(0 <= v <= 1 for v in bands.values())


@pytest.mark.parametrize("stride", [1, 2, 3, 4])
def test_symmetric_strided_operator_is_non_expansive(stride: int, replicate) -> None:
    part = replicate[replicate["h"] == stride]
    assert part["graph_symmetric"].all()
    assert (part["graph_norm"] <= 1 + 1e-12).all()


def test_replicate_matrix_is_the_padded_stencil() -> None:
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    for stride in (1, 2, 3):
        mat = theory.replicate_laplacian_matrix(9, stride)
        torch.testing.assert_close(
            torch.einsum("ij,bjd->bid", mat, x), theory.replicate_laplacian(x, stride)
        )
    assert torch.equal(theory.replicate_laplacian_matrix(9, 1), laplacian_matrix(9, 1))


def test_replicate_padding_is_expansive_for_strides_above_one(replicate) -> None:
    """The finding: replicate-padded R_h (h >= 2) is asymmetric and ||I + alpha R_h||_2 > 1 at
    every tested alpha < 1/2 and L, although it stays row-stochastic (max principle)."""
    assert (replicate["alpha"] < 0.5).all()
    h1 = replicate[replicate["h"] == 1]
    assert h1["replicate_symmetric"].all() and (h1["excess"].abs() < 1e-12).all()
    strided = replicate[replicate["h"] >= 2]
    assert not strided["replicate_symmetric"].any()
    assert (strided["excess"] > 3e-4).all()  # expansive everywhere on the grid
    summary = theory.replicate_padding_summary(replicate).set_index("h")
    worst = summary["max ||I+aR||_2"]
    assert worst[2] == pytest.approx(1.1433, abs=1e-3)
    assert worst[3] == pytest.approx(1.4128, abs=1e-3)
    assert worst[4] == pytest.approx(1.5792, abs=1e-3)
    long = summary["max ||I+aR||_2, L=256"]  # a boundary effect that does not vanish with L
    assert long[2] > 1.05 and long[3] > 1.15 and long[4] > 1.24
    assert np.allclose(strided["replicate_radius"], 1.0, atol=1e-9)
    assert np.allclose(strided["replicate_inf_norm"], 1.0, atol=1e-12)
    big = strided[strided["L"] > 2 * strided["h"]]  # column sum at the endpoint: 1 + (h-1)a
    assert np.allclose(big["replicate_one_norm"], 1 + (big["h"] - 1) * big["alpha"], atol=1e-12)
    assert (summary.loc[[2, 3, 4], "max ||(I+aR)^n||_2"] > worst[[2, 3, 4]] - 1e-12).all()


def test_roughness_bound_constant_is_two_cos() -> None:
    table = theory.roughness_bound_check()
    assert np.allclose(table["sup_ratio"], table["closed"], atol=1e-10)
    assert (table.loc[table["L"] >= 3, "sup_ratio"] > 1.5).all()  # Eq. 37's constant 1 is too small


@pytest.mark.slow
def test_cli_writes_figure_and_table(tmp_path) -> None:
    fig, table = tmp_path / "fig" / "theory.png", tmp_path / "tables" / "theory.md"
    theory_report.main(["--out", str(fig), "--table", str(table)])
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 20_000
    text = table.read_text()
    assert text.count("\n## ") == 7 and "Replicate-padded" in text and "| False" in text
