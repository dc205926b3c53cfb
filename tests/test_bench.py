"""`ablate bench`: runs timed side by side on one machine, written as a typed speed.json, read by the report."""

import json

import pytest
import torch

from ablate.data.batches import pad
from ablate.data.tokenizer import BOS, EOS
from ablate.model.decoding import translate_ids
from ablate.record import Ratio, RunResult, RunSpeed, SpeedRecord, Status
from ablate.report.frame import report_frame
from ablate.report.results import from_records
from ablate.report.tables import display
from ablate.rundir import read_speeds, write_speed
from ablate.sweep.bench import LengthForced, _ratio
from tests.conftest import ROOT, cli, randomised, tiny_model

V = 50


def sources(lengths: list[int], seed: int = 0) -> torch.Tensor:
    """Right-padded source rows of these lengths, </s> last."""
    g = torch.Generator().manual_seed(seed)
    return pad([[*torch.randint(4, V, (n - 1,), generator=g).tolist(), EOS] for n in lengths])


def forced_greedy_reference(model, src: torch.Tensor) -> list[list[int]]:
    """Greedy decoding written out without a cache, one sentence at a time: at step t of a source of L tokens,
    </s> is barred before t = L and chosen at it."""
    out = []
    for row in src:
        length = int((row != 0).sum())
        ys = [BOS]
        for t in range(1, length + 1):
            if t == length:
                ys.append(EOS)
                break
            logits = model(row[None, :length], torch.tensor([ys]))[0, -1]
            logits[EOS] = float("-inf")
            ys.append(int(logits.argmax()))
        out.append(ys[1:-1])
    return out


def test_length_forced_decoding_ends_every_sentence_at_its_source_length():
    """Untrained weights decode what a trained model's would cost: every output ends at its source's length, the
    tokens before it the model's own choices (greedy: the same as a plain cacheless loop with </s> barred)."""
    model = randomised(tiny_model(V, dropout=0.0)).eval()
    lengths = [3, 9, 5, 12, 1 + 1, 7]
    src = sources(lengths)
    with torch.no_grad():
        greedy = translate_ids(LengthForced(model), src, 1, 0.6, 50)
        beam = translate_ids(LengthForced(model), src, 4, 0.6, 50)
        expected = forced_greedy_reference(model, src)
    assert [len(h) for h in greedy] == [n - 1 for n in lengths]
    assert [len(h) for h in beam] == [n - 1 for n in lengths]
    assert greedy == expected
    assert all(EOS not in h for h in greedy + beam)
    unforced = translate_ids(model, src, 1, 0.6, 50)  # the random model left alone runs to other lengths
    assert [len(h) for h in unforced] != [n - 1 for n in lengths]


def test_ratio_is_the_geometric_mean_of_paired_rounds_with_a_t_interval():
    from scipy.stats import t

    values, base = [110.0, 99.0, 104.0, 101.0], [100.0, 90.0, 100.0, 100.0]
    ratio = _ratio(values, base)
    logs = torch.tensor([v / b for v, b in zip(values, base, strict=True)]).log().double()
    mean, sd = float(logs.mean()), float(logs.std())
    half = t.ppf(0.975, 3) * sd / 2
    assert ratio is not None and ratio.rounds == 4
    assert ratio.estimate == pytest.approx(float(torch.tensor(mean).exp()), abs=1e-4)
    assert ratio.low == pytest.approx(float(torch.tensor(mean - half).exp()), abs=1e-4)
    assert ratio.high == pytest.approx(float(torch.tensor(mean + half).exp()), abs=1e-4)


def test_bench_times_every_run_side_by_side_and_writes_a_typed_record(tmp_path):
    done = cli("bench", "experiments/smoke.yaml", "--results", str(tmp_path), "--updates", "2", "--sentences", "8",
               "--max-rounds", "3", "--threads", "1", "--decode-rounds", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (record,) = read_speeds(tmp_path / "smoke")
    assert record.experiment == "smoke" and record.device_type == "cpu" and record.threads == 1
    assert record.rounds == 3 and record.weights == "initial" and record.decode_sentences == 8
    assert record.decode_rounds == 2  # the third round timed its updates alone
    assert record.decode_split == "test_2017_mscoco" and record.torch == torch.__version__
    base, pre_ln = record.runs
    assert (base.run, pre_ln.run) == ("baseline", "pre_ln") and base.ratio is None
    assert pre_ln.ratio is not None and pre_ln.ratio.rounds == 3
    assert pre_ln.ratio.low <= pre_ln.ratio.estimate <= pre_ln.ratio.high
    for run in record.runs:
        assert run.updates == 2 and run.tokens_per_s > 0 and run.step_ms > 0
        assert run.greedy_sentences_per_s > 0 and run.beam_sentences_per_s > 0
        assert 100 < run.peak_memory_mib < 4000  # a forked process with torch loaded: hundreds of MiB
        assert 0 < run.mfu < 1 and run.gflop_per_target_token > 0
    assert "pre_ln" in done.stdout and "written to" in done.stdout


def test_bench_refuses_bad_flags_and_missing_checkpoints_in_one_line(tmp_path):
    for flags, words in ((["--target", "2"], "--target"), (["--sentences", "-1"], "--sentences"),
                         (["--decode-rounds", "-1"], "--decode-rounds"),
                         (["--weights", "trained"], "no run of smoke has a checkpoint")):  # fmt: skip
        done = cli("bench", "experiments/smoke.yaml", "--results", str(tmp_path), *flags)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "smoke" / "speed.json").exists()


