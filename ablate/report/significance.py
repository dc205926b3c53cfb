"""Is a BLEU difference real? Intervals over seeds and test sentences, and sacreBLEU's paired tests.

`delta_interval` gives a 95% confidence interval for ΔBLEU, a variant's mean BLEU over its seeds
minus the baseline's, that covers both sources of chance a reader cares about:

- seed to seed: another seed gives another model. The variance of each arm's mean is its
  per-seed BLEUs' sample variance over its number of seeds;
- test-set sampling: other sentences give other scores. Its variance is that of the difference
  under paired bootstrap resampling of the test sentences (Koehn 2004): one resample of sentence
  indices for both arms, each seed's corpus BLEU recomputed from its summed n-gram statistics.

The interval is ΔBLEU ± t(ν) √(sum of the three variances). ν is Welch-Satterthwaite's, capped at
2·(s − 1), the degrees of freedom of a seed variance pooled over two arms of s seeds, s the smaller
arm's count (`seed_df`). Welch-Satterthwaite alone reads ~1,000 degrees of freedom into the test-set
term whenever a seed variance happens to come out small, which with 2 or 3 seeds it often does: in
ablate.report.calibration's simulation its 95% interval covered the true difference in 88% of
experiments with 3 seeds against 2 (seed sds 0.2 and 1.1), 93.5% with 2 a side; capped, every cell
covers at least 94.9% (docs/reports.md has the table). The seed level uses Student's t rather than a
bootstrap over seeds: with 2 to 5 seeds a percentile bootstrap is over-confident (in
tests/test_significance.py's simulation of equal arms, 3 seeds a side, it covered 0 in 259 of 300
trials, 86%, instead of 95%). With fewer than 2 seeds in an arm the seed level cannot be estimated:
the interval is then test-set sampling alone and says so, and no verdict is drawn from it
(ablate.report.decide), unless the experiment declares a seed spread to borrow (`Spread`).

`paired_test` is sacreBLEU's PairedTest (bootstrap or approximate randomisation), for p-values.

`seeds_needed` is the power analysis for a row whose interval includes 0: how many seeds per arm a
two-sample t-test needs to resolve a difference of the measured size at the measured seed spread.
"""

from __future__ import annotations

import functools
import hashlib
import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

ALPHA, POWER = 0.05, 0.8
MAX_SEEDS = 1000  # a power analysis that needs more says so instead of a number

K = TypeVar("K")
Scorer = Callable[[np.ndarray], np.ndarray]  # summed statistics (M, K) -> one corpus score each (M,)


def t_ppf(q: Any, df: Any) -> Any:
    """scipy.stats.t.ppf(q, df), computed as scipy.stats computes it (scipy.special.stdtrit), without importing
    scipy.stats: that import takes about 2 s of a core, in every report and every sweep's table
    (tests/test_significance.py holds the two equal)."""
    from scipy.special import stdtrit

    return stdtrit(df, q)


def t_sf(x: Any, df: Any) -> Any:
    """scipy.stats.t.sf(x, df), computed as scipy.stats computes it (scipy.special.stdtr at -x)."""
    from scipy.special import stdtr

    return stdtr(df, np.negative(x))


@dataclass(frozen=True)
class Interval:
    """ΔBLEU with its confidence interval; `seeds`: whether seed-to-seed variance is in it."""

    delta: float
    low: float
    high: float
    seeds: bool
    df: float  # degrees of freedom of the t quantile
    level: float = 0.95  # its confidence level: low, high = delta ∓ t(0.5 + level/2; df)·se
    # the variance of delta from the test sentences, the reference's seeds and the system's (0 where not counted)
    terms: tuple[float, float, float] = (0.0, 0.0, 0.0)
    borrowed: float | None = None  # the seed sd borrowed for an arm of one seed (Spread), None: each arm's own

    @property
    def decidable(self) -> bool:
        """Whether a verdict about the architecture may read this interval: it counts seed-to-seed variance."""
        return self.seeds

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def se(self) -> float:
        """The standard error of delta: the root of its variances, or from the half-width and its t quantile."""
        if any(self.terms):
            return math.sqrt(sum(self.terms))
        if self.high == self.low:
            return 0.0
        return (self.high - self.low) / 2 / float(t_ppf(0.5 + self.level / 2, self.df))

    def p_value(self) -> float:
        """The two-sided p of delta = 0 under the interval's t distribution: 2·P(T_df > |delta| / se)."""
        if self.se == 0:
            return 0.0 if self.delta else 1.0
        return float(2 * t_sf(abs(self.delta) / self.se, self.df))

    def at(self, level: float) -> Interval:
        """The same estimate at another confidence level: delta ∓ t(0.5 + level/2; df)·se."""
        half = float(t_ppf(0.5 + level / 2, self.df)) * self.se
        return replace(self, low=self.delta - half, high=self.delta + half, level=level)


