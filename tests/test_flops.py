"""Training FLOPs against torch's FlopCounterMode and the paper's attention count; budgets in every unit."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ablate.data.batches import collate
from ablate.data.tokenizer import PAD
from ablate.model.transformer import build_model
from ablate.parts import POSITIONS
from ablate.train.flops import FlopModel, count, peak_flops
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import cross_entropy_sum
from tests.conftest import ROOT, cli, tiny_spec

SMOKE = ROOT / "experiments" / "smoke.yaml"
CPU = torch.device("cpu")


def model(vocab=60, **changes):
    torch.manual_seed(0)
    return build_model(tiny_spec(**changes), vocab, vocab, pad_id=PAD)


def examples(lengths, vocab=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(4, vocab, (s,), generator=g).tolist(), torch.randint(4, vocab, (t,), generator=g).tolist())
            for s, t in lengths]  # fmt: skip


def counted(m, batch) -> int:
    """What FlopCounterMode counts for a training step's forward and backward (attention on the math backend)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss = cross_entropy_sum(m, batch, 0.1)
        loss.backward()
    m.zero_grad(set_to_none=True)
    return counter.get_total_flops()


@pytest.mark.parametrize("positions", sorted(POSITIONS.declared))
@pytest.mark.parametrize(
    "changes", [{}, {"norm_placement": "pre_ln", "feedforward": "swiglu", "tying": "all", "scaling": "qk_norm"}]
)
def test_the_flop_model_predicts_the_counter_on_padded_batches(positions, changes):
    m = model(positions=positions, **changes)
    flop_model = FlopModel.measure(m, (60, 60), CPU)
    data = examples([(5, 9), (11, 4), (3, 14), (8, 8)])  # padded to S = 11, T = 13
    m.train()
    assert flop_model.batch(data, range(4)) == counted(m, collate(data))
    assert flop_model.batch(data, [2]) == counted(m, collate([data[2]]))
    assert flop_model.batch(data, range(4), 8) == counted(m, collate(data, 8))  # a bucket: S = T = 16


def test_attention_costs_what_the_paper_says():
    """QK^T and AV cost 2·2·B·n·m·d_model forward (§3.2.1), the backward twice that: 12·d_model·B·n·m a layer."""
    d = 32
    c = FlopModel.measure(model(encoder_layers=2, decoder_layers=3), (60, 60), CPU).coefficients
    assert c[2] == 12 * d * 2  # B·S²: encoder self-attention
    assert c[3] == 12 * d * 3  # B·T²: decoder self-attention
    assert c[4] == 12 * d * 3  # B·S·T: cross-attention


def test_torchs_fused_cpu_attention_is_invisible_to_the_counter_hence_the_math_backend():
    q = torch.randn(2, 4, 10, 8, requires_grad=True)
    with FlopCounterMode(display=False) as fused:
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as math:
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    assert fused.get_total_flops() == 0 and math.get_total_flops() == 3 * 4 * 2 * 4 * 10 * 10 * 8


def test_probing_changes_nothing_in_training():
    m = model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    count(m, (2, 5, 6), (60, 60), CPU)
    assert torch.equal(torch.rand(3), expected) and m.training
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert all(p.grad is None for p in m.parameters())


def test_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("ablate.train.flops.CoreShare.stop", lambda self: 1.0)  # the cores were this process's
    peak = peak_flops(CPU, "fp32", threads=1)
    assert peak > 1e8
    cache = json.loads((tmp_path / "peak_flops.v3.json").read_text())
    (key,) = cache
    cache[key] = 123.0  # what a second call reads instead of measuring
    (tmp_path / "peak_flops.v3.json").write_text(json.dumps(cache))
    assert peak_flops(CPU, "fp32", threads=1) == 123.0


def test_a_peak_measured_on_busy_cores_is_used_but_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    measured = iter([5e9, 7e9])
    monkeypatch.setattr("ablate.train.flops.measure_peak", lambda device, precision: next(measured))
    monkeypatch.setattr("ablate.train.flops.CoreShare.stop", lambda self: 0.6)  # others ran on 40% of the cores
    assert peak_flops(CPU, "fp32", threads=1) == 5e9
    assert not (tmp_path / "peak_flops.v3.json").exists()
    monkeypatch.setattr("ablate.train.flops.CoreShare.stop", lambda self: 0.95)  # measured again, quietly: kept
    assert peak_flops(CPU, "fp32", threads=1) == 7e9
    assert list(json.loads((tmp_path / "peak_flops.v3.json").read_text()).values()) == [7e9]


