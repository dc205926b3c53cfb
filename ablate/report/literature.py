"""Our rows beside the paper's: each run that changes one setting Vaswani et al. varied in their Table 3,
with the paper's change in the same direction and whether ours agrees.

A run matches when its resolved spec differs from its reference (the baseline) in exactly one such
setting (d_k = d_model / heads following heads or d_model counts as no change of its own, nor does a d_v
that is d_k on both sides following d_k; `layers` is the encoder's and decoder's depth changed together).
The paper's row B kept d_v = 64; a run whose d_v followed its d_k says so in its `change`.

Our base is not the paper's, so the paper's row is chosen by direction: among the values the paper
tried on the same side of its base, the one whose ratio to the paper's base is nearest ours to our
baseline (on a tie, the one that is our value; where a value is 0, the paper's row of that value). The
paper's change is that row against its base model.

A direction is `better`, `worse` or `≈`: the paper's when its BLEU moved by more than 0.1 (the
precision it reports), ours the row's verdict in the comparison table (ablate.report.decide: better, worse,
equivalent within the declared margin), and `not decided` where that is undecided, or has one seed.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ablate.config import flatten
from ablate.report.decide import BETTER, EQUIVALENT, ONE_SEED, UNDECIDED, WORSE
from ablate.report.paper import TABLE3, TABLE3_BASE, value_width
from ablate.report.results import ExperimentResults
from ablate.report.significance import POWER_NOTE
from ablate.rundir import BOOKKEEPING

TITLE = "against the paper (Vaswani et al. 2017, Table 3)"
IGNORED = {"training.seed", *(f"{section}.{key}" for section, key in BOOKKEEPING)}
COLUMNS = ["run", "row", "change", "paper", "paper ΔBLEU", "paper ΔPPL", "paper says", "ΔBLEU", "ΔBLEU lo",
           "ΔBLEU hi", "ΔPPL", "we find", "agrees", "seeds for 80%"]  # fmt: skip


def widths(config: dict[str, Any]) -> dict[str, str]:
    """A config's dotted keys, d_v as the run was built (a null d_v, or none stored, is d_k)."""
    return flatten(config) | {"model.d_v": str(value_width(config))}


def tied(flat: dict[str, str]) -> bool:  # d_v is d_k
    return flat["model.d_v"] == flat["model.d_k"]


def table3_change(base: dict[str, Any], config: dict[str, Any]) -> tuple[str, str, str] | None:
    """(Table 3 setting, the baseline's value, this run's) when the run changes that setting alone."""
    a, b = widths(base), widths(config)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and k not in IGNORED}

    def follows(flat: dict[str, str]) -> bool:  # d_k is d_model / heads: it followed them
        return int(flat["model.d_k"]) == int(flat["model.d_model"]) // int(flat["model.heads"])

    if {"model.d_k", "model.d_v"} <= changed and tied(a) and tied(b):
        changed.discard("model.d_v")  # d_v followed d_k, as it does unless set apart
    moved = changed & {"model.heads", "model.d_model"}
    if "model.d_k" in changed and moved and all(follows(f) and tied(f) for f in (a, b)):
        changed.discard("model.d_k")  # rows A and C: d_v = d_k = d_model / heads, in the paper's rows too
    depth = {"model.encoder_layers", "model.decoder_layers"}
    if changed == depth and a[min(depth)] == a[max(depth)] and b[min(depth)] == b[max(depth)]:
        return "layers", a["model.encoder_layers"], b["model.encoder_layers"]
    if len(changed) != 1 or (key := changed.pop()) not in TABLE3:
        return None
    return key, a.get(key, "-"), b.get(key, "-")


def paper_row(key: str, ours_from: str, ours_to: str) -> tuple[Any, float, float] | None:
    """The paper's row that changes `key` as we did (see the module's docstring), or None."""
    rows = TABLE3[key][1]
    base = TABLE3_BASE[key]
    if isinstance(base, str):
        return next((r for r in rows if r[0] == ours_to), None)
    ours, theirs = float(ours_to), float(ours_from)
    side = [r for r in rows if (r[0] - base) * (ours - theirs) > 0]
    if not side:
        return None
    if ours <= 0 or theirs <= 0:  # no ratio to compare (a dropout of 0): the paper's row of that value
        return next((r for r in side if r[0] == ours), None)

    def distance(row: tuple[Any, float, float]) -> tuple[float, bool, float]:  # ties: our value, else the bolder
        gap = round(abs(math.log(row[0] / base) - math.log(ours / theirs)), 9) if row[0] > 0 else math.inf
        return gap, row[0] != ours, -abs(math.log(row[0] / base)) if row[0] > 0 else 0.0

    return min(side, key=distance)


UNDECIDED_ROW = "not decided"
FOUND = {BETTER: "better", WORSE: "worse", EQUIVALENT: "≈", UNDECIDED: UNDECIDED_ROW,
         ONE_SEED: f"{UNDECIDED_ROW} (1 seed)"}  # fmt: skip


