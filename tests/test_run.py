"""`ablate run` end to end through the command line, on a slice of Multi30k."""

import csv
import json
import math

from tests.conftest import SmokeRun

COLUMNS = ["run", "differs", "params", "BLEU", "BLEU std", "n", "ΔBLEU", "chrF", "valid loss", "valid ppl",
           "train tok/s", "tok/s vs baseline", "decode sent/s", "GFLOP/tgt tok", "train PFLOP", "TFLOP/s", "MFU",
           "budget", "peak MiB", "wall s", "device", "GPUs", "cores", "core share", "precision", "status"]  # fmt: skip


def test_smoke_writes_every_file_and_column(smoke_run: SmokeRun):
    result = smoke_run
    assert result.returncode == 0, result.stderr
    root = result.results / "smoke"
    for run in ["baseline", "pre_ln"]:
        seed = root / "runs" / run / "seed-1"
        for name in ["config.yaml", "job.json", "metrics.jsonl", "result.json", "hypotheses/test_2017_mscoco.txt"]:
            assert (seed / name).is_file(), name
        data = json.loads((seed / "result.json").read_text())
        assert data["status"] == "completed"
        for key in ["params", "train_src_tokens_per_s", "train_tgt_tokens_per_s", "step_ms", "decode_sentences_per_s",
                    "peak_memory_mib", "wall_seconds", "valid_loss"]:  # fmt: skip
            assert math.isfinite(data[key]) and data[key] > 0, key
        assert data["device"].endswith((" 1 thread", " threads")) and data["torch"].startswith("2.13")
        assert data["threads"] == len(data["cpu_ids"]) and 0 <= data["core_share"] <= 1  # pinned, one thread a core
        score = data["scores"]["test_2017_mscoco"]  # smoke's test set
        assert math.isfinite(score["bleu"]) and score["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert len((seed / "hypotheses" / "test_2017_mscoco.txt").read_text().splitlines()) == 461
        log = [json.loads(line) for line in (seed / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in log if "loss" in r] == list(range(1, 151))
        assert any("valid_bleu" in r for r in log)
        assert [r["step"] for r in log if "valid_loss" in r] == [0, 75, 150]  # initialisation, validate_every, end
        diagnostics = [json.loads(line) for line in (seed / "diagnostics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in diagnostics] == [0, 75, 150]  # at initialisation and at each validation
        for record in diagnostics:
            assert next(iter(record["grad_norm"])) == "embeddings" and "decoder.0.cross_attn" in record["grad_norm"]
            assert all(len(heads) == 2 for heads in record["attention_entropy"].values())  # smoke has 2 heads
            assert math.isfinite(record["logits_norm"]) and set(record["residual_norm"]) == {"encoder.0", "decoder.0"}
        assert 0 < data["diagnostics_seconds"] < data["train_seconds"]
        buckets = score["by_length"]
        assert list(buckets) == ["1-10", "11-20", "21-30", "31+"]
        assert [b["sentences"] for b in buckets.values()] == [272, 188, 1, 0]  # test_2017_mscoco's English words
        scored, empty = list(buckets.values())[:3], buckets["31+"]
        assert all(math.isfinite(b["bleu"]) and math.isfinite(b["chrf"]) for b in scored)
        assert empty["bleu"] is None and empty["chrf"] is None  # an empty bucket has no scores
    with open(root / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    assert [r["run"] for r in rows] == ["baseline", "pre_ln"] and rows[1]["differs"] == "norm_placement=pre_ln"
    summary = (root / "summary.md").read_text()  # the main columns and their legend; the csv every column
    header = "| run | differs | BLEU | n | ΔBLEU | valid loss | train tok/s | tok/s vs baseline | peak MiB | status |"
    assert header in summary
    assert "Legend: BLEU is the mean over the run's n seeds" in summary
    assert "smoke" in result.stdout and "completed" in result.stdout


# That the same spec and seed give the same BLEU and hypotheses is shown where a second process re-runs a run:
# tests/test_runner.py's kill -9 test (the resumed and the straight sweep's tables) and tests/test_check.py's
# exact check (a re-run's hypotheses against the reference's sha256).
