"""Greedy and beam search (§6.1: beam 4, length penalty alpha 0.6, max length = source length + 50).

Beam search ranks finished hypotheses by log-probability over a length penalty lp(|Y|), in one of two forms
(`LENGTH_PENALTIES`): GNMT's, which the paper uses, or fairseq's, which papers trained with fairseq decode with.

Both decode a batch at once with the model's incremental cache, and drop finished sentences
from the batch as they go. Shapes: B sentences, k beams, S source length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ablate.data.tokenizer import BOS, EOS, PAD
from ablate.model.transformer import Transformer


@torch.no_grad()
def greedy(model: Transformer, src: Tensor, max_extra_len: int = 50, use_cache: bool = True) -> list[list[int]]:
    """The most probable next token, step by step. `use_cache=False` recomputes the whole prefix each step."""
    memory, src_mask = model.encode(src)
    max_len = (src != PAD).sum(1) + max_extra_len  # (B,)
    out: list[list[int]] = [[] for _ in range(src.size(0))]
    rows = torch.arange(src.size(0), device=src.device)  # which sentences are still being decoded
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)  # (B, t)
    cache = model.new_cache() if use_cache else None
    for t in range(int(max_len.max())):
        hidden = model.decode(ys[:, -1:] if use_cache else ys, memory, src_mask, cache)
        token = model.generator(hidden[:, -1]).argmax(-1)  # (B,)
        ys = torch.cat([ys, token[:, None]], dim=1)
        done = (token == EOS) | (t + 1 >= max_len[rows])
        if done.any():  # a CPU-GPU sync a step; it pays for itself by shrinking the batch
            for row, seq in zip(rows[done].tolist(), ys[done, 1:].tolist(), strict=True):
                out[row] = seq[:-1] if seq[-1] == EOS else seq
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows, ys, memory, src_mask = rows[keep], ys[keep], memory[keep], src_mask[keep]
            if cache is not None:
                cache.reorder(keep)
    return out


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), which the paper uses with alpha 0.6 (§6.1)."""
    return ((5 + length) / 6) ** alpha


def fairseq_penalty(length: int, alpha: float) -> float:
    """fairseq's lp(Y) = |Y|^alpha (`--lenpen`, 1 by default there: the mean log-probability a token)."""
    return length**alpha


LENGTH_PENALTIES: dict[str, Callable[[int, float], float]] = {"gnmt": gnmt_penalty, "fairseq": fairseq_penalty}
"""evaluation.length_penalty_form's values. |Y| counts the hypothesis's </s> when it has one, as both do; both grow
with the length for alpha > 0, and are 1 for alpha 0."""
FORMS = tuple(LENGTH_PENALTIES)


def penalty_of(form: str) -> Callable[[int, float], float]:
    """lp of `form` (LENGTH_PENALTIES), as a function of |Y| and alpha."""
    if form not in LENGTH_PENALTIES:
        raise ValueError(f"length penalty form {form!r}: one of {', '.join(FORMS)}")
    return LENGTH_PENALTIES[form]


@torch.no_grad()
def beam_search(model: Transformer, src: Tensor, beam_size: int = 4, alpha: float = 0.6,
                max_extra_len: int = 50, form: str = "gnmt") -> list[list[int]]:  # fmt: skip
    """Keeps the k best prefixes a sentence; a sentence ends once k hypotheses have finished and no live one
    can beat the worst of them (`_done`), when no live prefix is left, or at its max length; the one with the
    best log-probability / lp(length) wins, lp in `form` (LENGTH_PENALTIES)."""
    lp = penalty_of(form)  # an unknown form fails here, not mid-search
    k, n = beam_size, src.size(0)
    memory, src_mask = model.encode(src)
    memory, src_mask = memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0)  # (B*k, S, d), (B*k, ...)
    max_len = ((src != PAD).sum(1) + max_extra_len).tolist()
    sentences = list(range(n))  # the sentences still in the batch, in batch order
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    ys = torch.full((n * k, 1), BOS, dtype=torch.long, device=src.device)  # (B*k, t)
    scores = torch.zeros(n, k, device=src.device)
    scores[:, 1:] = float("-inf")  # all beams start equal: only the first may expand
    cache = model.new_cache()
    for t in range(max(max_len)):
        logits = model.generator(model.decode(ys[:, -1:], memory, src_mask, cache)[:, -1])  # (B*k, V)
        vocab = logits.size(-1)
        candidates = scores[:, :, None] + logits.float().log_softmax(-1).view(len(sentences), k, vocab)
        top, index = candidates.view(len(sentences), k * vocab).topk(2 * k, dim=1)  # (B, 2k)
        top, index = top.tolist(), index.tolist()  # one sync a step; the bookkeeping below is plain Python

        origins, tokens, new_scores, keep = [], [], [], []
        for b, sentence in enumerate(sentences):
            chosen: list[tuple[int, int, float]] = []
            for rank, (score, flat) in enumerate(zip(top[b], index[b], strict=True)):
                beam, token = divmod(flat, vocab)
                if score == float("-inf") or len(chosen) == k:
                    break
                if token != EOS:
                    chosen.append((beam, token, score))
                elif rank < k:  # an ending counts only if it ranks among the k best continuations
                    hypothesis = ys[b * k + beam, 1:].tolist()
                    finished[sentence].append((score / lp(len(hypothesis) + 1, alpha), hypothesis))
            finished[sentence] = sorted(finished[sentence], key=lambda h: -h[0])[:k]
            at_limit = t + 1 >= max_len[sentence]
            if at_limit:  # out of length: the live beams finish where they are
                for beam, token, score in chosen:
                    hypothesis = [*ys[b * k + beam, 1:].tolist(), token]
                    finished[sentence].append((score / lp(len(hypothesis), alpha), hypothesis))
            if at_limit or not chosen or _done(finished[sentence], chosen[0][2], max_len[sentence], k, alpha, lp):
                continue
            chosen += [(*chosen[-1][:2], float("-inf"))] * (k - len(chosen))  # pad with dead beams
            keep.append(b)
            for beam, token, score in chosen:
                origins.append(b * k + beam)
                tokens.append(token)
                new_scores.append(score)
        if not keep:
            break
        origin = torch.tensor(origins, device=src.device)
        ys = torch.cat([ys[origin], torch.tensor(tokens, device=src.device)[:, None]], dim=1)
        scores = torch.tensor(new_scores, device=src.device).view(len(keep), k)
        memory, src_mask = memory[origin], src_mask[origin]
        cache.reorder(origin)
        sentences = [sentences[b] for b in keep]
    return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]


def _done(finished: list[tuple[float, list[int]]], best_live: float, max_len: int, k: int, alpha: float,
          lp: Callable[[int, float], float]) -> bool:  # fmt: skip
    """k hypotheses have ended, and the best live one, however it ends, scores no better than the worst of them.

    A live beam's log-probability only falls as it grows, but with alpha > 0 the penalty it is divided
    by grows too (in either form): its best possible score is its log-probability now over the penalty at the
    longest it may become (tensor2tensor's bound), not at the next step.
    """
    return len(finished) >= k and best_live / lp(max_len, alpha) <= finished[-1][0]


def translate_ids(model: Transformer, src: Tensor, beam_size: int, alpha: float, max_extra_len: int,
                  form: str = "gnmt") -> list[list[int]]:  # fmt: skip
    if beam_size == 1:
        return greedy(model, src, max_extra_len)
    return beam_search(model, src, beam_size, alpha, max_extra_len, form)
