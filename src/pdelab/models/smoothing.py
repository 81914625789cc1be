"""Hidden-state smoothing after every encoder layer: the mechanism the Continuous-Time Attention
authors released (github.com/XueqingZhou/Continuous-Time-Attention), which the backbone applies
when ``model.smoothing`` is set. Its options are checked, torch-free, in pdelab.spec.options.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pdelab.spec.options import RELEASED_DEFAULTS, check_smoothing


class ReleasedSmoothing(nn.Module):
    """What github.com/XueqingZhou/Continuous-Time-Attention runs: after every encoder layer the
    *hidden states* (B, T, D) are smoothed along the sequence; the attention matrix is never
    touched. Each of ``steps`` steps is x[i] += dx[i] for 1 <= i <= T-2 with the first and last
    token left unchanged, and its own learnable scalar coefficient (one PDE layer per step):

        diffusion            dx = alpha * (x[i+1] - 2 x[i] + x[i-1])
        wave                 dx = alpha^2 * (same)     (first order in time, c = alpha)
        reaction_diffusion   dx = alpha * lap + beta * x[i] * (1 - sigmoid(x[i]))
        advection_diffusion  dx = alpha * lap + beta * (x[i+1] - x[i-1]) / 2

    There is no dt (dt = 1). Defaults are the code's (= Table 11): alpha 0.10 (0.15 for wave),
    beta 0.02 / 0.03; App. C.1 reports the learned alpha settling in [0.05, 0.15]. The paper
    text never describes this module. ``causal=True`` is the repository's later LM variant:
    x[i] += alpha * (x[i] - 2 x[i-1] + x[i-2]) for i >= 2, first two tokens unchanged. With a
    mask (B, T), True at real tokens, only positions whose three stencil tokens are real move.
    """

    def __init__(
        self,
        pde: str = "diffusion",
        steps: int = 1,
        alpha: float | None = None,
        beta: float | None = None,
        causal: bool = False,
        learnable: bool = True,
    ) -> None:
        super().__init__()
        check_smoothing({"pde": pde, "steps": steps, "alpha": alpha, "beta": beta})
        self.pde, self.steps, self.causal = pde, steps, causal
        given = {"alpha": alpha, "beta": beta}
        self.coef_names = tuple(RELEASED_DEFAULTS[pde])
        for name in self.coef_names:
            init = RELEASED_DEFAULTS[pde][name] if given[name] is None else float(given[name])
            value = torch.full((steps,), init)
            if learnable:
                setattr(self, name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)

    def extra_repr(self) -> str:
        return f"pde={self.pde}, steps={self.steps}, causal={self.causal}"

    def _step(self, x: Tensor, n: int, mask: Tensor | None) -> Tensor:
        lap = x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]  # centred at 1..T-2, (B, T-2, D)
        u = x[:, 2:] if self.causal else x[:, 1:-1]  # the updated tokens
        alpha = self.alpha[n].to(x.dtype)
        dx = (alpha**2 if self.pde == "wave" else alpha) * lap
        if self.pde == "reaction_diffusion":
            dx = dx + self.beta[n].to(x.dtype) * u * (1 - torch.sigmoid(u))
        elif self.pde == "advection_diffusion":
            grad = x[:, 2:] - x[:, 1:-1] if self.causal else (x[:, 2:] - x[:, :-2]) / 2
            dx = dx + self.beta[n].to(x.dtype) * grad
        if mask is not None:  # move only where the whole stencil is real
            dx = dx * (mask[:, 2:] & mask[:, 1:-1] & mask[:, :-2])[..., None].to(x.dtype)
        if self.causal:
            return torch.cat([x[:, :2], u + dx], dim=1)
        return torch.cat([x[:, :1], u + dx, x[:, -1:]], dim=1)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if x.shape[1] < 3:
            return x
        for n in range(self.steps):
            x = self._step(x, n, mask)
        return x