def t_interval(delta: float, terms: tuple[float, float, float], dfs: tuple[float, float, float], level: float = 0.95,
               seeds: bool = True) -> Interval:  # fmt: skip
    """delta ± t(0.5 + level/2; ν)·√(sum of the variances), ν by Welch-Satterthwaite from each term's degrees of
    freedom; a term with 0 degrees of freedom is not counted."""
    kept = [(v, d) for v, d in zip(terms, dfs, strict=True) if d > 0]
    variance = sum(v for v, _ in kept)
    counted = tuple(v if d > 0 else 0.0 for v, d in zip(terms, dfs, strict=True))
    if variance == 0:
        return Interval(delta, delta, delta, seeds, float("inf"), level, counted)
    df = variance**2 / sum(v**2 / d for v, d in kept if v > 0)
    half = float(t_ppf(0.5 + level / 2, df)) * variance**0.5
    return Interval(delta, delta - half, delta + half, seeds, df, level, counted)


def bleu_statistics(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool) -> np.ndarray:
    """Each sentence's BLEU sufficient statistics (N, K): lengths, matched and total n-grams (sacreBLEU's, as the
    worker keeps them beside the hypotheses: ablate.bleu_statistics)."""
    from ablate.bleu_statistics import References

    return References(references, lowercase).count(hypotheses)


def length_ratio(stats: np.ndarray) -> np.ndarray:
    """Each seed's hypothesis length over its reference length, from statistics (S, N, K): sacreBLEU's `ratio`.

    Below 1, BLEU's brevity penalty multiplies the score by exp(1 - 1/ratio): 0.90 costs 11% of it.
    """
    sums = stats.sum(1)  # (S, K): sacreBLEU's statistics start with the hypothesis's and the reference's length
    return sums[:, 0] / sums[:, 1]


