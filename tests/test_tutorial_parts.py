"""The tutorial's bugs as parts, against the tutorial's own code ("Transformer from scratch") written out here."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ablate.model.transformer import build_model, count_parameters
from ablate.parts.norms import NORM, NORM_PLACEMENT
from tests.conftest import cli, randomised, tiny_model, tiny_spec

D, H, FF, N, V = 32, 4, 64, 2, 50  # the sizes of tests.conftest.tiny_spec
D_K = D // H


class TutorialSelfAttention(nn.Module):
    """The tutorial's SelfAttention: each head's slice of the embedding through one shared head_dim x head_dim
    matrix, no bias, for values, keys and queries; `scale` replaces its 1 / sqrt(embed_size)."""

    def __init__(self, embed_size: int, heads: int, scale: float):
        super().__init__()
        self.heads, self.head_dim, self.scale = heads, embed_size // heads, scale
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        n, value_len, key_len, query_len = query.shape[0], values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values.reshape(n, value_len, self.heads, self.head_dim))
        keys = self.keys(keys.reshape(n, key_len, self.heads, self.head_dim))
        queries = self.queries(query.reshape(n, query_len, self.heads, self.head_dim))
        energy = torch.einsum("nqhd,nkhd->nhqk", [queries, keys])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy * self.scale, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values]).reshape(n, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


def tutorial_copy(attn, scale: float) -> TutorialSelfAttention:
    ref = TutorialSelfAttention(D, H, scale)
    ref.load_state_dict(
        {
            "queries.weight": attn.projection.w_q.weight,
            "keys.weight": attn.projection.w_k.weight,
            "values.weight": attn.projection.w_v.weight,
            "fc_out.weight": attn.w_o.weight,
            "fc_out.bias": attn.w_o.bias,
        }
    )
    return ref


SCALES = [("sqrt_dmodel", D**-0.5), ("sqrt_dk", D_K**-0.5)]  # the tutorial's own, and the paper's


@pytest.fixture(params=SCALES, ids=[name for name, _ in SCALES])
def shared(request):
    """The tiny model with shared per-head projections, and the scale its attention logits get."""
    scaling, scale = request.param
    return randomised(tiny_model(V, projection="shared_per_head", scaling=scaling)), scale


def test_shared_self_attention_equals_the_tutorials_with_a_padding_mask(shared):
    model, scale = shared
    attn = model.encoder.layers[0].self_attn
    x = torch.randn(3, 7, D)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[1, 4:] = keep[2, 2:] = False  # right padding
    with torch.no_grad():
        ours = attn(x, keep[:, None, None, :])
        theirs = tutorial_copy(attn, scale)(x, x, x, keep[:, None, None, :])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_shared_causal_self_attention_equals_the_tutorials(shared):
    model, scale = shared
    attn = model.decoder.layers[0].self_attn
    x = torch.randn(3, 6, D)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T), the tutorial's trg_mask
    with torch.no_grad():
        ours = attn(x, causal=True)
        theirs = tutorial_copy(attn, scale)(x, x, x, causal)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_shared_cross_attention_equals_the_tutorials(shared):
    model, scale = shared
    attn = model.decoder.layers[0].cross_attn
    x, memory = torch.randn(3, 5, D), torch.randn(3, 7, D)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[0, 3:] = False
    mask = keep[:, None, None, :]  # (B, 1, 1, S)
    with torch.no_grad():
        ours = attn(x, memory, mask)
        theirs = tutorial_copy(attn, scale)(memory, memory, x, mask)  # values, keys from the encoder
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary"])
def test_shared_projections_decode_with_the_cache_as_in_full(positions):
    model = randomised(tiny_model(V, projection="shared_per_head", positions=positions)).eval()
    src, tgt = torch.randint(1, V, (2, 6)), torch.randint(1, V, (2, 5))
    src[1, 4:] = 0
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, :2], memory, src_mask, cache)]
        steps += [model.decode(tgt[:, t : t + 1], memory, src_mask, cache) for t in range(2, 5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_shared_projections_are_three_dk_by_dk_matrices_for_every_attention():
    model = tiny_model(V, projection="shared_per_head")
    attentions = [layer.self_attn for layer in model.encoder.layers]
    attentions += [a for layer in model.decoder.layers for a in (layer.self_attn, layer.cross_attn)]
    assert len(attentions) == 3 * N
    for attn in attentions:
        assert count_parameters(attn.projection) == 3 * D_K * D_K
        assert count_parameters(attn) == 3 * D_K * D_K + (H * D_K * D + D)  # plus W^O, full, with its bias
    full = tiny_model(V)
    per_attention = 3 * (D * H * D_K + H * D_K) - 3 * D_K * D_K  # W^Q, W^K, W^V with biases, against 3 shared
    assert count_parameters(full) - count_parameters(model) == 3 * N * per_attention


def test_shared_projections_need_heads_times_dk_equal_to_d_model(write):
    path = write("bad.yaml", "name: bad\nmodel: {d_model: 32, heads: 4, d_k: 16, projection: shared_per_head}\n")
    result = cli("validate", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"{path}: model.projection: " in result.stderr and "heads * d_k = d_model" in result.stderr
    fine = write("fine.yaml", "name: fine\nmodel: {d_model: 32, heads: 4, d_k: 16}\n")  # the full projection
    assert cli("validate", str(fine)).returncode == 0
    values = write("values.yaml", "name: v\nmodel: {d_model: 32, heads: 4, d_v: 16, projection: shared_per_head}\n")
    result = cli("validate", str(values))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{values}: model.projection: " in result.stderr and "needs d_v = d_k, got d_v=16, d_k=8" in result.stderr


def test_full_projection_keeps_the_initial_weights_of_the_packed_layers():
    """The default model's initial weights, bit for bit, against a replay of how it was built before
    projections were a part: each attention's w_o, then its packed w_qkv (self) or w_q and w_kv (cross)."""
    torch.manual_seed(0)
    model = build_model(tiny_spec(), V, V)

    torch.manual_seed(0)
    linears = []  # in the order they were made, which is also module order: init_weights's order
    for _ in range(N):  # encoder layers: self-attention, feed-forward
        linears += [nn.Linear(D, D), nn.Linear(D, 3 * D), nn.Linear(D, FF), nn.Linear(FF, D)]
    for _ in range(N):  # decoder layers: self-attention, cross-attention, feed-forward
        linears += [nn.Linear(D, D), nn.Linear(D, 3 * D)]
        linears += [nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, 2 * D), nn.Linear(D, FF), nn.Linear(FF, D)]
    tables = []
    for _ in range(2):  # source, target embedding (tiny_spec: untied), as ablate.parts.embeddings makes them
        tables.append(nn.Embedding(V, D, padding_idx=0))
        nn.init.normal_(tables[-1].weight, std=D**-0.5)
        tables[-1].weight.data[0].zero_()
    output = nn.Linear(D, V, bias=False)
    for linear in linears:  # init_weights: xavier-uniform weights, zero biases, then the output projection
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
    nn.init.normal_(output.weight, std=D**-0.5)

    ours = [m for m in model.modules() if isinstance(m, nn.Linear) and m is not model.embeddings.output]
    assert [tuple(m.weight.shape) for m in ours] == [tuple(m.weight.shape) for m in linears]
    for mine, theirs in zip(ours, linears, strict=True):
        assert torch.equal(mine.weight, theirs.weight) and torch.equal(mine.bias, theirs.bias)
    assert torch.equal(model.embeddings.source.weight, tables[0].weight)
    assert torch.equal(model.embeddings.target.weight, tables[1].weight)
    assert torch.equal(model.embeddings.output.weight, output.weight)


