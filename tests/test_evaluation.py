"""Scoring: hypotheses and references are normalised alike before sacreBLEU sees them; scores by source length."""

import unicodedata

from sacrebleu.metrics import BLEU, CHRF

from ablate.data.corpus import CORPUS, data_dir
from ablate.data.dataset import load_dataset
from ablate.data.spec import DataSpec
from ablate.data.tokenizer import TokenizerSpec
from ablate.train.evaluation import bucket_labels, by_length, score

NFC = ["Ein Mädchen in einem rosa Kleid läuft über die Brücke .", "Zwei Männer spielen Fußball im Grünen ."]


def test_a_reference_written_in_nfd_matches_the_same_words_in_nfc():
    nfd = [unicodedata.normalize("NFD", line) for line in NFC]
    assert nfd != NFC  # the same words, other code points
    assert BLEU().corpus_score(NFC, [nfd]).score < 100  # raw, sacreBLEU would not match them
    result = score(NFC, nfd)
    assert result.bleu == 100.0 and result.chrf == 100.0
    assert score(nfd, NFC).bleu == 100.0


def test_length_buckets_score_each_bucket_as_sacrebleu_scores_its_sentences_alone():
    sources = ["a b", "a b c d e f g h i j k l", "one", "w " * 30 + "x"]  # 2, 12, 1 and 31 words
    hyps = ["Der Hund läuft .", "Eine Frau sitzt auf einer Bank .", "Kinder spielen .", "Ein Mann ."]
    refs = ["Der Hund rennt .", "Eine Frau sitzt auf der Bank .", "Kinder spielen .", "Ein alter Mann ."]
    buckets = by_length(sources, hyps, refs, [10, 20, 30])
    assert list(buckets) == ["1-10", "11-20", "21-30", "31+"] == bucket_labels([10, 20, 30])
    assert [b.sentences for b in buckets.values()] == [2, 1, 0, 1]
    short = [0, 2]
    expected = BLEU().corpus_score([hyps[i] for i in short], [[refs[i] for i in short]]).score
    assert buckets["1-10"].bleu == round(expected, 2)
    assert buckets["1-10"].chrf == round(CHRF().corpus_score([hyps[i] for i in short],
                                                                [[refs[i] for i in short]]).score, 2)  # fmt: skip
    assert buckets["11-20"].bleu == round(BLEU().corpus_score([hyps[1]], [[refs[1]]]).score, 2)
    assert buckets["21-30"].dump() == {"sentences": 0, "bleu": None, "chrf": None}  # as result.json holds it
    assert bucket_labels([5]) == ["1-5", "6+"]


def test_max_train_length_keeps_only_short_sources_and_the_vocabulary():
    tokenizer = TokenizerSpec(vocab_size=300)
    full = load_dataset(DataSpec(max_pairs=400), tokenizer)
    short = load_dataset(DataSpec(max_pairs=400, max_train_length=8), tokenizer)
    pairs = CORPUS.build(CORPUS.parse("multi30k"), root=data_dir(None)).read("train", "en", "de")[:400]
    kept = [src for src, _ in pairs if len(src.split()) <= 8]
    assert 0 < len(kept) < 400 and len(short.train) == len(kept)
    assert short.src_vocab.encode(kept) == [e[0][:-1] for e in short.train]  # those pairs, in order, without </s>
    assert short.src_vocab.tokenizer.get_vocab() == full.src_vocab.tokenizer.get_vocab()  # learned from all 400
    assert len(short.valid) == len(full.valid) and short.tests.keys() == full.tests.keys()  # tests keep every length


def test_lowercase_bleu_keeps_the_standard_cased_bleu_beside_it():
    from types import SimpleNamespace

    from ablate.train.evaluation import Translation, score_tests
    from ablate.train.spec import EvaluationSpec

    hyps = ["ein mann fährt Fahrrad .", "Zwei hunde spielen im schnee ."]
    refs = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."]
    data = SimpleNamespace(tests={"t": [("a b", r) for r in refs]}, tgt_vocab=None)  # no vocabulary: raw text
    scores = score_tests(data, {"t": Translation(hyps, 1.0)}, EvaluationSpec(lowercase=True)).scores["t"]
    assert scores.bleu == round(BLEU(lowercase=True).corpus_score(hyps, [refs]).score, 2) == 100.0
    assert scores.cased_bleu == round(BLEU().corpus_score(hyps, [refs]).score, 2) < 100
    assert "case:lc" in scores.bleu_signature and "case:mixed" in scores.cased_bleu_signature
    standard = score_tests(data, {"t": Translation(hyps, 1.0)}, EvaluationSpec()).scores["t"]
    assert "cased_bleu" not in standard.dump() and standard.bleu == scores.cased_bleu
    from ablate.data.preprocess import behind
    from ablate.data.spec import DataSpec
    from ablate.data.tokenizer import Vocabulary

    # a model trained on lowercased text (data.lowercase) never writes a capital: no cased BLEU, which could only
    # count its missing capitals
    joint = Vocabulary.train(iter(hyps * 10), 200, 1)
    data.tgt_vocab = behind((joint, joint), DataSpec(lowercase=True))[1]
    lowercased = score_tests(data, {"t": Translation(hyps, 1.0)}, EvaluationSpec(lowercase=True)).scores["t"]
    assert lowercased.bleu == scores.bleu and "cased_bleu" not in lowercased.dump()
