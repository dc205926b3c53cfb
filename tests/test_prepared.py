"""A prepared corpus (ablate.data.prepared): the token ids and batches of the in-memory path it replaced, bit for bit;
whole or absent after a kill; a damaged file found and prepared again; one preparation for two processes."""

import json
import os
import random
import re
import subprocess
import sys
import time

import pytest
import yaml

import ablate
from ablate.data.batches import batch_indices, bucket, lengths
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.dataset import load_dataset
from ablate.data.prepared import Sample, TokenPairs
from ablate.data.tokenizer import BOS, EOS, Vocabulary
from ablate.train.trainer import updates_of
from tests.conftest import ROOT, cli

# -- the in-memory path as it was before the prepared corpus (ablate 0.x up to issue 75), written out ---------------


def reference_train(data, tokenizer):
    """Training examples as the in-memory path made them: read, a vocabulary learned from every pair, encoded."""
    corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))
    pairs = corpus.read(data.train, data.source, data.target)
    pairs = pairs[: data.max_pairs] if data.max_pairs else pairs
    vocab = Vocabulary.train((text for pair in pairs for text in pair), tokenizer.vocab_size, tokenizer.min_frequency)
    if data.max_train_length is not None:
        pairs = [(s, t) for s, t in pairs if len(s.split()) <= data.max_train_length]
    src = [e.ids for e in vocab.tokenizer.encode_batch([p[0] for p in pairs])]
    tgt = [e.ids for e in vocab.tokenizer.encode_batch([p[1] for p in pairs])]
    encoded = [([*s, EOS], [BOS, *t, EOS]) for s, t in zip(src, tgt, strict=True)]
    return vocab, [e for e in encoded if max(len(e[0]), len(e[1]) - 1) <= data.max_len]


def reference_batches(examples, max_tokens, seed, width=None):
    """batch_indices as it was, on lists of Python ints."""
    rng = random.Random(seed)
    if width is not None:
        buckets = {}
        for i, example in enumerate(examples):
            buckets.setdefault(bucket(example, width), []).append(i)
        batches = []
        for length, members in sorted(buckets.items()):
            if seed is not None:
                rng.shuffle(members)
            rows = max(1, max_tokens // length)
            batches += [members[k : k + rows] for k in range(0, len(members), rows)]
        if seed is not None:
            rng.shuffle(batches)
        return batches
    order = list(range(len(examples)))
    if seed is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i][0]), len(examples[i][1])))
    batches, current, longest = [], [], 0
    for i in order:
        length = max(len(examples[i][0]), len(examples[i][1]))
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches


def reference_updates(examples, spec, epoch, width):
    batches = reference_batches(examples, spec.max_tokens, spec.seed * 100_003 + epoch, width)
    if spec.batch_tokens is None:
        return [[b] for b in batches]
    updates, current, tokens = [], [], 0
    for b in batches:
        current.append(b)
        tokens += sum(len(examples[i][1]) - 1 for i in b)
        if tokens >= spec.batch_tokens:
            updates.append(current)
            current, tokens = [], 0
    return updates + ([current] if current else [])


COMMITTED = ["experiments/smoke.yaml", "experiments/base.yaml", "experiments/converged.yaml",
             "experiments/paper/transformer_tiny.yaml", "experiments/length.yaml"]  # fmt: skip


@pytest.mark.parametrize("path", COMMITTED)
def test_the_prepared_corpus_gives_todays_ids_and_batches(path):
    """Every committed spec's training pairs, vocabulary and first two epochs' updates, at each bucket width its
    precisions give, are what the in-memory path gave: committed runs stay reproducible, and a run resumed across
    the change continues as it would have."""
    spec = ablate.load_experiment(ROOT / path).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    vocab, expected = reference_train(spec.data, spec.tokenizer)
    assert data.src_vocab.tokenizer.to_str() == vocab.tokenizer.to_str()
    assert isinstance(data.train, TokenPairs)
    assert len(data.train) == len(expected)
    assert [data.train[i] for i in range(len(expected))] == expected
    assert [tuple(a.tolist()) for a in lengths(data.train)] == [tuple(a.tolist()) for a in lengths(expected)]
    widths = {spec.training.bucket_width(p) for p in ("fp32", "bf16")}
    for width in sorted(widths, key=str):
        for epoch in (0, 1):
            got = updates_of(data.train, spec.training, epoch, width)
            assert [[b.tolist() for b in u] for u in got] == reference_updates(expected, spec.training, epoch, width)


def test_batches_of_lists_and_of_a_prepared_corpus_agree_without_a_seed():
    examples = [([5] * (1 + i % 37) + [2], [1] + [6] * (1 + (i * 7) % 41) + [2]) for i in range(300)]
    for width in (None, 8):
        got = [b.tolist() for b in batch_indices(examples, 400, None, width)]
        assert got == reference_batches(examples, 400, None, width)


# -- faults and bad input ---------------------------------------------------------------------------------------


