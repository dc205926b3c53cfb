"""The Slurm launcher: the jobs of a sweep as one Slurm job array, through submitit.

Each array task starts the same worker the local launcher starts (torchrun for several GPUs), in the
shared results directory, so a result looks the same wherever it was made, and running the same
command again (or `ablate report`) collects them. `--launcher submitit-local` goes through submitit's
local executor instead: the same path on this machine, without a cluster.

- **What a task asks for** follows the spec and the cluster (`resolve`): no GPU for a CPU spec, one
  for cuda, and for `auto` one where the partition's nodes have GPUs (sinfo says); as many CPUs as
  every node of the partition can give a run. Flags and the experiment's `slurm:` override both.
- **Time limits and preemption.** Slurm warns a job `signal_delay_s` before its limit (SIGUSR2, which
  reaches the worker too, and makes it save a checkpoint and stop); submitit then calls `Task.checkpoint`
  and requeues the task, which resumes from that checkpoint. A run ends as it would have uninterrupted.
- **A second `ablate run`** finds each queued job through the id kept in its run directory
  (ablate.rundir's slurm.json) and follows it instead of submitting it again.
- **Ctrl-C** asks whether to cancel the jobs still queued or running, or to leave them (and says how to
  cancel them later); without a terminal to ask on, it leaves them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ablate.errors import UserError
from ablate.record import RunResult
from ablate.rundir import Exit, checkpoint_step, read_result, read_slurm_job, write_slurm_job
from ablate.sweep.devices import place
from ablate.sweep.experiment import SlurmSpec
from ablate.sweep.launchers import Interrupted, Outcomes, cluster, outcome
from ablate.sweep.progress import SweepView
from ablate.train.job import Job

CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}
POLL_S = 5.0  # how often squeue is asked where the tasks stand
PATIENCE_S = 300.0  # how long following goes on while the controller does not answer


def resolve(s: SlurmSpec, device: str, where: str) -> SlurmSpec:
    """The settings with partition, GPUs and CPUs filled in from the spec's device and the cluster (sinfo)."""
    if device == "cpu" and s.gpus_per_run:
        raise UserError(f"--gpus-per-run {s.gpus_per_run}: the spec trains on the CPU (--device cpu or "
                        "training.device: cpu); use --device cuda or auto")  # fmt: skip
    if where == "local":  # submitit's local executor: this machine
        from ablate.sweep.devices import cuda_available

        gpus = s.gpus_per_run if s.gpus_per_run is not None else int(device != "cpu" and cuda_available())
        return s.model_copy(update={"gpus_per_run": gpus, "cpus_per_run": s.cpus_per_run or os.cpu_count() or 1})
    cluster.require()
    partition, nodes = cluster.nodes(s.partition)
    most = max(n.gpus for n in nodes)
    gpus = s.gpus_per_run
    if gpus is None:
        gpus = 1 if device == "cuda" or (device == "auto" and most) else 0
    if gpus > most:
        has = f"at most {most} GPU(s) a node" if most else "no GPU (no gres gpu in sinfo)"
        raise UserError(f"--launcher slurm: a run asks for {gpus} GPU(s), but partition '{partition}' has {has}; "
                        f"set --gpus-per-run{' 0 for CPU jobs' if not most else ''} or --partition")  # fmt: skip
    able = [n for n in nodes if n.gpus >= gpus] if gpus else nodes
    cpus = s.cpus_per_run
    if cpus is None:
        cpus = min(n.cpus * gpus // n.gpus if gpus else n.cpus for n in able)
    elif cpus > max(n.cpus for n in able):
        raise UserError(f"--cpus-per-run {cpus}: no node of partition '{partition}' that fits the run has that many "
                        f"(at most {max(n.cpus for n in able)}); the jobs would pend forever")  # fmt: skip
    return s.model_copy(update={"partition": partition, "gpus_per_run": gpus, "cpus_per_run": max(1, cpus)})


def _submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UserError("--launcher slurm: needs submitit; install it with: pip install 'ablate[slurm]'") from None
    return submitit


class Task:
    """One array task: the run's worker, to its end; its exit code (ablate.rundir.Exit) is the task's result.

    On Slurm's warning before a time limit or a preemption, submitit calls `checkpoint` (a signal handler,
    in this process): the worker has the same warning and stops after its current step with a checkpoint;
    once it has, the task is requeued and resumes from it. A worker still decoding when the warning comes
    is given until shortly before the limit, then stopped: the requeued task resumes at evaluation.
    """

    def __init__(self, grace_s: float = 60.0) -> None:
        self.grace_s = grace_s
        self.worker = None

    def __getstate__(self) -> dict[str, Any]:  # submitit pickles the task: never the process
        return {"grace_s": self.grace_s, "worker": None}

    def __call__(self, directory: str) -> int:
        from ablate.sweep.launchers.local import start_worker

        if "SLURM_CPUS_PER_TASK" in os.environ:  # torch's threads: the CPUs Slurm gave, not the node's
            os.environ.setdefault("OMP_NUM_THREADS", os.environ["SLURM_CPUS_PER_TASK"])
        self.worker = start_worker(Job.load(Path(directory)))
        while self.worker.poll() is None:  # polled, not wait(): `checkpoint` waits for it from a signal handler
            time.sleep(0.5)
        return self.worker.returncode

    def checkpoint(self, directory: str) -> Any:
        submitit = _submitit()
        if self.worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.worker.pid, signal.SIGUSR2)
            deadline = time.monotonic() + self.grace_s
            while self.worker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            if self.worker.poll() is None:  # decoding past the warning: its final checkpoint is saved
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.worker.pid, signal.SIGKILL)
                self.worker.wait()
        job = Job.load(Path(directory))
        result = read_result(job.directory)
        if result is not None and result.config_hash == job.config_hash:
            return None  # it ended (its result.json says how): nothing to resume, nothing requeued
        # stopped with a checkpoint, or before it could save one (the warning came while it started): requeued
        return submitit.helpers.DelayedSubmission(Task(self.grace_s), directory)


