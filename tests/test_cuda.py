"""The CUDA paths, on a GPU: every registered attention kernel and encoder block against its
own float64 output on the CPU (outputs and gradients), every variant's training step under
bf16 autocast, a GPU slot claimed by its UUID, and the cost plan's CUDA memory model against
``torch.cuda.max_memory_allocated``.

Skipped without CUDA. ``PDELAB_CUDA_TESTS_ON=cpu`` runs them on the CPU instead, a dry run of
the tests themselves (the CPU paths are tested elsewhere). ``benchmarks/gpu_check.sh`` runs
them on a GPU machine.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
from torch import Tensor

from conftest import ROOT
from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.transformer import ENCODER_BLOCKS, Classifier
from pdelab.spec.config import load_params, resolve
from pdelab.spec.plugins import import_mechanisms
from pdelab.training.precision import full_precision

import_mechanisms()
DEVICE = os.environ.get("PDELAB_CUDA_TESTS_ON", "cuda")
pytestmark = [
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.filterwarnings("ignore"),  # FlexAttention warns when a CPU runs it uncompiled
]
PARAMS = load_params(ROOT / "params.yaml")
VARIANTS = list(PARAMS["variants"])
B, H, DH, T = 3, 2, 8, 300  # T = 300: three FlexAttention blocks in a bucket of 512

# every registered kernel with its defaults, and the FNA settings that take other paths:
# LA (alpha = 2, SDPA on augmented q, k), the sphere, tied keys with the diagonal dropped
KERNEL_CASES = [(name, {}) for name in ATTENTION_KERNELS.names()] + [
    ("fna", {"alpha": 2.0}),
    ("fna", {"alpha": 1.2, "spherical": True}),
    ("fna", {"alpha": 1.2, "tied": True, "zero_diagonal": True}),
    ("fna", {"alpha": 1.2, "laplace": True}),
]
BLOCK_CASES = [(name, {}) for name in ENCODER_BLOCKS.names()] + [
    ("ldn", {"psi": "mlp"}),
    ("ldn", {"path": "reference"}),
]


def case_id(case: tuple[str, dict]) -> str:
    name, options = case
    return "-".join([name, *(f"{k}={v}" for k, v in options.items())])


def real_rows(b: int, t: int, padded: bool) -> Tensor:
    """(b, t) True at real tokens: right padding of the later rows where ``padded``."""
    lengths = torch.tensor([t] + [t * (i + 1) // (b + 1) for i in range(b - 1)])
    if not padded:
        lengths[:] = t
    return torch.arange(t)[None, :] < lengths[:, None]


def assert_close(got: Tensor, want: Tensor, tol: float, where: str) -> None:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), f"{where}: not finite"
    err = (got - want).abs().max().item()
    assert err <= tol * (1 + want.abs().max().item()), f"{where}: max error {err:.3g}"


def outputs_and_grads(
    module: torch.nn.Module, xs: tuple[Tensor, ...], call, weight: Tensor
) -> list[Tensor]:
    """The output and the gradients of <weight, output> to the inputs and the parameters
    that require them."""
    out = call(module, *xs)
    wrt = [x for x in (*xs, *module.parameters()) if x.requires_grad]
    grads = torch.autograd.grad(out, wrt, weight.to(out), materialize_grads=True)
    return [out, *grads]


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bi", "causal"])
@pytest.mark.parametrize("case", KERNEL_CASES, ids=case_id)
def test_every_kernel_on_the_device_equals_its_float64_output_on_a_cpu(
    case: tuple[str, dict], causal: bool, padded: bool
) -> None:
    """fp32 on the device (FNA's FlexAttention, PDE's SDPA over transformed values, ...)
    against the same module in float64 on the CPU: outputs at the real queries, and the
    gradients to q, k, v and every parameter of a loss that reads the real queries only."""
    name, options = case
    torch.manual_seed(0)
    kernel = ATTENTION_KERNELS.get(name)(heads=H, head_dim=DH, **options)
    mask = real_rows(B, T, padded)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(B, H, T, DH, generator=gen, dtype=torch.float64) for _ in range(3)]
    weight = torch.randn(B, H, T, DH, generator=gen, dtype=torch.float64)
    weight = weight * mask[:, None, :, None]  # padding queries' outputs are not used

    def call(module: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        m = mask.to(q.device) if padded else None
        return module(q, k, v, m, causal)

    want = outputs_and_grads(
        copy.deepcopy(kernel).double(), tuple(x.requires_grad_() for x in xs), call, weight
    )
    device_xs = tuple(x.detach().float().to(DEVICE).requires_grad_() for x in xs)
    with full_precision(DEVICE):
        got = outputs_and_grads(kernel.to(DEVICE), device_xs, call, weight)
    assert_close(got[0] * mask[:, None, :, None].to(DEVICE), want[0] * weight.ne(0), 1e-4, "out")
    for i, (g, w) in enumerate(zip(got[1:], want[1:], strict=True)):
        assert_close(g, w, 1e-3, f"gradient {i}")


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bi", "causal"])
@pytest.mark.parametrize("case", BLOCK_CASES, ids=case_id)
def test_every_encoder_block_on_the_device_equals_its_float64_output_on_a_cpu(
    case: tuple[str, dict], causal: bool, padded: bool
) -> None:
    name, options = case
    torch.manual_seed(0)
    block = ENCODER_BLOCKS.get(name)(16, **options)
    mask = real_rows(B, T, padded)
    gen = torch.Generator().manual_seed(1)
    x, tokens, weight = (torch.randn(B, T, 16, generator=gen, dtype=torch.float64) for _ in "xyz")
    weight = weight * mask[:, :, None]

    def call(module: torch.nn.Module, h: Tensor, tok: Tensor) -> Tensor:
        m = mask.to(h.device) if padded else None
        return module(h, m, causal, tokens=tok)

    want = outputs_and_grads(
        copy.deepcopy(block).double(), (x.requires_grad_(), tokens), call, weight
    )
    device_xs = (x.detach().float().to(DEVICE).requires_grad_(), tokens.float().to(DEVICE))
    with full_precision(DEVICE):
        got = outputs_and_grads(block.to(DEVICE), device_xs, call, weight)
    assert_close(got[0] * mask[:, :, None].to(DEVICE), want[0] * weight.ne(0), 1e-4, "out")
    for i, (g, w) in enumerate(zip(got[1:], want[1:], strict=True)):
        assert_close(g, w, 1e-3, f"gradient {i}")


def python_path() -> str:
    """This checkout's source first, then whatever the caller's path held."""
    return os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])


def tiny_model(variant: str) -> Classifier:
    """A two-layer classifier with the variant's attention, options, smoothing and diffusion
    (the paper profile's settings of it), small enough to build in milliseconds."""
    m = resolve(PARAMS, "listops", variant, 0, "paper")
    torch.manual_seed(0)
    return Classifier(
        5,
        vocab_size=17,
        max_len=200,
        dim=32,
        layers=2,
        heads=2,
        mlp_dim=64,
        dropout=0.0,
        attention_dropout=0.0,
        attention=m.model.attention,
        attention_options=m.model.attention_options,
        smoothing=m.model.smoothing,
        diffusion=m.diffusion,
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_trains_a_step_in_bf16_on_the_device(variant: str) -> None:
    """Forward, loss and backward under bf16 autocast on the device, as a ``precision: bf16``
    profile trains: finite loss and gradients, and the loss within bf16's rounding of the
    same step in fp32 (fp32 kernels inside, pdelab.training.precision, keep FNA's distances
    exact)."""
    model = tiny_model(variant).to(DEVICE)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(2, 17, (4, 150), generator=gen)
    mask = real_rows(4, 150, True)
    ids = ids.masked_fill(~mask, 0).to(DEVICE)
    labels = torch.randint(0, 5, (4,), generator=gen).to(DEVICE)
    losses = {}
    for precision in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        with torch.autocast(torch.device(DEVICE).type, dtype=dtype, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(model(ids, mask.to(DEVICE)), labels)
        loss.backward()
        losses[precision] = float(loss)
        bad = [n for n, p in model.named_parameters() if p.grad is not None]
        bad = [n for n in bad if not torch.isfinite(model.get_parameter(n).grad).all()]
        assert not bad, f"{precision}: non-finite gradients in {bad[:5]}"
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.05 * abs(losses["fp32"]), losses


@pytest.mark.skipif(DEVICE != "cuda", reason="GPU slots name real GPUs")
def test_a_job_claims_its_gpu_by_uuid_and_cuda_opens_that_gpu(tmp_path) -> None:
    """On a real node: the pool is nvidia-smi's UUIDs, the slot narrows CUDA_VISIBLE_DEVICES
    to one UUID, and CUDA then opens exactly that GPU."""
    from pdelab.runtime import gpu_slots

    uuids = gpu_slots.smi_uuids()
    assert uuids and all(u.startswith("GPU-") for u in uuids)
    code = (
        "import os, torch\n"
        "from pdelab.runtime import gpu_slots\n"
        "slot = gpu_slots.claim('cuda')\n"
        "print(os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "print(torch.cuda.device_count(), torch.cuda.get_device_properties(0).uuid)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    env |= {"PDELAB_GPU_SLOT_DIR": str(tmp_path), "PYTHONPATH": python_path()}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    visible, count, uuid = out[0], out[1], out[2]
    assert visible in uuids and count == "1"
    assert visible == f"GPU-{uuid}" or visible.endswith(uuid)


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA memory model is checked on CUDA")
@pytest.mark.parametrize(
    ("task", "variant", "batch"),
    [("listops", "baseline", 8), ("listops", "after_embedding", 8), ("imdb_wordpiece", "fna", 4)],
)
def test_the_plans_cuda_peak_is_within_20_percent_of_the_measured_one(
    task: str, variant: str, batch: int
) -> None:
    """The fake-tensor step's peak against max_memory_allocated of real steps of the paper
    profile's model at a small batch, measured in a fresh process."""
    code = (
        "import sys\n"
        "from pdelab.plan.check import measured_peak\n"
        "from pdelab.spec.config import load_params\n"
        "p = load_params(sys.argv[1])\n"
        "print(measured_peak(p, 'paper', sys.argv[2], sys.argv[3], int(sys.argv[4]), 'cuda'))\n"
    )
    args = [str(ROOT / "params.yaml"), task, variant, str(batch)]
    env = {**os.environ, "PYTHONPATH": python_path()}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measured = int(done.stdout.split()[-1])
    from pdelab.plan.check import estimated_peak

    estimate = estimated_peak(PARAMS, "paper", task, variant, batch, "cuda")
    assert abs(estimate / measured - 1) <= 0.20, (estimate, measured)
