"""Diagnostics against independent computations: SDPA's output, attention with a known entropy, autograd's
gradients grouped by parameter name, logits recomputed by hand; and measuring them leaves training unchanged."""

import math
import random
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from ablate.data.batches import collate
from ablate.data.tokenizer import BOS, EOS, PAD
from ablate.model.diagnostics import fixed_batch, measure, probed
from ablate.model.spec import PART_FIELDS
from ablate.model.transformer import build_model
from ablate.registry import REGISTRY
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import Trainer
from tests.conftest import randomised, tiny_model, tiny_spec

V = 40
ALL_PARTS = [(slot, name) for slot in PART_FIELDS for name in REGISTRY[slot].parts]


def batch(lengths=(7, 5, 3), seed=0):
    """Right-padded pairs of the given source lengths (targets one longer), as the batcher makes them."""
    rng = random.Random(seed)
    examples = []
    for n in lengths:
        src = [rng.randrange(4, V) for _ in range(n - 1)]
        tgt = [rng.randrange(4, V) for _ in range(n)]
        examples.append(([*src, EOS], [BOS, *tgt, EOS]))
    return collate(examples)


@pytest.mark.parametrize("slot, name", ALL_PARTS, ids=[f"{s}={p}" for s, p in ALL_PARTS])
def test_the_explicit_softmax_path_equals_sdpa(slot, name):
    model = randomised(tiny_model(V, **{slot: name}))
    b = batch()
    with torch.no_grad():
        fused = model(b.src, b.tgt[:, :-1])
        with probed(model, b.src != PAD, b.tgt[:, :-1] != PAD) as probes:
            explicit = model(b.src, b.tgt[:, :-1])
    assert len(probes) == 2 + 2 * 2  # every attention module of 2 encoder and 2 decoder layers
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    assert all(m.probe is None for m in model.modules() if hasattr(m, "probe")), "probes are removed after"


def test_uniform_attention_has_the_entropy_of_a_uniform_distribution():
    """With q = 0 every logit is 0: each real query spreads evenly over the keys it may see, so its entropy
    is log(keys seen): the sentence's length in the encoder and across, t + 1 for target position t."""
    model = tiny_model(V)
    for module in model.modules():
        if hasattr(module, "probe"):
            module.scaling.forward = lambda q, k: (torch.zeros_like(q), k, 1.0)  # every logit 0
    b = batch(lengths=(7, 5, 3))
    record = measure(model, b, 0.0, nullcontext())
    src_lengths, tgt_lengths = [7, 5, 3], [8, 6, 4]  # with </s>; targets: <s> + n tokens
    encoder = sum(n * math.log(n) for n in src_lengths) / sum(src_lengths)
    decoder = sum(math.log(t + 1) for n in tgt_lengths for t in range(n)) / sum(tgt_lengths)
    cross = sum(m * math.log(n) for n, m in zip(src_lengths, tgt_lengths, strict=True)) / sum(tgt_lengths)
    for name, entropy in record["attention_entropy"].items():
        expected = {"self_attn": encoder if name.startswith("encoder") else decoder, "cross_attn": cross}
        assert entropy == pytest.approx([expected[name.split(".")[-1]]] * 4, abs=1e-4), name
    assert set(record["max_logit"].values()) == {0.0}


def test_max_logit_is_the_largest_scaled_dot_product_a_real_query_sees():
    model = randomised(tiny_model(V))
    b = batch()
    seen = {}
    attn = model.encoder.layers[1].self_attn
    original = attn.scaling.forward

    def capture(q, k):
        q, k, scale = original(q, k)
        seen["logits"] = (q @ k.transpose(-1, -2)).detach() * scale  # (B, h, S, S)
        return q, k, scale

    attn.scaling.forward = capture
    record = measure(model, b, 0.1, nullcontext())
    keep = b.src != PAD  # (B, S)
    both = keep[:, None, :, None] & keep[:, None, None, :]  # a real query and a key it may see
    assert record["max_logit"]["encoder.1.self_attn"] == pytest.approx(float(seen["logits"][both.expand_as(
        seen["logits"])].max()), abs=1e-4)  # fmt: skip
    # with no scaling, the same weights give the first layer (same input) logits sqrt(d_k) times larger
    unscaled = randomised(tiny_model(V, scaling="none"))
    first = measure(unscaled, b, 0.1, nullcontext())["max_logit"]["encoder.0.self_attn"]
    assert first == pytest.approx(record["max_logit"]["encoder.0.self_attn"] * math.sqrt(8), rel=1e-4)


