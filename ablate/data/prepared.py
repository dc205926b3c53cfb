"""A prepared corpus: the vocabulary learned once, every split encoded once, written as flat token arrays that every
run memory-maps, as fairseq's `fairseq-preprocess` and its MMapIndexedDataset do.

On disk, in ablate's cache (ablate.files.cache_dir), under a key of what the vocabulary is learned from: the corpus's
name, the training split's content (not its path), the languages, `max_pairs`, the text's preprocessing and the
tokenizer's spec:

    corpora/<key>/
        vocabulary/            joint.json, or source.json and target.json
        <split>.<content>/     one folder a split, keyed by its files' content too; renamed into place when whole
            src.bin, tgt.bin   token ids back to back, uint16 under 65,536 types (else int32), each pair as a run reads
                               it (ablate.data.batches.Example): the source then </s>; <s>, the target, </s>
            index.npy          (pairs, 3) int32: source length, target length, source words (for max_train_length)
            meta.json          written last: the counts, the dtype, each file's size and SHA-256
        .lock                  held while anything under the key is written: two sweeps prepare it once

A process that opens a split checks its sizes against meta.json; `verify` also checks the SHA-256 (the sweep does,
once, before its workers start). A split that fails either is prepared again, with one line saying why.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ablate.data.corpus import CORPUS, Corpus, CorpusError, data_dir, sha256
from ablate.data.preprocess import behind, prepare_pairs
from ablate.data.spec import DataSpec
from ablate.data.tokenizer import BOS, EOS, TokenizerSpec, Vocabulary, vocabularies
from ablate.files import cache_dir, write_json

FORMAT = 1  # of the files below; a change of layout or meaning bumps it, and every key with it
FILES = ("src.bin", "tgt.bin", "index.npy")
CHUNK = 20_000  # pairs encoded at once: the tokenizers library encodes a batch on every core
NOT_TEXT = {
    "corpus",
    "source",
    "target",
    "train",
    "valid",
    "test",
    "data_dir",
    "max_pairs",
    "max_len",
    "max_train_length",
}  # fmt: skip   (DataSpec fields that do not change a split's token ids)

Report = Callable[[str, int, int | None], None]  # (what, done so far, total or None): a progress bar's view
Say = Callable[[str], None]  # one line for the user (a rebuilt split, a wait for another process's lock)


def _quiet(*_: Any) -> None:
    pass


class TokenPairs(Sequence[tuple[list[int], list[int]]]):
    """A prepared split's pairs, memory-mapped: the lengths are in memory, a pair's tokens are read when it is asked
    for. `rows`: the pairs kept (a filtered view), in order."""

    def __init__(self, folder: Path, rows: np.ndarray | None = None):
        self.folder = folder
        meta = read_json_safe(folder / "meta.json")
        dtype = np.dtype(meta["dtype"])
        self._src = np.memmap(folder / "src.bin", dtype=dtype, mode="r")
        self._tgt = np.memmap(folder / "tgt.bin", dtype=dtype, mode="r")
        index = np.load(folder / "index.npy", mmap_mode="r")
        src, tgt = np.asarray(index[:, 0]), np.asarray(index[:, 1])
        self._src_end, self._tgt_end = np.cumsum(src, dtype=np.int64), np.cumsum(tgt, dtype=np.int64)
        self.rows = np.arange(len(src), dtype=np.int64) if rows is None else rows
        self.src_lengths, self.tgt_lengths = src[self.rows], tgt[self.rows]
        self.words = np.asarray(index[:, 2])[self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        r = self.rows[i]
        s, t = self._src_end[r], self._tgt_end[r]
        src = self._src[s - self.src_lengths[i] : s]
        tgt = self._tgt[t - self.tgt_lengths[i] : t]
        return src.tolist(), tgt.tolist()

    def where(self, keep: np.ndarray) -> TokenPairs:
        """The pairs where `keep` (a boolean array over these pairs) holds, in order."""
        return TokenPairs(self.folder, self.rows[keep])

    def __reduce__(self) -> tuple:
        return TokenPairs, (self.folder, self.rows)  # pickled by name: never the mapped tokens


@dataclass(frozen=True)
class Prepared:
    """A corpus prepared for one data and tokenizer spec: its folder, vocabularies and splits."""

    folder: Path
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    splits: dict[str, Path]

    def pairs(self, split: str) -> TokenPairs:
        return TokenPairs(self.splits[split])


def prepare(data: DataSpec, tokenizer: TokenizerSpec, report: Report = _quiet, say: Say = _quiet,
            verify: bool = False) -> Prepared:  # fmt: skip
    """The training and validation splits of `data` prepared: opened where they are whole, else made, once, under a
    lock. `verify`: check every file's SHA-256, not only its size."""
    corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))
    for split in (data.train, data.valid):
        corpus.check(split, data.source, data.target)
    folder = cache_dir() / "corpora" / key_of(data, tokenizer, corpus)
    wanted = {split: folder / f"{split}.{content_key(corpus, split, data)}" for split in (data.train, data.valid)}
    if (
        not all(whole(path, verify, say) for path in wanted.values())
        or not vocabulary_file(folder, tokenizer).is_file()
    ):
        with locked(folder, say):
            for split, path in wanted.items():
                if not whole(path, verify, _quiet):  # again under the lock: another process may have made it
                    src_vocab, tgt_vocab = vocabularies_of(corpus, data, tokenizer, folder, report)
                    write_split(corpus, data, split, src_vocab, tgt_vocab, path, report)
            vocabularies_of(corpus, data, tokenizer, folder, report)
    src_vocab, tgt_vocab = behind(vocabularies(None, tokenizer, folder / "vocabulary"), data)
    return Prepared(folder, src_vocab, tgt_vocab, wanted)


