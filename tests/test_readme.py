"""The README's commands are what CI and users run."""

import re

from tests.conftest import ROOT


def commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


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
