"""ΔBLEU intervals over seeds and sentences: coverage on synthetic scores with a known answer, and BLEU itself."""

import numpy as np
import pytest

from ablate.report.significance import bleu_statistics, corpus_bleu, delta_interval


def mean_score(sums: np.ndarray) -> np.ndarray:
    """Statistics (value, count) summed over sentences -> the mean per-sentence score."""
    return sums[:, 0] / sums[:, 1]


def arm(rng, sentences: np.ndarray, seeds: int, quality: float, seed_sd: float) -> np.ndarray:
    """(seeds, N, 2): a shared sentence difficulty, a per-seed offset and per-sentence noise."""
    n = len(sentences)
    values = quality + sentences[None] + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, 1, (seeds, n))
    return np.stack([values, np.ones_like(values)], axis=-1)


@pytest.mark.parametrize("seed_sd", [0.05, 0.3])
def test_equal_arms_cover_zero_about_95_percent_of_the_time(seed_sd):
    rng = np.random.default_rng(1)
    covered = 0
    for trial in range(400):
        sentences = rng.normal(0, 0.5, 200)
        a, b = arm(rng, sentences, 3, 0.0, seed_sd), arm(rng, sentences, 3, 0.0, seed_sd)
        interval = delta_interval(a, b, mean_score, resamples=200, seed=trial)
        assert interval.seeds and interval.low < interval.delta < interval.high
        covered += not interval.excludes_zero
    # With 3 seeds a side the t quantile has at most 4 degrees of freedom (seed_df's cap), so the interval errs on
    # the safe side where seed noise is small (all 400 covered at sd 0.05); one that covered less than 93% (3
    # standard errors of 400 trials below 95%) would call equal arms different too often.
    assert covered >= 0.93 * 400, covered


def test_a_percentile_bootstrap_over_three_seeds_would_be_over_confident():
    """Why the seed level takes Student's t: resampling 3 seeds misses far more often than 5% of the time."""
    rng = np.random.default_rng(2)
    covered = 0
    for _ in range(300):
        sentences = rng.normal(0, 0.5, 200)
        a, b = arm(rng, sentences, 3, 0.0, 0.3), arm(rng, sentences, 3, 0.0, 0.3)
        means = []
        for _ in range(200):
            w = np.bincount(rng.integers(0, 200, 200), minlength=200)
            pick_a, pick_b = rng.integers(0, 3, 3), rng.integers(0, 3, 3)
            means.append((b[pick_b, :, 0] @ w).mean() / 200 - (a[pick_a, :, 0] @ w).mean() / 200)
        low, high = np.percentile(means, [2.5, 97.5])
        covered += low <= 0 <= high
    assert covered < 0.9 * 300, covered


def test_a_clearly_better_arm_excludes_zero():
    rng = np.random.default_rng(3)
    sentences = rng.normal(0, 0.5, 300)
    a, b = arm(rng, sentences, 3, 0.0, 0.1), arm(rng, sentences, 3, 1.0, 0.1)
    interval = delta_interval(a, b, mean_score)
    assert interval.excludes_zero and interval.low > 0.5
    assert abs(interval.delta - (b[..., 0].mean() - a[..., 0].mean())) < 1e-12


def test_seed_variance_widens_the_interval_and_one_seed_leaves_it_out():
    rng = np.random.default_rng(4)
    sentences = rng.normal(0, 0.5, 300)
    calm = delta_interval(arm(rng, sentences, 3, 0, 0.0), arm(rng, sentences, 3, 0, 0.0), mean_score)
    noisy = delta_interval(arm(rng, sentences, 3, 0, 2.0), arm(rng, sentences, 3, 0, 2.0), mean_score)
    assert noisy.high - noisy.low > 3 * (calm.high - calm.low)
    single = delta_interval(arm(rng, sentences, 1, 0, 2.0), arm(rng, sentences, 3, 0, 2.0), mean_score)
    assert not single.seeds and single.df == 299  # test-set sampling alone
    with pytest.raises(ValueError, match="do not match"):
        delta_interval(arm(rng, sentences, 2, 0, 0), arm(rng, sentences[:10], 2, 0, 0), mean_score)


