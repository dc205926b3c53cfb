"""The encoder and decoder stacks against PyTorch's own layers, every parameter randomised (biases and norm gains
included); the paper's parameter count."""

import pytest
import torch
from torch import nn

from ablate.model.spec import ModelSpec
from ablate.model.transformer import build_model, count_parameters, parameter_count
from tests.conftest import randomised, tiny_model, tiny_spec

D, H, FF, N = 32, 4, 64, 2


def copy_encoder_layer(ours, ref):
    ref.self_attn.in_proj_weight.data.copy_(ours.self_attn.projection.w_qkv.weight)  # rows [W_q; W_k; W_v] in both
    ref.self_attn.in_proj_bias.data.copy_(ours.self_attn.projection.w_qkv.bias)
    ref.self_attn.out_proj.load_state_dict(ours.self_attn.w_o.state_dict())
    ref.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
    ref.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
    ref.norm1.load_state_dict(ours.sublayers[0].norm.norm.state_dict())
    ref.norm2.load_state_dict(ours.sublayers[1].norm.norm.state_dict())


def copy_decoder_layer(ours, ref):
    ref.self_attn.in_proj_weight.data.copy_(ours.self_attn.projection.w_qkv.weight)
    ref.self_attn.in_proj_bias.data.copy_(ours.self_attn.projection.w_qkv.bias)
    ref.self_attn.out_proj.load_state_dict(ours.self_attn.w_o.state_dict())
    cross = ours.cross_attn.projection
    ref.multihead_attn.in_proj_weight.data.copy_(torch.cat([cross.w_q.weight, cross.w_kv.weight]))
    ref.multihead_attn.in_proj_bias.data.copy_(torch.cat([cross.w_q.bias, cross.w_kv.bias]))
    ref.multihead_attn.out_proj.load_state_dict(ours.cross_attn.w_o.state_dict())
    ref.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
    ref.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
    for i, norm in enumerate([ref.norm1, ref.norm2, ref.norm3]):
        norm.load_state_dict(ours.sublayers[i].norm.norm.state_dict())