def run_task(directory: str) -> int:
    """One job, as a task of submitit's (kept for tasks submitted by an earlier version)."""
    return Task()(directory)


class SlurmLauncher:
    """One job array; `wait=False` returns once it is submitted (the same command collects it later)."""

    def __init__(self, launcher: str, settings: SlurmSpec, folder: Path, device: str = "auto", wait: bool = True):
        self.where, self.settings, self.folder, self.wait = CLUSTERS[launcher], settings, folder, wait
        self.device = device

    def describe(self) -> str:
        return "slurm" if self.where == "slurm" else "submitit-local"

    def submit(self, jobs: list[Job], s: SlurmSpec) -> list[Any]:
        """Submits the jobs as one array; returns submitit's job handles, in order."""
        submitit = _submitit()
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.where, slurm_max_num_timeout=s.max_timeouts)
        executor.update_parameters(
            name="ablate", timeout_min=s.time_min, gpus_per_node=s.gpus_per_run, tasks_per_node=1,
            cpus_per_task=s.cpus_per_run, mem_gb=s.mem_gb, slurm_partition=s.partition,
            slurm_array_parallelism=s.array_parallelism, slurm_additional_parameters=s.additional or None,
            slurm_signal_delay_s=s.signal_delay_s,
        )  # fmt: skip
        for job in jobs:
            place(job, s.gpus_per_run)
            job.save()
        # The worker's time to stop, short of the limit. Slurm sends its warning up to a minute early (it
        # checks limits every 30 s), so even a short delay leaves 20 s.
        grace = max(20.0, s.signal_delay_s - 15.0)
        try:
            with _stderr_kept() as said:  # sbatch writes to our stderr: its refusal becomes our one line
                handles = executor.map_array(Task(grace), [str(job.directory) for job in jobs])
        except Exception as error:  # sbatch refused (submitit's FailedJobError carries its output)
            if type(error).__name__ not in ("FailedJobError", "CalledProcessError", "OSError"):
                raise
            raise UserError(f"--launcher slurm: the cluster refused the jobs: {cluster.explain('sbatch', str(error))}"
                            ) from None  # fmt: skip
        sys.stderr.write(said.text)  # sbatch's warnings, if any, once it accepted the jobs
        if self.where == "slurm":
            for job, handle in zip(jobs, handles, strict=True):
                write_slurm_job(job.directory, str(handle.job_id), self.folder)
        return handles

    def queued(self, jobs: list[Job]) -> dict[str, str]:
        """Job label -> the Slurm job (an earlier `ablate run`'s) that is still queued or running for it."""
        if self.where != "slurm":
            return {}
        known = {job.label: record["job_id"] for job in jobs if (record := read_slurm_job(job.directory))}
        alive = {task for task, (state, _) in cluster.states(list(known.values())).items() if state in cluster.ALIVE}
        return {label: task for label, task in known.items() if task in alive}

    follows_busy = True  # the runner hands over the jobs another process trains: those Slurm runs are followed

    def launch(self, jobs: list[Job], view: SweepView, busy: list[Job] | None = None) -> Outcomes | None:
        """Submits the jobs no earlier `ablate run` left queued, then follows them and those (and any of `busy`)."""
        if not jobs and not busy:
            return {}
        s = resolve(self.settings, self.device, self.where)
        queued = self.queued([*jobs, *(busy or [])])
        fresh = [job for job in jobs if job.label not in queued]
        handles: dict[Any, Job] = {}
        if queued:
            submitit = _submitit()
            for job in [*jobs, *(busy or [])]:
                if job.label in queued:
                    place(job, s.gpus_per_run)  # what it was submitted with, for the view
                    handles[submitit.SlurmJob(folder=self.folder, job_id=queued[job.label])] = job
            view.say(f"still queued or running from an earlier ablate run: {len(queued)} job(s) "
                     f"({', '.join(queued.values())}); following them, not submitting them again")  # fmt: skip
        if fresh:
            new = self.submit(fresh, s)
            handles |= dict(zip(new, fresh, strict=True))
            gpus = f"{s.gpus_per_run} GPU(s)" if s.gpus_per_run else "no GPU"
            view.say(f"submitted {len(new)} job(s): {', '.join(str(h.job_id) for h in new)} "
                     f"({s.partition or 'this machine'}, {s.cpus_per_run} CPU(s) and {gpus} a run, "
                     f"{s.time_min} min a job)")  # fmt: skip
        if not self.wait:
            view.say("not waiting (--no-wait): run the same command again to follow or collect them")
            return None
        try:
            return follow(handles, view, s, self.where == "slurm")
        except KeyboardInterrupt:
            raise Interrupted(self._interrupted(handles, view)) from None

    def _interrupted(self, handles: dict[Any, Job], view: SweepView) -> str:
        """Ctrl-C: cancel what is still queued or running, or leave it, as the user says; what was done."""
        left = [str(h.job_id) for h in handles if not _done(h)]
        if not left:
            return "interrupted: every job had ended; the same command collects them"
        view.close()
        arrays = " ".join(sorted({j.split("_")[0] for j in left}))
        if self.where == "slurm" and _ask(f"Cancel the {len(left)} Slurm job(s) still queued or running "
                                          f"({', '.join(left)})? [y/N] "):  # fmt: skip
            cluster.cancel(left)
            return (f"interrupted: cancelled with scancel {' '.join(left)}, each saving a checkpoint first; to "
                    "resume them, run the same command again")  # fmt: skip
        if self.where != "slurm":
            return "interrupted: the tasks end with this process; to resume them, run the same command again"
        return (f"interrupted: left {len(left)} Slurm job(s) queued or running ({', '.join(left)}); to cancel them: "
                f"scancel {arrays}; to follow or collect them, run the same command again")  # fmt: skip


