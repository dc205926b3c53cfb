"""What an experiment asked and what its verdicts say, in words: the first lines of the page and of the terminal.

The question is the experiment's description, as the sweep wrote it into summary.md; the answer is made from the
comparison table's verdict column alone (ablate.report.frame), so the words and the table cannot disagree. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ablate.config import flatten
from ablate.report.decide import Design
from ablate.report.results import ExperimentResults
from ablate.report.tables import cell
from ablate.report.verdicts import Declared
from ablate.rundir import SUMMARY_MD


@dataclass(frozen=True)
class Summary:
    question: str | None  # the experiment's description, where its summary.md has one
    line: str  # the answer in one sentence, without figures: the terminal's first line
    words: str  # the answer with each row's ΔBLEU [95% interval]: the page's first paragraph


def question(exp: ExperimentResults) -> str | None:
    """The experiment's description: summary.md's heading `## name: description`, which `ablate run` writes."""
    path = exp.directory / SUMMARY_MD
    try:
        first = path.read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None
    prefix = f"## {exp.name}: "
    return first[len(prefix) :].strip() or None if first.startswith(prefix) else None


def summarise(exp: ExperimentResults, comparison: pd.DataFrame | None, margin_text: str = "") -> Summary:
    """The question and the answer: which rows are worse, better, equivalent or undecided against the baseline (with
    the seeds a side that would resolve an undecided one), or, without verdicts, the runs' BLEU."""
    asked = question(exp)
    if comparison is None or "verdict" not in comparison.columns or comparison["verdict"].isna().all():
        return Summary(asked, *_scores(exp, comparison))
    groups: dict[str, list[dict]] = {}
    for row in comparison.to_dict("records"):
        verdict = row.get("verdict")
        if verdict is None or pd.isna(verdict):
            continue
        word = str(verdict).split(" (")[0]
        key = "one seed" if "1 seed" in str(verdict) else "pending" if str(row.get("decided at") or "").startswith(
            "pending") else word  # fmt: skip
        groups.setdefault(key, []).append(row)
    against = _against(exp, comparison)
    rows_judged = sum(len(rows) for rows in groups.values())
    short, long = [], []
    for key in ("worse", "better", "equivalent", "undecided", "pending", "one seed"):
        rows = groups.get(key, [])
        if not rows:
            continue
        names = _names([r["run"] for r in rows])
        # each row's ΔBLEU [interval] where the group is small: more would bury the sentence (the table has them)
        figures = _names([f"{r['run']} ({cell('ΔBLEU', r['ΔBLEU'], r)})" for r in rows]) if len(rows) <= 3 else names
        verb, has = ("is", "has") if len(rows) == 1 else ("are", "have")
        if key == "one seed":
            short.append(f"{names} {has} one seed in an arm: no verdict until a second seed")
            long.append(f"{names} {has} one seed in an arm, so the interval covers test sentences alone and no "
                        "verdict is drawn: train a second seed")  # fmt: skip
        elif key == "pending":
            short.append(f"{names} {verb} not decided yet (the sequential design goes on)")
            long.append(f"{figures} {verb} not decided yet: the sequential design goes on")
        elif key == "undecided":
            short.append(f"{names} {verb} undecided{_seeds(rows)}")
            long.append(f"{figures} {verb} undecided{_seeds(rows, long=True)}{_corrected(rows, rows_judged)}")
        else:
            tail = f" than {against}" if key in ("worse", "better") else f" to {against}"
            short.append(f"{names} {verb} {key}{tail}")
            long.append(f"{figures} {verb} {key}{tail}")
    line = "; ".join(short) + "."
    words = "; ".join(long) + "." + (f" Verdicts at {margin_text}." if margin_text else "")
    return Summary(asked, line, words)


def _against(exp: ExperimentResults, comparison: pd.DataFrame) -> str:
    """`the baseline (positions sinusoidal)`: the baseline, with its values of the keys the rows change."""
    keys = dict.fromkeys(k for jobs in exp.runs.values() for j in jobs[:1] for k in j.result.differences)
    base = next((j for j in exp.baseline if j.config), None)
    if not keys or base is None or len(keys) > 3:
        return "the baseline"
    flat = flatten(base.config)
    values = [f"{key.split('.')[-1]} {flat[key]}" for key in keys if key in flat]
    return f"the baseline ({', '.join(values)})" if values else "the baseline"