def test_a_peak_is_timed_on_the_threads_it_is_filed_under(tmp_path, monkeypatch):
    """The sweep's own process asks for a run's peak (1 thread a run, say) while it computes on every core."""
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("ablate.train.flops.CoreShare.stop", lambda self: 1.0)  # the cores were this process's
    seen = []
    monkeypatch.setattr("ablate.train.flops.measure_peak", lambda device, precision: seen.append(
        torch.get_num_threads()) or 1e9)  # fmt: skip
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        peak_flops(CPU, "fp32", threads=1)
        assert seen == [1] and torch.get_num_threads() == 2  # measured on 1, the process's own count given back
    finally:
        torch.set_num_threads(before)
    assert "threads=1" in next(iter(json.loads((tmp_path / "peak_flops.v3.json").read_text())))


def test_a_flop_model_is_counted_once_per_model_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    m = model()
    first = FlopModel.cached(m, "spec", (60, 60), CPU)
    assert first == FlopModel.measure(m, (60, 60), CPU)
    (path,) = (tmp_path / "flops").glob("*.json")
    data = json.loads(path.read_text())
    data["coefficients"] = [1.0, 2.0, 3.0, 4.0, 5.0]  # what a second call reads instead of counting
    path.write_text(json.dumps(data))
    assert FlopModel.cached(m, "spec", (60, 60), CPU).coefficients == (1.0, 2.0, 3.0, 4.0, 5.0)
    # another model, another vocabulary or another spec is counted afresh, into a file of its own
    wider = FlopModel.cached(model(d_ff=128), "spec", (60, 60), CPU)
    assert wider == FlopModel.measure(model(d_ff=128), (60, 60), CPU) and wider != first
    assert FlopModel.cached(m, "spec", (59, 60), CPU) == FlopModel.measure(m, (59, 60), CPU)
    assert FlopModel.cached(m, "another spec", (60, 60), CPU) == first
    assert len(list((tmp_path / "flops").glob("*.json"))) == 4
    path.write_text("{not json")  # a damaged entry is counted again
    assert FlopModel.cached(m, "spec", (60, 60), CPU) == first


def test_a_spec_needs_a_budget_in_some_unit():
    with pytest.raises(ValueError, match="set one of max_steps, max_epochs, max_target_tokens, max_flops"):
        TrainingSpec(max_steps=None)
    assert TrainingSpec(max_flops=1e12).budgets() == {"max_flops": 1e12}


def test_budgets_in_tokens_flops_and_seconds_stop_where_they_say(tmp_path, write):
    """Through the CLI: each budget ends its run at the first step that reaches it, and the table says so."""
    path = write("b.yaml", f"""
name: budgets
extends: {SMOKE}
data: {{max_pairs: 200}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
training: {{max_steps: null, max_flops: 2.0e+10, validate_every: 100000, checkpoint_every: null,
           schedule: {{name: linear_decay, lr: 0.003, warmup: 5, final: 0.1}}}}
variants:
  tokens: {{training.max_flops: null, training.max_target_tokens: 20000}}
  seconds: {{training.max_flops: null, training.max_seconds: 1.5}}
""")  # fmt: skip
    run = cli("run", str(path), "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    runs = tmp_path / "budgets" / "runs"

    def load(name):
        d = runs / name / "seed-1"
        steps = [r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
        return json.loads((d / "result.json").read_text()), steps

    flops, steps = load("baseline")
    assert flops["stopped_by"] == "max_flops" and flops["budget"] == {"max_flops": 2e10}
    per_step = flops["train_flops"] / flops["steps"]
    assert 2e10 <= flops["train_flops"] < 2e10 + 3 * per_step
    assert steps[-1]["lr"] < 0.2 * 0.003 < steps[10]["lr"]  # decayed towards final * lr at the end of the budget
    assert flops["gflop_per_target_token"] == pytest.approx(flops["train_flops"] / flops["train_target_tokens"] / 1e9,
                                                            rel=1e-3)  # fmt: skip
    assert 0 < flops["mfu"] < 1 and flops["train_tflops_per_s"] > 0 and flops["peak_source"] == "measured"

    tokens, steps = load("tokens")
    assert tokens["stopped_by"] == "max_target_tokens"
    assert sum(s["tgt_tokens"] for s in steps) == tokens["train_target_tokens"] >= 20000
    assert sum(s["tgt_tokens"] for s in steps[:-1]) < 20000

    seconds, steps = load("seconds")
    assert seconds["stopped_by"] == "max_seconds"
    rounding = 0.05 * len(steps)  # each step's step_ms is logged to 0.1 ms; the budget counts the exact times
    assert sum(s["step_ms"] for s in steps) >= 1500 - rounding
    assert 1500 + rounding > sum(s["step_ms"] for s in steps[:-1])

    report = cli("report", str(tmp_path / "budgets"), "--format", "csv", "--no-files")
    assert report.returncode == 0, report.stderr
    assert "2e+10 FLOPs" in report.stdout and "20000 tgt tokens" in report.stdout and "1.5 s" in report.stdout
    header = report.stdout.splitlines()[0].split(",")
    assert {"GFLOP/tgt tok", "train PFLOP", "TFLOP/s", "MFU", "budget"} <= set(header)
