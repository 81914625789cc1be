"""Continuous-Time Attention (arXiv 2505.20666): attention evolved in pseudo-time by a PDE.

Its attention kernels (``pde``, ``pde_reference``, ``longformer``, ``pde_longformer``) live in
attention.py; their params.yaml options are checked, torch-free, by options.py and registered
here. What is reproduced and what deviates: README.md beside this file.
"""

from pdelab.models.options import ATTENTION_OPTIONS, KernelOptions
from pdelab.papers import Paper, register
from pdelab.papers.continuous_time_attention.options import KERNEL_OPTIONS, check_stability

PAPER = register(
    Paper(
        name="continuous_time_attention",
        title="Continuous-Time Attention",
        study_kinds=("pde_classification", "lm", "lm_seq_len"),
        mechanisms=("attention",),
    )
)

for _kernel, _names in KERNEL_OPTIONS.items():
    ATTENTION_OPTIONS.register(_kernel)(KernelOptions(_names, check_stability))
