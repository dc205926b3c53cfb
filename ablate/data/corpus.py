"""Parallel corpora, registered by name. Files are read from a data directory, downloaded and checked once.

The data directory is, in order: the spec's `data.data_dir`, the environment's `ABLATE_DATA_DIR`,
or `$XDG_CACHE_HOME/ablate/data` (`~/.cache/ablate/data` when XDG_CACHE_HOME is not set). A corpus keeps
its files in a folder of its own name inside it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from ablate.errors import SpecValueError, UserError
from ablate.files import cache_dir, umask_mode, write_json
from ablate.registry import Part, PartParams, slot


class CorpusError(UserError):
    """A missing, corrupt or mismatched corpus file."""


def data_dir(configured: str | None = None) -> Path:
    if configured:
        return Path(configured).expanduser()
    if os.environ.get("ABLATE_DATA_DIR"):
        return Path(os.environ["ABLATE_DATA_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ablate" / "data"


class Corpus(Part):
    """Base: sentence-aligned text, one file per split and language."""

    def __init__(self, root: Path):
        self.root = root

    def languages(self) -> list[str]:
        raise NotImplementedError

    def splits(self) -> list[str]:
        raise NotImplementedError

    def path(self, split: str, language: str) -> Path:
        """The file of one side of a split, present and verified."""
        raise NotImplementedError

    def check(self, split: str, source: str, target: str) -> None:
        for language in (source, target):
            if language not in self.languages():
                raise CorpusError(f"corpus '{self.name}': no language '{language}' (has {', '.join(self.languages())})")
        if split not in self.splits():
            raise CorpusError(f"corpus '{self.name}': no split '{split}' (has {', '.join(self.splits())})")

    def read(self, split: str, source: str, target: str) -> list[tuple[str, str]]:
        """Sentence pairs of a split; both sides must have the same number of lines."""
        return list(self.stream(split, source, target))

    def stream(self, split: str, source: str, target: str, limit: int | None = None) -> Iterator[tuple[str, str]]:
        """The pairs of a split one at a time, at most `limit`, the whole split never in memory. A line that is not
        UTF-8, sides of unequal lengths and an empty split are one-line errors naming the file and the line."""
        for sources, targets in self.chunks(split, source, target, limit):
            yield from zip(sources, targets, strict=True)

    def chunks(self, split: str, source: str, target: str, limit: int | None = None, size: int = 10_000
               ) -> Iterator[tuple[list[str], list[str]]]:  # fmt: skip
        """The pairs of a split `size` at a time, as (sources, targets), at most `limit` in all; the errors of
        `stream`, which reads them so."""
        self.check(split, source, target)
        src_path, tgt_path = self.path(split, source), self.path(split, target)
        src, tgt = iter_lines(src_path), iter_lines(tgt_path)
        count = 0
        while limit is None or count < limit:
            want = size if limit is None else min(size, limit - count)
            sources, targets = list(islice(src, want)), list(islice(tgt, want))
            if len(sources) != len(targets):
                short, long = (tgt_path, src_path) if len(sources) > len(targets) else (src_path, tgt_path)
                n = count + min(len(sources), len(targets))
                raise CorpusError(f"{short}: ends after line {n}, but {long} has a line {n + 1}: "
                                  "a parallel corpus needs one line per pair")  # fmt: skip
            if sources:
                yield sources, targets
            count += len(sources)
            if len(sources) < want:
                break
        if count == 0:
            raise CorpusError(f"{src_path}: no lines: split '{split}' of corpus '{self.name}' is empty")

    def fingerprint(self, split: str, languages: list[str]) -> list[tuple[str, int, str]]:
        """(language, size, SHA-256) of each side of a split: what its text is, whatever its path."""
        return [(lang, (path := self.path(split, lang)).stat().st_size, content_sha256(path)) for lang in languages]

    def present(self, split: str, language: str) -> bool:
        """Whether one side of a split is on disk, fetching nothing and making no folder (a report reads the test
        references only where they are). A corpus that downloads in `path` answers without calling it."""
        try:
            self.path(split, language)
        except CorpusError:
            return False
        return True


CORPUS = slot("corpus", Corpus, "the parallel corpus to train and test on")


def iter_lines(path: Path) -> Iterator[str]:
    """The lines of a text file (plain or .gz) without their ends, as Python's text mode splits them (at \\n, \\r\\n
    and a lone \\r), read in binary so that a line that is not UTF-8 is named by its number."""
    return chain.from_iterable(line_blocks(path))


def line_blocks(path: Path, block: int = 1 << 22) -> Iterator[list[str]]:
    """`iter_lines`'s lines, a list of them for every `block` bytes read: decoded a block at a time (a newline byte
    never falls inside a UTF-8 character), line by line only to name the line that is not UTF-8. A file whose lines
    end in a lone \\r is read a block at a time too."""
    opener: Callable = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            before, into, rest = 0, 0, b""  # lines ended before; bytes of the line read so far; the bytes after the cut
            while True:
                data = f.read(block)
                if data:
                    data = rest + data  # cut after the last line end, a \r only where no \n can follow it
                    cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
                    raw, rest = data[:cut], data[cut:]
                    if not raw:
                        continue
                else:
                    raw, rest = rest, b""  # the last line, without a newline
                    if not raw:
                        return
                yield _decoded(raw, path, before, into)
                ended = raw.rfind(b"\n") + 1  # lines are numbered at \n, as sed and a binary reader number them
                before, into = before + raw.count(b"\n"), len(raw) - ended + (0 if ended else into)
    except (OSError, EOFError) as error:
        raise CorpusError(f"{path}: cannot read: {error}") from None


def _decoded(raw: bytes, path: Path, before: int, into: int) -> list[str]:
    """`raw`'s lines; `before` lines ended before it and its first line began `into` bytes earlier."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, before + 1):
            try:
                (line + b"\n" if number - before < len(lines) else line).decode("utf-8")  # as a line reads it
            except UnicodeDecodeError as error:
                why = f"{error.reason} at byte {error.start + (into if number == before + 1 else 0)}"
                raise CorpusError(f"{path}: line {number}: not UTF-8 ({why})") from None
        raise
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if "\r" in text:  # a line's \r\n end, then a lone \r splits it
        lines = [part for line in lines for part in (line[:-1] if line.endswith("\r") else line).split("\r")]
    return lines


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_sha256(path: Path) -> str:
    """sha256(path), remembered in the cache under the file's identity (path, size, modification time, inode), as
    git's index remembers what it hashed: a corpus of gigabytes is hashed once, not by every process that opens it.
    A file edited in place gets a new modification time, and so a new hash."""
    stat = path.stat()
    identity = [str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino]
    memo = cache_dir() / "fingerprints" / f"{hashlib.sha256(repr(identity).encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
        if known["identity"] == identity:
            return known["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = sha256(path)
    write_json(memo, {"identity": identity, "sha256": digest})
    return digest


MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d/data/task1/raw/{name}"
MULTI30K_SHA256 = {  # data/task1/raw of github.com/multi30k/dataset at commit a3d2e0d
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}


@CORPUS.register("multi30k")
class Multi30k(Corpus):
    """Multi30k task 1 (Elliott et al. 2016): image captions in en, de, fr, cs; 29,000 training pairs."""

    LANGUAGES: ClassVar[list[str]] = ["en", "de", "fr", "cs"]
    SPLITS: ClassVar[list[str]] = ["train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco",
                                   "test_2018_flickr"]  # fmt: skip
    _verified: ClassVar[set[Path]] = set()

    def __init__(self, root: Path):
        super().__init__(root / "multi30k")

    def languages(self) -> list[str]:
        return self.LANGUAGES

    def splits(self) -> list[str]:
        return self.SPLITS

    def files(self) -> list[str]:
        return list(MULTI30K_SHA256)

    def path(self, split: str, language: str) -> Path:
        name = f"{split}.{language}.gz"
        if name not in MULTI30K_SHA256:
            raise CorpusError(f"corpus 'multi30k': split '{split}' has no '{language}' side")
        path = self.root / name
        if not path.is_file():
            self.download(name)
        if path not in self._verified:
            actual = sha256(path)
            if actual != MULTI30K_SHA256[name]:
                raise CorpusError(
                    f"{path}: checksum mismatch (sha256 {actual[:12]}..., expected {MULTI30K_SHA256[name][:12]}...): "
                    f"delete it and run `ablate data download multi30k`"
                )
            self._verified.add(path)
        return path

    def present(self, split: str, language: str) -> bool:
        return (self.root / f"{split}.{language}.gz").is_file()

    def download(self, name: str) -> Path:
        """Fetches one file into the data directory; a file that fails its checksum is never left behind."""
        target = self.root / name
        url = MULTI30K_URL.format(name=name)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=f".{name}.", delete=False) as tmp:
                partial = Path(tmp.name)
                os.fchmod(tmp.fileno(), umask_mode())
                with urllib.request.urlopen(url, timeout=60) as response:
                    shutil.copyfileobj(response, tmp)
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            if "partial" in locals():
                partial.unlink(missing_ok=True)
            raise CorpusError(
                f"{target}: missing, and downloading {url} failed ({error}). Offline: copy the Multi30k raw files "
                f"(data/task1/raw of github.com/multi30k/dataset) into {self.root}, or point ABLATE_DATA_DIR at a "
                f"directory holding multi30k/"
            ) from None
        actual = sha256(partial)
        if actual != MULTI30K_SHA256[name]:
            partial.unlink(missing_ok=True)
            raise CorpusError(f"{url}: downloaded file fails its checksum (sha256 {actual[:12]}...); nothing was kept")
        partial.replace(target)  # atomic: the file is whole or absent
        self._verified.add(target)
        return target


