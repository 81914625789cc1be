"""Where to Add PDE Diffusion in Transformers: diffusion at seven insertion sites of the encoder.

The diffusion operator itself (pdelab.models.diffusion) and the sites (pdelab.models.transformer)
are part of the shared backbone; this package holds the paper's studies, claims, Layer I theory
checks and diagnostics. What is reproduced and what deviates: README.md beside this file.
"""

from typing import Any

from pdelab.papers import Paper, register


def outputs(params: dict[str, Any]) -> list[str]:
    """The theory checks always; the diagnostics when a study asks for them (diagnose: true)."""
    diagnosed = any(s.get("diagnose") for s in params.get("studies", {}).values())
    return [
        "figures/theory.png",
        "tables/theory.md",
        *(["figures/diagnostics.png", "tables/diagnostics.md"] if diagnosed else []),
    ]


PAPER = register(
    Paper(
        name="diffusion_positions",
        title="Where to Add PDE Diffusion in Transformers",
        study_kinds=("accuracy", "multiscale", "seeds", "cost"),
        heatmap_kinds=("accuracy",),
        outputs=outputs,
    )
)
