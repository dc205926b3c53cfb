"""`ablate check`: exact on the machine that made a reference, within seed noise elsewhere; real regressions fail.

A small reference is made here with `--update`: 5 seeds of tiny.yaml's model cut to 1+1 layers, 200 steps of
750-token batches, 1 thread each, side by side. With 3 seeds the 1% false-alarm multiple is 19.95 sd; with 5 it is
6.85, and a halved learning rate lands 11.8 sd from the seeds' mean loss curve, its BLEU 7.0 sd from theirs
(measured on an AVX2 EPYC; with 1,500-token batches it was 20.8 sd, and 2+2 layers at 100 steps gave 4.6 sd, which
passed). Checked on this machine it is compared exactly; with 2 threads, which change the round-off as another CPU
would, it is judged within seed noise and passes (0.6 sd); with the learning rate halved it fails, in the noise
mode too. Pre-LN for Post-LN (3.0 sd) and the tutorial's sqrt(d_model) scaling (1.4 sd) stayed within seed noise
this early (measured with 1,500-token batches): only Pre-LN's final norms, in the exactly compared parameter count,
would give one away, and that row is tested without training below.
"""

import hashlib
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ablate.check.compare import compare_exact, compare_noise
from ablate.check.reference import Expected, Measured, Reference, SeedRun, Tolerance, dump, load
from ablate.errors import UserError
from ablate.record import RunResult
from tests.conftest import ALL_CORES, ROOT, cli


@dataclass(frozen=True)
class Small:
    path: Path  # the reference file
    update: subprocess.CompletedProcess  # `ablate check --update ... --from-results`
    results: Path  # the sweep's results tree its first four seeds were read from


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Small:
    """A reference file made here: tiny.yaml's model with 1+1 layers on 2,000 pairs for 200 steps of 750 tokens,
    5 seeds, 1 thread each. Seeds 1-4 trained as a sweep (`ablate run --seeds 4 --threads-per-run 1`), read by `--update
    --from-results`, which trains the fifth itself."""
    folder = tmp_path_factory.mktemp("reference")
    source = folder / "small.yaml"
    source.write_text(f"""
name: small
extends: {ROOT / "experiments" / "reference" / "tiny.yaml"}
model: {{encoder_layers: 1, decoder_layers: 1}}
data: {{max_pairs: 2000, test: [test_2017_mscoco]}}
training: {{max_steps: 200, validate_every: 50, max_tokens: 750}}
""")  # fmt: skip
    path = folder / "small-ref.yaml"
    path.write_text(yaml.safe_dump({
        "name": "small", "description": "tiny.yaml's model, 1+1 layers, 200 steps", "source": str(source),
        "status": "not yet measured", "device": "cpu", "threads": 1, "seeds": 5, "why": "a test",
    }, sort_keys=False))  # fmt: skip
    results = folder / "results"
    swept = cli("run", str(source), "--seeds", "4", "--threads-per-run", "1", "--results", str(results))
    assert swept.returncode == 0, swept.stdout + swept.stderr
    update = cli("check", "--update", str(path), "--from-results", str(results))
    assert update.returncode == 0, update.stdout + update.stderr
    ref = Reference.model_validate(yaml.safe_load(path.read_text()))
    assert ref.status == "measured" and sorted(ref.expected.seeds) == [1, 2, 3, 4, 5]
    assert set(ref.expected.seeds[1].valid_loss) == {0, 50, 100, 150, 200}
    assert ref.machine["device"].endswith(", 1 thread") and ref.machine["precision"] == "fp32"
    assert len({run.hypotheses for run in ref.expected.seeds.values()}) == 5  # five seeds, five translations
    return Small(path, update, results)


@pytest.fixture(scope="module")
def small(made) -> Path:
    return made.path


def variant(small, tmp_path, change) -> str:
    """A copy of the small reference whose spec `change` edits: the code as a regression would leave it."""
    ref = yaml.safe_load(small.read_text())
    change(ref["spec"])
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(ref, sort_keys=False))
    return str(path)


def test_on_the_machine_that_made_it_the_check_is_exact(small):
    run = cli("check", str(small))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "same machine" in run.stdout and ": exact" in run.stdout and "hypotheses" in run.stdout
    assert "verdict: small: passed" in run.stdout


def test_a_different_thread_count_passes_within_seed_noise(small):
    """2 threads instead of 1: other kernels and summation orders, as on another CPU; the same code."""
    run = cli("check", str(small), "--threads", "2", cores=ALL_CORES)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "other machine" in run.stdout and "2 threads" in run.stdout and "within seed noise" in run.stdout


