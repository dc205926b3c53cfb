"""Verdicts on a row's ΔBLEU, and the seeds a sequential design adds where a row is undecided. No torch.

A row, a run against its reference (the baseline), reads one of:

- **equivalent**: two one-sided tests (TOST, Schuirmann 1987) reject ΔBLEU ≤ −margin and ΔBLEU ≥ +margin.
  The margin is the user's: the smallest difference that would matter, declared before looking (an
  experiment's `margin:`, or `--margin`) and printed with every verdict. Tested first: a difference inside the
  margin is no practical difference, even where it is distinguishable from 0.
- **better** / **worse**: the two-sided test of ΔBLEU = 0 rejects.
- **undecided**: neither; more seeds (or a wider margin, declared before looking) would be needed.
- **undecided (1 seed)**: an arm has one seed, so its interval cannot count seed-to-seed variance, and the row is
  not tested, unless the experiment declares a seed spread to borrow (`seed_sd:`, significance.Spread).

Both kinds of test are corrected together over the rows judged at one look (Holm's step-down with Shaffer's
sharpening: at most one of a row's two hypotheses can be true), so that the chance of any false verdict at
that look, better, worse or equivalent, is at most its level.
Each test reads the report's interval (significance.delta_interval: seed-to-seed and test-set variance,
Student's t with Welch-Satterthwaite's degrees of freedom).

**A sequential design** (`ablate run --until-decided --max-seeds N`) looks after every seed. Every run starts
with the experiment's seeds; after each look each undecided row gets one more seed, and so does the reference
when its seeds are the larger part of every undecided row's seed-to-seed variance, until every row is decided or has N
seeds. Stopping at the first decision would make false decisions likelier than α, since every look is another
chance: look k therefore tests at α_k, the increment of an alpha-spending function α·f(n_k / N) at the
information fraction n_k / N (Lan & DeMets 1983; n_k the seeds a row has at look k), so that the α_k sum to
α. By the union bound the chance of any false decision over all the looks is at most α, whatever the
correlation between looks, for a fixed schedule of seeds. The reference's seeds are not quite fixed: whether
it gets one more depends on the rows still undecided, so the bound is not strict there, and `simulate`, which
follows the same rule, measures the rates (docs/reports.md has the table). A group-sequential boundary would
use the correlation between looks to spend less; its derivation assumes normal increments, which a t
statistic from 3 to 5 seeds is not, so ablate keeps the bound that holds without it.

`replay` rebuilds every look from the finished seeds alone: the same results give the same decisions, so a
sweep stopped anywhere (kill -9 included) resumes where its design stands, and the report shows the verdicts
the sweep acted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from ablate.errors import UserError
from ablate.report.significance import ALPHA, Interval, holm, seed_interval, t_sf

K = TypeVar("K")  # a row: a run, or a (run, budget)

BETTER, WORSE, EQUIVALENT, UNDECIDED, NO_VERDICT = "better", "worse", "equivalent", "undecided", "no verdict"
ONE_SEED = "undecided (1 seed)"  # an arm of one seed and no borrowed spread: nothing said about the architecture


def _pocock(t: float, alpha: float) -> float:
    return alpha * math.log(1 + (math.e - 1) * t)


def _obrien_fleming(t: float, alpha: float) -> float:
    from scipy.special import ndtr, ndtri

    # scipy.stats.norm's sf(isf(alpha / 2) / sqrt(t)), computed as it computes them, without importing scipy.stats
    return float(2 * ndtr(-(-ndtri(alpha / 2) / math.sqrt(t)))) if t > 0 else 0.0


# Lan & DeMets's spending functions: the α spent by information fraction t, f(0) = 0, f(1) = α. Pocock's spends
# evenly, so early looks can decide; O'Brien-Fleming's keeps almost all of α for the last look.
SPENDING: dict[str, Callable[[float, float], float]] = {"pocock": _pocock, "obrien_fleming": _obrien_fleming}


@dataclass(frozen=True)
class Design:
    """How rows are judged: the margin of equivalence (BLEU; None: no equivalence verdict), the family-wise error
    α, and for a sequential design the seeds every run starts with, the most a run may have and how α is spent.
    """

    margin: float | None = None
    alpha: float = ALPHA
    first: int | None = None  # sequential: the seeds every run starts with
    max_seeds: int | None = None  # sequential: the most seeds a run may have; None: one look at what there is
    spending: str = "pocock"

    def __post_init__(self) -> None:
        if self.margin is not None and not self.margin > 0:
            raise UserError(f"margin: must be above 0 BLEU, got {self.margin}")
        if not 0 < self.alpha < 0.5:
            raise UserError(f"alpha: must be between 0 and 0.5, got {self.alpha}")
        if self.spending not in SPENDING:
            raise UserError(f"spending: unknown '{self.spending}' (known: {', '.join(SPENDING)})")
        if self.sequential:
            if self.first is None or self.first < 3:
                raise UserError(f"a sequential design starts every run with 3 seeds or more, got {self.first}: with "
                                "2, Welch's t of one degree of freedom an arm is liberal at the small levels of the "
                                "looks (docs/reports.md)")  # fmt: skip
            if self.max_seeds < self.first:
                raise UserError(f"--max-seeds {self.max_seeds} is below the {self.first} seeds every run starts with")

    @property
    def sequential(self) -> bool:
        return self.max_seeds is not None

    @property
    def looks(self) -> int:
        return self.max_seeds - self.first + 1 if self.sequential else 1

    def alpha_at(self, look: int) -> float:
        """The level of look `look` (0 is the first): the spending function's increment there; α for one look."""
        if not self.sequential:
            return self.alpha
        spend, n = SPENDING[self.spending], self.max_seeds
        before = spend((self.first + look - 1) / n, self.alpha) if look else 0.0
        return spend((self.first + look) / n, self.alpha) - before

    def describe(self) -> str:
        margin = f"margin ±{self.margin:g} BLEU" if self.margin is not None else "no margin (no equivalence verdict)"
        if not self.sequential:
            return f"{margin}, α {self.alpha:g}"
        return (f"{margin}, α {self.alpha:g} spent over {self.looks} looks ({self.spending}: "
                f"{', '.join(f'{self.alpha_at(k):.4f}' for k in range(self.looks))}), {self.first} to "
                f"{self.max_seeds} seeds a run")  # fmt: skip


