"""Every built-in part as a spec knows it, without torch: each slot, each part's name, what it is (its docstring,
which `ablate parts` and the JSON Schema show), its parameters, the dimensions it needs and what its slot asks
of it. A spec is validated against these alone, so ModelSpec and RunSpec import no torch (docs/architecture.md).

The code that builds a part is in this wing's other modules: its class subclasses the declaration and is
registered under the same name (`@POSITIONS.register("rotary") class RotaryPositions(declared.RotaryPositions,
Positions)`), so its parameters and checks are the declaration's. tests/test_registry.py holds every declared
part to one class that builds it. A plugin's part declares itself when it registers (ablate.registry).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import PositiveFloat, PositiveInt

from ablate.errors import SpecValueError
from ablate.registry import Part, PartParams, slot


class Positions(Part):
    """Base: how a token's position enters the model."""


class AttentionScaling(Part):
    """Base: what multiplies the dot products q.k of attention."""


class Projection(Part):
    """Base: how each attention head's q, k and v are projected from its input."""


class EmbeddingScale(Part):
    """Base: the factor token embeddings are multiplied by before positions are added."""


class Embeddings(Part):
    """Base: which of the source embedding, the target embedding and the output projection share one matrix."""

    joint_vocabulary: ClassVar[bool] = False  # whether source and target must share one vocabulary (RunSpec checks)


class FeedForward(Part):
    """Base: the position-wise feed-forward network, d_model -> d_ff -> d_model."""


class Norm(Part):
    """Base: the normalisation of the last dimension, d_model."""


class SublayerConnection(Part):
    """Base: a residual connection around one sublayer (attention or feed-forward), with its norm."""

    final_norm: ClassVar[bool] = False  # whether the stack of such layers ends with a norm of its own


POSITIONS = slot("positions", Positions, "how the model knows token order")
PROJECTION = slot("projection", Projection, "how each attention head's q, k and v are projected from its input")
SCALING = slot("scaling", AttentionScaling, "what the attention logits q.k are scaled by")
EMBEDDING_SCALE = slot("embedding_scale", EmbeddingScale, "what token embeddings are multiplied by")
TYING = slot("tying", Embeddings, "which of the embeddings and the output projection share one matrix")
FEEDFORWARD = slot("feedforward", FeedForward, "the position-wise feed-forward network")
NORM = slot("norm", Norm, "the normalisation layer")
NORM_PLACEMENT = slot("norm_placement", SublayerConnection, "where the norm sits around each residual sublayer")


# positions (ablate/parts/positions.py)


@POSITIONS.declare("sinusoidal")
class SinusoidalPositions(Positions):
    """Fixed sine and cosine encodings added to the embeddings, any length (Vaswani et al. §3.5)."""


@POSITIONS.declare("learned")
class LearnedPositions(Positions):
    """A trained embedding per position up to max_len, added to the embeddings (Table 3 row E)."""

    class Params(PartParams):
        max_len: PositiveInt = 1024


@POSITIONS.declare("none")
class NoPositions(Positions):
    """No position information at all: attention sees a bag of tokens (the decoder's mask still orders it)."""


@POSITIONS.declare("rotary")
class RotaryPositions(Positions):
    """RoPE: rotates each pair of self-attention query and key features by an angle growing with position (Su et al.
    2021); cross-attention is not rotated, and nothing is added to the embeddings."""

    class Params(PartParams):
        base: PositiveFloat = 10000.0

    @classmethod
    def check(cls, params: PartParams, *, d_k: int, **dims: int) -> None:
        if d_k % 2:
            raise SpecValueError(f"positions 'rotary' rotates pairs of features and needs an even d_k, got d_k={d_k}")


# scaling (ablate/parts/attention.py)


@SCALING.declare("sqrt_dk")
class SqrtDk(AttentionScaling):
    """q.k / sqrt(d_k), the paper's: keeps the logits' variance at 1 for unit-variance q and k (§3.2.1)."""


@SCALING.declare("sqrt_dmodel")
class SqrtDmodel(AttentionScaling):
    """q.k / sqrt(d_model), the tutorial bug: with d_k = d_model / h, logits sqrt(h) times too small."""


@SCALING.declare("none")
class NoScaling(AttentionScaling):
    """q.k unscaled: the logits' variance grows with d_k and the softmax saturates (§3.2.1, footnote 4)."""


@SCALING.declare("qk_norm")
class QKNorm(AttentionScaling):
    """QK-norm: q and k L2-normalised per head, cosine logits times a learned scale g (Henry et al. 2020 learn
    one g; here each head has its own)."""

    class Params(PartParams):
        init_scale: PositiveFloat = 10.0  # Henry et al. start g at log2(L^2 - L); L ~ 30 tokens gives ~10