def test_bleu_statistics_sum_to_sacrebleus_corpus_bleu():
    from sacrebleu.metrics import BLEU

    rng = np.random.default_rng(5)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "red", "big", "small"]
    refs = [" ".join(rng.choice(words, 8)) for _ in range(50)]
    hyps = [" ".join(w if rng.random() < 0.7 else rng.choice(words) for w in r.split()) for r in refs]
    stats = bleu_statistics(hyps, refs, lowercase=False)
    assert stats.shape[0] == 50
    expected = BLEU().corpus_score(hyps, [refs]).score
    assert corpus_bleu(stats.sum(0, keepdims=True))[0] == pytest.approx(expected, abs=1e-9)
    better = [" ".join([*r.split()[:7], rng.choice(words)]) for r in refs]
    interval = delta_interval(stats[None], bleu_statistics(better, refs, False)[None], corpus_bleu)
    assert interval.delta == pytest.approx(BLEU().corpus_score(better, [refs]).score - expected)
    assert not interval.seeds and interval.excludes_zero


def test_corpus_bleu_is_sacrebleus_score_row_by_row_zeros_and_short_corpora_included():
    """The vectorised score equals sacreBLEU's `_compute_score_from_stats` on random statistics and on each edge
    its rule has: an order without a match (smoothed, the k-th by 2^k), an order without n-grams (it and the
    orders after it count 0), no match at all, empty hypotheses, hypotheses longer and shorter than the reference."""
    from sacrebleu.metrics import BLEU

    rng = np.random.default_rng(3)
    total = rng.integers(0, 400, size=(4000, 4)).cumsum(axis=1)[:, ::-1]  # more 1-grams than 4-grams, as in text
    correct = (total * rng.random((4000, 4))).astype(int)
    correct[rng.random((4000, 4)) < 0.15] = 0  # orders without a match
    total[rng.random(4000) < 0.1, 2:] = 0  # corpora of sentences under 3 words: no 3- or 4-grams
    correct = np.minimum(correct, total)
    correct[rng.random(4000) < 0.05] = 0  # no match at any order
    sys_len = total[:, 0] * (rng.random(4000) < 0.97)  # a few empty outputs
    ref_len = (total[:, 0] * rng.uniform(0.7, 1.3, 4000)).astype(int)
    rows = np.column_stack([sys_len, ref_len, correct, total]).astype(np.float64)
    metric = BLEU()
    expected = np.array([metric._compute_score_from_stats(list(row)).score for row in rows])
    mine = corpus_bleu(rows)
    assert np.abs(mine - expected).max() < 1e-9 * max(1.0, expected.max())
    assert (mine == 0).sum() == (expected == 0).sum() > 100  # the zeros are the same rows, and there are many
    assert ((mine > 0) & (rows[:, 2:6] == 0).any(axis=1)).sum() > 100  # and smoothed orders were scored


def test_length_ratio_is_sacrebleus_ratio_and_sets_its_brevity_penalty():
    from sacrebleu.metrics import BLEU

    from ablate.report.significance import length_ratio

    rng = np.random.default_rng(7)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "red", "big", "small"]
    refs = [" ".join(rng.choice(words, rng.integers(4, 12))) for _ in range(40)]
    seeds = [[" ".join(r.split()[: max(1, len(r.split()) - int(rng.integers(0, k)))]) for r in refs] for k in (1, 3, 5)]
    ratios = length_ratio(np.stack([bleu_statistics(h, refs, False) for h in seeds]))
    for hyps, ratio in zip(seeds, ratios, strict=True):
        score = BLEU().corpus_score(hyps, [refs])
        assert ratio == pytest.approx(score.sys_len / score.ref_len)
        assert score.bp == pytest.approx(min(1.0, np.exp(1 - 1 / ratio)))
    assert ratios[0] == 1.0 and ratios[0] > ratios[1] > ratios[2]  # seed 1 copies every reference; 3 and 5 cut more


