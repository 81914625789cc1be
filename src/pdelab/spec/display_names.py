"""The names a paper prints for our identifiers: each task, and each variant family, declared
once here, so every table (and any figure or tag that asks) writes ``Text (bytes)`` where the
code says ``imdb_bytes_lra``. An identifier with no declared name falls back to its words
(``after_embedding`` -> ``after embedding``), never to the raw identifier with its
underscores."""

from __future__ import annotations

import re

# task -> the name its paper gives it (LRA's column names, the datasets' own names)
TASKS: dict[str, str] = {
    "listops": "ListOps",
    "imdb_bytes_lra": "Text",
    "retrieval": "Retrieval",
    "pathfinder": "Pathfinder",
    "image": "Image",
    "imdb_wordpiece": "IMDb",
    "imdb_bytes": "IMDb (bytes)",
    "ag_news": "AG News",
    "sst2": "SST-2",
    "wikitext": "WikiText",
    "multi30k": "Multi30k",
    "fashion_mnist32": "Fashion-MNIST",
}

# a variant family: its identifiers (a pattern) -> the paper's name, groups filled in
VARIANT_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"baseline", "Transformer"),
    (r"baseline_T(\d+)", r"Transformer T=\1"),
    (r"after_embedding", "after embedding"),
    (r"after_attention", "after attention"),
    (r"after_mlp", "after MLP"),
    (r"before_layernorm", "before LayerNorm"),
    (r"in_attention", "in attention"),
    (r"head_diffusion", "head diffusion"),
    (r"layer_diffusion", "layer diffusion"),
    (r"(after_embedding|after_mlp|layer_diffusion)_h(\d)", r"\1 h=\2"),
    (r"multiscale_(\w+)", r"\1 multi-scale"),
    (r"pde_s(\d+)", r"PDE s=\1"),
    (r"pde_s(\d+)_causal", r"PDE s=\1 (leak-free)"),
    (r"pde_s4_T(\d+)", r"PDE T=\1"),
    (r"pde_s4_causal_T(\d+)", r"PDE T=\1 (leak-free)"),
    (r"(wave|reaction_diffusion|advection_diffusion)_s4", r"\1"),
    (r"(wave|reaction_diffusion|advection_diffusion)_s4_causal", r"\1 (leak-free)"),
    (r"longformer", "Longformer"),
    (r"pde_longformer", "PDE-Longformer"),
    (r"pde_longformer_causal", "PDE-Longformer (leak-free)"),
    (r"released", "released code"),
    (r"released_causal", "released code (leak-free)"),
    (r"ldn", "LDN"),
    (r"ldn_(k|d)", r"LDN \1 only"),
    (r"ldn_no_f", "LDN w/o F"),
    (r"ldn_(k|d)_no_f", r"LDN \1 w/o F"),
    (r"ldn_fixed_dt", "LDN fixed dt"),
    (r"ldn_patch", "LDN (patches)"),
    (r"patch_vit", "ViT"),
    (r"fna", "FNA"),
    (r"fna_(la|dp)", r"\1"),
    (r"fna_(qk|op|sph|laplace)", r"FNA \1"),
    (r"fna_qk_zd", "FNA qk zero diag."),
    (r"fna_(la|dp)_(op|qk|sph)", r"\1 \2"),
    (r"fna_op_sph", "FNA op sph"),
    (r"fna_la_op_sph", "la op sph"),
    (r"(lra|mt|vit)_(fna|la|dp)", r"\2"),
    (r"(lra|mt|vit)_(fna|la|dp)_op", r"\2 op"),
    (r"shallow_l(\d)_d(\d+)_a(\d)(\d)(_qk)?", r"L=\1 d=\2 alpha=\3.\4\5"),
    (r"shallow_l(\d)_d(\d+)_dp(_qk)?", r"L=\1 d=\2 DP\3"),
)
ACRONYMS = {"fna": "FNA", "la": "LA", "dp": "DP", "qk": "QK", "mlp": "MLP", "ldn": "LDN"}
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")


def words(identifier: str) -> str:
    """The fallback: an identifier's parts as words (known acronyms capitalised)."""
    return " ".join(ACRONYMS.get(part, part) for part in re.split(r"[_ ]", identifier))


def display_name(name: str) -> str:
    """The paper's name for a task or variant; any other identifier as words; other text as
    it is."""
    if name in TASKS:
        return TASKS[name]
    for pattern, shown in reversed(VARIANT_FAMILIES):  # the most specific family is last
        found = re.fullmatch(pattern, name)
        if found:
            return words(found.expand(shown))
    return words(name) if IDENTIFIER.fullmatch(name) else name


def display_text(text: str) -> str:
    """A header or cell with every identifier in it written as its display name."""
    return re.sub(
        r"(?<![\w.])[A-Za-z][A-Za-z0-9_]*(?![\w.])",
        lambda m: display_name(m.group(0)) if _declared(m.group(0)) else m.group(0),
        text,
    )


def _declared(token: str) -> bool:
    return (
        token in TASKS or "_" in token or any(re.fullmatch(p, token) for p, _ in VARIANT_FAMILIES)
    )
