"""How well the report's ΔBLEU intervals and verdicts are calibrated: a simulation of two-level noise. No torch.

Each simulated experiment has a baseline and one row with a true ΔBLEU. Every seed's BLEU is its arm's true BLEU
plus normal seed noise (each arm its own sd); the row's ΔBLEU on the one test set has a further error of sd
`test_sd`, the spread the paired bootstrap over sentences measures (significance.delta_interval), which the
interval counts as known (the bootstrap's 1,000 resamples). The interval is significance.seed_interval's, built
from the same terms and the same degrees-of-freedom rule (`seed_df`), vectorised over experiments; the verdict is
decide.judge's for one row. Coverage is the share of experiments whose 95% interval holds the true ΔBLEU; a
false verdict is decide.false_verdict's.

    python -m ablate.report.calibration [--experiments N]     # the table of docs/reports.md
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ablate.report.decide import BETTER, EQUIVALENT, UNDECIDED, WORSE, false_verdict
from ablate.report.significance import ALPHA, Spread, df_cap, seed_df, t_ppf, t_sf

SENTENCES = 1000  # test2016's sentences: the test-set term's degrees of freedom are SENTENCES - 1


@dataclass(frozen=True)
class Cell:
    """One setting: seeds of the baseline and the row, their seed sds, the test-set sd of ΔBLEU, the true ΔBLEU."""

    seeds: tuple[int, int]
    sd: tuple[float, float]
    test_sd: float
    delta: float = 0.0


@dataclass(frozen=True)
class Calibration:
    cell: Cell
    coverage: float  # of the 95% interval
    half_width: float  # its median half-width
    verdicts: dict[str, float]  # better, worse, equivalent, undecided: shares of experiments
    false: float  # share of experiments with a false verdict


Cap = Callable[[int, int], float]  # seeds of both arms -> the most degrees of freedom (significance.df_cap)


def welch(s_b: int, s_v: int) -> float:
    """No cap: Welch-Satterthwaite's degrees of freedom alone, the report's rule until 2026-11-27."""
    return math.inf


def intervals(cell: Cell, experiments: int, rng: np.random.Generator, spread: Spread | None = None,
              cap: Cap = df_cap) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """ΔBLEU, its standard error, the t quantile's degrees of freedom and whether seeds are counted, one each per
    simulated experiment (seed_interval's arithmetic, vectorised; `cap` its rule for the degrees of freedom)."""
    (s_b, s_v), (sd_b, sd_v) = cell.seeds, cell.sd
    base = rng.normal(0.0, sd_b, (experiments, s_b))
    row = rng.normal(cell.delta, sd_v, (experiments, s_v))
    delta = row.mean(1) - base.mean(1) + rng.normal(0.0, cell.test_sd, experiments)
    v_test = np.full(experiments, cell.test_sd**2)
    if s_b > 1 and s_v > 1:
        terms = (v_test, base.var(1, ddof=1) / s_b, row.var(1, ddof=1) / s_v)
        df = seed_df(terms, (SENTENCES - 1, s_b - 1, s_v - 1), cap(s_b, s_v))
        seeds = np.ones(experiments, bool)
    elif spread is not None:
        terms = (v_test, np.full(experiments, spread.sd**2 / s_b), np.full(experiments, spread.sd**2 / s_v))
        df = seed_df(terms, (SENTENCES - 1, spread.df, spread.df), spread.df)
        seeds = np.ones(experiments, bool)
    else:
        terms = (v_test, np.zeros(experiments), np.zeros(experiments))
        df = seed_df(terms, (SENTENCES - 1, 0, 0), np.inf)
        seeds = np.zeros(experiments, bool)
    return delta, np.sqrt(terms[0] + terms[1] + terms[2]), np.broadcast_to(df, delta.shape), seeds


def calibrate(cell: Cell, margin: float | None = 1.0, experiments: int = 20_000, seed: int = 0,
              spread: Spread | None = None, alpha: float = ALPHA, cap: Cap = df_cap) -> Calibration:  # fmt: skip
    """Coverage, width and verdicts of the report's interval over `experiments` simulated experiments of `cell`.

    The verdict is decide.judge's for one row: equivalent where TOST rejects at `alpha`, else better or worse where
    the two-sided test of ΔBLEU = 0 does, else undecided; a row without seeds counted is undecided (1 seed)."""
    delta, se, df, seeds = intervals(cell, experiments, np.random.default_rng(seed), spread, cap)
    half = t_ppf(0.975, df) * se
    covered = np.abs(delta - cell.delta) <= half
    p_zero = 2 * t_sf(np.abs(delta) / se, df)
    verdict = np.where(p_zero < alpha, np.where(delta > 0, BETTER, WORSE), UNDECIDED).astype(object)
    if margin is not None:
        p_tost = np.maximum(t_sf((delta + margin) / se, df), t_sf((margin - delta) / se, df))
        verdict[p_tost < alpha] = EQUIVALENT
    verdict[~seeds] = UNDECIDED
    shares = {v: float(np.mean(verdict == v)) for v in (BETTER, WORSE, EQUIVALENT, UNDECIDED)}
    false = float(np.mean([false_verdict(v, cell.delta, margin) for v in verdict]))
    return Calibration(cell, float(covered.mean()), float(np.median(half)), shares, false)


SEEDS = (2, 3, 5, 10)
SEED_SDS = (0.2, 0.5, 1.1)  # the committed arms' seed sds run from 0.2 to 1.1 BLEU
TEST_SDS = (0.26, 0.48)  # and a mean ΔBLEU's test-set sd from 0.26 to 0.48
DELTAS = (0.0, 0.5, 1.0, 2.0)  # no difference, inside the margin, at it, beyond it
UNEQUAL = ((3, 2), (2, 3), (10, 3), (3, 10))  # seeds of arms whose sds differ 5.5-fold (0.2 and 1.1)


def grid(experiments: int = 20_000, cap: Cap = df_cap, seeds: Sequence[int] = SEEDS) -> list[Calibration]:
    """Every cell of docs/reports.md's tables: equal seeds and sds a side at each true ΔBLEU, then arms whose sds
    differ 5.5-fold (0.2 and 1.1, either way round) at unequal seeds and no difference."""
    cells = [Cell((n, n), (sd, sd), test_sd, delta) for n in seeds for sd in SEED_SDS for test_sd in TEST_SDS
             for delta in DELTAS]  # fmt: skip
    cells += [Cell(n, sd, test_sd, 0.0) for n in UNEQUAL for sd in ((0.2, 1.1), (1.1, 0.2)) for test_sd in TEST_SDS]
    return [calibrate(cell, experiments=experiments, seed=i, cap=cap) for i, cell in enumerate(cells)]


def borrowed(spread: Spread, experiments: int = 20_000) -> list[Calibration]:
    """One seed an arm judged with a borrowed spread, where the true seed sd is below, at or above it."""
    cells = [Cell((1, 1), (sd, sd), test_sd, delta) for sd in SEED_SDS for test_sd in TEST_SDS for delta in DELTAS]
    return [calibrate(cell, experiments=experiments, seed=i, spread=spread) for i, cell in enumerate(cells)]


def coverage_table(rows: list[Calibration], old: list[Calibration]) -> str:
    """Coverage of the 95% interval by seeds and seed sds (columns: test sd, the lowest over the true ΔBLEUs, with
    the rule in use and with Welch-Satterthwaite alone) and the median half-width."""
    head = " | ".join(f"test sd {t:g}: now | before | half-width" for t in TEST_SDS)
    lines = [f"| seeds (base, row) | seed sd (base, row) | {head} |", "|---|---|" + "--:|--:|--:|" * len(TEST_SDS)]
    keys = dict.fromkeys((r.cell.seeds, r.cell.sd) for r in rows)
    for seeds, sd in keys:
        cells = []
        for t in TEST_SDS:
            now = [r for r in rows if (r.cell.seeds, r.cell.sd, r.cell.test_sd) == (seeds, sd, t)]
            was = [r for r in old if (r.cell.seeds, r.cell.sd, r.cell.test_sd) == (seeds, sd, t)]
            cells.append(f"{min(r.coverage for r in now):.1%} | {min(r.coverage for r in was):.1%} | "
                         f"{np.median([r.half_width for r in now]):.2f}")  # fmt: skip
        lines.append(f"| {seeds[0]}, {seeds[1]} | {sd[0]:g}, {sd[1]:g} | {' | '.join(cells)} |")
    return "\n".join(lines)


def verdict_table(rows: list[Calibration]) -> str:
    """Each true ΔBLEU's verdicts (the highest false-verdict rate over the test sds, and the share decided right)."""
    lines = ["| seeds a side | seed sd | " + " | ".join(f"ΔBLEU {d:g}: false | right" for d in DELTAS) + " |",
             "|---|---|" + "--:|--:|" * len(DELTAS)]  # fmt: skip
    for n in SEEDS:
        for sd in SEED_SDS:
            cells = []
            for d in DELTAS:
                here = [r for r in rows if r.cell.seeds == (n, n) and r.cell.sd == (sd, sd) and r.cell.delta == d]
                if not here:
                    continue
                right = min(_right(r) for r in here)
                cells.append(f"{max(r.false for r in here):.1%} | {right:.1%}")
            if cells:
                lines.append(f"| {n} | {sd:g} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _right(r: Calibration) -> float:
    """The share of verdicts that are right and decided: equivalent inside the margin, better or worse outside it
    (at the margin itself: better or worse of the true sign)."""
    v, d = r.verdicts, r.cell.delta
    if d == 0 or abs(d) < 1.0:
        return v[EQUIVALENT]
    return v[BETTER] if d > 0 else v[WORSE]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ablate.report.calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20_000, help="simulated experiments a cell")
    parser.add_argument("--borrow", type=float, default=0.45, help="the seed sd borrowed for one-seed arms")
    parser.add_argument("--borrow-df", type=float, default=16, help="its degrees of freedom")
    args = parser.parse_args(argv)
    rows, old = grid(args.experiments), grid(args.experiments, cap=welch)
    print(f"Margin 1.0 BLEU, α {ALPHA}, {args.experiments:,} simulated experiments a cell.\n")
    print(coverage_table(rows, old))
    print(f"\nLowest coverage: {min(r.coverage for r in rows):.1%} now, {min(r.coverage for r in old):.1%} before.\n")
    print(verdict_table(rows))
    spread = Spread(args.borrow, args.borrow_df, "declared")
    print(f"\nOne seed an arm, with a borrowed seed sd of {spread.sd:g} ({spread.df:g} df):\n")
    print(verdict_table_borrowed(borrowed(spread, args.experiments)))


def verdict_table_borrowed(rows: list[Calibration]) -> str:
    head = " | ".join(f"ΔBLEU {d:g}: false | right" for d in DELTAS)
    lines = [f"| true seed sd | test sd | coverage | {head} |", "|--:|--:|--:|" + "--:|--:|" * len(DELTAS)]
    for sd in SEED_SDS:
        for t in TEST_SDS:
            here = [r for r in rows if r.cell.sd == (sd, sd) and r.cell.test_sd == t]
            cells = [f"{r.false:.1%} | {_right(r):.1%}" for r in here]
            lines.append(f"| {sd:g} | {t:g} | {min(r.coverage for r in here):.1%} | {' | '.join(cells)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
