"""The encoder-decoder Transformer of Vaswani et al. (2017), Figure 1, assembled from registered parts.

Shapes: B batch, S source length, T target length, V vocabulary, d_model width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ablate.model.spec import ModelSpec
from ablate.parts import EMBEDDING_SCALE, FEEDFORWARD, NORM, NORM_PLACEMENT, POSITIONS, PROJECTION, SCALING, TYING
from ablate.parts.attention import KV, AttentionScaling, CrossAttention, SelfAttention
from ablate.parts.dropout import use_sampler
from ablate.parts.embeddings import Embeddings
from ablate.parts.feedforward import FeedForward
from ablate.parts.norms import SublayerConnection
from ablate.parts.positions import Positions
from ablate.parts.projections import Projection


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each in a residual sublayer connection (§3.1)."""

    def __init__(self, self_attn: SelfAttention, feed_forward: FeedForward, sublayers: list[SublayerConnection]):
        super().__init__()
        self.self_attn, self.feed_forward = self_attn, feed_forward
        self.sublayers = nn.ModuleList(sublayers)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.sublayers[0](x, lambda x: self.self_attn(x, mask))
        return self.sublayers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention to the encoder's output, then the feed-forward network (§3.1)."""

    def __init__(
        self,
        self_attn: SelfAttention,
        cross_attn: CrossAttention,
        feed_forward: FeedForward,
        sublayers: list[SublayerConnection],
    ):
        super().__init__()
        self.self_attn, self.cross_attn, self.feed_forward = self_attn, cross_attn, feed_forward
        self.sublayers = nn.ModuleList(sublayers)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, cache: tuple[KV, KV] | None = None) -> Tensor:
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.sublayers[0](x, lambda x: self.self_attn(x, causal=True, cache=self_cache))
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, src_mask, cache=cross_cache))
        return self.sublayers[2](x, self.feed_forward)


class Encoder(nn.Module):
    """N encoder layers, then the final norm that Pre-LN needs (identity for Post-LN)."""

    def __init__(self, layers: list[EncoderLayer], final_norm: nn.Module):
        super().__init__()
        self.layers, self.final_norm = nn.ModuleList(layers), final_norm

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x)


class Decoder(nn.Module):
    """N decoder layers, then the final norm that Pre-LN needs (identity for Post-LN)."""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module):
        super().__init__()
        self.layers, self.final_norm = nn.ModuleList(layers), final_norm

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, cache.layers[i] if cache is not None else None)
        return self.final_norm(x)