def tost_p(interval: Interval, margin: float) -> float:
    """The p-value of two one-sided tests (Schuirmann 1987): the larger of the one-sided p-values of ΔBLEU ≤ −margin
    and of ΔBLEU ≥ +margin, under the interval's t distribution."""
    if interval.se == 0:
        return 0.0 if abs(interval.delta) < margin else 1.0
    below = t_sf((interval.delta + margin) / interval.se, interval.df)
    above = t_sf((margin - interval.delta) / interval.se, interval.df)
    return float(max(below, above))


def tost(interval: Interval, margin: float, alpha: float) -> bool:
    """Two one-sided tests at level `alpha`, uncorrected: the (1 − 2·alpha) interval lies inside ±margin."""
    return tost_p(interval, margin) < alpha


def judge(intervals: dict[K, Interval], margin: float | None, alpha: float) -> dict[K, str]:
    """Each row's verdict at one look, with the chance of any false verdict among them (better, worse or
    equivalent) at most `alpha`.

    A row has two hypotheses: no difference (its interval's p) and, with a margin, a difference of at least the
    margin (TOST's p). Both kinds are corrected together over the rows, by Holm's step-down with Shaffer's
    sharpening (at most one of a row's two can be true). A row whose TOST hypothesis falls is equivalent (a
    difference inside the margin is no practical difference, even where it is distinguishable from 0); else one
    whose no-difference hypothesis falls is better or worse; else it is undecided. A row whose interval leaves out
    seed-to-seed variance (an arm of one seed, no borrowed spread) is not tested and reads `ONE_SEED`: its interval
    covers the test sentences alone, too narrow for a claim about the architecture."""
    tested = {row: i for row, i in intervals.items() if i.decidable}
    p = {(row, "ΔBLEU = 0"): i.p_value() for row, i in tested.items()}
    if margin is not None:
        p |= {(row, "|ΔBLEU| ≥ margin"): tost_p(i, margin) for row, i in tested.items()}
    rejected = holm(p, alpha, group=lambda key: key[0])
    out = {}
    for row, interval in intervals.items():
        if row not in tested:
            out[row] = ONE_SEED
        elif (row, "|ΔBLEU| ≥ margin") in rejected:
            out[row] = EQUIVALENT
        elif (row, "ΔBLEU = 0") in rejected:
            out[row] = BETTER if interval.delta > 0 else WORSE
        else:
            out[row] = UNDECIDED
    return out


@dataclass(frozen=True)
class Decision:
    """A row's verdict, the look it was reached at and that look's level, the seeds of both arms then, and the
    95% interval of ΔBLEU then (None for a row with no interval)."""

    verdict: str
    look: int
    alpha: float
    seeds: int
    reference_seeds: int
    interval: Interval | None