class FilesParams(PartParams):
    paths: dict[str, dict[str, str]] = Field(
        description="split -> language -> file (plain or .gz); relative paths are relative to the data directory"
    )


@CORPUS.register("files")
class Files(Corpus):
    """Your own parallel text: a file per split and language, one sentence a line, plain or .gz."""

    Params = FilesParams

    def __init__(self, root: Path, paths: dict[str, dict[str, str]]):
        super().__init__(root)
        self.paths = paths

    def languages(self) -> list[str]:
        return sorted({lang for sides in self.paths.values() for lang in sides})

    def splits(self) -> list[str]:
        return list(self.paths)

    def path(self, split: str, language: str) -> Path:
        if language not in self.paths.get(split, {}):
            raise CorpusError(f"corpus 'files': split '{split}' has no '{language}' file")
        path = self.root / Path(self.paths[split][language]).expanduser()
        if not path.is_file():
            raise CorpusError(f"{path}: no such file (data.corpus.paths.{split}.{language})")
        return path


def corpus_rows() -> list[tuple[str, str, str, str]]:
    """(name, languages, splits, description) of every registered corpus, for `ablate data list`."""
    rows = []
    for corpus in CORPUS:
        languages = ", ".join(getattr(corpus, "LANGUAGES", ["(per spec)"]))
        splits = ", ".join(getattr(corpus, "SPLITS", ["(per spec)"]))
        rows.append((corpus.name, languages, splits, corpus.description()))
    return rows


def download(name: str, root: Path) -> list[Path]:
    """Every file of a downloadable corpus, fetched where missing and checked against its checksum."""
    try:
        declared = CORPUS.declaration(name)
        if not hasattr(declared, "files"):
            raise UserError(f"ablate data download: corpus '{name}' is read from your own files (data.corpus.paths "
                            "in a spec); there is nothing to download")  # fmt: skip
        corpus = CORPUS.build(CORPUS.parse(name), root=root)
    except SpecValueError as error:
        raise UserError(f"ablate data download: {error}") from None
    paths = []
    for file in corpus.files():
        split, language, _ = file.split(".")
        paths.append(corpus.path(split, language))  # downloads what is missing and checks every checksum
    return paths