class DecoderCache:
    """What incremental decoding keeps: per layer, self-attention k/v growing a step at a time and the
    cross-attention k/v of the memory, computed once."""

    def __init__(self, layers: int):
        self.layers = [(KV(), KV()) for _ in range(layers)]

    def __len__(self) -> int:
        """Target positions decoded so far."""
        return len(self.layers[0][0]) if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keeps the batch rows `index`, in that order (beam search)."""
        for self_kv, cross_kv in self.layers:
            self_kv.reorder(index)
            cross_kv.reorder(index)


class Transformer(nn.Module):
    """Encoder-decoder translation model: `encode` once, `decode` in full or a step at a time."""

    def __init__(
        self,
        embeddings: Embeddings,
        embedding_scale: nn.Module,
        src_positions: Positions,
        tgt_positions: Positions,
        encoder: Encoder,
        decoder: Decoder,
        dropout: float,
        pad_id: int,
    ):
        super().__init__()
        self.embeddings, self.embedding_scale = embeddings, embedding_scale
        self.src_positions, self.tgt_positions = src_positions, tgt_positions
        self.encoder, self.decoder = encoder, decoder
        self.dropout = nn.Dropout(dropout)
        self.pad_id = pad_id

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src: (B, S) token ids -> memory (B, S, d_model) and its key mask (B, 1, 1, S), True at real tokens."""
        src_mask = (src != self.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        x = self.dropout(self.src_positions(self.embedding_scale(self.embeddings.source(src))))
        return self.encoder(x, src_mask), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """tgt: (B, T) ids after the ones in `cache` -> (B, T, d_model). Targets are right-padded, so the
        causal mask alone keeps every real position from seeing padding."""
        offset = len(cache) if cache is not None else 0
        x = self.dropout(self.tgt_positions(self.embedding_scale(self.embeddings.target(tgt)), offset))
        return self.decoder(x, memory, src_mask, cache)

    def generator(self, hidden: Tensor) -> Tensor:
        """(B, T, d_model) -> logits (B, T, V), through the (possibly tied) output projection."""
        return self.embeddings.output(hidden)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: logits (B, T, V) for the next token at every target position."""
        memory, src_mask = self.encode(src)
        return self.generator(self.decode(tgt, memory, src_mask))

    def new_cache(self) -> DecoderCache:
        return DecoderCache(len(self.decoder.layers))


def build_model(spec: ModelSpec, src_vocab: int, tgt_vocab: int, pad_id: int = 0) -> Transformer:
    """Wires a Transformer from a validated model spec, a part per slot, as in Figure 1."""
    d_model, heads, d_k, d_v = spec.d_model, spec.heads, spec.d_k, spec.value_width
    src_positions = POSITIONS.build(spec.positions, d_model=d_model)
    tgt_positions = POSITIONS.build(spec.positions, d_model=d_model)

    def sublayers(n: int) -> list[SublayerConnection]:
        return [NORM_PLACEMENT.build(spec.norm_placement, norm=norm(), dropout=spec.dropout) for _ in range(n)]

    def norm() -> nn.Module:
        return NORM.build(spec.norm, d_model=d_model)

    def projection(cross: bool) -> Projection:
        return PROJECTION.build(spec.projection, d_model=d_model, heads=heads, d_k=d_k, d_v=d_v, cross=cross)

    def scaling() -> AttentionScaling:
        return SCALING.build(spec.scaling, d_model=d_model, heads=heads, d_k=d_k)

    def self_attn(positions: Positions) -> SelfAttention:
        return SelfAttention(
            d_model, heads, d_k, d_v, projection(cross=False), scaling(), spec.attention_dropout, positions
        )

    def cross_attn() -> CrossAttention:
        return CrossAttention(d_model, heads, d_k, d_v, projection(cross=True), scaling(), spec.attention_dropout)

    def feed_forward() -> FeedForward:
        return FEEDFORWARD.build(spec.feedforward, d_model=d_model, d_ff=spec.d_ff, dropout=spec.activation_dropout)

    def final_norm() -> nn.Module:
        return norm() if spec.norm_placement.cls.final_norm else nn.Identity()

    encoder = Encoder(
        [EncoderLayer(self_attn(src_positions), feed_forward(), sublayers(2)) for _ in range(spec.encoder_layers)],
        final_norm(),
    )
    decoder = Decoder(
        [
            DecoderLayer(self_attn(tgt_positions), cross_attn(), feed_forward(), sublayers(3))
            for _ in range(spec.decoder_layers)
        ],
        final_norm(),
    )
    embeddings = TYING.build(spec.tying, src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=d_model, pad_id=pad_id)
    model = Transformer(
        embeddings,
        EMBEDDING_SCALE.build(spec.embedding_scale, d_model=d_model),
        src_positions,
        tgt_positions,
        encoder,
        decoder,
        spec.dropout,
        pad_id,
    )
    init_weights(model)
    return use_sampler(model, spec.dropout_sampler)


def init_weights(model: Transformer) -> None:
    """Xavier-uniform linear layers, each from its own shape, with zero biases (as fairseq and tensor2tensor);
    embeddings keep N(0, 1/d_model), and so does an untied output projection (`tying: none`). A projection packed
    into one matrix takes its bound from the packed shape (ablate/parts/projections.py says what that gives each
    attention)."""
    output = model.embeddings.output
    for module in model.modules():
        if isinstance(module, nn.Linear) and module is not output:
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    if output.weight is not model.embeddings.target.weight:
        nn.init.normal_(output.weight, std=model.embeddings.output.in_features**-0.5)


def count_parameters(model: nn.Module) -> int:
    """Parameters, each shared matrix counted once."""
    return sum(p.numel() for p in model.parameters())


def parameter_count(spec: ModelSpec, src_vocab: int, tgt_vocab: int) -> int:
    """The model's parameter count, built on the meta device: no memory, and about 0.05 s a model on a CPU, but
    the first in a process also imports torch._dynamo, which torch's meta kernels of arange and normal_ need
    (1.9-2.4 s of CPU time on an AVX2-only EPYC core)."""
    with torch.device("meta"):
        return count_parameters(build_model(spec, src_vocab, tgt_vocab))