@dataclass
class Replay:
    """Where a design stands: the rows decided so far (all of them when done) and the seeds each run needs before
    the next look (empty when done)."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    wanted: dict[str, int] = field(default_factory=dict)
    looks: int = 0  # looks taken

    @property
    def done(self) -> bool:
        return not self.wanted


IntervalOf = Callable[[str, int, int], Interval | None]  # (row, its seeds, the reference's seeds) -> ΔBLEU's


def replay(design: Design, rows: Sequence[str], reference: str, have: dict[str, int], interval_of: IntervalOf
           ) -> Replay:  # fmt: skip
    """Every look of `design` that the finished seeds allow (`have`: run -> how many of its first seeds are
    finished); `interval_of` gives a row's interval from its first n seeds and the reference's first m."""
    out = Replay()
    if not design.sequential:
        intervals = {row: interval_of(row, have.get(row, 0), have.get(reference, 0)) for row in rows}
        out.decisions = _decided(design, intervals, 0, have, reference, last=True)
        out.looks = 1
        return out
    seeds = dict.fromkeys(rows, design.first) | {reference: design.first}
    for look in range(design.looks):
        pending = [row for row in rows if row not in out.decisions]
        if not pending:
            break
        need = {run: seeds[run] for run in [reference, *pending]}
        if any(have.get(run, 0) < n for run, n in need.items()):
            out.wanted = need
            return out
        intervals = {row: interval_of(row, seeds[row], seeds[reference]) for row in pending}
        out.decisions |= _decided(design, intervals, look, seeds, reference, last=look == design.looks - 1)
        out.looks = look + 1
        undecided = [row for row in pending if row not in out.decisions]
        for row in undecided:
            seeds[row] += 1
        if (
            undecided
            and seeds[reference] < design.max_seeds
            and all(_reference_limits(intervals[row]) for row in undecided)
        ):
            seeds[reference] += 1
    return out


def _decided(design: Design, intervals: dict[str, Interval | None], look: int, seeds: dict[str, int],
             reference: str, last: bool) -> dict[str, Decision]:  # fmt: skip
    """The rows this look decides (every row at the last look), as Decisions."""
    alpha = design.alpha_at(look)
    scored = {row: i for row, i in intervals.items() if i is not None}
    verdicts = judge(scored, design.margin, alpha) | {row: NO_VERDICT for row in intervals if row not in scored}
    return {row: Decision(verdict, look, alpha, seeds[row], seeds[reference], intervals[row])
            for row, verdict in verdicts.items() if last or verdict != UNDECIDED}  # fmt: skip


def _reference_limits(interval: Interval) -> bool:
    """Whether the reference's seeds are the larger part of a row's seed variance (a reference seed helps most)."""
    _, reference, row = interval.terms
    return reference >= row


# -- simulation: the design's error rates and seeds, from seed spreads like the committed ones -----------------------


@dataclass(frozen=True)
class Simulated:
    """A design's verdicts on rows of a known true ΔBLEU, over many simulated experiments."""

    delta: float
    better: float  # the share of experiments with this verdict
    worse: float
    equivalent: float
    undecided: float
    seeds: float  # the row's mean seeds


def false_verdict(verdict: str, delta: float, margin: float | None) -> bool:
    """Whether a verdict is wrong about a row whose true ΔBLEU is `delta`: better or worse on a difference of the
    other sign or none, equivalent on a difference of the margin or more."""
    if verdict == BETTER:
        return delta <= 0
    if verdict == WORSE:
        return delta >= 0
    return verdict == EQUIVALENT and margin is not None and abs(delta) >= margin


def simulate(design: Design, deltas: Sequence[float], sd: float, test_sd: float, experiments: int = 2000,
             sentences: int = 1000, seed: int = 0) -> tuple[list[Simulated], float, float]:  # fmt: skip
    """Simulated experiments of a baseline and one row for each true ΔBLEU in `deltas`, judged by `design`.

    Each seed's BLEU is its run's true BLEU plus normal seed noise (sd `sd`); each row's ΔBLEU has a test-set
    error of sd `test_sd` (one test set, so the same error at every look), which its interval counts as the
    report does (the bootstrap's variance, with sentences − 1 degrees of freedom). Returns each row's verdict
    shares and mean seeds, the experiments' mean total of seeds (the reference's included), and the share of
    experiments with any false verdict (`false_verdict`) among all their rows: what the design bounds by α."""
    rng = np.random.default_rng(seed)
    cap = design.max_seeds or design.first or 2
    rows = [f"row{i}" for i in range(len(deltas))]
    tally = {row: dict.fromkeys((BETTER, WORSE, EQUIVALENT, UNDECIDED), 0) for row in rows}
    seeds_of = dict.fromkeys(rows, 0)
    truth = dict(zip(rows, deltas, strict=True))
    total, any_false = 0, 0
    for _ in range(experiments):
        base = rng.normal(0.0, sd, cap)
        arms = {row: rng.normal(delta, sd, cap) for row, delta in zip(rows, deltas, strict=True)}
        errors = dict(zip(rows, rng.normal(0.0, test_sd, len(rows)), strict=True))

        def interval_of(row: str, n: int, m: int, arms=arms, base=base, errors=errors) -> Interval:
            delta = float(arms[row][:n].mean() - base[:m].mean() + errors[row])
            return seed_interval(delta, test_sd**2, sentences, base[:m], arms[row][:n])

        result = replay(design, rows, "baseline", dict.fromkeys([*rows, "baseline"], cap), interval_of)
        for row, decision in result.decisions.items():
            tally[row][decision.verdict] += 1
            seeds_of[row] += decision.seeds
        total += sum(d.seeds for d in result.decisions.values()) + max(
            d.reference_seeds for d in result.decisions.values()
        )
        any_false += any(false_verdict(d.verdict, truth[row], design.margin) for row, d in result.decisions.items())
    out = [Simulated(delta, *(tally[row][v] / experiments for v in (BETTER, WORSE, EQUIVALENT, UNDECIDED)),
                     seeds_of[row] / experiments) for row, delta in zip(rows, deltas, strict=True)]  # fmt: skip
    return out, total / experiments, any_false / experiments