def direction(verdict: Any) -> str:
    """What we find, from the row's verdict in the comparison table (decide.judge, corrected over its rows):
    better, worse, ≈ (equivalent within the declared margin), not decided, or ? (no verdict)."""
    return FOUND.get(verdict, "?") if isinstance(verdict, str) else "?"


def agreement(ours: str, says: str) -> str:
    """yes or no where we found a direction; not decided where our verdict is undecided (an interval covering 0
    is not agreement with a paper that found no difference: only equivalence is)."""
    if ours == "?":
        return "?"
    if ours.startswith(UNDECIDED_ROW):
        return UNDECIDED_ROW
    return "yes" if ours == says else "no"


def paper_direction(delta: float) -> str:
    return "better" if delta > 0.1 + 1e-9 else "worse" if delta < -0.1 - 1e-9 else "≈"


def literature_frame(exp: ExperimentResults, frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]] | None:
    """A row for each run that matches a Table 3 row (its ΔBLEU and interval from the report's `frame`)."""
    rows = []
    by_run = frame.set_index("run")
    for run, jobs in exp.runs.items():
        reference = exp.runs.get(exp.reference(run), [])
        if run == exp.reference(run) or not jobs or not reference or run not in by_run.index:
            continue
        change = table3_change(reference[0].config, jobs[0].config)
        if change is None:
            continue
        key, ours_from, ours_to = change
        row = paper_row(key, ours_from, ours_to)
        if row is None:
            continue
        base = next(r for r in TABLE3[key][1] if r[0] == TABLE3_BASE[key])
        mine = by_run.loc[run]
        low, high = mine.get("ΔBLEU lo"), mine.get("ΔBLEU hi")
        low, high = (None if pd.isna(v) else float(v) for v in (low, high))
        ppl, base_ppl = mine.get("valid ppl"), by_run.loc[exp.reference(run)].get("valid ppl")
        ours = direction(mine.get("verdict"))
        says = paper_direction(row[1] - base[1])
        name = "N" if key == "layers" else key.split(".")[-1]
        d_v = widths(reference[0].config)["model.d_v"], widths(jobs[0].config)["model.d_v"]
        also = " (d_v with it)" if key == "model.d_k" and d_v[0] != d_v[1] else ""
        rows.append({
            "run": run, "row": TABLE3[key][0], "change": f"{name} {ours_from} → {ours_to}{also}",
            "paper": f"{name} {base[0]} → {row[0]}: {base[1]} → {row[1]} BLEU",
            "paper ΔBLEU": round(row[1] - base[1], 2), "paper ΔPPL": round(row[2] - base[2], 2), "paper says": says,
            "ΔBLEU": mine.get("ΔBLEU"), "ΔBLEU lo": low, "ΔBLEU hi": high,
            "ΔPPL": None if ppl is None or base_ppl is None or pd.isna(ppl) or pd.isna(base_ppl)
            else round(float(ppl) - float(base_ppl), 2),
            "we find": ours, "agrees": agreement(ours, says),
            "seeds for 80%": None if pd.isna(mine.get("seeds for 80%")) else mine.get("seeds for 80%"),
        })  # fmt: skip
    if not rows:
        return None
    out = pd.DataFrame(rows, columns=COLUMNS, dtype=object)
    if out["seeds for 80%"].isna().all():  # single-seed arms: no spread to plan with
        out = out.drop(columns="seeds for 80%")
    agree, against = sum(r["agrees"] == "yes" for r in rows), sum(r["agrees"] == "no" for r in rows)
    open_ = sum(r["agrees"] == UNDECIDED_ROW for r in rows)
    notes = [
        f"{agree} of {len(rows)} rows go the paper's way, {against} against it, {open_} not decided. The paper: "
        "Vaswani et al. 2017, Table 3 (WMT14 en-de, "
        "newstest2013 dev BLEU and perplexity, 100K steps of a 65M model), each row against its base model; "
        "ours against this experiment's baseline.",
        "paper says: better or worse when its BLEU moved by more than 0.1, ≈ otherwise. we find: the row's verdict "
        "in the comparison table (better, worse, ≈ for equivalent within the declared margin), or not decided "
        "where it is undecided: an interval that covers 0 agrees with nothing, and a row of one seed is not "
        "decided whatever its interval. ΔPPL: validation perplexity, lower is better; ours is the NLL a subword "
        "without label smoothing.",
    ]  # fmt: skip
    if out["change"].str.endswith("(d_v with it)").any():
        notes.append(
            "(d_v with it): the run's d_v changed with its d_k, so W^V and W^O narrowed too; the paper's "
            "row B kept d_v = 64 (model.d_v sets it apart), so such a row changes more than the paper's did"
        )
    if "seeds for 80%" in out.columns:
        notes.append(POWER_NOTE)
    if (out["we find"] == "?").any():
        notes.append("?: no ΔBLEU interval (the test references were not readable when the report was made)")
    return out, notes