GROUPS = {"embeddings.": "embeddings", "src_positions.": "embeddings", "tgt_positions.": "embeddings"}


def group_of(name: str) -> str:
    """The sublayer of a parameter from its name alone: encoder.layers.0.self_attn.w_o.bias -> encoder.0.self_attn."""
    for prefix, group in GROUPS.items():
        if name.startswith(prefix):
            return group
    stack, rest = name.split(".", 1)
    if rest.startswith("final_norm"):
        return f"{stack}.final_norm"
    _, index, module = rest.split(".")[:3]
    return f"{stack}.{index}.{'norms' if module == 'sublayers' else module}"


@pytest.mark.parametrize("changes", [{}, {"norm_placement": "pre_ln"}, {"positions": "learned", "tying": "all"}])
def test_gradient_norms_equal_autograds_grouped_by_parameter_name(changes):
    model = randomised(tiny_model(V, **changes))
    b = batch()
    record = measure(model, b, 0.1, nullcontext())
    assert all(p.grad is None for p in model.parameters()), "measuring accumulates nothing in .grad"

    logits = model(b.src, b.tgt[:, :-1])  # eval mode, as measured
    labels = b.tgt[:, 1:]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD, label_smoothing=0.1,
                           reduction="sum") / (labels != PAD).sum()  # fmt: skip
    loss.backward()
    squares: dict[str, float] = {}
    for name, p in model.named_parameters():  # shared matrices are listed once, under their first name
        squares[group_of(name)] = squares.get(group_of(name), 0.0) + float(p.grad.pow(2).sum())
    expected = {group: math.sqrt(s) for group, s in squares.items()}
    assert record["grad_norm"] == pytest.approx(expected, rel=1e-4)
    assert list(record["grad_norm"])[:3] == ["embeddings", "encoder.0.self_attn", "encoder.0.feed_forward"]
    assert record["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)


def test_residual_and_logit_norms_are_means_over_real_tokens():
    model = randomised(tiny_model(V))
    b = batch()
    record = measure(model, b, 0.1, nullcontext())
    tgt_in, predicting = b.tgt[:, :-1], b.tgt[:, 1:] != PAD  # a padded row's </s> predicts nothing
    with torch.no_grad():
        memory, _ = model.encode(b.src)
        logits = model(b.src, tgt_in)
    # Post-LN: the encoder's last layer output is the memory (no final norm)
    assert record["residual_norm"]["encoder.1"] == pytest.approx(float(memory.norm(dim=-1)[b.src != PAD].mean()),
                                                                 rel=1e-4)  # fmt: skip
    assert record["logits_norm"] == pytest.approx(float(logits.norm(dim=-1)[predicting].mean()), rel=1e-4)
    assert list(record["residual_norm"]) == ["encoder.0", "encoder.1", "decoder.0", "decoder.1"]


def test_measuring_leaves_mode_and_training_unchanged():
    """Eval mode, no random numbers drawn, no .grad touched: a run measured at every step trains exactly as one
    that is never measured. That is why training.diagnostics_every is left out of the config hash."""
    rng = random.Random(0)
    data = [([rng.randrange(4, V) for _ in range(rng.randint(2, 9))] + [EOS], [BOS, rng.randrange(4, V), EOS])
            for _ in range(200)]  # fmt: skip
    probe = fixed_batch(data, 100)
    finals = []
    for diagnose in (False, True):
        torch.manual_seed(0)
        model = build_model(tiny_spec(dropout=0.3, attention_dropout=0.2), V, V)
        spec = TrainingSpec.model_validate({"schedule": {"name": "constant", "lr": 1e-3}, "max_steps": 8,
                                            "max_tokens": 120})  # fmt: skip
        trainer = Trainer(model, spec, 32)

        def on_step(p, model=model, diagnose=diagnose):
            if diagnose:
                assert model.training
                measure(model, probe, 0.1, nullcontext())
                assert model.training

        trainer.fit(data, on_step=on_step)
        finals.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*finals, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_fixed_batch_takes_the_first_pairs_that_fit():
    data = [([5] * n + [EOS], [BOS, 5, EOS]) for n in (3, 9, 4, 20)]
    b = fixed_batch(data, 30)  # 1 x 4, 2 x 10, 3 x 10 fit; 4 x 21 does not
    assert b.src.shape == (3, 10)
    assert fixed_batch(data[3:], 5).src.shape == (1, 21)  # one pair at least, whatever its length
