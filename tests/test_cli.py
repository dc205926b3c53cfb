"""The command line as a user types it: exit codes, one-line errors, no tracebacks."""

import json

from ablate.registry import REGISTRY
from tests.conftest import ROOT, cli


def test_validate_lists_runs_differences_and_params():
    result = cli("validate", "experiments/pe.yaml", "experiments/heads.yaml")
    assert result.returncode == 0, result.stderr
    for expected in ["pe (4 runs)", "learned", "positions=learned", "heads=8, d_k=32", "5,489,664"]:
        assert expected in result.stdout


def test_validate_with_set():
    result = cli("validate", "experiments/smoke.yaml", "--set", "model.d_model=64")
    assert result.returncode == 0, result.stderr
    assert "37,376" not in result.stdout  # the smoke model's size at d_model 32


def test_bad_input_exits_2_with_one_line_per_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodel: {hedas: 4, positions: lerned}\n")
    result = cli("validate", str(bad), "experiments/smoke.yaml", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert sorted(result.stderr.splitlines()) == [
        f"{bad}: model.hedas: unknown key 'hedas'; did you mean 'heads'?",
        f"{bad}: model.positions: unknown positions 'lerned'; did you mean 'learned'? "
        "(registered: sinusoidal, learned, none, rotary)",
        f"{tmp_path / 'missing.yaml'}: no such file",
    ]


def test_bad_flag_exits_2():
    result = cli("validate", "experiments/smoke.yaml", "--set", "model.heads")
    assert result.returncode == 2
    assert result.stderr.strip() == "--set: expected KEY=VALUE such as model.heads=4, got 'model.heads'"
    assert cli("frobnicate").returncode == 2


def test_parts_lists_every_slot_and_part_with_params():
    result = cli("parts")
    assert result.returncode == 0
    for slot in REGISTRY.values():
        assert slot.name in result.stdout
        for name, part in slot.parts.items():
            if part.__module__.startswith("ablate."):  # not parts another test's plugin registered in this process
                assert name in result.stdout
    assert "max_len=1024" in result.stdout


def test_schema_is_json_schema_with_every_part():
    result = cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    model = schema["$defs"]["ModelSpec"]["properties"]
    assert model["positions"]["anyOf"][0] == {"enum": list(REGISTRY["positions"].parts)}
    learned = next(
        f for f in model["positions"]["anyOf"] if f.get("properties", {}).get("name") == {"const": "learned"}
    )
    assert learned["properties"]["max_len"]["default"] == 1024
    assert {"name", "extends", "variants", "grid", "plugins", "model"} <= set(schema["properties"])


def test_schema_validates_the_shipped_experiments():
    import jsonschema
    import yaml

    schema = json.loads(cli("schema").stdout)
    for path in sorted((ROOT / "experiments").rglob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    bad = {"name": "x", "model": {"positions": "lerned"}}
    assert not jsonschema.Draft202012Validator(schema).is_valid(bad)


def test_report_output_takes_its_format_from_the_suffix_or_says_what_is_missing(tmp_path):
    """`--output table.tex` alone writes LaTeX (it wrote an empty file before, in the terminal format); a suffix
    that names no format is a one-line error, and nothing is written."""
    args = ["report", str(ROOT / "results" / "pe-short"), "--no-files", "--significance", "none"]
    done = cli(*args, "--output", str(tmp_path / "table.tex"))
    assert done.returncode == 0, done.stderr
    tex = (tmp_path / "table.tex").read_text()
    assert "\\begin{tabular}" in tex and "rotary" in tex and f"written: {tmp_path / 'table.tex'}" in done.stdout
    bad = cli(*args, "--output", str(tmp_path / "table.txt"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "table.txt").exists()
    assert "--output" in bad.stderr and "--format md, csv, latex or html" in bad.stderr
    assert "written" not in bad.stdout
    (tmp_path / "tables").mkdir()
    (tmp_path / "a-file").write_text("kept")
    for wrong, why in ((["--format", "md", "--output", str(tmp_path / "tables")], "a directory, where --format md"),
                       (["--output", str(tmp_path / "a-file" / "table.md")], "table.md: not written (")):  # fmt: skip
        bad = cli(*args, *wrong)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and why in bad.stderr, bad.stderr
    assert (tmp_path / "a-file").read_text() == "kept" and not any((tmp_path / "tables").iterdir())