def describe(prepared: Prepared) -> str:
    """One line: where a prepared corpus is, what each split holds, its size on disk."""
    parts, size = [], 0
    for split, path in prepared.splits.items():
        meta = read_json_safe(path / "meta.json")
        size += sum(meta["bytes"].values())
        parts.append(f"{split} {meta['pairs']:,} pairs ({meta['tokens']['src.bin']:,} + {meta['tokens']['tgt.bin']:,}"
                     " tokens)")  # fmt: skip
    joint = prepared.src_vocab.tokenizer is prepared.tgt_vocab.tokenizer  # behind preprocessing: two wrappers of one
    vocab = f"vocabulary {len(prepared.src_vocab):,}" + ("" if joint else f" + {len(prepared.tgt_vocab):,}")
    return f"{', '.join(parts)}, {vocab}; {size / 2**20:,.1f} MiB in {prepared.folder}"


# tokenizer.style came after corpora were prepared: at its default, a corpus keeps the key it had
_KEYED_SINCE = {"metaspace": {"style"}}


def key_of(data: DataSpec, tokenizer: TokenizerSpec, corpus: Corpus) -> str:
    """What the vocabulary, and so every split's ids, are made from; the training files by content, not by path."""
    what = {"format": FORMAT, "corpus": data.corpus.name, "content": corpus.fingerprint(data.train, [data.source,
            data.target]), "source": data.source, "target": data.target, "train": data.train,
            "max_pairs": data.max_pairs, "text": data.model_dump(mode="json", exclude=NOT_TEXT),
            "tokenizer": tokenizer.model_dump(mode="json", exclude=_KEYED_SINCE.get(tokenizer.style))}  # fmt: skip
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def content_key(corpus: Corpus, split: str, data: DataSpec) -> str:
    content = corpus.fingerprint(split, [data.source, data.target])
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:12]


