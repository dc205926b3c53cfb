"""Attention and its scaling parts against the formula softmax(s * q.k^T) v, written out by hand."""

import math

import pytest
import torch

from ablate.parts.attention import KV, SCALING, CrossAttention, SelfAttention
from ablate.parts.positions import POSITIONS
from ablate.parts.projections import PROJECTION
from tests.conftest import randomised, tiny_model

D, H = 32, 4
D_K = 8


def self_attention(
    scaling="sqrt_dk", d_k: int = D_K, positions="none", dropout: float = 0.0, d_v: int | None = None
) -> SelfAttention:
    torch.manual_seed(0)
    d_v = d_v or d_k
    part = SCALING.build(SCALING.parse(scaling), d_model=D, heads=H, d_k=d_k)
    where = POSITIONS.build(POSITIONS.parse(positions), d_model=D)
    full = PROJECTION.build(PROJECTION.parse("full"), d_model=D, heads=H, d_k=d_k, d_v=d_v, cross=False)
    return SelfAttention(D, H, d_k, d_v, full, part, dropout=dropout, positions=where).eval()


def by_hand(attn: SelfAttention, x: torch.Tensor, scale, normalise: bool = False) -> torch.Tensor:
    """W^Q, W^K, W^V read as the rows of the packed matrix, (h*d_k, h*d_k, h*d_v), each head its own slice."""
    B, L, _ = x.shape
    w_qkv = attn.projection.w_qkv
    q, k, v = (x @ w_qkv.weight.T + w_qkv.bias).split((H * attn.d_k, H * attn.d_k, H * attn.d_v), dim=-1)
    q, k = (t.reshape(B, L, H, attn.d_k).transpose(1, 2) for t in (q, k))  # (B, h, L, d_k)
    v = v.reshape(B, L, H, attn.d_v).transpose(1, 2)  # (B, h, L, d_v)
    if normalise:
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    weights = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, L, H * attn.d_v)
    return out @ attn.w_o.weight.T + attn.w_o.bias


@pytest.mark.parametrize(
    "scaling, scale",
    [
        ("sqrt_dk", 1 / math.sqrt(D_K)),
        ("sqrt_dmodel", 1 / math.sqrt(D)),  # the tutorial bug: sqrt(h) = 2 times smaller than sqrt_dk here
        ("none", 1.0),
    ],
)
def test_fixed_scalings_equal_the_formula(scaling, scale):
    attn = self_attention(scaling)
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), by_hand(attn, x, scale), atol=1e-5, rtol=1e-5)


def test_sqrt_dk_follows_d_k_not_d_model():
    attn = self_attention("sqrt_dk", d_k=16)  # Table 3 row B: d_k set apart from d_model / h
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), by_hand(attn, x, 1 / 4), atol=1e-5, rtol=1e-5)
    assert attn.projection.w_qkv.out_features == 3 * H * 16


@pytest.mark.parametrize(("d_k", "d_v"), [(4, 16), (16, 4)])
def test_d_v_sets_the_values_and_w_o_apart_from_d_k(d_k, d_v):
    """Table 3 row B: d_k changed, d_v kept. Scores are q.k / sqrt(d_k); each head's output is d_v wide, and W^O
    reads h*d_v of them."""
    attn = randomised(self_attention("sqrt_dk", d_k=d_k, d_v=d_v))
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), by_hand(attn, x, d_k**-0.5), atol=1e-4, rtol=1e-4)
    assert attn.projection.w_qkv.out_features == H * (2 * d_k + d_v)
    assert attn.w_o.in_features == H * d_v


def test_qk_norm_is_cosine_similarity_times_learned_scale():
    attn = self_attention({"name": "qk_norm", "init_scale": 3.0})
    with torch.no_grad():
        attn.scaling.g.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0])[:, None, None])
    x = torch.randn(2, 5, D)
    scale = attn.scaling.g.detach()  # (h, 1, 1): per head
    with torch.no_grad():
        torch.testing.assert_close(attn(x), by_hand(attn, x, scale, normalise=True), atol=1e-5, rtol=1e-5)
    assert {n for n, _ in attn.named_parameters()} >= {"scaling.g"}


