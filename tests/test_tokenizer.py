"""BPE vocabularies: real text back out, trained once and cached."""

import pytest

from ablate.data import tokenizer as tokenizer_module
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.tokenizer import BOS, EOS, PAD, UNK, TokenizerSpec, vocabularies


@pytest.fixture(scope="module")
def pairs():
    corpus = CORPUS.build(CORPUS.parse("multi30k"), root=data_dir())
    return corpus.read("train", "en", "de"), corpus.read("test_2016_flickr", "en", "de")


def test_round_trip_gives_back_the_raw_text(pairs, tmp_path):
    train, test = pairs
    src, tgt = vocabularies(train, TokenizerSpec(vocab_size=8000), tmp_path)
    assert src is tgt and len(src) == 8000
    for texts in ([p[0] for p in train], [p[1] for p in train], [p[1] for p in test]):
        assert src.decode(src.encode(texts)) == texts
    assert [src.tokenizer.id_to_token(i) for i in (PAD, BOS, EOS, UNK)] == ["<pad>", "<s>", "</s>", "<unk>"]


def test_separate_vocabularies_and_cache(pairs, monkeypatch, tmp_path):
    train, _ = pairs
    spec = TokenizerSpec(vocab_size=3000, joint=False)
    src, tgt = vocabularies(train[:5000], spec, tmp_path / "slice")
    assert src is not tgt
    assert "▁Männer" in tgt.tokenizer.get_vocab() and "▁Männer" not in src.tokenizer.get_vocab()

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of loading from the cache")

    monkeypatch.setattr(tokenizer_module.Vocabulary, "train", no_training)
    again, _ = vocabularies(train[:5000], spec, tmp_path / "slice")
    assert again.encode(["Zwei Männer"]) == src.encode(["Zwei Männer"])
    with pytest.raises(AssertionError, match="trained again"):
        vocabularies(train[:5000], spec, tmp_path / "another corpus")


def test_the_cache_follows_the_training_files_content_not_their_paths(tmp_path):
    from ablate.data import dataset
    from ablate.data.dataset import load_dataset
    from ablate.data.spec import DataSpec

    def corpus(root, word: str):
        root.mkdir(exist_ok=True)
        for split in ("train", "val", "test"):
            (root / f"{split}.en").write_text(f"a {word} runs\n" * 50 + "the dog sleeps\n" * 50)
            (root / f"{split}.de").write_text(f"ein {word} läuft\n" * 50 + "der Hund schläft\n" * 50)
        paths = {split: {"en": f"{split}.en", "de": f"{split}.de"} for split in ("train", "val", "test")}
        return DataSpec(corpus={"name": "files", "paths": paths}, test=["test"], data_dir=str(root))

    def vocabulary(spec):
        dataset._load.cache_clear()  # the in-memory cache of this process; the disk cache is what is tested
        return load_dataset(spec, TokenizerSpec(vocab_size=60, min_frequency=1)).src_vocab.tokenizer.get_vocab()

    assert "▁zebra" in vocabulary(corpus(tmp_path / "a", "zebra"))
    assert "▁walrus" in vocabulary(corpus(tmp_path / "a", "walrus"))  # edited in place
    assert "▁okapi" in vocabulary(corpus(tmp_path / "b", "okapi"))  # another directory, the same relative paths


