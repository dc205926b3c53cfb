"""Experiment files: extends, variants, grids, --set, and one clear line for every kind of mistake."""

import pytest

import ablate
from ablate.errors import SpecError
from tests.conftest import cli

BASE = """
name: base
model: {d_model: 64, heads: 4, d_ff: 128, encoder_layers: 2, decoder_layers: 2}
tokenizer: {vocab_size: 1000}
"""


def errors(path, overrides=()):
    with pytest.raises(SpecError) as info:
        ablate.load_experiment(path, overrides)
    return info.value.lines


def test_extends_chain_merges_and_variants_expand(write):
    write("base.yaml", BASE)
    write("mid.yaml", "name: mid\nextends: base.yaml\nmodel: {dropout: 0.2, positions: {name: learned, max_len: 64}}\n")
    path = write(
        "sub/exp.yaml",
        """
name: exp
extends: ../mid.yaml
model: {heads: 8}
variants:
  rope: {model.positions: rotary}
  longer: {model.positions.max_len: 128}
grid:
  model.d_ff: [64, 256]
  model.norm_placement: [post_ln, pre_ln]
""",
    )
    exp = ablate.load_experiment(path)
    names = [r.name for r in exp.runs]
    assert names == [
        "baseline",
        "rope",
        "longer",
        "d_ff=64,norm_placement=post_ln",
        "d_ff=64,norm_placement=pre_ln",
        "d_ff=256,norm_placement=post_ln",
        "d_ff=256,norm_placement=pre_ln",
    ]
    base = exp.baseline.spec.model
    assert (base.d_model, base.heads, base.d_k, base.dropout) == (64, 8, 8, 0.2)
    assert str(base.positions) == "learned(max_len=64)"
    assert str(exp.run("rope").spec.model.positions) == "rotary"  # a new part replaces, its params do not leak
    assert str(exp.run("longer").spec.model.positions) == "learned(max_len=128)"
    assert exp.run("rope").differences == {"model.positions": "rotary"}
    assert exp.run("d_ff=64,norm_placement=post_ln").differences == {"model.d_ff": "64"}
    assert exp.run("d_ff=256,norm_placement=pre_ln").describe() == "d_ff=256, norm_placement=pre_ln"


def test_set_applies_to_every_run(write):
    write("base.yaml", BASE)
    path = write("exp.yaml", "name: e\nextends: base.yaml\nvariants: {pre: {model.norm_placement: pre_ln}}\n")
    exp = ablate.load_experiment(path, ["model.dropout=0.3", "model.positions={name: learned, max_len: 32}"])
    assert all(r.spec.model.dropout == 0.3 for r in exp.runs)
    assert all(str(r.spec.model.positions) == "learned(max_len=32)" for r in exp.runs)
    assert exp.run("pre").differences == {"model.norm_placement": "pre_ln"}


def test_one_seed_of_a_sweep_alone_is_the_sweeps_job(write, tmp_path):
    """`--only RUN --set training.seed=N --seeds 1` (scripts/gpu_jobs.py) plans the sweep's seed-N job of RUN: the
    same directory, spec and config hash, so the result stands for the sweep's and is never trained again."""
    from ablate.rundir import config_hash
    from ablate.sweep.plan import plan

    write("base.yaml", BASE)
    path = write("exp.yaml", "name: e\nextends: base.yaml\ntraining: {max_steps: 10}\n"
                 "variants: {pre: {model.norm_placement: pre_ln}}\n")  # fmt: skip
    sweep = {(p.job.run, p.job.seed): p.job for p in plan(ablate.load_experiment(path), tmp_path, 3)}
    alone = [p.job for p in plan(ablate.load_experiment(path, ["training.seed=3"]), tmp_path, 1)]
    assert sorted((job.run, job.seed) for job in alone) == [("baseline", 3), ("pre", 3)]
    for job in alone:
        twin = sweep[(job.run, job.seed)]
        assert job.directory == twin.directory and job.spec == twin.spec
        assert config_hash(job.spec) == config_hash(twin.spec)


