"""A corpus of your own files, and parts with required parameters: docs/spec.md's example, end to end."""

import gzip
import json
import random

from tests.conftest import ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"
WORDS = {"the": "der", "red": "rote", "dog": "Hund", "runs": "läuft", "big": "große", "cat": "Katze",
         "sleeps": "schläft", "a": "ein", "small": "kleine", "bird": "Vogel", "sings": "singt"}  # fmt: skip


def sentences(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    en = [" ".join(rng.choice(list(WORDS)) for _ in range(rng.randint(3, 8))) for _ in range(n)]
    return en, [" ".join(WORDS[w] for w in line.split()) for line in en]


def write_corpus(root, unequal: bool = False) -> None:
    for split, n in (("train", 300), ("val", 40), ("test_x", 30)):
        en, de = sentences(n, seed=len(split))
        (root / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        with gzip.open(root / f"{split}.de.gz", "wt", encoding="utf-8") as f:  # plain and gzipped alike
            f.write("\n".join(de[:-1] if unequal and split == "val" else de) + "\n")


def experiment(write, root) -> str:
    paths = {split: {"en": f"{split}.en", "de": f"{split}.de.gz"} for split in ("train", "val", "test_x")}
    corpus = json.dumps({"name": "files", "paths": paths})  # YAML is a superset of JSON
    return str(write("own.yaml", f"""
name: own
extends: {SMOKE}
data: {{corpus: {corpus}, test: [test_x], data_dir: {root}}}
tokenizer: {{vocab_size: 100, min_frequency: 1}}
training: {{max_steps: 20, validate_every: 20}}
"""))  # fmt: skip


def test_the_readme_files_corpus_validates_and_runs(tmp_path, write):
    write_corpus(tmp_path)
    path = experiment(write, tmp_path)
    validate = cli("validate", path)
    assert validate.returncode == 0, validate.stderr
    assert "own (1 runs)" in validate.stdout and "all 1 runs valid" in validate.stdout
    run = cli("run", path, "--only", "baseline", "--results", str(tmp_path / "results"))
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "results" / "own" / "runs" / "baseline" / "seed-1" / "result.json").read_text())
    assert result["status"] == "completed" and set(result["scores"]) == {"test_x"}
    assert result["train_pairs"] == 300


def test_unequal_line_counts_get_one_line_naming_the_file(tmp_path, write):
    write_corpus(tmp_path, unequal=True)
    run = cli("run", experiment(write, tmp_path), "--only", "baseline", "--results", str(tmp_path / "results"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"{tmp_path / 'val.de.gz'}: ends after line 39, but {tmp_path / 'val.en'} has a line 40")


def test_a_plugin_part_with_a_required_parameter(tmp_path, write):
    plugin = write(
        "widen.py",
        '''
import torch.nn.functional as F
from ablate.parts.feedforward import FEEDFORWARD, FeedForward
from ablate.registry import PartParams


@FEEDFORWARD.register("widened_relu")
class Widened(FeedForward):
    """relu FFN whose hidden width is d_ff times a factor that must be given."""

    class Params(PartParams):
        factor: float

    def __init__(self, d_model, d_ff, dropout, factor):
        super().__init__(d_model, int(d_ff * factor), dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))
''',
    )
    wide = "variants: {wide: {model.feedforward: {name: widened_relu, factor: 2.0}}}\n"
    path = write("e.yaml", f"name: e\nextends: {SMOKE}\nplugins: [{plugin}]\n" + wide)
    run = cli("validate", str(path))
    assert run.returncode == 0, run.stderr
    assert "feedforward=widened_relu(factor=2.0)" in run.stdout
    missing = write("m.yaml", f"name: m\nextends: {SMOKE}\nplugins: [{plugin}]\nmodel: {{feedforward: widened_relu}}\n")
    bad = cli("validate", str(missing))
    assert bad.returncode == 2 and bad.stderr.strip() == f"{missing}: model.feedforward.factor: required key is missing"
