"""Evaluating a model: its validation loss (and greedy BLEU), every test split translated with beam search and
scored with sacreBLEU (corpus BLEU with its signature, and chrF), as EvaluationSpec (ablate.train.spec) says."""

from __future__ import annotations

import contextlib
import math
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU, CHRF

from ablate.bleu_statistics import References
from ablate.data.batches import Batch, pad
from ablate.data.dataset import Dataset
from ablate.data.preprocess import scored_as, writes_lowercase
from ablate.data.tokenizer import EOS, Vocabulary
from ablate.files import write_text
from ablate.model.decoding import translate_ids
from ablate.model.transformer import Transformer
from ablate.record import BucketScore, Evaluation, Score, Validation
from ablate.rundir import hypotheses_path
from ablate.train.log import Log
from ablate.train.spec import EvaluationSpec
from ablate.train.trainer import validation_loss


@dataclass
class Translation:
    hypotheses: list[str]
    seconds: float

    @property
    def sentences_per_second(self) -> float:
        return len(self.hypotheses) / self.seconds if self.seconds > 0 else float("nan")


def translate(
    model: Transformer, sources: Sequence[str], src_vocab: Vocabulary, tgt_vocab: Vocabulary, *, beam_size: int,
    alpha: float, max_extra_len: int, batch_size: int, device: torch.device, autocast: torch.autocast | None = None,
    form: str = "gnmt",
) -> Translation:  # fmt: skip
    """Detokenised translations of `sources`, in order; sentences of similar length are decoded together. Beam
    search divides by the length penalty of `form` with `alpha` (ablate.model.decoding.FORMS)."""
    was_training = model.training
    model.eval()
    ids = [[*s, EOS] for s in src_vocab.encode(sources)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[list[int]] = [[] for _ in ids]
    start = time.perf_counter()
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        src = pad([ids[i] for i in chunk]).to(device)
        with autocast or torch.autocast(device.type, enabled=False):
            for i, hyp in zip(chunk, translate_ids(model, src, beam_size, alpha, max_extra_len, form), strict=True):
                out[i] = hyp
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    model.train(was_training)
    return Translation(tgt_vocab.decode(out), seconds)


def score(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False, detokenised: str = ""
          ) -> Score:  # fmt: skip
    """Corpus BLEU (13a tokenisation) and chrF of detokenised text against the references; `detokenised`: how the
    hypotheses were detokenised (`detok:moses`, ablate.data.preprocess.scored_as), added to both signatures.

    Both sides are NFC-normalised first: hypotheses come out of the vocabulary in NFC (its normaliser),
    and a reference written in NFD ("a" + combining diaeresis for "ä") would otherwise never match them.
    """
    hypotheses = [unicodedata.normalize("NFC", h) for h in hypotheses]
    references = [unicodedata.normalize("NFC", r) for r in references]
    bleu = BLEU(lowercase=lowercase)
    chrf = CHRF(lowercase=lowercase)
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    suffix = f"|{detokenised}" if detokenised else ""
    return Score(bleu=round(b.score, 2), chrf=round(c.score, 2), bleu_signature=f"{bleu.get_signature()}{suffix}",
                 chrf_signature=f"{chrf.get_signature()}{suffix}")  # fmt: skip


def bucket_labels(bounds: Sequence[int]) -> list[str]:
    """[10, 20, 30] -> ["1-10", "11-20", "21-30", "31+"]: the upper ends of closed buckets, then an open one."""
    lows = [1, *(b + 1 for b in bounds)]
    return [f"{low}-{high}" for low, high in zip(lows, bounds, strict=False)] + [f"{lows[-1]}+"]


def by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str], bounds: Sequence[int],
              lowercase: bool = False) -> dict[str, BucketScore]:  # fmt: skip
    """BLEU and chrF of the sentences whose source has 1-10, 11-20, ... words (compare-mt's breakdown).

    Words are whitespace-separated tokens of the raw source: the unit is the same whatever the vocabulary,
    so runs with different tokenizers share buckets. An empty bucket has no scores.
    """
    labels = bucket_labels(bounds)
    members: dict[str, list[int]] = {label: [] for label in labels}
    for i, source in enumerate(sources):
        words = len(source.split())
        members[labels[sum(words > b for b in bounds)]].append(i)
    out: dict[str, BucketScore] = {}
    for label, rows in members.items():
        scored = score([hypotheses[i] for i in rows], [references[i] for i in rows], lowercase) if rows else None
        out[label] = BucketScore(sentences=len(rows), bleu=scored.bleu if scored else None,
                                 chrf=scored.chrf if scored else None)  # fmt: skip
    return out