def _seeds(rows: list[dict], long: bool = False) -> str:
    """For undecided rows: the seeds a side that would resolve their difference at 80% power, where known."""
    counts = {r["run"]: str(r["seeds for 80%"]) for r in rows if _present(r.get("seeds for 80%"))}
    if not counts:
        return ""
    if set(counts.values()) == {"> 1000"}:
        return " (no number of seeds would resolve a difference this small)"
    numbers = sorted(counts.values(), key=lambda c: float(c.strip("> ")))
    about = numbers[0] if numbers[0] == numbers[-1] else f"{numbers[0]} to {numbers[-1]}"
    whom = "it" if len(rows) == 1 else "them" if len(counts) == len(rows) else _names(list(counts))
    if long:
        return f": about {about} seeds a side would resolve {whom} (80% power; a lower bound)"
    return f" (about {about} seeds a side would resolve {whom})"


def _corrected(rows: list[dict], judged: int) -> str:
    """Undecided rows whose interval excludes 0: the correction over the table's rows is why."""
    excluded = [r["run"] for r in rows if r.get("ΔBLEU lo") is not None and (r["ΔBLEU lo"] > 0 or r["ΔBLEU hi"] < 0)]
    if not excluded:
        return ""
    which = "its interval excludes" if len(excluded) == 1 else "their intervals exclude"
    return f" ({_names(excluded)}: {which} 0, but not after the correction over the {judged} rows)"


def _present(value) -> bool:
    return value is not None and value != "" and not (isinstance(value, float) and pd.isna(value))


def _names(names: list[str], most: int = 6) -> str:
    """`a`, `a and b`, `a, b and c`; past `most`, the first five and how many more."""
    if len(names) > most:
        return f"{', '.join(names[:5])} and {len(names) - 5} more"
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _scores(exp: ExperimentResults, comparison: pd.DataFrame | None) -> tuple[str, str]:
    """Without verdicts: each run's BLEU over its seeds (one run: a reproduction, say its score)."""
    if comparison is None or "BLEU" not in comparison.columns:
        return "no run has a score.", "No run has a score."
    rows = [r for r in comparison.to_dict("records") if r.get("BLEU") is not None and not pd.isna(r["BLEU"])]
    if not rows:
        return "no run has a score.", "No run has a score."
    split = exp.split()
    said = [f"{r['run']} {cell('BLEU', r['BLEU'], r)} ({r['n']} seed{'s' if r['n'] != 1 else ''})" for r in rows]
    text = _names(said) if len(rows) > 1 else said[0]
    return f"BLEU: {text}.", f"BLEU on {split}: {text}; no ΔBLEU interval, so no verdict."


def legend(frame: pd.DataFrame, declared: Declared | None, short: bool = False) -> list[str]:
    """The comparison table's legend in a few lines: what ΔBLEU and the verdict are (`short`: those alone, for the
    terminal), what the other main columns measure; the notes say how."""
    items = []
    if "ΔBLEU lo" in frame.columns:
        items.append("ΔBLEU [lo, hi]: the run's mean BLEU minus the baseline's, with its 95% interval over seeds and "
                     "test sentences; * where it excludes 0.")  # fmt: skip
    verdicts = frame["verdict"].dropna() if "verdict" in frame.columns else pd.Series(dtype=object)
    if len(verdicts):
        design = declared.design if declared is not None else Design()
        view = declared is not None and declared.source.startswith("a view")
        where = declared.source.replace("a view; declared: ", "a view; declared ±") if view else "declared"
        said = (f"equivalent inside ±{design.margin:g} BLEU ({where}), else better or worse, else undecided"
                if design.margin is not None else "better or worse, else undecided (no margin declared: nothing is "
                "equivalent)")  # fmt: skip
        looks = ", at the sequential design's looks" if design.sequential else ""
        one = "; (1 seed): an arm of one seed, no verdict" if verdicts.astype(str).str.contains("1 seed").any() else ""
        items.append(f"verdict: {said}; corrected over the {len(verdicts)} rows{looks}{one}.")
    if not short:
        items.append("BLEU: mean ± sd over the n seeds; valid loss: nats a target token; train tok/s: source and "
                     "target tokens a second of training; peak MiB: peak memory (each as the notes say).")  # fmt: skip
    return items
