"""The report's plots, drawn by `ablate report` from run directories written here by hand (no training).

`synthetic_results` is also the results directory of tests/test_page.py.
"""

import json
import math
import random
import xml.etree.ElementTree as ET

import pytest
import yaml

from ablate.report.paper import PAPER_BASE
from ablate.report.plots import smooth
from tests.conftest import cli

SPLIT = "test_2016_flickr"
SEEDS = (1, 2)
RUNS = {"baseline": {}, "pre_ln": {"model.norm_placement": "pre_ln"}, "plain": {"model.positions": "learned"}}
DIAGNOSED = ("baseline", "pre_ln")  # `plain` has neither diagnostics.jsonl nor BLEU by length
BUCKETS = {"1-10": 412, "11-20": 389, "21-30": 150, "31+": 49}
LAYERS = 2  # encoder and decoder layers of the synthetic model
HEADS = 4
PLOTS = ["curves", "bleu", "length", "gradnorm", "entropy", "max_logit", "norms"]
DIAGNOSTIC_PLOTS = ["gradnorm", "entropy", "max_logit", "norms"]
SVG = "{http://www.w3.org/2000/svg}"


def sublayers(run: str) -> list[str]:
    """Sublayers in model order, as diagnostics.jsonl names them; a final norm a stack under Pre-LN only."""
    names = ["embeddings"]
    for stack, kinds in (("encoder", ["self_attn"]), ("decoder", ["self_attn", "cross_attn"])):
        for i in range(LAYERS):
            names += [f"{stack}.{i}.{kind}" for kind in [*kinds, "feed_forward", "norms"]]
        names += [f"{stack}.final_norm"] if run == "pre_ln" else []
    return names


def attentions() -> list[str]:
    return [f"encoder.{i}.self_attn" for i in range(LAYERS)] + [
        f"decoder.{i}.{kind}" for i in range(LAYERS) for kind in ("self_attn", "cross_attn")
    ]


def config(run: str) -> dict:
    """The paper's base model as a resolved config.yaml spells it, with the run's changes and a small size."""
    values = {key: value for key, (value, _) in PAPER_BASE.items()} | {"model.d_model": 32} | RUNS[run]
    out: dict = {}
    for key, value in values.items():
        section, name = key.split(".")
        out.setdefault(section, {})[name] = value
    return out


def diagnostics(rng: random.Random, steps: list[int], run: str) -> list[dict]:
    records = []
    for step in steps:
        grow = 1 + step / 100
        records.append({
            "step": step, "seconds": 0.4 + step * 0.05,
            "grad_norm": {name: rng.uniform(0.1, 2.0) / grow for name in sublayers(run)},
            "attention_entropy": {name: [rng.uniform(0.5, 2.5) / grow for _ in range(HEADS)] for name in attentions()},
            "max_logit": {name: rng.uniform(2, 6) * grow for name in attentions()},
            "residual_norm": {f"{stack}.{i}": rng.uniform(5, 30) * grow for stack in ("encoder", "decoder")
                              for i in range(LAYERS)},
            "logits_norm": rng.uniform(20, 60) * grow,
        })  # fmt: skip
    return records


def metrics(rng: random.Random, steps: int) -> list[dict]:
    records = [{"phase": "training"}, {"step": 0, "valid_loss": 9.2, "valid_ppl": 9897.1, "wall_s": 0.3}]
    for step in range(1, steps + 1):
        loss = 2 + 7 * math.exp(-step / 60) + rng.gauss(0, 0.3)
        records.append({"step": step, "epoch": step // 100, "loss": round(loss, 4), "lr": 1e-3, "step_ms": 40.0,
                        "src_tokens": 900, "tgt_tokens": 950, "wall_s": round(0.3 + step * 0.045, 2)})  # fmt: skip
        if step % 100 == 0:
            valid = 2.5 + 6 * math.exp(-step / 60)
            records.append({"step": step, "valid_loss": round(valid, 4), "valid_ppl": round(math.exp(valid), 2),
                            "valid_bleu": round(30 - 3 * valid, 2), "wall_s": round(0.5 + 0.045 * step)})  # fmt: skip
    return [*records, {"phase": f"decoding {SPLIT}"}]


def bucket(rng: random.Random, sentences: int) -> dict:
    return {"sentences": sentences, "bleu": round(rng.uniform(15, 40), 2), "chrf": round(rng.uniform(40, 65), 2)}