def corpus_bleu(sums: np.ndarray) -> np.ndarray:
    """(M, 10) summed statistics -> (M,) corpus BLEU, as sacreBLEU computes it (its bootstrap does the same;
    lowercasing acts on the statistics, not on their score): sacreBLEU's `compute_bleu` (4-grams, its default `exp`
    smoothing, no effective order), for every row at once. A bootstrap scores thousands of rows, which sacreBLEU
    does one Python call a row; tests/test_significance.py holds the two equal on rows with every kind of zero.

    Its rule, order by order: precision = correct / total; an order without a match gets 1 / (2^k · total) for
    the k-th such order; an order with no n-grams at all (a corpus of shorter sentences) and every order after it
    get precision 0, which sacreBLEU's floored log (−9,999,999,999) turns into a score of 0. No match at any
    order scores 0. The brevity penalty is exp(1 − ref/sys) when the hypotheses are shorter, 0 when empty."""
    sums = np.asarray(sums, dtype=np.float64)
    sys_len, ref_len, correct, total = sums[:, 0], sums[:, 1], sums[:, 2:6], sums[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        counted = np.cumprod(total > 0, axis=1).astype(bool)  # the orders before the first without n-grams
        unmatched = (correct == 0) & counted
        smoothed = 100.0 / (2.0 ** np.cumsum(unmatched, axis=1) * total)
        precision = np.where(counted, np.where(unmatched, smoothed, 100.0 * correct / total), 0.0)
        logs = np.where(precision > 0, np.log(precision), -9999999999.0)
    mean_log = (((logs[:, 0] + logs[:, 1]) + logs[:, 2]) + logs[:, 3]) / 4  # sacreBLEU's order of summation
    return np.where(correct.any(axis=1), bp * np.exp(mean_log), 0.0)


def delta_interval(baseline: np.ndarray, system: np.ndarray, score: Scorer, level: float = 0.95,
                   resamples: int = 1000, seed: int = 12345, spread: Spread | None = None) -> Interval:  # fmt: skip
    """The interval of mean(score of system's seeds) - mean(score of baseline's seeds).

    `baseline` (S_b, N, K) and `system` (S_v, N, K): per-seed, per-sentence statistics on the same N
    test sentences; `score` turns statistics summed over sentences into a corpus score; `spread`: a seed sd
    borrowed for an arm of one seed (seed_interval).
    """
    n, k = baseline.shape[1:]
    if system.shape[1:] != (n, k):
        raise ValueError(f"the system's statistics {system.shape[1:]} do not match the baseline's {(n, k)}")
    full_b, full_v = score(baseline.sum(1)), score(system.sum(1))  # (S_b,), (S_v,)
    delta = float(full_v.mean() - full_b.mean())
    resampled = _resampled(system, score, resamples, seed) - _resampled(baseline, score, resamples, seed)
    return seed_interval(delta, float(np.var(resampled, ddof=1)), n, full_b, full_v, level, spread)


_RESAMPLED: dict[tuple, np.ndarray] = {}  # see _resampled


def _resampled(stats: np.ndarray, score: Scorer, resamples: int, seed: int) -> np.ndarray:
    """(R,) an arm's mean score on each of `resamples` bootstrap resamples of its N sentences (S, N, K); the same
    resamples for every arm of a seed, so that the difference is paired. Kept for the process: a report compares
    every row, at every budget point, with the same baseline."""
    key = (hashlib.sha256(stats.tobytes()).hexdigest(), stats.shape, score, resamples, seed)
    if key not in _RESAMPLED:
        if len(_RESAMPLED) >= 256:  # a report holds a few dozen arms; a simulation would hold thousands
            _RESAMPLED.clear()
        n, k = stats.shape[1:]
        sums = np.einsum("rn,snk->rsk", _weights(n, resamples, seed), stats)  # (R, S, K)
        _RESAMPLED[key] = score(sums.reshape(-1, k)).reshape(resamples, -1).mean(1)
    return _RESAMPLED[key]


@functools.lru_cache(maxsize=8)
def _weights(n: int, resamples: int, seed: int) -> np.ndarray:
    """(R, N) how often each of N sentences is drawn in each resample: one draw for every arm of a report (drawing
    them took 20 ms an arm, most of a report's bootstrap). Read only, as it is shared."""
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1 / n), size=resamples).astype(np.float64)
    weights.flags.writeable = False
    return weights


@dataclass(frozen=True)
class Spread:
    """A seed sd declared for arms of one seed (an experiment's `seed_sd:`): `sd` BLEU, estimated with `df` degrees
    of freedom (inf for a number taken as known), from `source` (the experiment it was pooled over, or 'declared')."""

    sd: float
    df: float
    source: str

    def describe(self) -> str:
        df = "" if math.isinf(self.df) else f", {self.df:g} df"
        return f"seed sd {self.sd:.2f} borrowed ({self.source}{df})"


def df_cap(s_b: int, s_v: int) -> float:
    """The most degrees of freedom the t quantile may have with `s_b` and `s_v` seeds an arm: 2·(s − 1), s the smaller
    count, those of a seed variance pooled over two arms of s seeds (docs/reports.md: why)."""
    return 2.0 * (min(s_b, s_v) - 1)


def seed_df(terms: np.ndarray | tuple, dfs: tuple[float, float, float], cap: float) -> np.ndarray | float:
    """Welch-Satterthwaite's degrees of freedom of the sum of the variance `terms` (test, reference, system; arrays
    for many experiments at once), each with its own `dfs`, capped at `cap`: seed_interval's rule."""
    v = [np.asarray(t, dtype=np.float64) for t in terms]
    total = v[0] + v[1] + v[2]
    parts = sum(np.divide(x**2, d, out=np.zeros_like(total), where=(x > 0)) for x, d in zip(v, dfs, strict=True)
                if d > 0)  # fmt: skip
    ws = np.divide(total**2, parts, out=np.full_like(total, np.inf), where=parts > 0)
    out = np.minimum(ws, cap)
    return float(out) if out.ndim == 0 else out