def result(run: str, device: str, share: float | None = None) -> RunResult:
    return RunResult(run=run, seed=1, status=Status.COMPLETED, device=device, train_src_tokens_per_s=900.0,
                     train_tgt_tokens_per_s=1000.0, core_share=share, peak_memory_mib=800.0)  # fmt: skip


def speed(run: str, rate: float, ratio: Ratio | None) -> RunSpeed:
    return RunSpeed(run=run, config_hash="x", precision="bf16", params=1, updates=4, tokens_per_update=4000.0,
                    step_ms=4000 / rate * 1000, tokens_per_s=rate, mfu=0.1, beam_sentences_per_s=20.0,
                    peak_memory_mib=700.0 + rate / 100, ratio=ratio)  # fmt: skip


def test_the_report_takes_speed_and_memory_from_the_bench(tmp_path):
    runs = [result("baseline", "Zen 4, 1 thread"), result("rotary", "EPYC AVX2, 1 thread", share=0.5)]
    record = SpeedRecord(
        experiment="e", machine="AMD EPYC (AVX2, emulated bf16), 1 thread", device_type="cpu", threads=1,
        torch="2.13.0", python="3.11", host="h", started_at="2026-11-27T12:00:00+00:00", seconds=200.0, rounds=6,
        target=0.03, reached=True, decode_split="test_2016_flickr", decode_sentences=100,
        runs=[speed("baseline", 2000.0, None), speed("rotary", 1900.0, Ratio(estimate=0.95, low=0.93, high=0.97,
                                                                              rounds=6))],
    )  # fmt: skip
    frame, notes = report_frame(from_records("e", tmp_path, runs), "none")
    assert list(frame["tok/s vs baseline"]) == [1.0, None]  # two machines, one busy: no ratio from the runs
    assert any(n.startswith("tok/s vs baseline is – for rotary") and "ablate bench" in n for n in notes)
    write_speed(tmp_path, record)
    assert json.loads((tmp_path / "speed.json").read_text())["runs"][1]["ratio"]["low"] == 0.93
    frame, notes = report_frame(from_records("e", tmp_path, runs), "none")
    rows = frame.set_index("run")
    assert rows.loc["rotary", "tok/s vs baseline"] == 0.95 and rows.loc["baseline", "tok/s vs baseline"] == 1.0
    assert rows.loc["rotary", "train tok/s"] == 1900 and rows.loc["rotary", "peak MiB"] == 719.0
    assert rows.loc["rotary", "decode sent/s"] == 20.0 and rows.loc["rotary", "MFU"] == 0.1
    assert any("`ablate bench` on AMD EPYC (AVX2, emulated bf16), 1 thread" in n for n in notes)
    assert any("rotary 0.95× [0.93, 0.97]" in n for n in notes)
    assert not any("different devices" in n for n in notes)
    columns, cells = display(frame)
    rotary = dict(zip(columns, cells[1], strict=True))
    assert rotary["tok/s vs baseline"] == "0.95×"  # the bench's: no busy-machine mark
    assert not rotary["train tok/s"].endswith("†")


def test_a_learning_rate_sweep_is_benched_once_a_run(tmp_path, write):
    """The rates of a run train alike: one is timed for all, and the report finds it for every rate."""
    path = write("swept.yaml", "name: swept\nextends: " + str(ROOT / "experiments" / "smoke.yaml") + "\n"
                 "lr_sweep: [1.0e-3, 3.0e-3]\nvariants: {pre_ln: {model.norm_placement: pre_ln}}\n")  # fmt: skip
    done = cli("bench", str(path), "--results", str(tmp_path), "--updates", "1", "--sentences", "0",
               "--max-rounds", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (record,) = read_speeds(tmp_path / "swept")
    assert [r.run for r in record.runs] == ["baseline", "pre_ln"] and record.decode_sentences == 0
    assert all(r.beam_sentences_per_s is None for r in record.runs)


def test_a_round_decodes_only_when_told_and_times_every_update_in_turn():
    """bench's later rounds (past --decode-rounds) time updates alone; updates interleave A1, B1, A2, B2."""
    from types import SimpleNamespace

    from ablate.sweep.bench import one_round

    calls = []

    def subject(name):
        evaluation = SimpleNamespace(beam_size=4)
        return SimpleNamespace(
            batches=[[], []],
            sources=["x"],
            tokens=(10, 10),
            run=SimpleNamespace(spec=SimpleNamespace(evaluation=evaluation)),
            update=lambda i: calls.append((name, "update", i)) or 0.5,
            decode=lambda beam: calls.append((name, "decode", beam)) or 7.0,
        )

    a, b = subject("a"), subject("b")
    samples = one_round([a, b], decode=False)
    assert calls == [("a", "update", 0), ("b", "update", 0), ("a", "update", 1), ("b", "update", 1)]
    assert all(s.greedy_per_s is None and s.beam_per_s is None and s.tokens_per_s == 20.0 for s in samples)
    calls.clear()
    samples = one_round([a, b], decode=True)
    assert [c for c in calls if c[1] == "decode"] == [("a", "decode", 1), ("b", "decode", 1), ("a", "decode", 4),
                                                      ("b", "decode", 4)]  # fmt: skip
    assert all(s.greedy_per_s == 7.0 and s.beam_per_s == 7.0 for s in samples)
