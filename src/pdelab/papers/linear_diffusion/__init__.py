"""Linear Diffusion Networks (Fein-Ashley): sequence layers as explicit diffusion steps.

Its layer is an encoder block (``model.block: ldn``) in layer.py; its params.yaml options
(``model.block_options``) are checked, torch-free, by options.py and registered here. What is
implemented and every choice where the paper is silent or contradicts itself: README.md.
"""

from pdelab.models.options import BLOCK_OPTIONS, KernelOptions
from pdelab.papers import Paper, register
from pdelab.papers.linear_diffusion.options import BLOCK, OPTION_NAMES, check_options

PAPER = register(
    Paper(
        name="linear_diffusion",
        title="Linear Diffusion Networks: Harnessing Diffusion Processes for Global Interactions",
        study_kinds=(),
        mechanisms=("layer",),
    )
)

BLOCK_OPTIONS.register(BLOCK)(KernelOptions(OPTION_NAMES, check_options))
