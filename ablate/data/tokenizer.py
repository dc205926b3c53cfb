"""Subword vocabularies: BPE learned on the training split only, applied with `tokenizers`, cached on disk.

Two styles (`tokenizer.style`). `metaspace`, the default: text is split at spaces with a visible marker (Metaspace,
as SentencePiece does) and at punctuation, so decoding gives back real text: what sacreBLEU scores is detokenised
output, not token soup; `tokenizers` learns the merges. `subword-nmt`: words are split at whitespace only and a
word's last piece carries `</w>`, as Sennrich et al.'s subword-nmt learns its merges on text a tokenizer has already
split (data.tokenize), and the merges are learned here as subword-nmt's learn_bpe learns them (`learn_merges`: the
same merges in the same order, ties included, where `tokenizers` breaks ties differently from one process to the
next with a word-end marker); decoding joins the words with single spaces, for the tokenizer's detokenizer.
"""

from __future__ import annotations

import heapq
import json
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from ablate.config import ADDED, Section
from ablate.files import write_text

PAD, BOS, EOS, UNK = 0, 1, 2, 3
END_OF_WORD = "</w>"  # subword-nmt's mark on a word's last piece (style subword-nmt)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, in this order, in every vocabulary


class TokenizerSpec(Section):
    """Subword vocabulary. Training it comes with the data pipeline; its sizes already shape the model."""

    vocab_size: PositiveInt = Field(37000, description="BPE vocabulary size (per language when not joint)")
    merges: PositiveInt | None = Field(
        None,
        description="learn exactly this many BPE merges instead (subword-nmt's -s, as papers give it; fewer when no "
        "pair is left seen min_frequency times): the vocabulary is then the 4 specials, the alphabet and the types the "
        "merges make, and vocab_size is not used",
        json_schema_extra=ADDED,
    )
    style: Literal["metaspace", "subword-nmt"] = Field(
        "metaspace",
        description="how text is cut into words before BPE: metaspace (at spaces, kept as a ▁ starting a word, and at "
        "every punctuation character, as SentencePiece marks words: decoding gives back the text) or subword-nmt (at "
        "whitespace only, a word's last piece ending in </w>, the merges learned as subword-nmt's learn_bpe learns "
        "them, for text data.tokenize has split: punctuation is a word like any other, and merges may join it, as in "
        "'s or &quot;; decoding gives back the words, for data.tokenize to join)",
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
        merges and the 4 specials (the alphabet comes on top: 102 characters in Multi30k en-de's raw training text;
        with style subword-nmt, a character inside a word and ending one are two types)."""
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
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int, merges: int | None = None,
              style: str = "metaspace") -> Vocabulary:  # fmt: skip
        """BPE learned from `texts`: `vocab_size` types in all, or with `merges` exactly that many merges (fewer when
        no pair is left seen `min_frequency` times); words cut as `style` says (TokenizerSpec.style)."""
        if style == "subword-nmt":
            return cls(_subword_nmt(texts, vocab_size, min_frequency, merges))
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


def _subword_nmt(texts: Iterable[str], vocab_size: int, min_frequency: int, merges: int | None) -> Tokenizer:
    """A BPE model of subword-nmt's style: its merges learned by `learn_merges` from the words of `texts` (NFC, at
    whitespace, as the model cuts them), its vocabulary the specials, the alphabet in sorted order, then each merge's
    type in the order learned: the same ids from the same text on any machine."""
    normalizer, words = normalizers.NFC(), pre_tokenizers.WhitespaceSplit()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in words.pre_tokenize_str(normalizer.normalize_str(text)))
    alphabet = sorted({symbol for word in counts for symbol in _symbols(word)})
    wanted = merges if merges is not None else max(0, vocab_size - len(SPECIALS) - len(alphabet))
    learned = learn_merges(counts, wanted, min_frequency)
    types = list(dict.fromkeys([*SPECIALS, *alphabet, *(a + b for a, b in learned)]))
    model = models.BPE({t: i for i, t in enumerate(types)}, learned, unk_token="<unk>", end_of_word_suffix=END_OF_WORD)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, words
    tokenizer.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
    tokenizer.add_special_tokens(SPECIALS)
    return tokenizer


def _symbols(word: str) -> list[str]:
    """A word as subword-nmt starts it: its characters, the last one carrying `</w>`."""
    return [*word[:-1], word[-1] + END_OF_WORD]


def learn_merges(words: Mapping[str, int], n: int, min_frequency: int) -> list[tuple[str, str]]:
    """subword-nmt's learn_bpe (Sennrich et al. 2016): n times, the pair of adjacent symbols seen most often in the
    words (each weighted by its count), the larger pair first where counts tie (`max` of (count, pair), as
    learn_bpe picks), merged everywhere, left to right; fewer when the best is seen fewer than `min_frequency`
    times. Counts are kept up to date word by word (only the words that hold a merged pair are looked at again) and
    the best pair read from a heap whose stale entries are skipped."""
    symbols = [_symbols(word) for word in words]
    weight = list(words.values())
    stats: Counter[tuple[str, str]] = Counter()
    holders: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, word in enumerate(symbols):
        for pair in pairwise(word):
            stats[pair] += weight[i]
            holders[pair].add(i)
    heap = [(-count, _larger_first(pair), pair) for pair, count in stats.items()]
    heapq.heapify(heap)
    learned: list[tuple[str, str]] = []
    while heap and len(learned) < n:
        count, _, pair = heapq.heappop(heap)
        if stats.get(pair) != -count:
            continue  # an entry from before a later change of this pair's count
        if -count < min_frequency:
            break
        learned.append(pair)
        changed = set()
        for i in holders.pop(pair):
            merged = _merge(symbols[i], pair)
            if len(merged) == len(symbols[i]):
                continue  # a word that no longer holds the pair
            for old in pairwise(symbols[i]):
                stats[old] -= weight[i]
                changed.add(old)
            for new in pairwise(merged):
                stats[new] += weight[i]
                holders[new].add(i)
                changed.add(new)
            symbols[i] = merged
        for other in changed:
            if stats[other] > 0:
                heapq.heappush(heap, (-stats[other], _larger_first(other), other))
            else:
                del stats[other]
    return learned


def _merge(word: list[str], pair: tuple[str, str]) -> list[str]:
    """Every occurrence of `pair` in `word` merged, left to right, an occurrence not overlapping the one before."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def _larger_first(pair: tuple[str, str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A heap key that puts the lexicographically larger pair first: code points negated, and a string before the
    longer strings it begins (a 1 after its last character, where theirs go on at or below 0)."""
    return (*(-ord(c) for c in pair[0]), 1), (*(-ord(c) for c in pair[1]), 1)


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
            Vocabulary.train(texts, spec.vocab_size, spec.min_frequency, spec.merges, spec.style).save(path)
    loaded = [Vocabulary.load(folder / f"{name}.json") for name in names]
    return loaded[0], loaded[-1]
