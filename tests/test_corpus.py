"""Corpora: files found, downloaded and verified; every kind of bad input is one clear error."""

import gzip
import shutil
from pathlib import Path

import pytest

from ablate.data import corpus as corpus_module
from ablate.data.corpus import CORPUS, MULTI30K_SHA256, CorpusError, Multi30k, data_dir
from tests.conftest import cli

SHARED = data_dir() / "multi30k"


def multi30k(root: Path) -> Multi30k:
    Multi30k._verified.clear()
    return CORPUS.build(CORPUS.parse("multi30k"), root=root)


def test_reads_the_shared_corpus_with_published_sizes():
    corpus = multi30k(SHARED.parent)
    sizes = {split: len(corpus.read(split, "en", "de")) for split in corpus.splits()}
    assert sizes == {"train": 29000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000,
                     "test_2017_mscoco": 461, "test_2018_flickr": 1071}  # fmt: skip
    src, tgt = corpus.read("train", "en", "de")[0]
    assert src == "Two young, White males are outside near many bushes."
    assert tgt.startswith("Zwei junge weiße Männer")


def test_data_dir_order(monkeypatch, tmp_path):
    monkeypatch.setenv("ABLATE_DATA_DIR", str(tmp_path / "env"))
    assert data_dir(str(tmp_path / "spec")) == tmp_path / "spec"
    assert data_dir(None) == tmp_path / "env"
    monkeypatch.delenv("ABLATE_DATA_DIR")
    assert data_dir(None).parts[-2:] == ("ablate", "data")


def test_download_checks_and_keeps_the_file(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus_module, "MULTI30K_URL", SHARED.as_uri() + "/{name}")
    corpus = multi30k(tmp_path)
    path = corpus.path("val", "en")
    assert path == tmp_path / "multi30k" / "val.en.gz"
    assert corpus_module.sha256(path) == MULTI30K_SHA256["val.en.gz"]
    assert [p.name for p in (tmp_path / "multi30k").iterdir()] == ["val.en.gz"]  # no temporary file left