def test_halving_the_learning_rate_fails_in_either_mode(small, tmp_path):
    """One run judged both ways: exactly, as here, and within seed noise, as on any other CPU (the exact
    mode's verdict says where a difference stands against seed noise; compare_noise is what --noise prints)."""

    def halve(spec):
        spec["training"]["schedule"]["lr"] /= 2

    path = variant(small, tmp_path, halve)
    exact = cli("check", path)
    assert exact.returncode == 1 and "OUTSIDE" in exact.stdout, exact.stdout + exact.stderr
    assert exact.stderr.strip() == f"check failed: {path}" and "verdict: small: FAILED" in exact.stdout
    assert "now resolves to a different spec" in exact.stdout
    assert (
        "not identical on the machine that made small: the code changed its arithmetic (and beyond seed noise"
        in exact.stdout
    )


def test_update_from_results_reads_the_finished_seeds_and_trains_only_the_others(made):
    """Seeds 1-4 are the sweep's runs, read and not trained; seed 5, missing there, trained by the check. That the
    check's exact re-run of seed 1 passes (above) shows a sweep's run and the check's are the same run."""
    out = made.update.stdout
    assert "seed 4: read from" in out and "no finished run of seed(s) 5: they train" in out
    assert "seed-1: started" not in out and "seed-5: started" in out
    seeds = load(made.path).expected.seeds
    for seed in (1, 2, 3, 4):
        run = made.results / "small" / "runs" / "baseline" / f"seed-{seed}"
        scores = json.loads((run / "result.json").read_text())["scores"]["test_2017_mscoco"]
        assert seeds[seed].run.endswith(f"small/runs/baseline/seed-{seed}")
        assert seeds[seed].device is None  # all five trained on this machine: its device is the reference's
        assert (seeds[seed].bleu, seeds[seed].chrf) == (scores["bleu"], scores["chrf"])
        digest = hashlib.sha256((run / "hypotheses" / "test_2017_mscoco.txt").read_bytes()).hexdigest()
        assert seeds[seed].hypotheses == digest
    assert seeds[5].run is None  # trained by the check
    environment = load(made.path).environment  # seed 1's, read: where and when that run trained
    assert environment["read_from"] == seeds[1].run and environment["commit"] is None


def test_from_results_reads_only_runs_the_reference_could_have_trained(made, tmp_path):
    """No training: the swept seeds' result.json edited as other runs would have left them."""
    import io
    import shutil

    from rich.console import Console

    from ablate.check.measure import finished_seeds, resolve_source

    results = tmp_path / "results"
    shutil.copytree(made.results, results)
    runs = results / "small" / "runs" / "baseline"
    shutil.copytree(runs / "seed-1", results / "zz" / "runs" / "baseline" / "seed-1")  # a second run of seed 1

    def edit(seed, **fields):
        path = runs / f"seed-{seed}" / "result.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | fields))

    edit(1, gpus=1)  # trained on a GPU: zz's seed 1, after it in path order, is read instead
    edit(2, threads=2)  # other threads: not for an exact reference
    edit(3, status="diverged")
    edit(4, reused_from="elsewhere/runs/baseline/seed-4")  # a copy: its source would be read, not it
    ref = load(made.path)
    spec, plugins = resolve_source(ref)
    out = Console(file=io.StringIO(), width=400)
    found = finished_seeds(ref, spec, plugins, [1, 2, 3, 4, 5], results, out)
    assert sorted(found) == [1] and found[1].run.endswith("zz/runs/baseline/seed-1")
    said = out.file.getvalue()
    assert "seed 1: " in said and "it trained on a GPU, the reference is a cpu one" in said
    assert "seed 2: " in said and "it trained with 2 thread(s), the reference pins 1" in said
    noise = ref.model_copy(update={"mode": "noise"})  # within seed noise, other threads are welcome
    assert sorted(finished_seeds(noise, spec, plugins, [1, 2], results, out)) == [1, 2]
    edit(2, precision="bf16")
    assert sorted(finished_seeds(noise, spec, plugins, [1, 2], results, out)) == [1]
    assert "it trained in bf16, the seeds read before in fp32" in out.file.getvalue()

    (runs / "seed-2" / "result.json").unlink()  # interrupted: it would train here from scratch
    with pytest.raises(UserError, match=r"seed-2: the reference's spec and seed 2, not finished; finish it with"):
        finished_seeds(ref, spec, plugins, [1, 2], results, out)
    with pytest.raises(UserError, match=r"no runs \(<experiment>/runs/<run>/seed-<n>\) under it; its parent, perhaps"):
        finished_seeds(ref, spec, plugins, [1], results / "small", out)


