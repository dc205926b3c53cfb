"""What a report reads: the run directories of an experiment, or the records a sweep holds in memory.

Every file is read through ablate.rundir; torch is never imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ablate.errors import UserError
from ablate.record import RunResult, SpeedRecord
from ablate.rundir import (
    RESULT,
    is_experiment,
    read_config,
    read_diagnostics,
    read_hypotheses,
    read_metrics,
    read_result,
    read_speeds,
    run_dirs,
    seed_dirs,
    summary_order,
)


@dataclass
class JobRecord:
    """One job's files: what it measured, its resolved spec, where its logs are."""

    directory: Path
    result: RunResult
    config: dict[str, Any]
    _hypotheses: dict[str, list[str] | None] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.result.ok

    def hypotheses(self, split: str) -> list[str] | None:
        """The split's translations, read once (the report compares a job with several others)."""
        if split not in self._hypotheses:
            self._hypotheses[split] = read_hypotheses(self.directory, split)
        return self._hypotheses[split]

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.directory)

    def diagnostics(self) -> list[dict[str, Any]]:
        return read_diagnostics(self.directory)


@dataclass
class ExperimentResults:
    name: str
    directory: Path
    runs: dict[str, list[JobRecord]] = field(default_factory=dict)  # run -> its seeds, the baseline first

    @property
    def baseline(self) -> list[JobRecord]:
        return self.runs.get("baseline", [])

    def reference(self, run: str) -> str:
        """The run a row is compared with: the baseline; in a learning-rate sweep, the baseline at the same rate."""
        lr = next((j.result.lr for j in self.runs.get(run, []) if j.result.lr is not None), None)
        if lr is not None:
            for name, jobs in self.runs.items():
                if any(j.result.arm == "baseline" and j.result.lr == lr for j in jobs):
                    return name
        return "baseline"

    def benches(self) -> list[SpeedRecord]:
        """The experiment's benches (`ablate bench`: speed.json, speed.cuda.json), the CPU's first."""
        return read_speeds(self.directory)

    def split(self) -> str | None:
        """The test split the table reports: the first the baseline (or any run) was scored on."""
        for jobs in [self.baseline, *self.runs.values()]:
            for job in jobs:
                if job.result.scores:
                    return next(iter(job.result.scores))
        return None


def bleus(jobs: list[JobRecord], split: str | None) -> list[float]:
    """The split's BLEU of each completed job that scored it."""
    return [bleu for j in jobs if j.ok and (bleu := j.result.bleu(split)) is not None]


def from_records(name: str, directory: Path, records: list[RunResult]) -> ExperimentResults:
    """Results a sweep holds in memory (one record a job, the baseline's first), as if read from files."""
    exp = ExperimentResults(name, directory)
    for record in records:
        exp.runs.setdefault(record.run, []).append(JobRecord(directory, record, {}))
    return exp


def find_experiments(path: Path) -> list[Path]:
    """RESULTS_DIR itself when it holds runs/, else each of its subdirectories that does."""
    if not path.is_dir():
        raise UserError(f"{path}: no such directory")
    if is_experiment(path):
        return [path]
    found = sorted(p for p in path.iterdir() if is_experiment(p))
    if not found:
        raise UserError(f"{path}: no results found (expected <experiment>/runs/<run>/seed-<n>/result.json below it)")
    return found


def load_results(directory: Path) -> ExperimentResults:
    """Every job with a result.json; runs in the order of summary.csv when there is one, the baseline first."""
    runs: dict[str, list[JobRecord]] = {}
    for run_dir in run_dirs(directory):
        for seed_dir in seed_dirs(run_dir):
            if not (seed_dir / RESULT).is_file():
                continue
            result = read_result(seed_dir)  # a record that does not validate: a SpecError naming the field
            if result is None:
                raise UserError(f"{seed_dir}: unreadable result: {RESULT} cannot be read as JSON")
            try:
                config = read_config(seed_dir)
            except (OSError, ValueError, yaml.YAMLError) as error:
                raise UserError(f"{seed_dir}: unreadable result: {error}") from None
            runs.setdefault(run_dir.name, []).append(JobRecord(seed_dir, result, config))
    order = ["baseline", *summary_order(directory)]
    ranked = sorted(runs, key=lambda r: (order.index(r) if r in order else len(order), r))
    name = next((jobs[0].result.experiment for jobs in runs.values() if jobs), None) or directory.name
    return ExperimentResults(name, directory, {r: runs[r] for r in ranked})


class UnreadableReferencesError(UserError):
    """A run's BLEU statistics are not kept, and the test references to count them from are not on disk."""


