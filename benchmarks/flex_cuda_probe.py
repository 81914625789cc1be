"""Which compiled FlexAttention calls of FNA's flex path run correctly on this GPU.

    python benchmarks/flex_cuda_probe.py          # every case, each in a fresh process

A CUDA fault (an illegal memory access) poisons the process that meets it, so each case runs
in its own child, side by side: FNA at alpha = 1.2 through ``flex.flex_path`` on (B, 8, T,
32) inputs, with gradients (training) or under no_grad (evaluation), then compared with the
materialised reference.
Prints one line per case: ok with the largest error, or the error the child died of.
"""

from __future__ import annotations

import subprocess
import sys

CASES = [  # (grad, B, T)
    (False, 32, 1024),
    (True, 32, 1024),
    (False, 3, 300),
    (True, 3, 300),
]
CHILD = """
import sys, torch
from pdelab.papers.fractional_attention import attention as fna, flex
from pdelab.training.precision import full_precision
grad, b, t = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3])
kernel = fna.FNAAttention(8, 32, alpha=1.2).cuda()
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(b, 8, t, 32, device="cuda", generator=gen) for _ in range(3))
with full_precision("cuda"), torch.set_grad_enabled(grad):
    qs = [x.requires_grad_(grad) for x in (q, k, v)]
    q_, k_ = kernel.prepare(qs[0], qs[1])
    out = flex.flex_path(q_, k_, qs[2], kernel.geo, None, False, False, True)
    if grad:
        out.sum().backward()
    torch.cuda.synchronize()
with full_precision("cuda"), torch.no_grad():
    want = kernel.attend(q.detach(), k.detach(), v.detach(), None, False, "reference")
err = (out.detach() - want).abs().max().item()
print("ok" if err < 1e-3 else "WRONG", f"max error {err:.2e}")
"""


def main() -> int:
    """The cases side by side, one child each (correctness only: nothing here is timed)."""
    children = {}
    for grad, b, t in CASES:
        name = f"{'grad' if grad else 'no_grad'} B={b} T={t}"
        args = [str(int(grad)), str(b), str(t)]
        children[name] = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    failures = 0
    for name, child in children.items():
        out, _ = child.communicate(timeout=240)
        lines = out.strip().splitlines()
        said = next((x for x in lines if x.startswith(("ok", "WRONG"))), None)
        if said is None:
            said = next((x for x in reversed(lines) if "Error" in x), lines[-1] if lines else "")
        failures += not said.startswith("ok")
        print(f"{name}: {said}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
