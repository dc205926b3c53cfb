"""Is a BLEU difference real? Paired tests on the test set, as sacreBLEU implements them (Koehn 2004).

Each system is compared with the baseline on the same sentences: paired bootstrap resampling
(`bs`, 1,000 resamples) or approximate randomisation (`ar`, 10,000 trials). With several seeds, the
hypotheses of the seeds both runs completed are concatenated (seed k against seed k), so the test
sees each seed's sentences; the seed-to-seed spread itself is what the BLEU std column shows.
"""

from __future__ import annotations

from collections.abc import Sequence


def paired_test(baseline: Sequence[str], systems: dict[str, Sequence[str]], references: Sequence[str],
                lowercase: bool, test: str = "bs") -> dict[str, float]:  # fmt: skip
    """p-value of each system's BLEU difference from the baseline (sacreBLEU's PairedTest, fixed seed)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    for name, hyps in [("baseline", baseline), *systems.items()]:
        if len(hyps) != len(references):
            raise ValueError(f"{name}: {len(hyps)} hypotheses for {len(references)} references")
    named = [("baseline", list(baseline)), *((name, list(hyps)) for name, hyps in systems.items())]
    paired = PairedTest(named, {"BLEU": BLEU(lowercase=lowercase)}, [list(references)], test_type=test)
    _, scores = paired()
    return {name: result.p_value for name, result in zip(scores["System"][1:], scores["BLEU"][1:], strict=True)}