def vocabularies_of(corpus: Corpus, data: DataSpec, tokenizer: TokenizerSpec, folder: Path, report: Report
                    ) -> tuple[Vocabulary, Vocabulary]:  # fmt: skip
    """The vocabularies under `folder`, learned first where they are not there: from the training pairs, or from at
    most tokenizer.max_sentences of them, evenly spaced, when the split is larger."""
    target = folder / "vocabulary"
    if vocabulary_file(folder, tokenizer).is_file():
        return behind(vocabularies(None, tokenizer, target), data)
    report("learning the vocabulary", 0, None)
    pairs = prepare_pairs(Sample(corpus, data, tokenizer.max_sentences), data)  # lowercased, tokenised: data.tokenize
    return behind(vocabularies(pairs, tokenizer, target), data)


def vocabulary_file(folder: Path, tokenizer: TokenizerSpec) -> Path:
    """The file whose presence says a prepared corpus's vocabularies were written whole (written last of them)."""
    return folder / "vocabulary" / ("joint.json" if tokenizer.joint else "target.json")


class Sample(Iterable[tuple[str, str]]):
    """The training pairs a vocabulary learns from, read again at each pass (a vocabulary a side reads them twice):
    all of them, or `limit` evenly spaced over the split when it has more. Never the whole split in memory."""

    def __init__(self, corpus: Corpus, data: DataSpec, limit: int):
        self.corpus, self.data, self.limit = corpus, data, limit
        self.total = sum(len(sources) for sources, _ in self._chunks())

    def _chunks(self) -> Iterator[tuple[list[str], list[str]]]:
        d = self.data
        return self.corpus.chunks(d.train, d.source, d.target, d.max_pairs, CHUNK)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        picked = np.ones(self.total, dtype=bool)
        if self.total > self.limit:
            picked[:] = False
            picked[np.linspace(0, self.total - 1, self.limit).round().astype(np.int64)] = True
        start = 0
        for sources, targets in self._chunks():
            for i in np.flatnonzero(picked[start : start + len(sources)]).tolist():
                yield sources[i], targets[i]
            start += len(sources)


def write_split(corpus: Corpus, data: DataSpec, split: str, src_vocab: Vocabulary, tgt_vocab: Vocabulary,
                folder: Path, report: Report) -> None:  # fmt: skip
    """Encodes a split chunk by chunk into a temporary folder beside `folder`, then renames it into place: a process
    killed at any moment leaves no folder of that name, or a whole one; one that fails removes its temporary folder,
    and a disk that fills is one line."""
    for stale in folder.parent.glob(".*.tmp"):  # a killed preparation's, of any split or content: the lock is ours
        shutil.rmtree(stale, ignore_errors=True)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True)
    try:
        _write_split(corpus, data, split, src_vocab, tgt_vocab, tmp, report)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
        _fsync_dir(folder.parent)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, OSError):
            raise CorpusError(f"{folder}: could not be written ({error.strerror or error})") from None
        raise


