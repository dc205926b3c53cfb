"""Subword vocabularies: BPE trained with `tokenizers` on the training split only, cached on disk.

Text is split at spaces with a visible marker (Metaspace, as SentencePiece does) and at punctuation,
so decoding gives back real text: what sacreBLEU scores is detokenised output, not token soup.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import Field, PositiveInt
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from ablate.config import ADDED, Section
from ablate.files import write_text

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, in this order, in every vocabulary


class TokenizerSpec(Section):
    """Subword vocabulary. Training it comes with the data pipeline; its sizes already shape the model."""

    vocab_size: PositiveInt = Field(37000, description="BPE vocabulary size (per language when not joint)")
    merges: PositiveInt | None = Field(
        None,
        description="learn exactly this many BPE merges instead (subword-nmt's -s, as papers give it; fewer when no "
        "pair is left seen min_frequency times): the vocabulary is then the 4 specials, the alphabet and one type a "
        "merge, and vocab_size is not used",
        json_schema_extra=ADDED,
    )
    joint: bool = Field(True, description="one vocabulary shared by source and target")
    min_frequency: PositiveInt = Field(2, description="merges seen fewer times than this are not learned")
    max_sentences: PositiveInt = Field(
        1_000_000,
        description="the vocabulary is learned from at most this many training pairs, evenly spaced over a larger "
        "training split (every pair still trains the model)",
        json_schema_extra=ADDED,
    )

    @property
    def nominal_size(self) -> int:
        """The vocabulary size the spec asks for, for a parameter count before any text is read: vocab_size, or the
        merges and the 4 specials (the alphabet comes on top: 102 characters in Multi30k en-de's training text)."""
        return self.vocab_size if self.merges is None else self.merges + len(SPECIALS)


class Vocabulary:
    """A trained BPE model: text <-> ids."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch_fast(list(texts))]  # the ids, on every core; no offsets

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.tokenizer.decode_batch([list(i) for i in ids], skip_special_tokens=True)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int, merges: int | None = None
              ) -> Vocabulary:  # fmt: skip
        """BPE learned from `texts`: `vocab_size` types in all, or with `merges` exactly that many merges (fewer when
        no pair is left seen `min_frequency` times)."""
        if merges is not None:
            texts = list(texts)  # read twice: its characters bound the alphabet, then BPE learns from it
            alphabet = len({c for text in texts for c in unicodedata.normalize("NFC", text)}) + 1  # at most; and ▁
            # the merges wanted, or a few more where two merges make one type: the vocabulary's size is what
            # `tokenizers` stops at, so the alphabet is over-counted and the merges cut to the first `merges`
            return cls(first_merges(cls._learn(texts, len(SPECIALS) + alphabet + merges, min_frequency), merges))
        return cls(cls._learn(texts, vocab_size, min_frequency))

    @staticmethod
    def _learn(texts: Iterable[str], vocab_size: int, min_frequency: int) -> Tokenizer:
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation(behavior="isolated")]
        )
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIALS, show_progress=False
        )
        tokenizer.train_from_iterator(texts, trainer)
        return tokenizer

    def save(self, path: Path) -> None:
        """Atomically, through a temporary file of its own: two processes that train the same vocabulary at once
        (two sweeps, two test workers sharing a cache) each write a whole file, and the last one stays."""
        write_text(path, self.tokenizer.to_str(pretty=True))

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        return cls(Tokenizer.from_file(str(path)))


def first_merges(tokenizer: Tokenizer, n: int) -> Tokenizer:
    """A trained BPE model cut to its first `n` merges, its vocabulary to the specials, the alphabet and the types
    those merges make: the model training would have made had it stopped there (BPE learns greedily, and a merge
    never depends on a later one). Ids keep their order, with no gaps."""
    state = json.loads(tokenizer.to_str())
    model = state["model"]
    model["merges"] = model["merges"][:n]
    made = {"".join(m) if isinstance(m, list) else m.replace(" ", "") for m in model["merges"]}  # "a b": before 0.20
    by_id = sorted(model["vocab"], key=model["vocab"].__getitem__)
    kept = [t for t in by_id if t in SPECIALS or len(t) == 1 or t in made]  # a merge makes two characters or more
    model["vocab"] = {t: i for i, t in enumerate(kept)}
    return Tokenizer.from_str(json.dumps(state))


def vocabularies(pairs: Iterable[tuple[str, str]] | None, spec: TokenizerSpec, folder: Path
                 ) -> tuple[Vocabulary, Vocabulary]:  # fmt: skip
    """Source and target vocabularies, the same object twice when joint: loaded from `folder`, or first learned
    there from `pairs` (read twice when not joint: an iterable that reads its text again, not an iterator)."""
    names = ["joint"] if spec.joint else ["source", "target"]
    for side, name in enumerate(names):
        path = folder / f"{name}.json"
        if not path.is_file():
            if pairs is None:
                raise FileNotFoundError(path)
            texts = (text for pair in pairs for text in pair) if spec.joint else (p[side] for p in pairs)
            Vocabulary.train(texts, spec.vocab_size, spec.min_frequency, spec.merges).save(path)
    loaded = [Vocabulary.load(folder / f"{name}.json") for name in names]
    return loaded[0], loaded[-1]