def connection(name: str, p: float):
    norm = randomised(NORM.build(NORM.parse("layernorm"), d_model=D))  # a gain and a bias that are not 1 and 0
    return NORM_PLACEMENT.build(NORM_PLACEMENT.parse(name), norm=norm, dropout=p).train()


def test_dropout_after_norm_equals_the_tutorials_block():
    p = 0.3
    ours = connection("post_ln_dropout_after_norm", p)
    sublayer = randomised(nn.Linear(D, D))
    x = torch.randn(4, 5, D)
    ln = ours.norm.norm
    with torch.no_grad():
        torch.manual_seed(7)
        got = ours(x, sublayer)
        torch.manual_seed(7)  # the tutorial's x = dropout(norm1(attention + query)), the same dropout mask
        expected = F.dropout(F.layer_norm(x + sublayer(x), (D,), ln.weight, ln.bias, ln.eps), p, training=True)
        torch.testing.assert_close(got, expected)
        assert (got == 0).any()  # dropout acted

        post_ln = connection("post_ln", p)  # the paper's, with the same norm and the same seed
        post_ln.norm.load_state_dict(ours.norm.state_dict())
        torch.manual_seed(7)
        assert not torch.allclose(post_ln(x, sublayer), got)

        ours.eval()  # without dropout the two compute the same
        post_ln.eval()
        torch.testing.assert_close(ours(x, sublayer), post_ln(x, sublayer))


def test_dropout_after_norm_has_no_final_norm():
    assert not NORM_PLACEMENT["post_ln_dropout_after_norm"].final_norm
    model = tiny_model(V, norm_placement="post_ln_dropout_after_norm")
    assert isinstance(model.encoder.final_norm, nn.Identity) and isinstance(model.decoder.final_norm, nn.Identity)