def seed_interval(delta: float, v_test: float, sentences: int, baseline: Sequence[float], system: Sequence[float],
                  level: float = 0.95, spread: Spread | None = None) -> Interval:  # fmt: skip
    """The interval of `delta` from its test-set variance (over `sentences`) and each arm's per-seed scores: each
    arm's mean has its seeds' sample variance over their number, with seeds − 1 degrees of freedom, and the t
    quantile's degrees of freedom are Welch-Satterthwaite's capped at 2·(s − 1), s the smaller arm's seeds
    (`seed_df`). An arm of one seed leaves the seed level out (`seeds` False), unless a `spread` is borrowed:
    then both arms' means vary with its sd, and the degrees of freedom are capped at its own."""
    s_b, s_v = len(baseline), len(system)
    if s_b > 1 and s_v > 1:
        terms = (v_test, float(np.var(baseline, ddof=1)) / s_b, float(np.var(system, ddof=1)) / s_v)
        dfs, cap, borrowed = (sentences - 1, s_b - 1, s_v - 1), df_cap(s_b, s_v), None
    elif spread is not None:
        terms = (v_test, spread.sd**2 / s_b, spread.sd**2 / s_v)
        dfs, cap, borrowed = (sentences - 1, spread.df, spread.df), spread.df, spread.sd
    else:
        return t_interval(delta, (v_test, 0.0, 0.0), (sentences - 1, 0, 0), level, False)
    variance = sum(terms)
    if variance == 0:
        return Interval(delta, delta, delta, True, float("inf"), level, terms, borrowed)
    df = seed_df(terms, dfs, cap)
    half = float(t_ppf(0.5 + level / 2, df)) * variance**0.5
    return Interval(delta, delta - half, delta + half, True, df, level, terms, borrowed)


def paired_test(baseline: Sequence[str], systems: dict[str, Sequence[str]], references: Sequence[str],
                lowercase: bool, test: str = "bs") -> dict[str, float]:  # fmt: skip
    """p-value of each system's BLEU difference from the baseline (sacreBLEU's PairedTest, fixed seed).

    Paired bootstrap resampling (`bs`, 1,000 resamples) or approximate randomisation (`ar`, 10,000
    trials). With several seeds, the report concatenates the hypotheses of the seeds both runs
    completed (seed k against seed k): the test covers test-set sampling, not seed variance.
    """
    for name, hyps in [("baseline", baseline), *systems.items()]:
        if len(hyps) != len(references):
            raise ValueError(f"{name}: {len(hyps)} hypotheses for {len(references)} references")
    from ablate.bleu_statistics import References

    count = References(references, lowercase).count
    p = paired_p(count(baseline), {name: count(hyps) for name, hyps in systems.items()}, test)
    return {name: 1.0 if list(systems[name]) == list(baseline) else value for name, value in p.items()}


