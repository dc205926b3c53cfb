"""The paper's base model and recipe (Vaswani et al. 2017), as a run's config.yaml spells them.

A run card (ablate.report.cards) lists where a run differs from it, so a reader of a table knows exactly what
each row changed from the Transformer of the paper. Torch-free: `ablate report` reads result files only.
A test keeps this in step with the spec's defaults and experiments/paper/base.yaml.
"""

from __future__ import annotations

from typing import Any

from ablate.config import show
from ablate.rundir import ADDED

# dotted key -> (the paper's value, where the paper says so)
PAPER_BASE: dict[str, tuple[Any, str]] = {
    "model.d_model": (512, "Table 3, base"),
    "model.heads": (8, "§3.2.2"),
    "model.d_k": (64, "§3.2.2"),
    "model.d_v": (64, "§3.2.2"),
    "model.d_ff": (2048, "§3.3"),
    "model.encoder_layers": (6, "§3.1"),
    "model.decoder_layers": (6, "§3.1"),
    "model.dropout": (0.1, "§5.4"),
    "model.attention_dropout": (0.0, "§5.4 (residual and embedding dropout only)"),
    "model.activation_dropout": (0.0, "§5.4 (residual and embedding dropout only)"),
    "model.positions": ("sinusoidal", "§3.5"),
    "model.norm_placement": ("post_ln", "§3.1, LayerNorm(x + Sublayer(x))"),
    "model.norm": ("layernorm", "§3.1"),
    "model.projection": ("full", "§3.2.2"),
    "model.scaling": ("sqrt_dk", "§3.2.1"),
    "model.feedforward": ("relu", "§3.3"),
    "model.embedding_scale": ("sqrt_dmodel", "§3.4"),
    "model.tying": ("all", "§3.4"),
    "tokenizer.vocab_size": (37000, "§5.1, shared BPE"),
    "tokenizer.joint": (True, "§5.1, shared BPE"),
    "training.schedule": ("noam", "§5.3, warmup 4000"),
    "training.betas": ([0.9, 0.98], "§5.3"),
    "training.eps": (1e-9, "§5.3"),
    "training.label_smoothing": (0.1, "§5.4"),
    "evaluation.beam_size": (4, "§6.1"),
    "evaluation.length_penalty": (0.6, "§6.1"),
    "evaluation.max_extra_len": (50, "§6.1"),
}


def value_at(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def value_width(config: dict[str, Any]) -> Any:
    """d_v as the run was built: null, or missing from a config stored before d_v existed, is d_k."""
    d_v = value_at(config, "model.d_v")
    return value_at(config, "model.d_k") if d_v is None else d_v


def paper_differences(config: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(key, the paper's value, this run's value, the paper's section) wherever a resolved spec departs."""
    out = []
    for key, (paper, where) in PAPER_BASE.items():
        value = value_width(config) if key == "model.d_v" else value_at(config, key)
        if value is None and tuple(key.split(".")) in ADDED:  # a run made before the key existed had its default
            value = ADDED[tuple(key.split("."))]
        if show(value) != show(paper):
            out.append((key, show(paper), show(value), where))
    return out


# Vaswani et al. 2017, Table 3 (WMT14 en->de, newstest2013 dev, 100K steps): for each setting the
# paper varied one at a time, its row and every value it tried, with dev BLEU and perplexity, the base
# model's value among them. `layers` is N, the encoder's and the decoder's depth together; row A keeps
# h x d_k = h x d_v = d_model, as `model.heads` alone does here (d_k = d_model / heads, d_v = d_k); row B
# changed d_k alone and kept d_v = 64 (its 58M and 60M parameters say so), as `model.d_v` set apart does.
TABLE3: dict[str, tuple[str, list[tuple[Any, float, float]]]] = {
    "model.heads": ("A", [(1, 24.9, 5.29), (4, 25.5, 5.00), (8, 25.8, 4.92), (16, 25.8, 4.91), (32, 25.4, 5.01)]),
    "model.d_k": ("B", [(16, 25.1, 5.16), (32, 25.4, 5.01), (64, 25.8, 4.92)]),
    "layers": ("C", [(2, 23.7, 6.11), (4, 25.3, 5.19), (6, 25.8, 4.92), (8, 25.5, 4.88)]),
    "model.d_model": ("C", [(256, 24.5, 5.75), (512, 25.8, 4.92), (1024, 26.0, 4.66)]),
    "model.d_ff": ("C", [(1024, 25.4, 5.12), (2048, 25.8, 4.92), (4096, 26.2, 4.75)]),
    "model.dropout": ("D", [(0.0, 24.6, 5.77), (0.1, 25.8, 4.92), (0.2, 25.5, 4.95)]),
    "training.label_smoothing": ("D", [(0.0, 25.3, 4.67), (0.1, 25.8, 4.92), (0.2, 25.7, 5.47)]),
    "model.positions": ("E", [("sinusoidal", 25.8, 4.92), ("learned", 25.7, 4.92)]),
}
TABLE3_BASE = {"model.heads": 8, "model.d_k": 64, "layers": 6, "model.d_model": 512, "model.d_ff": 2048,
               "model.dropout": 0.1, "training.label_smoothing": 0.1, "model.positions": "sinusoidal"}  # fmt: skip