@contextlib.contextmanager
def _stderr_kept():
    """Holds back what child processes write to this process's stderr (file descriptor 2); `.text` after."""
    import tempfile
    from types import SimpleNamespace

    said = SimpleNamespace(text="")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            said.text = held.read()


def _ask(question: str) -> bool:
    """A yes from the terminal; no terminal (a script, CI), a second Ctrl-C or end of input mean no."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    try:
        print(f"\n{question}", end="", file=sys.stderr, flush=True)
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except (KeyboardInterrupt, EOFError):
        return False


def _done(handle: Any) -> bool:
    with contextlib.suppress(Exception):  # the cluster unreachable: not known to be done
        return handle.done()
    return False


def follow(handles: dict[Any, Job], view: SweepView, s: SlurmSpec, squeue: bool = True) -> Outcomes:
    """Follows the tasks until every one has ended, showing the pending ones with Slurm's reason; their results."""
    pending = dict(handles)
    if not squeue:  # submitit's local executor: every task starts at once
        for job in pending.values():
            view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
    results: Outcomes = {}
    asked, unanswered = 0.0, None
    while pending:
        time.sleep(1.0)
        if squeue and time.monotonic() - asked >= POLL_S:
            asked = time.monotonic()
            try:
                where = cluster.states([str(h.job_id) for h in pending])
                unanswered = None
            except UserError:  # a controller restarting: the jobs go on; give up only if it stays away
                unanswered = unanswered or time.monotonic()
                if time.monotonic() - unanswered > PATIENCE_S:
                    raise
                where = {}
            for handle, job in pending.items():
                if str(handle.job_id) not in where:
                    continue
                state, reason = where[str(handle.job_id)]
                if state == "PENDING":
                    view.queued(job, _reason(reason))
                elif state in ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
                    view.queued(job, f"{state.lower()}: {_reason(reason)}")
                elif state in cluster.ALIVE:
                    view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
        view.refresh()
        for handle in [h for h in pending if _done(h)]:
            job = pending.pop(handle)
            results[job.label] = ended(job, handle, s)
            view.finished(job, results[job.label])
    return results