def paired_p(baseline: np.ndarray, systems: dict[str, np.ndarray], test: str = "bs") -> dict[str, float]:
    """paired_test from each sentence's statistics (N, K), as bleu_statistics counts them: sacreBLEU's PairedTest,
    its resampling and scoring unchanged, handed the statistics where it would count them from the text.

    sacreBLEU counts resampled differences strictly above the observed one (multeval's convention), so a system
    identical to the baseline gets 1/(n+1), which reads as significant: the caller, which has the hypotheses,
    makes that p = 1."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    class Counted(BLEU):
        def __init__(self) -> None:
            super().__init__()
            self.num_refs = 1  # for its signature, which sacreBLEU takes from the references it counts against

        def _extract_corpus_statistics(self, hypotheses: Any, references: Any) -> list[list[int]]:
            return [list(row) for row in hypotheses]  # the sentences' statistics, counted already

    for name, stats in systems.items():
        if stats.shape != baseline.shape:
            raise ValueError(f"{name}: statistics {stats.shape} for the baseline's {baseline.shape}")
    named = [("baseline", baseline), *systems.items()]
    paired = PairedTest([(name, stats.astype(np.int64).tolist()) for name, stats in named], {"BLEU": Counted()}, None,
                        test_type=test)  # fmt: skip
    _, scores = paired()
    return {name: result.p_value for name, result in zip(scores["System"][1:], scores["BLEU"][1:], strict=True)}


def holm(p: dict[K, float], alpha: float = ALPHA, group: Callable[[K], Hashable] | None = None) -> set[K]:
    """The keys whose p-values survive Holm's step-down correction over all of them (family-wise error `alpha`).

    `group`: hypotheses of which at most one a group can be true (a row's "no difference" and "a difference of
    at least the margin"). Each step then divides alpha by the number of groups that still have a hypothesis
    left, the most true hypotheses there can be among them, rather than by the hypotheses left: Shaffer's
    (1986) sharpening of Holm, which keeps the family-wise error at `alpha` under any dependence."""
    survivors = set()
    order = sorted(p, key=p.__getitem__)
    for rank, key in enumerate(order):
        left = order[rank:]
        possibly_true = len(left) if group is None else len({group(k) for k in left})
        if p[key] > alpha / possibly_true:
            break
        survivors.add(key)
    return survivors


def pooled_sd(a: list[float], b: list[float]) -> float | None:
    """The pooled standard deviation over seeds of two arms (of those with two seeds or more); None if neither has."""
    parts = [(len(x) - 1, statistics.variance(x)) for x in (a, b) if len(x) > 1]
    if not parts:
        return None
    return math.sqrt(sum(d * v for d, v in parts) / sum(d for d, _ in parts))


def seeds_needed(delta: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> str:
    """Seeds per arm for a two-sample t-test to detect `delta` at seed spread `sd` (noncentral t power)."""
    from scipy.special import nctdtr

    if delta == 0:
        return f"> {MAX_SEEDS}"
    if sd <= 0:
        return "2"
    for n in range(2, MAX_SEEDS + 1):
        df, shift = 2 * n - 2, abs(delta) / (sd * math.sqrt(2 / n))
        critical = float(t_ppf(1 - alpha / 2, df))
        # P(|T| > critical) for T noncentral t: scipy.stats.nct's cdf is scipy.special.nctdtr, read here without
        # importing scipy.stats; its sf is 1 - cdf to within 1e-15 (tests/test_significance.py)
        if 1.0 - float(nctdtr(df, shift, critical)) + float(nctdtr(df, shift, -critical)) >= power:
            return str(n)
    return f"> {MAX_SEEDS}"


def seeds_for(interval: Interval | None, spread: float | None) -> str | None:
    """A row's 'seeds for 80%': None where there is no interval or it excludes 0 (resolved), or where one seed an
    arm leaves no spread to plan with (`lacks_spread`). A difference of exactly 0, the same hypotheses on both
    sides, needs no spread: no number of seeds resolves it."""
    if interval is None or interval.excludes_zero:
        return None
    if interval.delta == 0:
        return f"> {MAX_SEEDS}"
    return None if spread is None else seeds_needed(interval.delta, spread)


def lacks_spread(interval: Interval | None, spread: float | None) -> bool:
    """An unresolved row that cannot be planned: one seed an arm, and a difference other than 0."""
    return interval is not None and not interval.excludes_zero and interval.delta != 0 and spread is None


def no_spread_note(rows: list[str]) -> str:
    """The report's word on unresolved rows whose arms have one seed each: no spread to plan seeds with."""
    return (f"seeds for 80%: not computed for {'; '.join(rows)}. The interval includes 0, but with one seed an arm "
            "there is no seed spread to plan with; train a second seed (`ablate run <experiment> --seeds 2`) and "
            "the report says how many seeds would resolve the difference.")  # fmt: skip


POWER_NOTE = (
    "seeds for 80%: for a row whose interval includes 0, the seeds per arm a two-sample t-test needs to resolve a "
    f"difference of the measured ΔBLEU at the measured seed spread (pooled sd of both arms) with {POWER:.0%} "
    f"power at α = {ALPHA}. It counts seed variance alone, so it is a lower bound; > {MAX_SEEDS} means the "
    "measured difference is too small to chase. The measured ΔBLEU of an unresolved row is itself uncertain "
    "(post-hoc power), so read the count as an order of magnitude."
)