def test_heads_change_derives_d_k(write):
    write("base.yaml", BASE)
    exp = ablate.load_experiment(write("e.yaml", "name: e\nextends: base.yaml\ngrid: {model.heads: [1, 16]}\n"))
    assert [r.spec.model.d_k for r in exp.runs] == [16, 64, 4]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: e\nmodel: {heads: 3}\n", "e.yaml: model.heads: heads=3 does not divide d_model=512"),
        ("name: e\nmodel: {hedas: 4}\n", "e.yaml: model.hedas: unknown key 'hedas'; did you mean 'heads'?"),
        ("name: e\nmodle: {heads: 4}\n", "e.yaml: modle: unknown key 'modle'; did you mean 'model'?"),
        ("name: e\nmodel: {heads: four}\n", "e.yaml: model.heads: input should be a valid integer (got 'four')"),
        ("name: e\nmodel: {heads: '4'}\n", "e.yaml: model.heads: input should be a valid integer (got '4')"),
        ("name: e\nmodel: {d_model: 0}\n", "e.yaml: model.d_model: input should be greater than 0 (got 0)"),
        ("name: e\nmodel: {d_ff: -5}\n", "e.yaml: model.d_ff: input should be greater than 0 (got -5)"),
        ("name: e\nmodel: {dropout: 1.0}\n", "e.yaml: model.dropout: input should be less than 1 (got 1.0)"),
        (
            "name: e\nmodel: {attention_dropout: -0.1}\n",
            "e.yaml: model.attention_dropout: input should be greater than",
        ),
        (
            "name: e\nmodel: {positions: lerned}\n",
            "e.yaml: model.positions: unknown positions 'lerned'; did you mean 'learned'? "
            "(registered: sinusoidal, learned,",
        ),
        (
            "name: e\nmodel: {scaling: sqrt_dkk}\n",
            "e.yaml: model.scaling: unknown scaling 'sqrt_dkk'; did you mean 'sqrt_dk'?",
        ),
        (
            "name: e\nmodel: {positions: {name: learned, max_len: 0}}\n",
            "e.yaml: model.positions.max_len: input should be greater than 0",
        ),
        (
            "name: e\nmodel: {positions: rotary, d_model: 30, heads: 2}\n",
            "e.yaml: model.positions: positions 'rotary' rotates pairs of features and needs an even d_k, got d_k=15",
        ),
        ("name: e\ntokenizer: {joint: false}\n", "e.yaml: model.tying: tying 'all' shares one matrix across languages"),
        (
            "name: e\nvariants: {v: {model.hedas: 2}}\n",
            "e.yaml: variants.v.model.hedas: no such key in the spec: unknown key 'hedas'; did you mean 'heads'?",
        ),
        ("name: e\nvariants: {v: {model.heads.x: 2}}\n", "e.yaml: variants.v.model.heads.x: 'model.heads' is a value"),
        (
            "name: e\nvariants: {v: {model.heads: 3}}\n",
            "e.yaml: model.heads: heads=3 does not divide d_model=512; "
            "choose heads that divide it, or set d_k (run 'v')",
        ),
        (
            "name: e\nvariants: {baseline: {model.heads: 4}}\n",
            "e.yaml: variants.baseline: a run named 'baseline' exists",
        ),
        ("name: e\nvariants: {a/b: {model.heads: 4}}\n", "e.yaml: variants.a/b: run name 'a/b' may hold only"),
        ("name: e\ngrid: {model.heads: []}\n", "e.yaml: grid.model.heads: needs at least one value"),
        ("name: e\ngrid: {model.heads: 4}\n", "e.yaml: grid.model.heads: input should be a valid list"),
        ("name: e\nextends: nowhere.yaml\n", "e.yaml: extends: no such file: "),
        ("model: {}\n", "e.yaml: name: required key is missing"),
        ("name: e\nmodel: [1, 2]\n", "e.yaml: model: expected a mapping"),
        ("name: e\nmodel: {heads: 4\n", "e.yaml: line 3, column 1: not valid YAML"),
        ("- a list\n", "e.yaml: (top level): expected a mapping of keys, got list"),
    ],
)
def test_bad_spec_gives_one_line_per_problem(write, text, expected):
    path = write("e.yaml", text)
    lines = errors(path)
    assert any(
        line.startswith(str(path.parent / expected.split(":")[0]) + expected[len(expected.split(":")[0]) :])
        for line in lines
    ), lines


def test_errors_name_the_file_that_set_the_key(write):
    base = write("base.yaml", "name: base\nmodel: {heads: 3}\n")
    path = write("e.yaml", "name: e\nextends: base.yaml\n")
    assert errors(path) == [
        f"{base.resolve()}: model.heads: heads=3 does not divide d_model=512; choose heads that divide it, or set d_k"
    ]


def test_every_bad_variant_is_reported_at_once(write):
    path = write("e.yaml", "name: e\nvariants: {a: {model.heads: 3}, b: {model.dropout: 2}}\n")
    lines = errors(path)
    assert len(lines) == 2 and "(run 'a')" in lines[0] and "(run 'b')" in lines[1]


def test_extends_cycle_is_an_error(write):
    write("a.yaml", "name: a\nextends: b.yaml\n")
    write("b.yaml", "name: b\nextends: c.yaml\n")
    path = write("c.yaml", "name: c\nextends: a.yaml\n")
    (line,) = errors(path)
    assert "extends: extends forms a cycle: c.yaml -> a.yaml -> b.yaml -> c.yaml" in line


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.heads", "--set: expected KEY=VALUE"),
        ("model.hedas=4", "--set: model.hedas: no such key in the spec: unknown key 'hedas'; did you mean 'heads'?"),
        ("model.heads=3", "model.heads: heads=3 does not divide d_model=512"),
    ],
)
def test_bad_set(write, override, expected):
    path = write("e.yaml", "name: e\n")
    assert any(expected in line for line in errors(path, [override]))


def test_a_key_given_twice_is_an_error_that_names_the_file_the_key_and_the_line(write):
    path = write("e.yaml", "name: e\nmodel:\n  heads: 4\n  d_model: 256\n  heads: 8\n")
    assert errors(path) == [f"{path}: model.heads: line 5: duplicate key (first given at line 3); keep one"]
    run = cli("validate", str(path))
    assert run.returncode == 2 and run.stderr.splitlines() == errors(path)
    nested = write("n.yaml", "name: e\nvariants:\n  v: {model.heads: 4, model.heads: 2}\n")
    assert errors(nested) == [
        f"{nested}: variants.v.model.heads: line 3: duplicate key (first given at line 3); keep one"
    ]