def test_a_reference_in_noise_mode_is_judged_within_seed_noise_on_its_own_machine_too():
    from ablate.check.compare import exact_here, mode_line

    here = result(20.0, 50.0, 3.0).result
    exact = reference(s1=(20.0, 50.0, 3.0), s2=(21.0, 50.0, 3.0), s3=(22.0, 50.0, 3.0))
    noise = exact.model_copy(update={"mode": "noise"})
    assert exact_here(exact, here, noise=False) and not exact_here(exact, here, noise=True)
    assert not exact_here(noise, here, noise=False)
    assert mode_line(noise, here, exact=False, noise=False).startswith("same machine, the reference's mode (")
    elsewhere = result(20.0, 50.0, 3.0, device="cpu there").result
    assert mode_line(noise, elsewhere, exact=False, noise=False).startswith("other machine (cpu there;")


def test_the_fast_cpu_reference_passes_here():
    """Exact where it was made, within seed noise on any other CPU."""
    run = cli("check", "tiny-cpu")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "verdict: tiny-cpu: passed" in run.stdout and "BLEU" in run.stdout and "valid loss" in run.stdout


def reference(**seeds) -> Reference:
    runs = {int(s[1:]): SeedRun(bleu=b, chrf=c, valid_loss={10: v, 20: v - 1}, hypotheses=f"h{s}")
            for s, (b, c, v) in seeds.items()}  # fmt: skip
    return Reference(name="r", description="", source="x.yaml", status="measured", why="", threads=1,
                     machine={"device": "cpu here", "torch": "2", "precision": "fp32"},
                     expected=Expected(split="t", params=100, seeds=runs))  # fmt: skip


def result(bleu, chrf, loss, hypotheses="hs1", device="cpu here", params=100):
    scores = {"t": {"bleu": bleu, "chrf": chrf, "bleu_signature": "b", "chrf_signature": "c"}}
    record = RunResult(run="baseline", seed=1, status="completed", params=params, device=device, torch="2",
                       precision="fp32", scores=scores)  # fmt: skip
    return Measured(record, {10: loss, 20: loss - 1}, hypotheses)


def unscored(params=100):
    """A run that scored nothing (it failed before decoding)."""
    return Measured(RunResult(run="baseline", seed=1, status="failed", params=params))


def test_the_multiple_is_students_prediction_interval_split_over_the_metrics():
    tol = Tolerance()
    # t(1 - 0.01/6; 2) = 17.277 for 3 seeds, times sqrt(1 + 1/3)
    assert tol.multiple(3) == pytest.approx(17.2772 * math.sqrt(4 / 3), rel=1e-4)
    assert tol.multiple(5) == pytest.approx(6.2541 * math.sqrt(6 / 5), rel=1e-4)


def test_noise_mode_applies_k_sd_or_the_floor_at_its_edge():
    ref = reference(s1=(20.0, 50.0, 3.0), s2=(21.0, 50.0, 3.0), s3=(22.0, 50.0, 3.0))  # BLEU sd 1; chrF, loss sd 0
    k = Tolerance().multiple(3)
    inside = {name: ok for name, *_, ok in compare_noise(ref, result(21 + k - 0.01, 50.29, 3.0049))}
    assert inside == {"params": True, "valid loss curve": True, "BLEU": True, "chrF": True}
    outside = {name: ok for name, *_, ok in compare_noise(ref, result(21 - k - 0.01, 50.31, 3.0051, params=101))}
    assert outside == {"params": False, "valid loss curve": False, "BLEU": False, "chrF": False}
    unmeasured = {name: ok for name, *_, ok in compare_noise(ref, unscored())}  # a run that scored nothing
    assert unmeasured == {"params": True, "valid loss curve": False, "BLEU": False, "chrF": False}


