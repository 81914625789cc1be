"""Fractional Neural Attention (Qu et al.): attention weights from a Lévy heat kernel.

Its kernels (``fna``, ``fna_reference``, ``fna_dp``) live in attention.py; their params.yaml
options are checked, torch-free, by options.py and registered here. What is reproduced and
what deviates: README.md beside this file.
"""

from pdelab.models.options import ATTENTION_OPTIONS, KernelOptions
from pdelab.papers import Paper, register
from pdelab.papers.fractional_attention.options import KERNEL_OPTIONS, check_options

PAPER = register(
    Paper(
        name="fractional_attention",
        title="Fractional neural attention for efficient multiscale sequence processing",
        study_kinds=(),
        mechanisms=("attention",),
    )
)

for _kernel, _names in KERNEL_OPTIONS.items():
    ATTENTION_OPTIONS.register(_kernel)(KernelOptions(_names, check_options))