def validate(model: Transformer, data: Dataset, batches: Sequence[Batch], ev: EvaluationSpec, bleu_pairs: int,
             device: torch.device, amp: Any, step: int) -> Validation:  # fmt: skip
    """Validation loss and perplexity on the whole split; greedy BLEU on its first `bleu_pairs` pairs."""
    loss = validation_loss(model, batches, device, amp)
    record = Validation(step=step, valid_loss=round(loss, 4), valid_ppl=perplexity(loss))
    n = min(bleu_pairs, len(data.valid_pairs))
    if n:
        pairs = data.valid_pairs[:n]
        hyps = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab, beam_size=1, alpha=0.0,
                         max_extra_len=ev.max_extra_len, batch_size=ev.batch_size, device=device,
                         autocast=amp).hypotheses  # fmt: skip
        record.valid_bleu = score(hyps, [p[1] for p in pairs], ev.lowercase).bleu
    return record


def perplexity(loss: float) -> float:
    """exp(loss) to 2 decimals; infinite past exp's range, NaN for NaN (a diverging run's validation)."""
    return math.inf if loss > 700 else round(math.exp(loss), 2)


def decode(model: Transformer, data: Dataset, ev: EvaluationSpec, device: torch.device, amp: Any, directory: Path,
           log: Log) -> dict[str, Translation]:  # fmt: skip
    """Beam search on every test split, each a phase of the log; its hypotheses written to hypotheses/<split>.txt."""
    translations = {}
    for split, pairs in data.tests.items():
        log.phase(f"decoding {split}", f"decoding {split} ({len(pairs)} sentences, beam {ev.beam_size})")
        translation = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab,
                                beam_size=ev.beam_size, alpha=ev.length_penalty, max_extra_len=ev.max_extra_len,
                                batch_size=ev.batch_size, device=device, autocast=amp,
                                form=ev.length_penalty_form)  # fmt: skip
        write_text(hypotheses_path(directory, split), "\n".join(translation.hypotheses) + "\n")
        translations[split] = translation
    return translations


def keep_statistics(data: Dataset, translations: dict[str, Translation], ev: EvaluationSpec, directory: Path) -> None:
    """Each decoded split's BLEU statistics sentence by sentence, counted from its hypotheses file as a report counts
    them and kept beside it (hypotheses/<split>.bleu.json): a report builds its intervals, p-values and verdicts
    from them, with no corpus (ablate.bleu_statistics)."""
    for split in translations:
        # a hypothesis the file's reader splits in two (a model that writes U+2028) pairs with no reference: no
        # statistics, and the report says so, rather than a run lost after its training
        with contextlib.suppress(ValueError):
            References([target for _, target in data.tests[split]], ev.lowercase).keep(directory, split)


def score_tests(data: Dataset, translations: dict[str, Translation], ev: EvaluationSpec) -> Evaluation:
    """sacreBLEU's BLEU and chrF of every decoded test split, whole and by source length, and the decoding speed."""
    scores: dict[str, Score] = {}
    detokenised = scored_as(data.tgt_vocab)  # the signature says when the hypotheses were Moses-detokenised
    for split, translation in translations.items():
        pairs = data.tests[split]
        sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
        scored = score(translation.hypotheses, references, ev.lowercase, detokenised)
        if ev.lowercase and not writes_lowercase(data.tgt_vocab):  # a paper's flavour beside the standard one, where
            # the model can write capitals (trained on lowercased text, it never matches a cased reference's)
            cased = score(translation.hypotheses, references, detokenised=detokenised)
            scored.cased_bleu, scored.cased_bleu_signature = cased.bleu, cased.bleu_signature
        scored.by_length = by_length(sources, translation.hypotheses, references, ev.length_buckets, ev.lowercase)
        scores[split] = scored
    seconds = sum(t.seconds for t in translations.values())
    decoded = sum(len(t.hypotheses) for t in translations.values())
    return Evaluation(scores=scores, decode_sentences_per_s=round(decoded / seconds, 1))
