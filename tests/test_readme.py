"""The README's and docs/'s commands are what CI and users run: each shell block is exercised here."""

import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path, language: str = "bash") -> list[str]:
    return re.findall(rf"```{language}\n(.+?)\n```", path.read_text(encoding="utf-8"), flags=re.S)


def commands() -> list[str]:
    """The README's shell blocks, in order."""
    return blocks(ROOT / "README.md")


def shell_lines() -> list[tuple[str, str]]:
    """(file, command) for every command of every ```bash block of README.md and docs/, continuations joined."""
    out = []
    for path in DOCS:
        for block in blocks(path):
            for line in block.replace("\\\n", " ").splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command:
                    out.append((path.name, command))
    return out


SETUP = commands()[:2]
LINES = [(f, c) for f, c in shell_lines() if c not in SETUP]


def test_readme_opens_with_setup_and_run_then_setup_and_test():
    run, test = commands()[:2]
    assert run.startswith("python3 -m venv .venv") and "-c constraints.txt" in run
    assert run.endswith("ablate run experiments/pe.yaml")
    assert test.startswith("python3 -m venv .venv") and "-c constraints.txt" in test and "pytest" in test


def test_ci_runs_the_readme_test_command_verbatim():
    test = commands()[1]
    assert test in (ROOT / ".ci" / "run").read_text().splitlines()


def test_constraints_pin_torch_exactly():
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins
    assert all("==" in line for line in pins if line and not line.startswith("#"))


def test_the_readme_is_a_guide_of_at_most_150_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_every_relative_link_of_the_docs_resolves():
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{path.name}: link to {target}, which does not exist"


def ablate_args(command: str) -> list[str] | None:
    """The arguments of `ablate` in a documented command (after VAR=value and `torchrun ... -m ablate.cli`)."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    if words[:1] == ["ablate"]:
        return words[1:]
    if words[:1] == ["torchrun"] and "ablate.cli" in words:
        return words[words.index("ablate.cli") + 1 :]
    return None


def test_the_docs_have_shell_blocks_to_exercise():
    assert len(LINES) >= 5 and all(ablate_args(c) or c.startswith("sudo scripts/") for _, c in LINES)


@pytest.mark.parametrize(("doc", "command"), LINES, ids=[f"{f}: {c}" for f, c in LINES])
def test_documented_command(doc, command, tmp_path, request):
    """`ablate run` plans (--dry-run) into an empty directory; report writes no files (the quick start's report of
    results/smoke reads the smoke experiment as the test session trained it); bench times one short round into an
    empty directory; the rest run as written."""
    if command.startswith("sudo scripts/"):
        script = ROOT / shlex.split(command)[1]
        assert script.is_file() and script.stat().st_mode & 0o111, f"{doc}: {script} is not an executable script"
        return
    args = ablate_args(command)
    assert args, f"{doc}: a shell block holds a command this test does not know how to exercise: {command}"
    if args[0] == "run":
        if "--results" in args:
            del args[args.index("--results") : args.index("--results") + 2]
        args += ["--dry-run", "--results", str(tmp_path / "results")]
    elif args[0] == "report":
        if args[1] == "results/smoke":  # what the quick start's first command made
            args[1] = str(request.getfixturevalue("smoke_run").results / "smoke")
        args += ["--no-files"]
    elif args[0] == "bench":  # one short round without decoding (tests/test_bench.py decodes), into an empty directory
        args += ["--results", str(tmp_path / "results"), "--max-rounds", "1", "--updates", "1", "--sentences", "0"]
    else:
        assert args[0] in ("validate", "parts", "schema", "data"), f"{doc}: add a way to exercise `ablate {args[0]}`"
        if args[0] == "data":
            assert args[1] in ("list", "prepare"), f"{doc}: `ablate data {args[1]}` would download"
            if args[1] == "prepare":  # its corpus (WMT14) is the user's to bring: what can be checked is the files
                args = ["validate", *args[2:]]
    done = cli(*args)
    assert done.returncode == 0, f"{doc}: {command}\n{done.stderr}"
    assert done.stdout.strip()


def test_the_readme_plugin_example_registers_a_part_that_computes_what_its_docstring_says(tmp_path, write):
    """The README's plugin, copied as a user would, validates in an experiment file and computes
    relu(x W1 + b1)^power W2 + b2 with every parameter random. In processes of their own: the registry is
    global, and tests/fixtures/plugin_parts.py registers a part of the same name in this one."""
    (example,) = [b for b in blocks(ROOT / "README.md", "python") if "register(" in b]
    plugin = tmp_path / "readme_plugin.py"
    plugin.write_text(example)
    path = write("plugin.yaml", f"""
name: plugin
extends: {ROOT / "experiments" / "smoke.yaml"}
plugins: [{plugin}]
variants:
  cubed: {{model.feedforward: {{name: squared_relu, power: 3.0}}}}
""")  # fmt: skip
    validated = cli("validate", str(path))
    assert validated.returncode == 0, validated.stderr
    assert "feedforward=squared_relu(power=3.0)" in validated.stdout
    check = write("check.py", f"""
import torch
import ablate

run = ablate.load_experiment({str(path)!r}).run("cubed")
torch.manual_seed(0)
ffn = ablate.build_model(run.spec.model, 50, 50).encoder.layers[0].feed_forward
for parameter in ffn.parameters():
    torch.nn.init.normal_(parameter)
x = torch.randn(2, 5, run.spec.model.d_model)
w1, b1, w2, b2 = ffn.w_1.weight, ffn.w_1.bias, ffn.w_2.weight, ffn.w_2.bias
torch.testing.assert_close(ffn.eval()(x), torch.relu(x @ w1.T + b1) ** 3 @ w2.T + b2)
print("ok")
""")  # fmt: skip
    done = subprocess.run([sys.executable, str(check)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
