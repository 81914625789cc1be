"""The papers: each subpackage is one paper, a plug-in that registers itself with
:mod:`pdelab.spec.plugins` when imported. Nothing outside this folder imports a paper by name."""