def ended(job: Job, handle: Any, s: SlurmSpec) -> RunResult:
    """The result of a task that has ended: the worker's, or what Slurm's final state says happened."""
    try:
        code, failure = handle.result(), None
    except Exception as error:  # no exit code: cancelled, timed out, the node failed, out of memory...
        code, failure = None, error
    result = read_result(job.directory)
    if result is not None and result.config_hash == job.config_hash:
        return result  # it ended with a result (perhaps just as the task was stopped)
    state = _final_state(handle)
    if state == "CANCELLED" or code == Exit.INTERRUPTED:
        why = (f"Slurm job {handle.job_id} was cancelled (scancel)" if state == "CANCELLED" else
               f"the worker of Slurm job {handle.job_id} was stopped")  # fmt: skip
        return outcome(job, Exit.INTERRUPTED).model_copy(
            update={"error": f"{why}; the same command resumes it from its checkpoint"}
        )
    if failure is None:
        return outcome(job, code)
    if state == "TIMEOUT" or "timed-out" in str(failure):
        why = (f"Slurm job {handle.job_id} hit its time limit of {s.time_min} min "
               f"{'after ' + str(s.max_timeouts) + ' requeue(s)' if s.max_timeouts else ''}; raise --time-min "
               "(the same command resumes it from its checkpoint)")  # fmt: skip
    elif state == "OUT_OF_MEMORY":
        why = f"Slurm job {handle.job_id} ran out of memory: ask for more with --slurm mem_gb=N or slurm.mem_gb"
    else:
        why = f"Slurm job {handle.job_id} ended {state}: {str(failure).strip().splitlines()[0]}"
    return outcome(job, Exit.FAILED, why)


def _final_state(handle: Any) -> str:
    """How Slurm says the task ended (CANCELLED, TIMEOUT...): the controller's word, else submitit's (sacct)."""
    with contextlib.suppress(UserError, AttributeError):
        if type(handle).__name__ == "SlurmJob":
            deadline = time.monotonic() + 20.0  # a cancelled job shows as COMPLETING until its processes are gone
            while (state := cluster.states([str(handle.job_id)]).get(str(handle.job_id))) is not None:
                if state[0] not in cluster.ALIVE or time.monotonic() > deadline:
                    return state[0]
                time.sleep(1.0)
    return str(handle.state).split()[0] if str(handle.state).strip() else "UNKNOWN"


def _reason(reason: str) -> str:
    """Slurm's reason, with what the common ones mean."""
    meaning = {"Resources": "waiting for free CPUs/GPUs", "Priority": "other jobs come first",
               "PartitionConfig": "the request exceeds what the partition allows (CPUs, GPUs or memory)",
               "ReqNodeNotAvail": "the nodes it needs are unavailable", "BeginTime": "requeued, about to start",
               "JobArrayTaskLimit": "the array's parallelism limit"}  # fmt: skip
    return f"{reason} ({meaning[reason]})" if reason in meaning else reason or "no reason given"