# projection (ablate/parts/projections.py)


@PROJECTION.declare("full")
class FullProjection(Projection):
    """Each head's q, k and v projected from all of d_model by its own matrices, the paper's (§3.2.2), with
    biases (the paper writes none; fairseq's have them)."""


@PROJECTION.declare("shared_per_head")
class SharedPerHeadProjection(Projection):
    """The tutorial bug: head i's q, k, v from only the i-th d_k-wide slice of x, through one d_k x d_k matrix
    shared by all heads, no bias; the paper projects each head from all of d_model with its own matrices (§3.2.2).

    Three d_k x d_k matrices in all (q, k, v), against the paper's three d_model x h*d_k: a head sees only
    d_k of the d_model features, and every head looks at its slice the same way. Needs h*d_k = d_model and
    d_v = d_k.
    """

    @classmethod
    def check(cls, params: PartParams, *, d_model: int, heads: int, d_k: int, d_v: int, **dims: int) -> None:
        if heads * d_k != d_model:
            raise SpecValueError(
                f"projection 'shared_per_head' cuts d_model into the heads' slices and needs heads * d_k = d_model, "
                f"got {heads} * {d_k} != {d_model}"
            )
        if d_v != d_k:
            raise SpecValueError(
                f"projection 'shared_per_head' makes a head's values from its d_k-wide slice and needs d_v = d_k, "
                f"got d_v={d_v}, d_k={d_k}"
            )


# embedding_scale and tying (ablate/parts/embeddings.py)


@EMBEDDING_SCALE.declare("sqrt_dmodel")
class SqrtDmodelScale(EmbeddingScale):
    """Embeddings times sqrt(d_model), the paper's (§3.4)."""


@EMBEDDING_SCALE.declare("none")
class NoScale(EmbeddingScale):
    """Embeddings as they are."""


@TYING.declare("none")
class Untied(Embeddings):
    """Three separate matrices: source embedding, target embedding, output projection."""


@TYING.declare("decoder")
class DecoderTied(Embeddings):
    """The target embedding is the output projection's weight (Press & Wolf 2017); the source has its own."""


@TYING.declare("all")
class AllTied(Embeddings):
    """One matrix for source embedding, target embedding and output projection, over a joint vocabulary (§3.4)."""

    joint_vocabulary = True


# feedforward (ablate/parts/feedforward.py)


@FEEDFORWARD.declare("relu")
class ReLUFeedForward(FeedForward):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, the paper's (§3.3)."""


@FEEDFORWARD.declare("gelu")
class GELUFeedForward(FeedForward):
    """FFN(x) = GELU(x W1 + b1) W2 + b2 (Hendrycks & Gimpel 2016; BERT, GPT)."""


@FEEDFORWARD.declare("swiglu")
class SwiGLUFeedForward(FeedForward):
    """FFN(x) = (Swish(x W1) * x V) W2, gated, no biases (Shazeer 2020); a third d_model x d_ff matrix."""


# norm and norm_placement (ablate/parts/norms.py)


class EpsParams(PartParams):
    eps: PositiveFloat = 1e-5


@NORM.declare("layernorm")
class LayerNorm(Norm):
    """LayerNorm: subtract the mean, divide by the standard deviation, then a learned gain and bias (Ba et al. 2016)."""

    Params = EpsParams


@NORM.declare("rmsnorm")
class RMSNorm(Norm):
    """RMSNorm: divide by the root mean square, then a learned gain; no centring, no bias (Zhang & Sennrich 2019)."""

    Params = EpsParams


@NORM_PLACEMENT.declare("post_ln")
class PostLN(SublayerConnection):
    """Post-LN, the paper's: x = LN(x + Dropout(Sublayer(x))), no final norm (§3.1, §5.4)."""


@NORM_PLACEMENT.declare("pre_ln")
class PreLN(SublayerConnection):
    """Pre-LN: x = x + Dropout(Sublayer(LN(x))), and a final norm on the stack's output (Xiong et al. 2020)."""

    final_norm = True


@NORM_PLACEMENT.declare("post_ln_dropout_after_norm")
class PostLNDropoutAfterNorm(SublayerConnection):
    """The tutorial bug: x = Dropout(LN(x + Sublayer(x))), no final norm; the paper drops the sublayer's output
    before the residual sum and the norm, x = LN(x + Dropout(Sublayer(x))) (§5.4).

    Dropout then acts on the residual stream itself, the skip path included: every layer's input has
    features zeroed and the rest scaled by 1/(1 - p), while the sublayer's output is never dropped on its own
    before the sum.
    Without dropout (evaluation, or p = 0) it computes what post_ln does; only training differs.
    """