def inputs(seed=1, batch=3, src_len=7, tgt_len=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(batch, src_len, D, generator=g)
    tgt = torch.randn(batch, tgt_len, D, generator=g)
    lengths = torch.tensor([src_len, src_len - 2, 3])
    keep = torch.arange(src_len)[None, :] < lengths[:, None]  # (B, S), True at real tokens
    return src, tgt, keep


@pytest.mark.parametrize("placement, norm_first", [("post_ln", False), ("pre_ln", True)])
def test_encoder_equals_pytorch_encoder(placement, norm_first):
    model = randomised(tiny_model(norm_placement=placement))
    layer = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerEncoder(layer, N, norm=nn.LayerNorm(D) if norm_first else None, enable_nested_tensor=False)
    for ours, theirs in zip(model.encoder.layers, ref.layers, strict=True):
        copy_encoder_layer(ours, theirs)
    if norm_first:
        ref.norm.load_state_dict(model.encoder.final_norm.norm.state_dict())
    else:
        assert isinstance(model.encoder.final_norm, nn.Identity)
    ref.eval()
    x, _, keep = inputs()
    with torch.no_grad():
        ours = model.encoder(x, keep[:, None, None, :])
        theirs = ref(x, src_key_padding_mask=~keep)
    torch.testing.assert_close(ours[keep], theirs[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("placement, norm_first", [("post_ln", False), ("pre_ln", True)])
def test_decoder_equals_pytorch_decoder(placement, norm_first):
    model = randomised(tiny_model(norm_placement=placement))
    layer = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerDecoder(layer, N, norm=nn.LayerNorm(D) if norm_first else None)
    for ours, theirs in zip(model.decoder.layers, ref.layers, strict=True):
        copy_decoder_layer(ours, theirs)
    if norm_first:
        ref.norm.load_state_dict(model.decoder.final_norm.norm.state_dict())
    ref.eval()
    memory, y, keep = inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(y.size(1))
    with torch.no_grad():
        ours = model.decoder(y, memory, keep[:, None, None, :])
        theirs = ref(y, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~keep)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_paper_base_parameter_count_equals_closed_form():
    d, d_ff, n, vocab = 512, 2048, 6, 37000
    attention = 4 * (d * d + d)  # W_q, W_k, W_v, W_o with biases
    ffn = d * d_ff + d_ff + d_ff * d + d
    layer_norm = 2 * d
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    expected = vocab * d + n * encoder_layer + n * decoder_layer  # one shared embedding matrix, no output bias
    assert expected == 63_082_496  # the paper rounds its figure to 65M
    assert parameter_count(ModelSpec(), vocab, vocab) == expected

    from tests.conftest import cli

    result = cli("validate", "experiments/paper/base.yaml")
    assert result.returncode == 0, result.stderr
    assert f"{expected:,}" in result.stdout


@pytest.mark.parametrize(("d_k", "paper_millions"), [(16, 58), (32, 60)])
def test_table3_row_b_shrinks_w_q_and_w_k_alone_as_the_paper_counts(d_k, paper_millions):
    """Row B of the paper's Table 3 changed d_k and kept d_v = 64: 58M and 60M parameters against the base's 65M.
    The 7M and 5M it saved are W^Q and W^K narrowed in all 18 attentions; a d_v tied to d_k would save about
    twice that (51M and 56M)."""
    d, vocab, attentions = 512, 37000, 6 + 2 * 6
    saved = attentions * 2 * (d * (d - 8 * d_k) + (d - 8 * d_k))  # W^Q and W^K with their biases, 8 heads
    base = parameter_count(ModelSpec(), vocab, vocab)
    row_b = parameter_count(ModelSpec(d_k=d_k, d_v=64), vocab, vocab)
    assert base - row_b == saved
    assert round((base - row_b) / 1e6) == 65 - paper_millions
    tied = parameter_count(ModelSpec(d_k=d_k), vocab, vocab)
    assert base - tied == saved + attentions * (2 * d + 1) * (d - 8 * d_k)  # W^V (with its bias) and W^O narrowed too


def test_d_v_equal_to_d_k_is_the_default_spelt_out():
    """d_v = d_k reads as null (the default), so it is one model with one config hash."""
    assert ModelSpec(d_v=64).d_v is None and ModelSpec(d_v=64) == ModelSpec()
    assert ModelSpec(heads=4, d_k=16, d_v=16).d_v is None
    spec = ModelSpec(d_k=16, d_v=64)
    assert (spec.d_k, spec.d_v, spec.value_width) == (16, 64, 64)


def test_every_attention_of_the_model_is_built_with_d_k_and_d_v_apart():
    """build_model's wiring: each attention's scores scaled by 1/sqrt(d_k) (never d_v), its values d_v wide, and
    W^O reading h*d_v, in the encoder, the decoder's self-attention and its cross-attention."""
    model = tiny_model(d_k=4, d_v=12)
    attentions = [layer.self_attn for layer in model.encoder.layers]
    attentions += [a for layer in model.decoder.layers for a in (layer.self_attn, layer.cross_attn)]
    assert len(attentions) == 3 * N
    q, k = torch.randn(1, H, 3, 4), torch.randn(1, H, 3, 4)
    for attn in attentions:
        assert (attn.d_k, attn.d_v, attn.w_o.in_features) == (4, 12, H * 12)
        assert attn.scaling(q, k)[2] == 4**-0.5


def test_tied_parameters_are_counted_once():
    spec = tiny_spec(tying="all")
    model = build_model(spec, 50, 50)
    untied = build_model(tiny_spec(tying="none"), 50, 50)
    assert count_parameters(untied) - count_parameters(model) == 2 * 50 * D