def test_vocabularies_saved_at_once_to_one_path_each_write_a_whole_file(tmp_path):
    """Two sweeps (or two test workers) sharing a cache may train the same vocabulary at once: each save goes through
    a temporary file of its own, so none fails on another's rename and the file left is whole and loads."""
    import os
    import threading

    from ablate.data.tokenizer import Vocabulary

    vocabulary = Vocabulary.train((f"a sentence number {i} of a few words" for i in range(200)), 60, 1)
    path = tmp_path / "joint.json"
    failures: list[BaseException] = []

    def save() -> None:
        try:
            for _ in range(20):
                vocabulary.save(path)
        except BaseException as error:  # the test reports it
            failures.append(error)

    threads = [threading.Thread(target=save) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert Vocabulary.load(path).encode(["a sentence"]) == vocabulary.encode(["a sentence"])
    assert os.listdir(tmp_path) == ["joint.json"]  # no temporary file left behind


def bpe(vocabulary) -> dict:
    """The trained BPE model's state: its vocabulary and its merges, in order."""
    import json

    return json.loads(vocabulary.tokenizer.to_str())["model"]


def test_merges_learns_exactly_that_many_the_model_training_stops_at():
    """tokenizer.merges: N merges, as subword-nmt's -s N; the vocabulary is the specials, the alphabet and a type a
    merge, the model `tokenizers` makes when its vocabulary size stops it after N merges."""
    from ablate.data.tokenizer import SPECIALS, Vocabulary, first_merges

    texts = [f"a sentence number {i} of a few words, said {i % 7} times" for i in range(300)]
    vocabulary = Vocabulary.train(iter(texts), 1, 1, merges=50)  # vocab_size is not used
    model = bpe(vocabulary)
    alphabet = [t for t in model["vocab"] if len(t) == 1]
    assert len(model["merges"]) == 50 and len(vocabulary) == len(SPECIALS) + len(alphabet) + 50
    sized = bpe(Vocabulary.train(iter(texts), len(SPECIALS) + len(alphabet) + 50, 1))
    assert (model["merges"], model["vocab"]) == (sized["merges"], sized["vocab"])
    assert vocabulary.decode(vocabulary.encode(texts[:3])) == texts[:3]
    cut = bpe(Vocabulary(first_merges(vocabulary.tokenizer, 10)))  # BPE is greedy: the first 10 are a 10-merge run
    ten = bpe(Vocabulary.train(iter(texts), len(SPECIALS) + len(alphabet) + 10, 1))
    assert (cut["merges"], cut["vocab"]) == (ten["merges"], ten["vocab"])


def test_merges_stop_early_where_no_pair_is_seen_min_frequency_times():
    """Fewer merges than asked when training runs out of pairs seen min_frequency times: the same model as a
    vocabulary size too large to stop it."""
    from ablate.data.tokenizer import Vocabulary

    texts = [f"a sentence number {i} of a few words" for i in range(300)]
    few = bpe(Vocabulary.train(iter(texts), 1, 250, merges=1000))
    unbounded = bpe(Vocabulary.train(iter(texts), 100_000, 250))
    assert 0 < len(few["merges"]) < 1000 and (few["merges"], few["vocab"]) == (unbounded["merges"], unbounded["vocab"])


def test_the_nominal_size_counts_merges_and_specials():
    assert TokenizerSpec(vocab_size=8000).nominal_size == 8000
    assert TokenizerSpec(vocab_size=8000, merges=10_000).nominal_size == 10_004


def subword_nmt_merges(words: dict[str, int], n: int, min_frequency: int) -> list[tuple[str, str]]:
    """subword-nmt's learn_bpe (Sennrich et al. 2016, Algorithm 1, with `</w>` on a word's last character), written
    from the paper, slowly: every pair counted again at every merge, the best the max of (count, pair)."""
    from collections import Counter
    from itertools import pairwise

    vocab = {(*w[:-1], w[-1] + "</w>"): c for w, c in words.items()}
    merges: list[tuple[str, str]] = []
    for _ in range(n):
        stats: Counter = Counter()
        for word, count in vocab.items():
            for pair in pairwise(word):
                stats[pair] += count
        if not stats or max(stats.values()) < min_frequency:
            break
        best = max(stats, key=lambda pair: (stats[pair], pair))
        merges.append(best)
        merged: dict[tuple[str, ...], int] = {}
        for word, count in vocab.items():
            out, i = [], 0
            while i < len(word):
                if word[i : i + 2] == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + count
        vocab = merged
    return merges


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_learn_merges_learns_subword_nmt_s_merges_in_its_order_ties_included(seed):
    """On random words over a small alphabet (many ties, and words like `aaaa` whose pairs overlap), the merges
    of the incremental learner are those of the algorithm counted afresh at every merge, in the same order."""
    import random
    from collections import Counter

    from ablate.data.tokenizer import learn_merges

    rng = random.Random(seed)
    words = Counter("".join(rng.choice("aabcd") for _ in range(rng.randint(1, 8))) for _ in range(3000))
    expected = subword_nmt_merges(words, 300, 2)
    assert len(expected) > 100
    assert learn_merges(words, 300, 2) == expected
    assert learn_merges(words, 20, 2) == expected[:20]  # greedy: the first merges of a longer run


def test_style_subword_nmt_cuts_words_at_whitespace_only_and_decodes_to_the_words():
    """Punctuation is a word like any other (no lone `▁` before it, one piece for `&quot;`), the word's last piece
    carries `</w>`, N merges are N, the ids are the specials, the alphabet sorted and the merges' types in order
    (the same on every machine), and decoding joins the words with single spaces for the detokenizer."""
    import json

    from ablate.data.tokenizer import SPECIALS, Vocabulary

    texts = [f"a dog &apos;s ball , number {i} &quot; in {i % 7} parks &quot; ." for i in range(300)]
    nmt = Vocabulary.train(iter(texts), 1, 2, merges=30, style="subword-nmt")
    model = bpe(nmt)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    alphabet = sorted({c for t in texts for w in t.split() for c in [*w[:-1], w[-1] + "</w>"]})
    types = dict.fromkeys([*SPECIALS, *alphabet, *("".join(m) for m in merges)])
    assert len(merges) == 30 and list(model["vocab"]) == list(types)
    assert list(model["vocab"].values()) == list(range(len(nmt)))
    pieces = [nmt.tokenizer.id_to_token(i) for i in nmt.encode(["a dog &quot; , 12 ."])[0]]
    assert pieces[:2] == ["a</w>", "dog</w>"] and "&quot;</w>" in pieces and ",</w>" in pieces and "▁" not in pieces
    assert nmt.decode(nmt.encode(["a  dog &apos;s ball ,   17 ."])) == ["a dog &apos;s ball , 17 ."]
    metaspace = Vocabulary.train(iter(texts), 1, 2, merges=30)
    assert len(metaspace.encode(texts[:1])[0]) > len(nmt.encode(texts[:1])[0])  # a `▁` before each punctuation mark
    assert json.loads(Vocabulary.train(iter(texts), 1, 2, merges=30, style="subword-nmt").tokenizer.to_str()) == (
        json.loads(nmt.tokenizer.to_str())
    )
    sized = Vocabulary.train(iter(texts), len(SPECIALS) + len(alphabet) + 12, 2, style="subword-nmt")
    assert len(sized) == len(SPECIALS) + len(alphabet) + 12 and bpe(sized)["merges"] == model["merges"][:12]
