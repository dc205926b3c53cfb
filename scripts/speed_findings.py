"""The speed table of docs/findings.md ("Speed and memory"), from the six converged experiments' committed
results/<name>/speed.json (`ablate bench`): every run but the baseline, its training and beam-search speed against
the baseline with their 95% intervals, and its peak memory; then the baselines' own figures and each bench's rounds.

    python scripts/speed_findings.py        # prints the markdown; tests/test_evidence.py holds findings.md to it
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ("pe", "scaling", "tutorial", "norm", "heads", "table3")


def ratio(r: dict) -> str:
    return f"{r['estimate']:.2f}× [{r['low']:.2f}, {r['high']:.2f}]"


def speeds() -> dict[str, dict]:
    return {name: json.loads((ROOT / "results" / name / "speed.json").read_text()) for name in EVIDENCE}


def table() -> str:
    lines = ["| experiment | run | params | training tok/s vs baseline | beam sent/s vs baseline | peak MiB |",
             "|---|---|--:|--:|--:|--:|"]  # fmt: skip
    for name, speed in speeds().items():
        for run in speed["runs"]:
            if run["ratio"] is None:  # the baseline
                continue
            lines.append(f"| {name} | {run['run']} | {run['params']:,} | {ratio(run['ratio'])} | "
                         f"{ratio(run['beam_ratio'])} | {run['peak_memory_mib']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def baselines() -> str:
    runs = [next(r for r in s["runs"] if r["ratio"] is None) for s in speeds().values()]
    speeds_ = ", ".join(f"{r['tokens_per_s']:,.0f}" for r in runs)
    peaks = ", ".join(f"{r['peak_memory_mib']:.0f}" for r in runs)
    return f"the baselines trained {speeds_} tokens a second, and peaked at {peaks} MiB"


def rounds() -> str:
    parts = []
    for name, s in speeds().items():
        missed = "" if s["reached"] else " (±3% not reached)"
        parts.append(f"{name} {s['rounds']} rounds in {s['seconds']:.0f} s{missed}")
    return "How long each bench took: " + "; ".join(parts) + "."


if __name__ == "__main__":
    print(table(), baselines(), rounds(), sep="\n\n")
