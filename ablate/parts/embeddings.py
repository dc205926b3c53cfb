"""Token embeddings and the output projection (§3.4): their scale, and which of them share weights.

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import EMBEDDING_SCALE, TYING


@EMBEDDING_SCALE.builds
class EmbeddingScale(declared.EmbeddingScale, nn.Module):
    """Base: the factor token embeddings are multiplied by before positions are added."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model


@EMBEDDING_SCALE.register("sqrt_dmodel")
class SqrtDmodelScale(declared.SqrtDmodelScale, EmbeddingScale):
    def forward(self, x: Tensor) -> Tensor:
        return x * math.sqrt(self.d_model)


@EMBEDDING_SCALE.register("none")
class NoScale(declared.NoScale, EmbeddingScale):
    def forward(self, x: Tensor) -> Tensor:
        return x


def embedding(vocab: int, d_model: int, pad_id: int) -> nn.Embedding:
    table = nn.Embedding(vocab, d_model, padding_idx=pad_id)
    nn.init.normal_(table.weight, std=d_model**-0.5)  # times sqrt(d_model), unit variance
    table.weight.data[pad_id].zero_()
    return table


@TYING.builds
class Embeddings(declared.Embeddings, nn.Module):
    """Base: the source and target embeddings and the pre-softmax projection (`output`), tied or not."""

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, pad_id: int):
        super().__init__()
        self.source = embedding(src_vocab, d_model, pad_id)
        self.target = embedding(tgt_vocab, d_model, pad_id)
        self.output = nn.Linear(d_model, tgt_vocab, bias=False)


@TYING.register("none")
class Untied(declared.Untied, Embeddings):
    pass


@TYING.register("decoder")
class DecoderTied(declared.DecoderTied, Embeddings):
    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, pad_id: int):
        super().__init__(src_vocab, tgt_vocab, d_model, pad_id)
        self.output.weight = self.target.weight


@TYING.register("all")
class AllTied(declared.AllTied, Embeddings):
    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, pad_id: int):
        if src_vocab != tgt_vocab:
            raise ValueError(
                f"tying 'all' needs one joint vocabulary, got {src_vocab} source and {tgt_vocab} target tokens"
            )
        super().__init__(src_vocab, tgt_vocab, d_model, pad_id)
        self.target = self.source
        self.output.weight = self.source.weight
