"""`ablate check`: the fast CPU reference reproduces; a perturbed reference does not."""

import yaml

from ablate.check.reference import Expected, Reference, Tolerance, compare
from tests.conftest import ROOT, cli

TINY = ROOT / "results" / "reference" / "tiny-cpu.yaml"


def test_the_fast_cpu_reference_reproduces():
    run = cli("check", "tiny-cpu")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 3 + 4 and all(line.rstrip(" │").endswith("ok") for line in rows)
    assert "BLEU test_2016_flickr" in run.stdout and "valid loss @ 1000" in run.stdout


def test_a_perturbed_reference_fails(tmp_path, write):
    """A small reference made here with --update (200 steps of tiny.yaml's model): checked as made it passes; with
    the learning rate halved, it fails, and the check says the source now resolves to another spec."""
    source = write("small.yaml", f"""
name: small
extends: {ROOT / "experiments" / "reference" / "tiny.yaml"}
data: {{max_pairs: 2000}}
training: {{max_steps: 200, validate_every: 100}}
""")  # fmt: skip
    tiny = yaml.safe_load(TINY.read_text())
    path = write("small-ref.yaml", yaml.safe_dump({
        "name": "small", "description": "tiny.yaml's model for 200 steps", "source": str(source),
        "status": "not yet measured", "device": "cpu", "threads": tiny["threads"], "tolerance": tiny["tolerance"],
        "why": "a test",
    }, sort_keys=False))  # fmt: skip
    made = cli("check", "--update", str(path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert cli("check", str(path)).returncode == 0  # as made: the check can pass
    ref = yaml.safe_load(path.read_text())
    assert ref["status"] == "measured" and set(ref["expected"]["valid_loss"]) == {"0", "100", "200"}
    ref["spec"]["training"]["schedule"]["lr"] /= 2  # the source says 0.004
    path.write_text(yaml.safe_dump(ref, sort_keys=False))
    run = cli("check", str(path))
    assert run.returncode == 1
    assert "OUTSIDE" in run.stdout and run.stderr.strip() == f"check failed: {path}"
    assert f"note: {source} now resolves to a different spec" in run.stdout


def test_compare_applies_each_tolerance_at_its_edge():
    ref = Reference(
        name="r", description="", source="x.yaml", status="measured", why="",
        tolerance=Tolerance(params=0, bleu=0.5, chrf=1.0, valid_loss=0.01),
        expected=Expected(split="t", params=100, bleu=20.0, chrf=40.0, valid_loss={10: 3.0, 20: 2.5}),
    )  # fmt: skip
    measured = {"params": 100, "scores": {"t": {"bleu": 20.5, "chrf": 38.9}}, "valid_losses": {10: 2.99, 20: 2.52}}
    ok = {name: within for name, _, _, _, within in compare(ref, measured)}
    assert ok == {"params": True, "BLEU t": True, "chrF t": False, "valid loss @ 10": True, "valid loss @ 20": False}
    missing = {name: within for name, _, _, _, within in compare(ref, {"params": 101})}
    assert not any(missing.values())


def test_references_not_yet_measured_are_said_so_and_bad_names_get_one_line():
    run = cli("check", "transformer-tiny")
    assert run.returncode == 1 and "not yet measured; to measure it: ablate check --update" in run.stdout
    assert run.stderr.strip() == "check failed: results/reference/transformer-tiny.yaml"
    bad = cli("check", "tiny-cpuu")
    assert bad.returncode == 2 and bad.stderr.startswith("tiny-cpuu: no such reference; did you mean 'tiny-cpu'?")


def test_every_reference_file_is_valid_and_measured_ones_keep_their_environment():
    for path in (ROOT / "results" / "reference").glob("*.yaml"):
        ref = Reference.model_validate(yaml.safe_load(path.read_text()))
        if ref.status == "measured":
            assert ref.expected is not None and ref.spec is not None, path
            assert ref.environment["torch"].startswith("2.13.0") and ref.environment["seed"] == 1, path
        else:
            assert ref.published is not None, path  # the paper recipes, waiting for a GPU