def _fsync_dir(path: Path) -> None:
    """The rename made durable where the file system can sync a directory; some (network ones) refuse, and the split
    is whole all the same."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_split(corpus: Corpus, data: DataSpec, split: str, src_vocab: Vocabulary, tgt_vocab: Vocabulary,
                 tmp: Path, report: Report) -> None:  # fmt: skip
    """write_split's work: the split's files and their meta.json, last, in `tmp`, each synced to the disk."""
    code, dtype = ("H", "<u2") if max(len(src_vocab), len(tgt_vocab)) <= 1 << 16 else ("i", "<i4")
    digests = {name: hashlib.sha256() for name in FILES}
    src_len, tgt_len, words = array("i"), array("i"), array("i")

    def encoded(sources: list[str], targets: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        return src_vocab.encode(sources), tgt_vocab.encode(targets)

    def write(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> None:
        src, tgt = array(code), array(code)
        for ids in src_ids:
            src.extend(ids)
            src.append(EOS)
        for ids in tgt_ids:
            tgt.append(BOS)
            tgt.extend(ids)
            tgt.append(EOS)
        src_len.extend(len(ids) + 1 for ids in src_ids)
        tgt_len.extend(len(ids) + 2 for ids in tgt_ids)
        for name, block, file in (("src.bin", src, src_file), ("tgt.bin", tgt, tgt_file)):
            if sys.byteorder == "big":
                block.byteswap()
            data_bytes = block.tobytes()
            file.write(data_bytes)
            digests[name].update(data_bytes)

    # The tokenizers library encodes a chunk on every core without the GIL; meanwhile this thread reads the next
    # chunk and writes the one before, in order.
    done = 0
    with open(tmp / "src.bin", "wb") as src_file, open(tmp / "tgt.bin", "wb") as tgt_file, \
            ThreadPoolExecutor(1) as encoder:  # fmt: skip
        pending: tuple[Future, int] | None = None
        for sources, targets in corpus.chunks(split, data.source, data.target, data.max_pairs, CHUNK):
            submitted = encoder.submit(encoded, sources, targets)
            words.extend(len(s.split()) for s in sources)
            if pending is not None:
                write(*pending[0].result())
                done += pending[1]
                report(f"encoding {split}", done, None)
            pending = (submitted, len(sources))
        if pending is not None:
            write(*pending[0].result())
            report(f"encoding {split}", done + pending[1], None)
        for file in (src_file, tgt_file):
            file.flush()
            os.fsync(file.fileno())
    index = np.stack([np.frombuffer(a, dtype=np.int32) for a in (src_len, tgt_len, words)], axis=1)
    with open(tmp / "index.npy", "wb") as file:
        np.save(file, index.astype("<i4"))
        file.flush()
        os.fsync(file.fileno())
    digests["index.npy"].update((tmp / "index.npy").read_bytes())
    meta = {"format": FORMAT, "split": split, "pairs": len(index), "dtype": dtype,
            "tokens": {"src.bin": int(index[:, 0].sum()), "tgt.bin": int(index[:, 1].sum())},
            "bytes": {name: (tmp / name).stat().st_size for name in FILES},
            "sha256": {name: digest.hexdigest() for name, digest in digests.items()}}  # fmt: skip
    write_json(tmp / "meta.json", meta)


def read_json_safe(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CorpusError(f"{path}: unreadable ({error}): delete {path.parent} and prepare it again") from None


def problem(folder: Path, verify: bool) -> str | None:
    """Why a prepared split cannot be read as whole, or None when it can."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return "missing" if not folder.exists() else "meta.json missing"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta["format"] != FORMAT:
            return f"format {meta['format']}, this ablate reads {FORMAT}"
        sizes, sums, dtype = meta["bytes"], meta["sha256"], np.dtype(meta["dtype"])
        tokens = {name: meta["tokens"][name] for name in ("src.bin", "tgt.bin")}
        if not all(isinstance(sizes.get(name), int) and isinstance(sums.get(name), str) for name in FILES) or \
                not all(isinstance(n, int) for n in tokens.values()):  # fmt: skip
            raise ValueError("a size, token count or checksum missing or not a number")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"meta.json unreadable ({error})"
    for name in FILES:
        path = folder / name
        size = path.stat().st_size if path.is_file() else None
        if size != sizes[name]:
            return f"{name} is {'missing' if size is None else f'{size:,} bytes'}, meta.json says {sizes[name]:,}"
    for name, count in tokens.items():
        if sizes[name] != count * dtype.itemsize:
            return f"{name} holds {sizes[name] // dtype.itemsize:,} tokens, its index {count:,}"
    if verify:
        for name in FILES:
            if sha256(folder / name) != sums[name]:
                return f"{name} fails its SHA-256 (corrupted)"
    return None


def whole(folder: Path, verify: bool, say: Say) -> bool:
    """Whether a prepared split can be read; a damaged one is said (write_split replaces it)."""
    why = problem(folder, verify)
    if why is None:
        return True
    if why != "missing":
        say(f"{folder}: {why}: prepared again")
    return False


@contextmanager
def locked(folder: Path, say: Say) -> Iterator[None]:
    """An exclusive lock on `folder` (its .lock file, flock'd: released when the process dies, however it dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{folder}: another process is preparing this corpus; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