def test_early_stopped_seeds_are_compared_over_the_steps_that_all_of_them_validated_at():
    """Early stopping ends seeds at different steps (transformer-tiny-8192's, a pass apart): the loss curves are
    compared over the stretch the seeds and the re-run all trained, short of the earliest end, whose point is the
    averaged model's; each seed's mean over it computed here by hand. A re-run that validated at other steps has no
    curve, but its BLEU and chrF are still judged; seeds that share no steps make no reference."""
    from ablate.check.measure import expected_from

    curve = {0: 9.6, 75: 6.1, 150: 5.2, 225: 4.9, 300: 4.7, 375: 4.6}

    def seed(name, bleu, last, shift):
        losses = {step: loss + shift for step, loss in curve.items() if step <= last}
        return SeedRun(bleu=bleu, chrf=50.0, valid_loss=losses, hypotheses=name)

    seeds = {1: seed("a", 20.0, 375, 0.0), 2: seed("b", 21.0, 300, 0.02), 3: seed("c", 22.0, 225, 0.04)}
    ref = Reference(name="r", description="", source="x.yaml", status="measured", why="", threads=1,
                    machine={"device": "cpu here", "torch": "2", "precision": "fp32"},
                    expected=Expected(split="t", params=100, seeds=seeds))  # fmt: skip
    means = [(9.6 + 6.1 + 5.2) / 3 + shift for shift in (0.0, 0.02, 0.04)]  # 0, 75, 150: short of seed 3's end

    def rows(losses, against=ref):
        got = result(21.0, 50.0, 0.0)
        got.valid_losses.clear()
        got.valid_losses.update(losses)
        return {name: (expected, measured, ok) for name, expected, measured, _, ok in compare_noise(against, got)}

    judged = rows({step: loss + 0.03 for step, loss in curve.items()})  # the re-run trained to 375
    expected = f"{sum(means) / 3:.4f} ± {0.02:.4f} sd"
    assert judged["valid loss curve to step 150"] == (expected, f"{(9.6 + 6.1 + 5.2) / 3 + 0.03:.4f}", True)
    shorter = rows({0: 9.63, 75: 6.13, 150: 5.23})  # stopped before every seed: the stretch ends short of 150
    assert shorter["valid loss curve to step 75"][1:] == (f"{(9.63 + 6.13) / 2:.4f}", True)
    elsewhere = rows({0: 9.6, 100: 6.0, 200: 5.0})  # validated every 100 steps
    assert elsewhere["valid loss curve to step 150"][1:] == ("-", False)
    assert elsewhere["BLEU"][2] and elsewhere["chrF"][2]
    capped = {i: seed(n, 20.0 + i, 375, i / 100) for i, n in enumerate("abc", 1)}  # all at the cap: every step
    whole = ref.model_copy(update={"expected": Expected(split="t", params=100, seeds=capped)})
    assert rows(curve, whole)["valid loss curve"][1] == f"{sum(curve.values()) / len(curve):.4f}"
    with pytest.raises(ValueError, match="same steps up to where the first ends"):
        Expected(split="t", params=100, seeds={**seeds, 4: seed("d", 20.0, 375, 0.0).model_copy(
            update={"valid_loss": {0: 9.6, 100: 6.0, 200: 5.0}})})  # fmt: skip
    one, other = result(20.0, 50.0, 3.0), result(21.0, 50.0, 3.0)  # validated at 10 and 20
    other.valid_losses.clear()
    other.valid_losses.update({10: 3.0, 15: 2.5, 30: 2.0})
    with pytest.raises(UserError, match=r"seeds 1 \(validated at 10, 20\), 2 \(validated at 10, 15, 30\): their"):
        expected_from({1: one, 2: other}, {"data": {"test": ["t"]}})


def test_exact_mode_wants_every_digit_and_the_same_hypotheses():
    ref = reference(s1=(20.0, 50.0, 3.0), s2=(21.0, 50.0, 3.0), s3=(22.0, 50.0, 3.0))
    assert all(ok for *_, ok in compare_exact(ref, result(20.0, 50.0, 3.0)))
    rows = {name: ok for name, *_, ok in compare_exact(ref, result(20.0, 50.0, 3.0001, hypotheses="other"))}
    assert rows == {"params": True, "hypotheses t (sha256)": False, "BLEU t": True, "chrF t": True,
                    "valid loss @ 10": False, "valid loss @ 20": False}  # fmt: skip


def test_references_not_yet_measured_are_said_so_and_bad_names_get_one_line():
    run = cli("check", "seq2seq-notebook")
    assert run.returncode == 1 and "not yet measured; to measure it: ablate check --update" in run.stdout
    assert run.stderr.strip() == "check failed: results/reference/seq2seq-notebook.yaml"
    bad = cli("check", "tiny-cpuu")
    assert bad.returncode == 2 and bad.stderr.startswith("tiny-cpuu: no such reference; did you mean 'tiny-cpu'?")
    threads = cli("check", "tiny-cpu", "--threads", "0")
    assert threads.returncode == 2 and "--threads" in threads.stderr and "Traceback" not in threads.stderr
    alone = cli("check", "tiny-cpu", "--from-results", "results")
    assert alone.returncode == 2 and alone.stderr.strip().startswith("--from-results: only with --update"), alone.stderr
    missing = cli("check", "tiny-cpu", "--update", "--from-results", "no/such/dir")
    assert missing.returncode == 2 and missing.stderr.strip() == "--from-results no/such/dir: no such directory"


