"""Each sentence's BLEU statistics, sacreBLEU's, counted from a file of hypotheses against its references. No torch.

Corpus BLEU is a function of sums over the sentences: the hypotheses' and the references' lengths and, for n = 1 to
4, the n-grams matched and the n-grams there were. Kept a sentence apart (sacreBLEU's segment statistics, as its
paired bootstrap uses them), they are all that a report needs to score any resample of the test set: ΔBLEU
intervals, sacreBLEU's paired tests, verdicts, length ratios (ablate.report.significance). So the worker counts them
after decoding and keeps them beside the hypotheses (hypotheses/<split>.bleu.json, ablate.rundir), with the sha256
of the hypotheses file and of the references they were counted from, and a report reads them without the corpus.
`scripts/backfill_sentence_stats.py` counted them for the runs scored before they were kept.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError

from ablate.files import read_json, write_text
from ablate.record import Record
from ablate.rundir import hypotheses_path, read_hypotheses, statistics_path

# sacreBLEU's order (BLEU._compute_segment_statistics): the lengths, then the matched and the total n-grams
COLUMNS = ["sys_len", "ref_len", *(f"correct_{n}" for n in range(1, 5)), *(f"total_{n}" for n in range(1, 5))]


class BleuStatistics(Record):
    """hypotheses/<split>.bleu.json: a row of `columns` for each line of the hypotheses file, counted from the file
    and against the references whose sha256 it names."""

    hypotheses_sha256: str = Field(description="sha256 of the hypotheses file's bytes")
    references_sha256: str = Field(description="sha256 of the references joined by newlines, as the corpus reads them")
    lowercase: bool = Field(description="evaluation.lowercase: counted with sacreBLEU's lowercase=")
    signature: str = Field(description="sacreBLEU's BLEU signature of the counting (tokenizer, case, its version)")
    columns: list[str]
    rows: list[list[int]]


def read(directory: Path, split: str) -> BleuStatistics | None:
    """hypotheses/<split>.bleu.json, or None where there is none, or it cannot be read as such a record."""
    try:
        return BleuStatistics.model_validate(read_json(statistics_path(directory, split)))
    except (OSError, ValueError, ValidationError):
        return None


def write(directory: Path, split: str, statistics: BleuStatistics) -> None:
    """hypotheses/<split>.bleu.json, atomically: its fields, then a row a line (about 26 bytes a sentence)."""
    data = statistics.dump()
    rows = ",\n".join(json.dumps(row, separators=(",", ":")) for row in data.pop("rows"))
    fields = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in data.items()]
    write_text(statistics_path(directory, split), "{\n" + ",\n".join([*fields, f'  "rows": [\n{rows}\n  ]']) + "\n}\n")


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class References:
    """A test split's references, their n-grams counted once by sacreBLEU's reference cache, for every file of
    hypotheses scored against them. `lowercase`: evaluation.lowercase, as the run was scored."""

    def __init__(self, references: Sequence[str], lowercase: bool):
        from sacrebleu.metrics import BLEU

        self.size, self.lowercase = len(references), lowercase
        self.sha256 = sha256("\n".join(references))  # of the text as read: the file's identity
        self._metric = BLEU(lowercase=lowercase, references=[[nfc(r) for r in references]])

    def count(self, hypotheses: Sequence[str]) -> np.ndarray:
        """(N, 10) each hypothesis's statistics against its reference, in COLUMNS' order, both sides NFC-normalised
        as the run's BLEU was scored (ablate.train.evaluation.score): their sums give its corpus BLEU."""
        if len(hypotheses) != self.size:
            raise ValueError(f"{len(hypotheses)} hypotheses for {self.size} references")
        rows = self._metric._extract_corpus_statistics([nfc(h) for h in hypotheses], None)
        return np.array(rows, dtype=np.float64)

    def of(self, directory: Path, split: str) -> BleuStatistics | None:
        """The statistics of a run's hypotheses of `split` (read as a report reads them); None where it has none."""
        path = hypotheses_path(directory, split)
        if not path.is_file():
            return None
        digest, lines = sha256(path.read_bytes()), read_hypotheses(directory, split) or []
        return BleuStatistics(hypotheses_sha256=digest, references_sha256=self.sha256, lowercase=self.lowercase,
                              signature=str(self._metric.get_signature()), columns=COLUMNS,
                              rows=self.count(lines).astype(np.int64).tolist())  # fmt: skip

    def keep(self, directory: Path, split: str) -> bool:
        """Writes hypotheses/<split>.bleu.json beside a run's hypotheses; False where it has none."""
        statistics = self.of(directory, split)
        if statistics is not None:
            write(directory, split, statistics)
        return statistics is not None


def kept(directory: Path, split: str, lowercase: bool) -> tuple[BleuStatistics | None, str]:
    """The statistics kept beside a run's hypotheses when they are of those hypotheses, counted with that case; else
    None, and why not (a few words naming the file)."""
    file = statistics_path(directory, split)
    name, statistics = file.relative_to(directory), read(directory, split)
    if statistics is None:
        return None, f"its {name} cannot be read" if file.exists() else f"it has no {name}"
    path = hypotheses_path(directory, split)
    if not path.is_file() or statistics.hypotheses_sha256 != sha256(path.read_bytes()):
        return None, f"its {name} is of other hypotheses than {path.name}"
    if statistics.lowercase != lowercase or statistics.columns != COLUMNS:
        return None, f"its {name} was counted otherwise (lowercase {statistics.lowercase}, {statistics.signature})"
    return statistics, ""
