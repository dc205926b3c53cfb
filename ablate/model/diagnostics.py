"""What explains a row: gradient norms by sublayer, attention entropy and logits, residual and output norms.

The papers behind these ablations explain them with these quantities: Xiong et al. 2020 the gradient
norm of each sublayer at initialisation (large near the output under Post-LN), Zhai et al. 2023 the
attention entropy of each head (its collapse goes with instability), Dehghani et al. 2023 and
Wortsman et al. 2023 the growth of the largest attention logit and of the output logits.

`measure` takes them on one fixed validation batch, in eval mode (no dropout, so it draws no random
numbers and training is exactly what it would be without it), with gradients from `torch.autograd.grad`
(nothing is accumulated in `.grad`, so the optimizer never sees them). Training attends through
F.scaled_dot_product_attention, which returns no probabilities: on a diagnostic step alone, each
attention module's `probe` computes the explicit softmax instead, and records what it sees.

Shapes: B batch, S source length, T target length, h heads, L query length, M key length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.data.batches import Batch, Example, collate
from ablate.data.tokenizer import PAD
from ablate.model.transformer import Transformer
from ablate.parts.attention import Attention

SUBLAYERS = ("self_attn", "cross_attn", "feed_forward")  # in the order of the paper's Figure 1


def fixed_batch(valid: Sequence[Example], max_tokens: int) -> Batch:
    """The validation pairs from the first on, as many as fit `max_tokens` padded tokens: the same at every step."""
    count, longest = 0, 0
    for src, tgt in valid:
        longest = max(longest, len(src), len(tgt) - 1)
        if count and (count + 1) * longest > max_tokens:
            break
        count += 1
    return collate(list(valid[: max(count, 1)]))


def sublayer_parameters(model: Transformer) -> dict[str, list[nn.Parameter]]:
    """Every parameter once, grouped by sublayer as Xiong et al. (2020) measure them, in model order:

    `embeddings` (token embeddings, output projection, learned positions), then per layer
    `encoder.<i>.self_attn`, `encoder.<i>.feed_forward`, `encoder.<i>.norms`, and for the decoder
    `self_attn`, `cross_attn`, `feed_forward`, `norms`; then a stack's `final_norm` under Pre-LN.
    A parameter shared by several modules (tied embeddings, learned positions' table, which every
    layer's self-attention holds as its positions part) counts in the first group that holds it.
    """
    seen: set[int] = set()
    groups: dict[str, list[nn.Parameter]] = {}

    def add(name: str, *modules: nn.Module) -> None:
        params = [p for m in modules for p in m.parameters() if id(p) not in seen]
        seen.update(id(p) for p in params)
        if params:
            groups[name] = params

    add("embeddings", model.embeddings, model.embedding_scale, model.src_positions, model.tgt_positions)
    for stack_name in ("encoder", "decoder"):
        stack = getattr(model, stack_name)
        for i, layer in enumerate(stack.layers):
            for sublayer in SUBLAYERS:
                if hasattr(layer, sublayer):
                    add(f"{stack_name}.{i}.{sublayer}", getattr(layer, sublayer))
            add(f"{stack_name}.{i}.norms", layer.sublayers)
        add(f"{stack_name}.final_norm", stack.final_norm)
    add("other", model)  # a plugin's parameters outside these modules still count
    return groups


class AttentionProbe:
    """Attention as softmax(q.k^T * scale) v written out, recording each head's entropy and the largest logit.

    Statistics are taken over the real (unpadded) queries of the batch, and over the keys each query may see.
    """

    def __init__(self, name: str, queries: Tensor):
        self.name = name
        self.queries = queries  # (B, L) bool, True at real query positions
        self.entropy: list[float] | None = None  # per head, nats
        self.max_logit: float | None = None

    def __call__(self, attention: Attention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                 is_causal: bool, scale: float) -> Tensor:  # fmt: skip
        logits = (q @ k.transpose(-1, -2)).float() * scale  # (B, h, L, M)
        allowed = torch.ones_like(logits, dtype=torch.bool)
        if mask is not None:
            allowed = allowed & mask  # (B, 1, 1, M) or (L, M) broadcast
        if is_causal:
            L, M = logits.shape[-2:]
            allowed = allowed & torch.ones(L, M, dtype=torch.bool, device=q.device).tril()
        weights = torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1)  # (B, h, L, M)
        real = self.queries[:, None, :].expand(-1, logits.size(1), -1)  # (B, h, L)
        with torch.no_grad():
            entropy = torch.special.entr(weights).sum(-1)  # (B, h, L): -sum p log p, 0 log 0 = 0
            self.entropy = [round(float(e), 5) for e in (entropy * real).sum((0, 2)) / real.sum((0, 2)).clamp(min=1)]
            seen = allowed & real[..., None]
            self.max_logit = round(float(logits.masked_fill(~seen, -math.inf).max()), 5)
        if attention.training and attention.dropout:
            weights = F.dropout(weights, attention.dropout)
        return weights.to(v.dtype) @ v  # (B, h, L, d_v)


@contextmanager
def probed(model: Transformer, src_keep: Tensor, tgt_keep: Tensor):
    """Sets an AttentionProbe on every attention module for the block; yields {name: probe}."""
    probes: dict[str, AttentionProbe] = {}
    for stack_name, queries in (("encoder", src_keep), ("decoder", tgt_keep)):
        for i, layer in enumerate(getattr(model, stack_name).layers):
            for sublayer in ("self_attn", "cross_attn"):
                module = getattr(layer, sublayer, None)
                if isinstance(module, Attention):
                    name = f"{stack_name}.{i}.{sublayer}"
                    module.probe = probes[name] = AttentionProbe(name, queries)
    try:
        yield probes
    finally:
        for module in model.modules():
            if isinstance(module, Attention):
                module.probe = None


def measure(model: Transformer, batch: Batch, label_smoothing: float, autocast: Any) -> dict[str, Any]:
    """One diagnostics record for `batch` (see ablate.rundir.read_diagnostics for its keys)."""
    started = time.perf_counter()
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    batch = batch.to(device)
    tgt_in, labels = batch.tgt[:, :-1], batch.tgt[:, 1:]  # (B, T) each
    src_keep, tgt_keep = batch.src != PAD, labels != PAD  # (B, S), (B, T): a padded row's </s> predicts nothing
    residual: dict[str, float] = {}
    hooks = []
    for stack_name, keep in (("encoder", src_keep), ("decoder", tgt_keep)):
        for i, layer in enumerate(getattr(model, stack_name).layers):

            def record(module, inputs, output, name=f"{stack_name}.{i}", keep=keep):
                residual[name] = _mean_norm(output, keep)

            hooks.append(layer.register_forward_hook(record))
    groups = sublayer_parameters(model)
    try:
        with probed(model, src_keep, tgt_keep) as probes, autocast:
            logits = model(batch.src, tgt_in).float()  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD,
                               label_smoothing=label_smoothing, reduction="sum") / (labels != PAD).sum()  # fmt: skip
        params = [p for group in groups.values() for p in group]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    norms, i = {}, 0
    for name, group in groups.items():
        squares = sum(float(g.float().pow(2).sum()) for g in grads[i : i + len(group)] if g is not None)
        norms[name] = round(math.sqrt(squares), 6)
        i += len(group)
    return {
        "grad_norm": norms,
        "attention_entropy": {name: probe.entropy for name, probe in probes.items()},
        "max_logit": {name: probe.max_logit for name, probe in probes.items()},
        "residual_norm": residual,
        "logits_norm": _mean_norm(logits.detach(), tgt_keep),
        "loss": round(float(loss.detach()), 5),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _mean_norm(x: Tensor, keep: Tensor) -> float:
    """The mean L2 norm of the vectors x (B, L, d) at the positions where keep (B, L) is True."""
    norms = x.detach().float().norm(dim=-1)  # (B, L)
    return round(float(norms[keep].mean()), 5)