def test_corrupt_download_leaves_nothing(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with gzip.open(mirror / "val.en.gz", "wt") as f:
        f.write("not the corpus\n")
    monkeypatch.setattr(corpus_module, "MULTI30K_URL", mirror.as_uri() + "/{name}")
    with pytest.raises(CorpusError, match=r"val.en.gz: downloaded file fails its checksum .*nothing was kept"):
        multi30k(tmp_path / "data").path("val", "en")
    assert list((tmp_path / "data" / "multi30k").iterdir()) == []


def test_failed_download_says_what_to_do_offline(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus_module, "MULTI30K_URL", (tmp_path / "nowhere").as_uri() + "/{name}")
    with pytest.raises(
        CorpusError, match=r"missing, and downloading .* failed .* Offline: copy the Multi30k raw files"
    ):
        multi30k(tmp_path).path("train", "de")
    assert list((tmp_path / "multi30k").iterdir()) == []


def test_checksum_mismatch_in_data_dir(tmp_path):
    (tmp_path / "multi30k").mkdir()
    shutil.copy(SHARED / "val.en.gz", tmp_path / "multi30k" / "val.en.gz")
    with open(tmp_path / "multi30k" / "val.en.gz", "ab") as f:
        f.write(b"tampered")
    with pytest.raises(CorpusError, match=r"val.en.gz: checksum mismatch .* delete it and run `ablate data download"):
        multi30k(tmp_path).path("val", "en")


def test_unknown_language_and_split():
    corpus = multi30k(SHARED.parent)
    with pytest.raises(CorpusError, match=r"no language 'xx' \(has en, de, fr, cs\)"):
        corpus.read("train", "en", "xx")
    with pytest.raises(CorpusError, match=r"no split 'dev'"):
        corpus.read("dev", "en", "de")
    with pytest.raises(CorpusError, match=r"split 'test_2017_flickr' has no 'cs' side"):
        corpus.read("test_2017_flickr", "en", "cs")


def test_files_corpus_and_line_count_mismatch(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n")
    with gzip.open(tmp_path / "a.de.gz", "wt") as f:
        f.write("eins\nzwei\n")
    (tmp_path / "b.de").write_text("eins\n")
    spec = {"name": "files", "paths": {"train": {"en": "a.en", "de": "a.de.gz"}, "val": {"en": "a.en", "de": "b.de"}}}
    corpus = CORPUS.build(CORPUS.parse(spec), root=tmp_path)
    assert corpus.read("train", "en", "de") == [("one", "eins"), ("two", "zwei")]
    with pytest.raises(CorpusError, match=r"b.de: ends after line 1, but .*a.en has a line 2: a parallel corpus"):
        corpus.read("val", "en", "de")
    spec["paths"]["test"] = {"en": "missing.en", "de": "b.de"}
    with pytest.raises(CorpusError, match=r"missing.en: no such file \(data.corpus.paths.test.en\)"):
        CORPUS.build(CORPUS.parse(spec), root=tmp_path).read("test", "en", "de")


def test_cli_data_list_and_download(tmp_path):
    listed = cli("data", "list")
    assert listed.returncode == 0 and "multi30k" in listed.stdout and "test_2016_flickr" in listed.stdout
    result = cli("data", "download", "multi30k", "--data-dir", str(SHARED.parent))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(MULTI30K_SHA256)


def test_cli_corpus_error_is_one_line(tmp_path, write):
    path = write("e.yaml", f"name: e\ndata: {{data_dir: {tmp_path / 'empty'}, source: en, target: xx}}\n"
                           "training: {max_steps: 1}\n")  # fmt: skip
    result = cli("run", str(path), "--results", str(tmp_path / "results"))
    assert result.returncode == 2
    assert result.stderr.strip() == "corpus 'multi30k': no language 'xx' (has en, de, fr, cs)"


@pytest.mark.parametrize("block", [1, 2, 5, 64, 1 << 22])
def test_lines_read_a_block_at_a_time_are_pythons_text_mode_lines(tmp_path, block):
    """Against Python's own universal-newline text mode (\\n, \\r\\n and a lone \\r end a line), on random text
    cut into blocks of every size, a block boundary inside a character or a \\r\\n included; a line that is not
    UTF-8 is named by its number as a reader of one line at a time names it."""
    import random

    from ablate.data.corpus import iter_lines, line_blocks

    rng = random.Random(block)
    pieces = ["a", "bc ", "\n", "\r\n", "\r", "ü", "€", " ", "x" * 30]
    for trial in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 50)))
        path = tmp_path / ("t.gz" if trial % 3 == 0 else "t.txt")
        (gzip.open if trial % 3 == 0 else open)(path, "wb").write(text.encode())
        with gzip.open(path, "rt", encoding="utf-8") if trial % 3 == 0 else open(path, encoding="utf-8") as f:
            expected = f.read().split("\n")
        expected = expected[:-1] if expected[-1] == "" else expected
        assert [line for lines in line_blocks(path, block) for line in lines] == expected, (text, block)
        assert list(iter_lines(path)) == expected

        at = rng.randint(0, len(text))  # between two characters
        bad = text[:at].encode() + b"\xff" + text[at:].encode()
        path = tmp_path / "t.txt"
        path.write_bytes(bad)
        number, byte = next((n, line.index(b"\xff")) for n, line in enumerate(bad.split(b"\n"), 1) if b"\xff" in line)
        with pytest.raises(
            CorpusError, match=rf"t.txt: line {number}: not UTF-8 \(invalid start byte at byte {byte}\)"
        ):
            list(line_blocks(path, block))


def test_a_file_of_lone_carriage_returns_is_read_a_block_at_a_time(tmp_path):
    """Lines that end in \\r alone (old Mac text) are cut at their ends as \\n lines are: each block's lines come
    as they are read, not the whole file as one growing line."""
    from ablate.data.corpus import line_blocks

    path = tmp_path / "cr.txt"
    lines = [f"sentence {i} ü" for i in range(5000)]
    path.write_bytes("\r".join(lines).encode() + b"\r")
    blocks = list(line_blocks(path, 1024))
    assert [line for block in blocks for line in block] == lines
    assert len(blocks) > 60 and max(len(block) for block in blocks) < 100