def test_causal_self_attention_equals_masked_formula():
    attn = self_attention("sqrt_dk")
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        full = attn(x, causal=True)
        for t in range(5):  # position t sees positions <= t only
            torch.testing.assert_close(full[:, t], attn(x[:, : t + 1])[:, t], atol=1e-5, rtol=1e-5)


def test_cross_attention_reads_memory_through_key_mask():
    torch.manual_seed(0)
    part = SCALING.build(SCALING.parse("sqrt_dk"), d_model=D, heads=H, d_k=D_K)
    full = PROJECTION.build(PROJECTION.parse("full"), d_model=D, heads=H, d_k=D_K, d_v=D_K, cross=True)
    attn = CrossAttention(D, H, D_K, D_K, full, part, dropout=0.0).eval()
    x, memory = torch.randn(1, 3, D), torch.randn(1, 6, D)
    mask = torch.tensor([True, True, True, True, False, False])[None, None, None, :]
    with torch.no_grad():
        torch.testing.assert_close(attn(x, memory, mask), attn(x, memory[:, :4], None), atol=1e-5, rtol=1e-5)


def test_cross_attention_with_d_v_apart_from_d_k_equals_the_formula():
    """Queries from x through W^Q, keys and values from the memory through the packed W^KV (h*d_k, then h*d_v),
    softmax(q.k / sqrt(d_k)) v per head, W^O over h*d_v; every parameter randomised."""
    d_k, d_v = 4, 12
    part = SCALING.build(SCALING.parse("sqrt_dk"), d_model=D, heads=H, d_k=d_k)
    full = PROJECTION.build(PROJECTION.parse("full"), d_model=D, heads=H, d_k=d_k, d_v=d_v, cross=True)
    attn = randomised(CrossAttention(D, H, d_k, d_v, full, part, dropout=0.0).eval())
    x, memory = torch.randn(2, 3, D), torch.randn(2, 6, D)
    q = (x @ full.w_q.weight.T + full.w_q.bias).reshape(2, 3, H, d_k).transpose(1, 2)
    k, v = (memory @ full.w_kv.weight.T + full.w_kv.bias).split((H * d_k, H * d_v), dim=-1)
    k, v = k.reshape(2, 6, H, d_k).transpose(1, 2), v.reshape(2, 6, H, d_v).transpose(1, 2)
    out = (torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_k), dim=-1) @ v).transpose(1, 2).reshape(2, 3, -1)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, memory, None), out @ attn.w_o.weight.T + attn.w_o.bias, atol=1e-4, rtol=1e-4)


def test_on_the_cpu_bf16_attention_is_computed_in_fp32():
    """Under bf16 autocast, `sdpa` is the exact attention of its bf16 inputs rounded once to bf16 (fp32 inside),
    and gradients flow; fp32 inputs without autocast take torch's kernel unchanged."""
    from ablate.parts.attention import sdpa

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, H, 7, D_K).bfloat16().requires_grad_() for _ in range(3))
    mask = torch.rand(2, 1, 1, 7) > 0.2
    mask[..., 0] = True  # every query sees a key
    exact = torch.softmax((q.double() @ k.double().transpose(-1, -2)) * 0.3 + (~mask) * -1e9, -1) @ v.double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sdpa(q, k, v, attn_mask=mask, scale=0.3)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), exact, rtol=2**-8, atol=1e-6)  # one bf16 rounding of the exact value
    out.float().sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (q, k, v))
    x = [t.detach().float() for t in (q, k, v)]
    assert torch.equal(sdpa(*x, attn_mask=mask, scale=0.3),
                       torch.nn.functional.scaled_dot_product_attention(*x, attn_mask=mask, scale=0.3))  # fmt: skip


