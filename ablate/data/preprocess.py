"""Text as MT papers prepare it before BPE: lowercased and Moses-tokenised, and detokenised again before sacreBLEU
scores a translation (DataSpec's `lowercase` and `tokenize`). Torch-free.

The preparation sits behind each side's vocabulary (`behind`): raw text goes in, and what comes out of decoding is
detokenised text, so every caller of `encode` and `decode` (training, validation, beam search, the bench) sees the
raw text it always saw. References stay raw; lowercase BLEU is sacreBLEU's own option (evaluation.lowercase).
Sources are counted in words of the raw text (evaluation.length_buckets, data.max_train_length), whatever the
preparation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import ClassVar, Protocol

from ablate.data.tokenizer import Vocabulary
from ablate.registry import Part, PartParams, PartSpec, slot


class Tokenize(Part):
    """Base: splits one language's text into words before BPE learns and applies its merges, and joins a
    translation's words back into text."""

    identity: ClassVar[bool] = False  # leaves the text as it is
    scored_as: ClassVar[str] = ""  # what the BLEU signature adds for hypotheses this part joined

    def __init__(self, language: str):
        self.language = language

    def tokenize(self, texts: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def detokenize(self, texts: Sequence[str]) -> list[str]:
        raise NotImplementedError


TOKENIZE = slot("tokenize", Tokenize, "how text is split into words before BPE, and joined again before scoring")


@TOKENIZE.register("none")
class NoTokenize(Tokenize):
    """The text as it is: BPE's own pre-tokenizer splits it at spaces and punctuation, and decoding joins it back."""

    identity = True

    def tokenize(self, texts: Sequence[str]) -> list[str]:
        return list(texts)

    def detokenize(self, texts: Sequence[str]) -> list[str]:
        return list(texts)


class MosesParams(PartParams):
    normalize: bool = False  # normalize-punctuation.perl -l L first, as Multi30k's tok files (lc.norm.tok) were made
    aggressive_dash_splits: bool = False  # tokenizer.perl -a (`well @-@ known`), as fairseq's WMT scripts run it
    # tokenizer.perl's default, as Multi30k's tok files have it: & | < > ' " [ ] as &amp; &#124; &lt; &gt; &apos;
    # &quot; &#91; &#93;, undone before scoring. For tokenizer.style subword-nmt, which keeps `&quot;` one word where
    # metaspace's punctuation split would cut it in three
    escape: bool = False


@TOKENIZE.register("moses")
class Moses(Tokenize):
    """Moses's tokenizer.perl for the side's language (sacremoses; special characters escaped as XML entities only
    with `escape`), after its normalize-punctuation.perl with `normalize`, and its detokenizer.perl (unescaping with
    `escape`) on every translation before it is scored."""

    Params = MosesParams
    scored_as = "detok:moses"

    def __init__(self, language: str, normalize: bool, aggressive_dash_splits: bool, escape: bool):
        from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer  # 1.8 s: not for every spec

        super().__init__(language)
        self.normalizer = MosesPunctNormalizer(language) if normalize else None
        self.tokenizer, self.detokenizer = MosesTokenizer(language), MosesDetokenizer(language)
        self.aggressive_dash_splits, self.escape = aggressive_dash_splits, escape

    def tokenize(self, texts: Sequence[str]) -> list[str]:
        if self.normalizer is not None:  # a line with its newline, as the Perl script reads it: a rule that moves
            # `."` to `".` wants a character after the quote
            texts = [self.normalizer.normalize(f"{text}\n").rstrip("\n") for text in texts]
        dashes, escape = self.aggressive_dash_splits, self.escape
        return [self.tokenizer.tokenize(t, aggressive_dash_splits=dashes, return_str=True, escape=escape)
                for t in texts]  # fmt: skip

    def detokenize(self, texts: Sequence[str]) -> list[str]:
        return [self.detokenizer.detokenize(text.split(), unescape=self.escape) for text in texts]


class TextSpec(Protocol):
    """What the preparation reads of a spec: DataSpec has it all (and imports this module, so it is not named)."""

    source: str
    target: str
    lowercase: bool
    tokenize: PartSpec


@lru_cache(maxsize=16)
def tokenize_part(spec: PartSpec, language: str) -> Tokenize:
    """The tokenize part of one language, built once a process."""
    return TOKENIZE.build(spec, language=language)


@dataclass(frozen=True)
class Side:
    """One language's preparation."""

    language: str
    lowercase: bool
    tokenize: PartSpec

    def prepare(self, texts: Sequence[str]) -> list[str]:
        """Raw text as BPE learns it and the model reads it: lowercased, then tokenised."""
        texts = [text.lower() for text in texts] if self.lowercase else texts
        return tokenize_part(self.tokenize, self.language).tokenize(texts)

    def restore(self, texts: Sequence[str]) -> list[str]:
        """What the model wrote, as text to score: detokenised (lowercase stays lowercase)."""
        return tokenize_part(self.tokenize, self.language).detokenize(texts)


def sides(spec: TextSpec) -> tuple[Side, Side]:
    return Side(spec.source, spec.lowercase, spec.tokenize), Side(spec.target, spec.lowercase, spec.tokenize)


def prepare_side(texts: Sequence[str], language: str, spec: TextSpec) -> list[str]:
    """One language's raw text as the spec prepares it: lowercased, then tokenised."""
    return Side(language, spec.lowercase, spec.tokenize).prepare(texts)


def restore(texts: Sequence[str], language: str, spec: TextSpec) -> list[str]:
    """Translations into `language` as text to score: detokenised."""
    return Side(language, spec.lowercase, spec.tokenize).restore(texts)


def changes_text(spec: TextSpec) -> bool:
    """Whether the preparation does anything: at the defaults, BPE sees the raw text."""
    return spec.lowercase or not TOKENIZE.declaration(spec.tokenize.name).identity


class PreparedPairs(Iterable[tuple[str, str]]):
    """Pairs as BPE learns from them, both sides prepared, a chunk at a time; read again at each pass, as the pairs
    it wraps are (a vocabulary a side reads them twice)."""

    CHUNK = 10_000

    def __init__(self, pairs: Iterable[tuple[str, str]], spec: TextSpec):
        self.pairs, self.sides = pairs, sides(spec)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        pairs, (source, target) = iter(self.pairs), self.sides
        while chunk := list(islice(pairs, self.CHUNK)):
            yield from zip(source.prepare([p[0] for p in chunk]), target.prepare([p[1] for p in chunk]), strict=True)


def prepare_pairs(pairs: Iterable[tuple[str, str]], spec: TextSpec) -> Iterable[tuple[str, str]]:
    """`pairs` prepared for BPE to learn from: the pairs themselves when the spec changes nothing."""
    return PreparedPairs(pairs, spec) if changes_text(spec) else pairs


class PreparedVocabulary(Vocabulary):
    """A side's vocabulary behind its preparation: raw text in, detokenised text out."""

    def __init__(self, vocabulary: Vocabulary, side: Side):
        super().__init__(vocabulary.tokenizer)
        self.side = side

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return super().encode(self.side.prepare(texts))

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.side.restore(super().decode(ids))


def behind(vocabularies: tuple[Vocabulary, Vocabulary], spec: TextSpec) -> tuple[Vocabulary, Vocabulary]:
    """The source and target vocabularies behind the spec's preparation of each side (themselves when it changes
    nothing); a joint vocabulary becomes two, one a language, sharing one BPE model."""
    if not changes_text(spec):
        return vocabularies
    (src, tgt), (source, target) = vocabularies, sides(spec)
    return PreparedVocabulary(src, source), PreparedVocabulary(tgt, target)


def writes_lowercase(vocabulary: Vocabulary) -> bool:
    """Whether what `vocabulary` decodes was learned from lowercased text (data.lowercase), so has no capitals."""
    return isinstance(vocabulary, PreparedVocabulary) and vocabulary.side.lowercase


def scored_as(vocabulary: Vocabulary) -> str:
    """What a BLEU signature adds for hypotheses that `vocabulary` decoded: `detok:moses` when they were Moses-
    detokenised before scoring, else nothing."""
    if not isinstance(vocabulary, PreparedVocabulary):
        return ""
    return TOKENIZE.declaration(vocabulary.side.tokenize.name).scored_as
