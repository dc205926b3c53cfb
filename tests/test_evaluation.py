"""Scoring: hypotheses and references are normalised alike before sacreBLEU sees them."""

import unicodedata

from sacrebleu.metrics import BLEU

from ablate.evaluation import score

NFC = ["Ein Mädchen in einem rosa Kleid läuft über die Brücke .", "Zwei Männer spielen Fußball im Grünen ."]


def test_a_reference_written_in_nfd_matches_the_same_words_in_nfc():
    nfd = [unicodedata.normalize("NFD", line) for line in NFC]
    assert nfd != NFC  # the same words, other code points
    assert BLEU().corpus_score(NFC, [nfd]).score < 100  # raw, sacreBLEU would not match them
    result = score(NFC, nfd)
    assert result["bleu"] == 100.0 and result["chrf"] == 100.0
    assert score(nfd, NFC)["bleu"] == 100.0