def test_an_arms_resamples_are_scored_once_and_the_interval_is_the_same(monkeypatch):
    """The baseline is resampled for every row it is compared with: its scores are kept, not computed again, and
    the interval is what a fresh computation gives."""
    from ablate.report import significance

    rng = np.random.default_rng(4)
    sentences = rng.normal(0, 0.5, 100)
    base, rows = arm(rng, sentences, 3, 0.0, 0.1), [arm(rng, sentences, 3, q, 0.1) for q in (0.2, 0.5)]
    scored = []

    def counting(sums: np.ndarray) -> np.ndarray:
        scored.append(len(sums))
        return mean_score(sums)

    first = [delta_interval(base, row, counting, resamples=100) for row in rows]
    assert scored.count(300) == 3  # the baseline's 100 resamples of 3 seeds once, each row's once
    monkeypatch.setattr(significance, "_RESAMPLED", {})
    again = [delta_interval(base, row, counting, resamples=100) for row in rows]
    assert [(i.low, i.high) for i in first] == [(i.low, i.high) for i in again]


def test_per_sentence_statistics_are_kept_in_the_cache_and_a_damaged_entry_is_made_again(tmp_path, monkeypatch):
    from ablate.report.results import cached_statistics

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    computed = []

    def compute():
        computed.append(1)
        return np.arange(12, dtype=np.float64).reshape(3, 4)

    first = cached_statistics("refs", "hyps", compute)
    again = cached_statistics("refs", "hyps", compute)
    assert len(computed) == 1 and np.array_equal(first, again)
    assert len(computed) == 1 and cached_statistics("refs", "other hyps", compute) is not None and len(computed) == 2
    for entry in (tmp_path / "bleu-statistics").iterdir():
        entry.write_bytes(b"cut off")
    assert np.array_equal(cached_statistics("refs", "hyps", compute), first) and len(computed) == 3


def test_the_t_and_normal_tails_are_scipy_stats_own_without_importing_it():
    """significance.t_ppf and t_sf, decide's O'Brien-Fleming spending and seeds_for's power read scipy.special as
    scipy.stats does: the same numbers to the last bit (the power's sf to 1e-15, and the same seed counts)."""
    from scipy.stats import nct, norm, t

    from ablate.report.decide import _obrien_fleming
    from ablate.report.significance import seeds_needed, t_ppf, t_sf

    q = np.array([0.5, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995, 1 - 1e-9])
    x = np.array([-30.0, -2.5, -0.0, 0.0, 0.3, 1.96, 4.0, 40.0])
    for df in [1, 2, 3.7, 4, 9.5, 30, 999, 1e6, np.inf]:
        assert np.array_equal(t_ppf(q, df), t.ppf(q, df)) and np.array_equal(t_sf(x, df), t.sf(x, df))
        assert float(t_ppf(0.975, df)) == float(t.ppf(0.975, df))  # scalars as the report passes them
    for alpha in [0.01, 0.05, 0.1]:
        for look in [0.2, 1 / 3, 0.5, 0.8, 1.0]:
            assert _obrien_fleming(look, alpha) == float(2 * norm.sf(norm.isf(alpha / 2) / np.sqrt(look)))
    for df, shift in [(2, 0.5), (4, 2.0), (8, 2.8), (30, 3.1), (98, 1.0)]:
        critical = float(t.ppf(0.975, df))
        ours = 1.0 - nct.cdf(critical, df, shift) + nct.cdf(-critical, df, shift)
        assert abs(ours - (nct.sf(critical, df, shift) + nct.cdf(-critical, df, shift))) < 1e-15

    def scipys(delta, sd, power=0.8, alpha=0.05, most=1000):
        for n in range(2, most + 1):
            df, shift = 2 * n - 2, abs(delta) / (sd * np.sqrt(2 / n))
            critical = float(t.ppf(1 - alpha / 2, df))
            if nct.sf(critical, df, shift) + nct.cdf(-critical, df, shift) >= power:
                return str(n)
        return f"> {most}"

    for delta, sd in [(0.1, 0.3), (0.2, 0.3), (0.5, 0.4), (1.0, 0.3), (0.05, 0.5), (2.0, 0.1)]:
        assert seeds_needed(delta, sd) == scipys(delta, sd), (delta, sd)