def rope_by_hand(x: torch.Tensor, base: float, offset: int = 0) -> torch.Tensor:
    """RoPE as Su et al. write it: feature pair i of position m, read as the complex number x_2i + j·x_2i+1, times
    e^(j·m·θ_i) with θ_i = base^(−2i/d_k)."""
    *_, length, d_k = x.shape
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d_k // 2, 2).contiguous())
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    m = torch.arange(offset, offset + length, dtype=torch.float64)[:, None]
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(m * theta), m * theta)).flatten(-2).float()


@pytest.mark.parametrize("causal", [False, True])
def test_rotary_attention_rotates_q_and_k_and_not_v(causal):
    """Self-attention with RoPE (a base other than the default, every parameter randomised) against the formula:
    q and k rotated by their positions, v as projected, softmax(q·k / √d_k) v. Without the rotation, or with v
    rotated too, it fails (checked below)."""
    torch.manual_seed(0)
    attn = randomised(self_attention(positions={"name": "rotary", "base": 500.0}))
    full = attn.projection
    x = torch.randn(2, 6, D)
    B, L, _ = x.shape
    q, k, v = (x @ full.w_qkv.weight.T + full.w_qkv.bias).split(H * D_K, dim=-1)
    q, k, v = (t.reshape(B, L, H, D_K).transpose(1, 2) for t in (q, k, v))

    def attend(q, k, v):
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D_K)
        if causal:
            scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, L, H * D_K)
        return out @ attn.w_o.weight.T + attn.w_o.bias

    expected = attend(rope_by_hand(q, 500.0), rope_by_hand(k, 500.0), v)
    with torch.no_grad():
        got = attn(x, causal=causal)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(got, attend(q, k, v), atol=1e-3)  # the rotation matters here
        assert not torch.allclose(got, attend(rope_by_hand(q, 500.0), rope_by_hand(k, 500.0),
                                              rope_by_hand(v, 500.0)), atol=1e-3)  # fmt: skip


def test_rotary_decoding_one_token_at_a_time_rotates_each_at_its_position():
    """With the decoding cache, token t is rotated as position t (the offset), as the whole sequence would be."""
    torch.manual_seed(1)
    attn = randomised(self_attention(positions={"name": "rotary", "base": 500.0}))
    full = attn.projection
    x = torch.randn(2, 5, D)
    B, L, _ = x.shape
    with torch.no_grad():
        whole = attn(x, causal=True)
        cache = KV()
        steps = [attn(x[:, t : t + 1], causal=True, cache=cache) for t in range(L)]
        k = (x @ full.w_qkv.weight.T + full.w_qkv.bias).split(H * D_K, dim=-1)[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=1e-5)
    k = k.reshape(B, L, H, D_K).transpose(1, 2)
    torch.testing.assert_close(cache.k, rope_by_hand(k, 500.0), atol=1e-5, rtol=1e-5)  # key t turned as position t


def test_attention_dropout_drops_attention_weights_in_training_alone():
    """attention_dropout (SDPA's dropout_p): in training each draw differs, and their mean is the evaluation output
    (weights dropped and the rest scaled by 1/(1 − p): unbiased); in evaluation nothing is dropped. Every attention
    of a model built with it has it."""
    torch.manual_seed(0)
    attn = randomised(self_attention(dropout=0.3))
    x = torch.randn(1, 6, D)
    with torch.no_grad():
        evaluation = attn.eval()(x)
        assert torch.equal(attn(x), evaluation)
        attn.train()
        draws = torch.stack([attn(x) for _ in range(4000)])
    assert not torch.allclose(draws[0], draws[1])
    sd = draws.std(0) / 4000**0.5  # the standard error of the mean, element by element
    assert ((draws.mean(0) - evaluation).abs() <= 5 * sd + 1e-6).all()
    model = tiny_model(attention_dropout=0.2)
    attentions = [m for m in model.modules() if isinstance(m, (SelfAttention, CrossAttention))]
    assert len(attentions) == 6 and all(m.dropout == 0.2 for m in attentions)  # 2 encoder + 2x2 decoder layers
