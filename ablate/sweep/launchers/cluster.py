"""What a Slurm cluster says, through its own commands (sinfo, squeue, sacct, scancel), and why it refused.

Every failure becomes one UserError line that names the cause: Slurm is not installed here, the
controller cannot be reached, or the command's own message (sbatch's, say) for a request the cluster
rejects. No other module of ablate runs a Slurm command.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ablate.errors import UserError

# Job states in which a job may still run (`squeue` lists them); any other state is final.
ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
         "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED"}  # fmt: skip
COMMANDS = ("sbatch", "srun", "squeue", "sacct", "sinfo", "scancel")
TIMEOUT_S = 60


def require() -> None:
    """Slurm's commands are on PATH (submitit needs srun and sbatch, and polls sacct)."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise UserError(f"--launcher slurm: no Slurm here: {', '.join(missing)} not on PATH (run from a node of "
                        "the cluster with Slurm's commands, or use --launcher local)")  # fmt: skip


def explain(command: str, message: str) -> str:
    """A failed Slurm command's output as one line naming the cause."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines or ["no output"]
    text = errors[-1] if len(errors) == 1 else "; ".join(dict.fromkeys(errors))
    text = text.replace("Batch job submission failed: ", "")
    if any(s in message for s in ("Unable to contact slurm controller", "Socket timed out", "Connection refused")):
        return f"the Slurm controller is unreachable (is slurmctld running?): {text}"
    if "slurmdbd" in message or "accounting storage" in message.lower():
        return f"Slurm's accounting (slurmdbd) is unreachable; submitit polls sacct, which needs it: {text}"
    return text if text.startswith(command) else f"{command}: {text}"


def run(*args: str, unknown_ok: bool = False) -> str:
    """One Slurm command's standard output; a one-line UserError when it fails.

    `unknown_ok`: a job id the controller no longer knows (squeue -j of a long-ended job) lists nothing.
    """
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UserError(f"--launcher slurm: no Slurm here: {args[0]} not on PATH") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{args[0]} gave no answer in {TIMEOUT_S} s: the Slurm controller is unreachable") from None
    if done.returncode != 0:
        if unknown_ok and "Invalid job id" in done.stderr:
            return ""
        raise UserError(explain(args[0], done.stderr or done.stdout))
    return done.stdout


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    gpus: int  # GPUs of the node's generic resources (gres gpu[:type]:N)


def gpus_of(gres: str) -> int:
    """`gpu:a100:4(S:0-1),shard:8` -> 4; `(null)` -> 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def nodes(partition: str | None) -> tuple[str, list[Node]]:
    """The partition (named, or the cluster's default) and its nodes, as sinfo reports them."""
    out = run("sinfo", "-h", "-N", "-o", "%P|%N|%c|%G", *(["-p", partition] if partition else []))
    found: dict[str, list[Node]] = {}
    default = None
    for line in out.splitlines():
        part, name, cpus, gres = line.split("|")
        if part.endswith("*"):
            part = default = part[:-1]
        found.setdefault(part, []).append(Node(name, int(cpus), gpus_of(gres)))
    name = partition or default
    if not found or name not in found:
        what = f"partition '{partition}'" if partition else "a default partition"
        raise UserError(f"--launcher slurm: the cluster has no {what} (sinfo lists: "
                        f"{', '.join(found) or 'none'}); name one with --partition")  # fmt: skip
    return name, found[name]


def states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """Array task or job id (`12_3`) -> (state, reason): squeue for jobs the controller still holds (ended ones
    too, for a few minutes), then sacct, which slurmdbd fills a little later, for the others."""
    if not job_ids:
        return {}
    arrays = sorted({j.split("_")[0] for j in job_ids})
    found: dict[str, tuple[str, str]] = {}
    listed = run("squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T|%r", unknown_ok=True)
    for line in listed.splitlines():
        task, state, reason = line.split("|", 2)
        found[task] = (state, reason)
    ended = [j for j in job_ids if j not in found]
    if ended:
        out = run("sacct", "-n", "-X", "-P", "-j", ",".join(sorted({j.split("_")[0] for j in ended})), "-o",
                  "JobID,State")  # fmt: skip
        for line in out.splitlines():
            task, state = line.split("|", 1)
            found.setdefault(task, (state.split()[0] if state else "UNKNOWN", ""))
    return {j: found[j] for j in job_ids if j in found}


def cancel(job_ids: list[str]) -> None:
    run("scancel", *job_ids)