class SentenceStatistics:
    """Each job's per-sentence BLEU statistics on one test split, read once: those kept beside its hypotheses
    (hypotheses/<split>.bleu.json, ablate.bleu_statistics), or, where it has none of those hypotheses, counted from
    the test references (significance.bleu_statistics).

    The references are read only where they are on disk: a report fetches nothing and makes no folder. They and
    the statistics of each distinct set of hypotheses are kept for the whole process: a report compares the same
    runs again at each budget point and each look of a sequential design. `of` raises UserError, naming the run,
    for a job whose statistics are not kept and whose references cannot be read (UnreadableReferencesError)."""

    def __init__(self, config: dict[str, Any], split: str):
        from ablate.report.significance import corpus_bleu

        self.split, self.lowercase = split, bool(config.get("evaluation", {}).get("lowercase", False))
        corpus = config.get("data", {}).get("corpus", "multi30k")
        self.corpus = corpus if isinstance(corpus, str) else corpus.get("name", "")
        self.score = corpus_bleu
        self._of: dict[Path, Any] = {}
        self._references: tuple[str, str] | None = None  # their sha256 and whose: the test set's, or the first kept
        try:
            self._against, self._seen = _test_set(config, split, self.lowercase)
            self._references = (self._against.sha256, "the test set's")
        except UserError as error:
            self._against, self._seen, self._unreadable = None, {}, error.lines[0]

    def of(self, jobs: list[JobRecord]):
        """The jobs' statistics stacked (seeds, sentences, K); each job must have the split's hypotheses."""
        import numpy as np

        for j in jobs:
            if j.directory not in self._of:
                self._of[j.directory] = self._statistics(j)
        return np.stack([self._of[j.directory] for j in jobs])

    def _statistics(self, job: JobRecord) -> Any:
        import numpy as np

        from ablate.bleu_statistics import kept, sha256

        lines = job.hypotheses(self.split)
        record, why = kept(job.directory, self.split, self.lowercase)
        if record is not None and len(record.rows) != len(lines):
            record, why = None, f"its BLEU statistics have {len(record.rows)} rows for {len(lines)} hypotheses"
        if record is not None and self._references is not None and record.references_sha256 != self._references[0]:
            record, why = None, (f"its BLEU statistics are against other references (sha256 "
                                 f"{record.references_sha256[:12]}) than {self._references[1]}")  # fmt: skip
        if record is not None:
            self._references = self._references or (record.references_sha256, f"{job.directory}'s")
            return np.array(record.rows, dtype=np.float64)
        if self._against is None:
            raise UnreadableReferencesError(f"{job.directory}: {why}, and the test references are not readable: "
                                       f"{self._unreadable}")  # fmt: skip
        import sacrebleu

        digest, against = sha256("\n".join(lines)), self._against
        if digest not in self._seen:
            key = f"{against.sha256} lowercase={self.lowercase} {sacrebleu.__version__}"
            try:
                self._seen[digest] = cached_statistics(key, digest, lambda: against.count(lines))
            except ValueError as error:  # runs of one experiment scored on different sentences (another max_pairs)
                raise UserError(f"{job.directory}: {error} of {self.split}: its runs were not scored on the same "
                                "test sentences") from None  # fmt: skip
        return self._seen[digest]


def cached_statistics(references: str, hypotheses: str, compute: Callable[[], Any]) -> Any:
    """Per-sentence BLEU statistics from ablate's cache (files.cache_dir()/bleu-statistics), keyed by the sha256 of
    the references (with the lowercase flag and sacreBLEU's version) and of the hypotheses; computed and kept
    there when missing. Tokenising and counting n-grams is most of a report's time, and a report is made again
    and again from the same translations (another format, margin or set of columns)."""
    import io

    import numpy as np

    from ablate.files import cache_dir, write_bytes

    path = cache_dir() / "bleu-statistics" / f"{hashlib.sha256(f'{references} {hypotheses}'.encode()).hexdigest()}.npy"
    with contextlib.suppress(OSError, ValueError, EOFError):
        return np.load(path, allow_pickle=False)
    stats = compute()
    buffer = io.BytesIO()
    np.save(buffer, stats, allow_pickle=False)
    with contextlib.suppress(OSError):  # a read-only cache only costs the statistics next time
        write_bytes(path, buffer.getvalue())
    return stats


_TEST_SETS: dict[str, tuple[Any, dict[str, Any]]] = {}  # see _test_set


def _test_set(config: dict[str, Any], split: str, lowercase: bool) -> tuple[Any, dict[str, Any]]:
    """The split's references (ablate.bleu_statistics.References: their n-grams counted once), and the statistics
    counted so far against them by hypotheses' sha256: one entry per test set the runs read (corpus, its folder,
    languages, max_pairs). Raises UserError where the references are not on disk."""
    from ablate.bleu_statistics import References
    from ablate.data.corpus import data_dir

    data = config["data"]
    key = json.dumps([data["corpus"], str(data_dir(data.get("data_dir"))), data["source"], data["target"],
                      data.get("max_pairs"), split, lowercase], sort_keys=True, default=str)  # fmt: skip
    if key not in _TEST_SETS:
        _TEST_SETS[key] = (References(references(config, split), lowercase), {})
    return _TEST_SETS[key]


def references(config: dict[str, Any], split: str) -> list[str]:
    """The test split's reference translations, read from the corpus as the run read them. Raises UserError where
    they are not on disk: nothing is downloaded, and no folder made."""
    from ablate.data.corpus import CORPUS, data_dir

    data = config["data"]
    corpus = CORPUS.build(CORPUS.parse(data["corpus"]), root=data_dir(data.get("data_dir")))
    missing = [language for language in (data["source"], data["target"]) if not corpus.present(split, language)]
    if missing:
        raise UserError(f"{corpus.root}: missing ({split}, {' and '.join(missing)} of corpus '{corpus.name}')")
    return [target for _, target in corpus.stream(split, data["source"], data["target"], data.get("max_pairs"))]