def synthetic_results(root, with_diagnostics: bool = True, with_buckets: bool = True):
    """results/<experiment>/ with 3 runs x 2 completed seeds: result.json, config.yaml, metrics.jsonl, diagnostics."""
    experiment = root / "syn"
    for r, run in enumerate(RUNS):
        for seed in SEEDS:
            rng = random.Random(10 * r + seed)
            directory = experiment / "runs" / run / f"seed-{seed}"
            directory.mkdir(parents=True)
            scores = {"bleu": round(rng.uniform(25, 35), 2), "chrf": round(rng.uniform(50, 60), 2),
                      "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                      "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"}  # fmt: skip
            if with_buckets and run in DIAGNOSED:
                scores["by_length"] = {label: bucket(rng, n) for label, n in BUCKETS.items()}
            result = {"experiment": "syn", "run": run, "seed": seed, "status": "completed", "params": 123456,
                      "describe": "baseline" if run == "baseline" else ", ".join(RUNS[run]),
                      "valid_loss": 2.6, "valid_ppl": 13.46, "scores": {SPLIT: scores}}  # fmt: skip
            (directory / "result.json").write_text(json.dumps(result))
            (directory / "config.yaml").write_text(yaml.safe_dump(config(run)))
            (directory / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics(rng, 200)))
            if with_diagnostics and run in DIAGNOSED:
                records = diagnostics(rng, [0, 50, 100, 150, 200], run)
                (directory / "diagnostics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in records))
    return experiment


def report(experiment, *args):
    run = cli("report", str(experiment), *args)  # no hypotheses here: no interval to compute
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    experiment = synthetic_results(tmp_path_factory.mktemp("plots"))
    report(experiment)
    return experiment


def texts(svg) -> list[str]:
    """Every text of an SVG, in document order (matplotlib writes text as text: svg.fonttype none)."""
    return ["".join(t.itertext()).strip() for t in ET.parse(svg).getroot().iter(f"{SVG}text")]


def test_every_plot_is_a_valid_png_and_svg(results):
    folder = results / "report"
    for name in PLOTS:
        png = (folder / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000, name
        root = ET.parse(folder / f"{name}.svg").getroot()
        assert root.tag == f"{SVG}svg" and root.find(f".//{SVG}path") is not None, name


def test_a_line_a_run_and_diagnostic_plots_only_for_runs_with_diagnostics(results):
    folder = results / "report"
    for name in ["curves", "bleu"]:
        assert set(RUNS) <= set(texts(folder / f"{name}.svg")), name
    for name in ["length", *DIAGNOSTIC_PLOTS]:
        labels = set(texts(folder / f"{name}.svg"))
        assert set(DIAGNOSED) <= labels and "plain" not in labels, name


def test_gradient_norms_show_every_sublayer_in_model_order_at_init_and_end(results):
    labels = texts(results / "report" / "gradnorm.svg")
    every = sublayers("pre_ln")  # the baseline's, and each stack's final norm after its last layer
    assert [t for t in labels if t in every] == every  # the x axis, shared by both panels
    assert any(t.startswith("at initialisation (step 0)") for t in labels)
    assert any(t.startswith("at the end (step 200)") for t in labels)


@pytest.mark.parametrize("name", ["entropy", "max_logit"])
def test_attention_plots_have_a_panel_per_attention_layer(results, name):
    labels = texts(results / "report" / f"{name}.svg")
    panels = [t for t in labels if ", layer " in t]
    expected = [f"{stack} {kind}, layer {i}" for stack, kind in (("encoder", "self_attn"), ("decoder", "self_attn"),
                ("decoder", "cross_attn")) for i in range(LAYERS)]  # fmt: skip
    assert sorted(panels) == sorted(expected)


def test_the_training_loss_is_smoothed_and_drawn_with_validation_against_step_and_time(results):
    assert smooth([3.0] * 10, span=4) == [3.0] * 10
    assert smooth([0.0, 1.0, 1.0], span=9) == pytest.approx([0.0, 0.2, 0.36])  # weight 2 / (9 + 1) a new value
    labels = texts(results / "report" / "curves.svg")
    for label in ["training loss (EMA; raw faint)", "validation loss (nats a token)", "validation BLEU (greedy)",
                  "step", "wall time (s)"]:  # fmt: skip
        assert label in labels, label


def test_no_diagnostics_and_no_buckets_no_such_plots_or_table(tmp_path):
    experiment = synthetic_results(tmp_path, with_diagnostics=False, with_buckets=False)
    report(experiment)
    folder = experiment / "report"
    for name in ["curves", "bleu"]:
        assert (folder / f"{name}.svg").is_file() and (folder / f"{name}.png").is_file(), name
    for name in ["length", *DIAGNOSTIC_PLOTS]:
        assert not (folder / f"{name}.svg").exists() and not (folder / f"{name}.png").exists(), name
    assert not (folder / "length.md").exists() and not (folder / "length.csv").exists()
    assert (folder / "index.html").read_text().count("<svg") == 2
