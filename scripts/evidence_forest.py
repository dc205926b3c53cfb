"""The forest plot of the converged evidence for the README: every row of the six converged experiments, from their
committed report tables (results/<name>/report/table.csv), one panel.

    python scripts/evidence_forest.py        # writes docs/evidence.png and docs/evidence.svg
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd

from ablate.report.forest import forest_plot

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ("pe", "scaling", "tutorial", "norm", "heads", "table3")


def main() -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "ablate"
    plt.rcParams["svg.fonttype"] = "none"
    frames = []
    for name in EVIDENCE:
        table = pd.read_csv(ROOT / "results" / name / "report" / "table.csv", dtype={"verdict": object})
        table["run"] = name + ": " + table["run"]
        frames.append(table[["run", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "verdict"]])
    rows = pd.concat(frames, ignore_index=True).astype(object).where(lambda f: f.notna(), None)
    written = forest_plot("The converged evidence", rows, 1.0, None, ROOT / "docs", xlim=(-13.0, 4.5))
    for path in written:
        path.rename(path.with_name(f"evidence{path.suffix}"))
        print(path.with_name(f"evidence{path.suffix}"))


if __name__ == "__main__":
    main()