def test_every_reference_file_is_valid_and_measured_ones_keep_their_machine():
    for path in (ROOT / "results" / "reference").glob("*.yaml"):
        ref = Reference.model_validate(yaml.safe_load(path.read_text()))
        if ref.status == "measured":
            assert ref.expected is not None and ref.spec is not None and ref.machine is not None, path
            assert len(ref.expected.seeds) >= 2 and ref.machine["torch"].startswith("2.13.0"), path
        else:
            assert ref.expected is None and ref.machine is None, path  # nothing kept that was not measured


def test_a_bad_reference_file_gets_one_line_naming_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "description": "", "source": "x.yaml", "status": "measured",
                                    "why": "", "tolerance": {"floor": {"bleu": 1.0}}}))  # fmt: skip
    run = cli("check", str(path))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert str(path) in run.stderr and "tolerance.floor" in run.stderr and "no metric bleu" in run.stderr


def test_a_reference_that_pinned_auto_precision_is_not_told_its_source_changed():
    """base-cpu was measured from experiments/base.yaml (`precision: auto`) and pinned fp32, what auto gave."""
    from ablate.check.measure import source_changed

    ref = Reference.model_validate(yaml.safe_load((ROOT / "results" / "reference" / "base-cpu.yaml").read_text()))
    assert ref.spec["training"]["precision"] == "fp32" and not source_changed(ref)
    changed = ref.model_copy(update={"spec": ref.spec | {"training": ref.spec["training"] | {"max_steps": 999}}})
    assert source_changed(changed)


def test_every_measured_reference_file_dumps_back_byte_for_byte():
    """`--update` rewrites a file with `dump`: what `load` reads of a committed file comes back unchanged."""
    measured = [path for path in sorted((ROOT / "results" / "reference").glob("*.yaml"))
                if load(path).status == "measured"]  # fmt: skip
    assert measured
    for path in measured:
        assert dump(load(path)) == path.read_text(encoding="utf-8"), path


def test_every_seed_a_reference_read_from_a_run_is_that_committed_run():
    """A seed taken by `--update --from-results` names its run: it is committed and measured what the file says."""
    read = 0
    for path in sorted((ROOT / "results" / "reference").glob("*.yaml")):
        ref = load(path)
        for seed, run in ref.expected.seeds.items() if ref.expected else []:
            if run.run is None:
                continue
            result = json.loads((ROOT / run.run / "result.json").read_text())
            scores = result["scores"][ref.expected.split]
            assert (result["seed"], result["status"], scores["bleu"], scores["chrf"]) == (
                seed, "completed", run.bleu, run.chrf), (path, seed)  # fmt: skip
            hypotheses = ROOT / run.run / "hypotheses" / f"{ref.expected.split}.txt"
            assert hashlib.sha256(hypotheses.read_bytes()).hexdigest() == run.hypotheses, (path, seed)
            read += 1
    assert read >= 3  # transformer-tiny's three seeds


def test_a_reference_file_with_a_mode_dumps_back_byte_for_byte(tmp_path):
    for mode in ("exact", "noise"):
        text = dump(reference(s1=(20.0, 50.0, 3.0), s2=(21.0, 50.0, 3.0)).model_copy(update={"mode": mode}))
        assert f"\nmode: {mode}\n" in text
        path = tmp_path / f"{mode}.yaml"
        path.write_text(text, encoding="utf-8")
        assert dump(load(path)) == text


def test_the_reference_file_and_the_comparison_import_neither_torch_nor_training_nor_launchers():
    """A reference loads, and a result is compared and tabled, in a process that has no torch, trainer or launcher."""
    code = """
import sys
from pathlib import Path
from ablate.check.compare import compare_exact, compare_noise, table
from ablate.check.reference import Measured, dump, load
from ablate.record import RunResult

ref = load(Path("results/reference/tiny-cpu.yaml"))
dump(ref)
failed = Measured(RunResult(run="baseline", seed=1, status="failed"))
table("t", compare_exact(ref, failed) + compare_noise(ref, failed))
heavy = [m for m in sys.modules if m == "torch" or m.startswith(("ablate.train", "ablate.sweep.launchers"))]
assert not heavy, heavy
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