def files_corpus(root, pairs=40_000, **splits):
    """A `files` corpus of `pairs` training pairs made of Multi30k's sentences (two joined a line); `splits`: text
    to write in place of a split's files, {name: (en text, de text)}."""
    root.mkdir(parents=True, exist_ok=True)
    multi30k = CORPUS.build(CORPUS.parse("multi30k"), root=data_dir())
    train = multi30k.read("train", "en", "de")
    lines = [(f"{train[i % 29000][0]} {train[(i * 7 + 1) % 29000][0]}", f"{train[i % 29000][1]} "
              f"{train[(i * 7 + 1) % 29000][1]}") for i in range(pairs)]  # fmt: skip
    texts = {
        "train": ("\n".join(p[0] for p in lines) + "\n", "\n".join(p[1] for p in lines) + "\n"),
        "val": ("A dog runs.\nTwo men talk.\n", "Ein Hund rennt.\nZwei Männer reden.\n"),
    } | splits
    for split, (en, de) in texts.items():
        for lang, text in (("en", en), ("de", de)):
            (root / f"{split}.{lang}").write_bytes(text if isinstance(text, bytes) else text.encode())
    paths = {split: {"en": f"{split}.en", "de": f"{split}.de"} for split in texts}
    return root / "e.yaml", paths


def experiment(root, paths, steps=0):
    spec = {"name": "e", "data": {"corpus": {"name": "files", "paths": paths}, "valid": "val", "test": ["val"],
            "data_dir": str(root)}, "tokenizer": {"vocab_size": 400},
            "model": {"d_model": 32, "heads": 2, "d_ff": 64, "encoder_layers": 1, "decoder_layers": 1},
            "training": {"max_steps": max(steps, 1), "max_tokens": 2000, "device": "cpu", "precision": "fp32",
                         "valid_bleu_pairs": 0}, "evaluation": {"beam_size": 1}}  # fmt: skip
    path = root / "e.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def whole_splits(cache):
    return sorted(p.parent.name.split(".")[0] for p in (cache / "corpora").glob("*/*/meta.json"))


