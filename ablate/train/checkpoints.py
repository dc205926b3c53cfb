"""Checkpoint files: the trainer's whole state for resuming, and the model weights kept for averaging.

checkpoints/last-<n>.pt    model, optimizer, step, epoch, position, RNG states, totals (what resuming needs) at
                           step n, the last checkpoint's
checkpoints/last.json      its step, config hash and file, read without torch (ablate.rundir.last_checkpoint):
                           written after the state, so a kill between the two resumes from the checkpoint before
checkpoints/step-<n>.pt    the model's weights at step n, written when a run averages more than one checkpoint
                           or selects the best: the last `evaluation.average_checkpoints` are kept, and with
                           `evaluation.select: best` also as many up to the best validation step

Every file holds tensors, numbers, strings, lists and dicts alone, so each is read with
`torch.load(weights_only=True)`: a crafted file (a results directory on a shared filesystem) cannot
run code, and is refused with one line.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ablate.errors import UserError
from ablate.files import write_json
from ablate.rundir import CHECKPOINT_INFO, CHECKPOINTS, Checkpoint, last_checkpoint, state_name


def load(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """A checkpoint file, tensors and plain data only; anything else is refused."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{path}: refused: a checkpoint holds tensors and plain data only ({first})") from None


def load_state(found: Checkpoint, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The trainer's state of the checkpoint last.json names, which must be at the step it says."""
    state = load(found.state, device)
    if state.get("step") != found.step:
        raise UserError(f"{found.state}: holds step {state.get('step')}, but {CHECKPOINT_INFO} says {found.step}; "
                        "start the run over with --fresh")  # fmt: skip
    return state


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(data, tmp)
    tmp.replace(path)  # atomic: a kill never leaves half a checkpoint


def weights_path(directory: Path, step: int) -> Path:
    return directory / CHECKPOINTS / f"step-{step}.pt"


def kept_steps(directory: Path) -> list[int]:
    """Steps whose weights are kept for averaging, in order."""
    found = []
    for path in (directory / CHECKPOINTS).glob("step-*.pt"):
        number = path.stem.removeprefix("step-")
        if number.isdigit():
            found.append(int(number))
    return sorted(found)


WALL = "wall_seconds"  # saved beside the trainer's state: the seconds the job had taken when it was saved


def wall_seconds(state: dict[str, Any]) -> float:
    """What the job had taken when the checkpoint `state` was saved (0 for a checkpoint of an earlier ablate)."""
    return float(state.get(WALL, 0.0))


def save(directory: Path, state: dict[str, Any], step: int, config_hash: str, keep: int, weights: bool = True,
         best: int | None = None, wall: float = 0.0) -> None:  # fmt: skip
    """The trainer's state, and the seconds the job has taken so far (`wall`), as last-<step>.pt, then last.json,
    which names it; with `keep` > 1 (or a `best` step to keep) and `weights` also the weights of this step, pruned
    to the last `keep` and the `keep` up to step `best`. The weights and the state are written before last.json,
    so last.json never names a step whose files are missing; the checkpoint before is removed after it.

    Only the checkpoints a run of this length would average keep weights: those `checkpoint_every` apart and
    the run's end. A checkpoint taken because training was stopped (Ctrl-C) saves no weights, or the resumed
    run would average one more step than the uninterrupted run."""
    if (keep > 1 or best is not None) and weights:
        _save(weights_path(directory, step), state["model"])
        steps = kept_steps(directory)
        wanted = set(steps[-keep:]) | set(window(steps, keep, best))
        for old in set(steps) - wanted:
            weights_path(directory, old).unlink(missing_ok=True)
    name = state_name(step)
    _save(directory / CHECKPOINTS / name, state | {WALL: wall})
    write_json(directory / CHECKPOINT_INFO, {"step": step, "config_hash": config_hash, "state": name})
    for earlier in (directory / CHECKPOINTS).glob("last*.pt"):  # last-<n>.pt, or an earlier ablate's last.pt
        if earlier.name != name:
            earlier.unlink(missing_ok=True)


def forget_after(directory: Path, step: int) -> None:
    """Drops kept weights from after `step`: a resumed run trains those steps again."""
    for later in [s for s in kept_steps(directory) if s > step]:
        weights_path(directory, later).unlink(missing_ok=True)


def average(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The elementwise mean of state dicts with the same keys (Vaswani et al. §6.1: the last 5 checkpoints).

    Floating-point tensors are averaged in float64 and cast back; integer buffers (none in ablate's
    models) are taken from the last state.
    """
    if not states:
        raise ValueError("no checkpoints to average")
    keys = list(states[-1])
    for state in states:
        if list(state) != keys:
            raise ValueError("checkpoints to average hold different tensors")
    out = {}
    for key in keys:
        last = states[-1][key]
        if not last.is_floating_point():
            out[key] = last.clone()
            continue
        total = torch.zeros_like(last, dtype=torch.float64)
        for state in states:
            total += state[key].to(torch.float64)
        out[key] = (total / len(states)).to(last.dtype)
    return out


def window(steps: Sequence[int], n: int, until: int | None) -> list[int]:
    """The last `n` of `steps` at or before `until` (all of them up to the last, when `until` is None)."""
    return [s for s in steps if until is None or s <= until][-n:]


def averaged_weights(directory: Path, n: int, device: torch.device | str = "cpu",
                     until: int | None = None) -> tuple[dict, list[int]]:  # fmt: skip
    """The mean of the last `n` kept weights (up to step `until`, when given), and the steps they come from."""
    steps = window(kept_steps(directory), n, until)
    if until is not None and until not in steps:
        raise ValueError(f"{directory}: no weights kept of step {until} (kept: {kept_steps(directory)})")
    return average([load(weights_path(directory, s), device) for s in steps]), steps


def scored_weights(directory: Path, averaged_steps: Sequence[int] | None, config_hash: str | None,
                   device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:  # fmt: skip
    """The weights a finished run decoded: the mean of `averaged_steps` (its result's), or, without them, its last
    checkpoint's model. Raises UserError when neither is on disk."""
    if averaged_steps:
        missing = [s for s in averaged_steps if not weights_path(directory, s).is_file()]
        if missing:
            raise UserError(f"{directory / CHECKPOINTS}: the weights of step(s) {missing}, which the run averaged, "
                            "are not kept")  # fmt: skip
        return average([load(weights_path(directory, s), device) for s in averaged_steps])
    found = last_checkpoint(directory, config_hash)
    if found is None:
        raise UserError(f"{directory / CHECKPOINTS}: no checkpoint of this run")
    return load_state(found, device)["model"]