def test_a_prepare_killed_at_any_moment_leaves_nothing_read_as_whole(tmp_path):
    """kill -9 while the vocabulary is learned, then while the training split is encoded; the same command then
    prepares the whole corpus, and a run trains on it."""
    spec = experiment(tmp_path, files_corpus(tmp_path, pairs=60_000)[1], steps=2)
    cache = tmp_path / "cache"
    env = os.environ | {"ABLATE_CACHE_DIR": str(cache)}
    for moment in ("learning", "encoding"):
        process = subprocess.Popen([sys.executable, "-m", "ablate.cli", "data", "prepare", str(spec)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if moment == "learning" and list(cache.glob("corpora/*/.lock")):
                break
            if moment == "encoding" and list(cache.glob("corpora/*/.train.*.tmp/src.bin")):
                break
            time.sleep(0.02)
        assert process.poll() is None, f"prepare ended before the {moment} stage could be interrupted"
        process.kill()
        process.wait()
        assert "train" not in whole_splits(cache)  # nothing a later run would read as whole
    result = cli("data", "prepare", str(spec), env={"ABLATE_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    assert "train 60,000 pairs" in result.stdout
    assert whole_splits(cache) == ["train", "val"]
    assert not list(cache.glob("corpora/*/.*.tmp"))  # what the killed preparations left is gone
    run = cli("run", str(spec), "--results", str(tmp_path / "results"), env={"ABLATE_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "results/e/runs/baseline/seed-1/result.json").read_text())["status"] == "completed"


def test_a_truncated_or_corrupted_file_is_found_and_prepared_again(tmp_path):
    spec = experiment(tmp_path, files_corpus(tmp_path, pairs=2000)[1])
    env = {"ABLATE_CACHE_DIR": str(tmp_path / "cache")}
    assert cli("data", "prepare", str(spec), env=env).returncode == 0
    (train,) = (tmp_path / "cache/corpora").glob("*/train.*")
    whole = (train / "src.bin").read_bytes()
    (train / "src.bin").write_bytes(whole[:-100])
    result = cli("data", "prepare", str(spec), env=env)
    assert result.returncode == 0, result.stderr
    assert f"{train}: src.bin is {len(whole) - 100:,} bytes, meta.json says {len(whole):,}: prepared again" in (
        result.stdout + result.stderr)  # fmt: skip
    assert (train / "src.bin").read_bytes() == whole
    flipped = bytearray(whole)
    flipped[10] ^= 0xFF
    (train / "src.bin").write_bytes(bytes(flipped))  # the same size: only the checksum finds it
    result = cli("data", "prepare", str(spec), env=env)
    assert f"{train}: src.bin fails its SHA-256 (corrupted): prepared again" in result.stdout + result.stderr
    assert (train / "src.bin").read_bytes() == whole
    meta = json.loads((train / "meta.json").read_text())
    for damage in ({"bytes": {"tgt.bin": 1}}, {"tokens": None}, {"sha256": {**meta["sha256"], "index.npy": None}}):
        (train / "meta.json").write_text(json.dumps(meta | damage))  # JSON still, but not the meta.json of a split
        result = cli("data", "prepare", str(spec), env=env)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert re.search(rf"{re.escape(str(train))}: meta.json unreadable \(.+\): prepared again", result.stdout
                         + result.stderr), result.stdout + result.stderr  # fmt: skip
        assert json.loads((train / "meta.json").read_text()) == meta and (train / "src.bin").read_bytes() == whole


def test_a_preparation_that_fails_leaves_no_temporary_folder_and_a_full_disk_is_one_line(tmp_path, monkeypatch):
    from ablate.data import prepared
    from ablate.data.corpus import CorpusError

    spec = experiment(tmp_path, files_corpus(tmp_path, pairs=500)[1])
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    run = ablate.load_experiment(spec).runs[0].spec

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepared.np, "save", full)
    with pytest.raises(CorpusError, match=r"train\.\w+: could not be written \(No space left on device\)$"):
        prepared.prepare(run.data, run.tokenizer)
    assert not list((tmp_path / "cache").glob("corpora/*/.*.tmp"))  # the encoded tokens went with it
    assert not whole_splits(tmp_path / "cache")
    monkeypatch.undo()
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    made = prepared.prepare(run.data, run.tokenizer)
    assert len(made.pairs("train")) == 500 and whole_splits(tmp_path / "cache") == ["train", "val"]


def test_two_processes_preparing_one_corpus_prepare_it_once(tmp_path):
    spec = experiment(tmp_path, files_corpus(tmp_path, pairs=40_000)[1])
    env = os.environ | {"ABLATE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "ablate.cli", "data", "prepare", str(spec)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not list((tmp_path / "cache").glob("corpora/*/.lock")):
        time.sleep(0.02)
    second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    assert "encoding train" in outputs[0]
    assert "another process is preparing this corpus; waiting for it" in outputs[1]
    assert "encoding train" not in outputs[1]  # it found the first one's, whole
    assert outputs[0].splitlines()[-1] == outputs[1].splitlines()[-1]


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({"val": (b"fine\n\xff\xfe bad\n", b"gut\nschlecht\n")}, r"val.en: line 2: not UTF-8 \(invalid start byte"),
        ({"val": ("", "")}, r"val.en: no lines: split 'val' of corpus 'files' is empty"),
        ({"val": ("one\ntwo\nthree\n", "eins\nzwei\n")}, r"val.de: ends after line 2, but .*val.en has a line 3"),
    ],
)
def test_bad_corpus_files_are_one_line_naming_the_file_and_the_line(tmp_path, splits, message):
    spec = experiment(tmp_path, files_corpus(tmp_path, pairs=500, **splits)[1])
    for command in (("data", "prepare"), ("run",)):
        result = (
            cli(*command, str(spec), "--results", str(tmp_path / "r"), env={"ABLATE_CACHE_DIR": str(tmp_path)})
            if command == ("run",)
            else cli(*command, str(spec), env={"ABLATE_CACHE_DIR": str(tmp_path)})
        )
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and re.search(message, result.stderr), result.stderr
        assert not list(tmp_path.glob("corpora/*/.*.tmp"))  # a split that failed half-written leaves nothing
    assert not (tmp_path / "r/e/runs/baseline/seed-1/result.json").exists()


def test_a_vocabulary_learns_from_an_evenly_spaced_sample_of_a_large_split(tmp_path):
    _, paths = files_corpus(tmp_path, pairs=1000)
    spec = ablate.load_experiment(experiment(tmp_path, paths)).baseline.spec
    corpus = CORPUS.build(spec.data.corpus, root=tmp_path)
    everything = corpus.read("train", "en", "de")
    sample = Sample(corpus, spec.data, 10)
    assert sample.total == 1000
    assert list(sample) == [everything[i] for i in (0, 111, 222, 333, 444, 555, 666, 777, 888, 999)]
    assert list(sample) == list(sample)  # read again for a vocabulary a side
    assert list(Sample(corpus, spec.data, 5000)) == everything


def test_each_rank_reads_only_its_share_of_each_batch_from_the_map():
    """Data-parallel, rank r of 2 collates sentences r, r + 2, ... of each batch: those pairs are read from the map,
    no others (the two processes' shares together are the batch)."""
    import torch

    from ablate.model.transformer import build_model
    from ablate.train.steps import Pending
    from ablate.train.trainer import Trainer

    spec = ablate.load_experiment(ROOT / "experiments/smoke.yaml").baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)

    class Spy(TokenPairs):
        def __getitem__(self, i):
            self.read.append(int(i))
            return super().__getitem__(i)

    shares = []
    for rank in (0, 1):
        pairs = Spy(data.train.folder, data.train.rows)
        pairs.read = []
        torch.manual_seed(0)
        model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab))
        trainer = Trainer(model, spec.training, spec.model.d_model)
        trainer.rank, trainer.world = rank, 2  # what a placement of rank r of 2 gives, without a process group
        updates = trainer.updates(pairs, 0)
        trainer.position = 1
        trainer._update_at(pairs, updates, Pending(None, float("inf")))
        batch = updates[0][0]
        assert sorted(pairs.read) == sorted(batch[rank::2].tolist())
        shares.append(set(pairs.read))
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(batch.tolist())
