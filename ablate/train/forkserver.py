"""Workers forked from a warm process: torch imported once a sweep, not once a job.

A worker started as `python -m ablate.worker RUN_DIR` spends its first seconds importing torch, and, when it
makes its optimizer, torch._dynamo: 4 s of a free core on an AVX2 EPYC, twice that on a shared one. The test
suite trains hundreds of jobs of a few seconds each. So the local launcher starts this server once a sweep
(`python -m ablate.train.forkserver`). It imports what a worker imports, never touches CUDA or runs a
kernel, and forks one child a job, which goes straight to training.

A child is set up as the launcher would start a fresh worker, before it runs a line of the worker:
- in a session of its own (the sweep forwards Ctrl-C, SIGTERM and Slurm's warning to it);
- SIGKILLed if the server dies (and the server if the sweep dies, however it dies);
- pinned to the job's cores, with torch's threads as a fresh process takes them;
- with the sweep's environment of that moment (the job's CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS
  included) and its working directory;
- stdin from /dev/null, stdout and stderr appended to the run's worker.log;
- showing a fresh worker's command line to ps and `pgrep -f`.
The server tells the sweep a child's pid once it is set up, and its exit code when it ends (a signal's as
subprocess gives it: -9 for SIGKILL); the sweep holds a Popen-like `Forked` for each. Multi-GPU jobs
(torchrun) and Slurm's tasks start fresh workers, and so does every job with `ABLATE_FORKSERVER=0`, where the
server cannot start (not Linux) and once it has died. The server is forked from `ablate run` itself where that
is safe and shows the same (fork_here: the test suite's commands); elsewhere it starts fresh.

The protocol is JSON lines. The sweep writes {"job", "log", "cwd", "env", "cores"}; the server answers
{"started": pid} or {"error": why}, and later {"exited": pid, "code": code}.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from ablate.rundir import LOG
from ablate.train.children import a_child_of_the_sweep, die_with_parent, released_in_child, signals_held
from ablate.train.job import Job

ENABLED = "ABLATE_FORKSERVER"  # 0: every worker starts fresh


def available() -> bool:
    """Whether workers may be forked here: Linux (prctl, sched_setaffinity), and not turned off."""
    return sys.platform == "linux" and os.environ.get(ENABLED, "1") != "0"


ROOM = 4096  # bytes of command line the server is started with, for its workers to show theirs in (ps, pgrep -f)


def show_command_line(argv: list[str]) -> None:
    """What ps and `pgrep -f` show for this process (/proc/self/cmdline): `argv`, within the bytes its own command
    line took (arg_start to arg_end in /proc/self/stat), the rest zeroed. A forked worker shows the command line
    a fresh worker has, `python -m ablate.worker RUN_DIR`."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end, fields 48 and 49 of proc(5)
    line = "\0".join(argv).encode()[: end - start - 1]
    ctypes.memmove(start, line.ljust(end - start, b"\0"), end - start)


def room() -> int:
    """Bytes this process's command line may show (arg_end - arg_start in /proc/self/stat)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[46]) - int(fields[45])


# ---- the sweep's side ------------------------------------------------------------------------------------------


class NotForked(Exception):  # noqa: N818 (not an error of the run: the launcher starts it fresh instead)
    """The server could not start a worker: it could not start, has ended, or the child died in its set-up."""


class Forked:
    """A forked worker as the launcher sees it: Popen's pid, poll(), wait() and returncode."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.hear(block=False)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self.server.hear(block=True)
        return self.returncode


class ForkServer:
    """The launcher's handle on the server: started on first use, ended by `close` or by this process's end."""

    @classmethod
    def for_sweep(cls) -> ForkServer:
        """The server `fork_here` forked from this process, taken once, while it runs; else one that starts fresh
        on first use."""
        global _forked_here
        server, _forked_here = _forked_here, None
        if server is not None and server.pid is not None:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(server.pid, os.WNOHANG)[0] == 0:
                    return server
            server.reap = lambda: None  # it died, reaped just now: a fresh one instead
            server.close()
        return cls()

    def __init__(self) -> None:
        self.pid: int | None = None  # the server's, while it runs
        self.requests = self.replies = -1  # the pipes to it and from it
        self.reap: Callable[[], object] = lambda: None  # waits for the server's end
        self.children: dict[int, Forked] = {}
        self.answers: list[dict[str, Any]] = []  # to requests, in their order, not yet taken
        self.pending = b""
        self.ended = False  # once it has, the sweep's workers start fresh: a server that died is not restarted
        self.forked_here = False  # by fork_here, from the sweep's process; else started fresh

    def ensure_running(self) -> None:
        """Starts the server, `python -m ablate.train.forkserver`, unless it runs (its imports take seconds: a
        request made meanwhile waits for them). Raises NotForked once it has ended."""
        if self.ended:
            raise NotForked("the fork server has ended")
        if self.pid is None:
            requests_r, self.requests = os.pipe()
            self.replies, replies_w = os.pipe()
            command = [sys.executable, "-m", "ablate.train.forkserver", " " * ROOM]  # room for workers' lines
            with signals_held():
                server = subprocess.Popen(command, stdin=requests_r, stdout=replies_w, start_new_session=True,
                                          preexec_fn=a_child_of_the_sweep)  # fmt: skip
            os.close(requests_r)
            os.close(replies_w)
            self.pid, self.reap = server.pid, server.wait

    def start(self, job: Job, env: dict[str, str], cores: Iterable[int]) -> Forked:
        """Forks a worker for `job`; returns once it is set up (a signal sent to it now is its own to handle).

        Raises NotForked where the server cannot start, has ended, or the child died in its set-up.
        """
        self.ensure_running()
        request = {"job": str(job.directory), "log": str(job.directory / LOG), "cwd": os.getcwd(), "env": env,
                   "cores": sorted(cores)}  # fmt: skip
        with contextlib.suppress(OSError):  # a server that has ended: said by hear() below
            _write(self.requests, request)
        while not self.answers:
            if self.pid is None:
                raise NotForked("the fork server ended")
            self.hear(block=True)
        answer = self.answers.pop(0)
        if "error" in answer:
            raise NotForked(answer["error"])
        self.children[answer["started"]] = Forked(self, answer["started"])
        return self.children[answer["started"]]

    def hear(self, block: bool) -> None:
        """Takes in what the server has said, children started and ended: all of it, or (`block`) at least one
        message. Where the server has ended, so have its children (die_with_parent): SIGKILLed."""
        heard = False
        while self.pid is not None:
            ready, _, _ = select.select([self.replies], [], [], None if block and not heard else 0)
            if not ready:
                return
            chunk = os.read(self.replies, 65536)
            if not chunk:
                self.close()
                return
            *lines, self.pending = (self.pending + chunk).split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "exited" in message:
                    if (child := self.children.pop(message["exited"], None)) is not None:
                        child.returncode = message["code"]
                else:
                    self.answers.append(message)
                heard = True

    def close(self) -> None:
        """Ends the server: once its children have ended, it has nothing left to do; any left die with it
        (SIGKILLed: die_with_parent), and are recorded so."""
        if self.pid is not None:
            for fd in (self.requests, self.replies):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.reap()
            self.pid = None
        for child in self.children.values():
            child.returncode = -signal.SIGKILL
        self.children.clear()
        self.pending, self.ended = b"", True


_forked_here: ForkServer | None = None


def fork_here() -> None:
    """Forks the server from this process, which then need not start one fresh (seconds of imports); `ablate run`
    and `ablate check` call it before they read an experiment (a plugin's import, or a touch of CUDA, is then the
    worker's own, as in a fresh server's). Only where that is safe and shows the same, else it does nothing and the
    launcher starts the server fresh: on Linux; in a process with one thread (no OpenMP or OpenBLAS pool, nothing
    another thread holds) and no file open but its standard streams (nothing for the server to hold or close
    under an object that owns it); with a command line of ROOM bytes for the workers' (ps, `pgrep -f`). A command
    typed in a shell has less room, and with numpy's OpenBLAS a thread a core: in practice this serves the test
    suite's commands, forked from a warm process started with that room (tests/fixtures/warm_cli.py)."""
    global _forked_here
    if _forked_here is not None or not available() or room() < ROOM:
        return
    import torch._dynamo  # noqa: F401 (what serve imports, here: the child has it for nothing)

    import ablate.train.pipeline
    import ablate.train.spec  # noqa: F401

    if not _one_thread() or _open_files():
        return
    server = ForkServer()
    requests_r, server.requests = os.pipe()
    server.replies, replies_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    gc.disable()
    gc.freeze()  # the child never collects what this process left to collect (Python's advice before a fork)
    with signals_held():
        pid = os.fork()
    if pid == 0:
        released_in_child()
        gc.enable()

        def become_server() -> NoReturn:
            os.setsid()
            die_with_parent()
            os.dup2(requests_r, 0)
            os.dup2(replies_w, 1)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the four ends of the two pipes: none was open before
            serve()

        end_as_python_would(become_server)
    gc.unfreeze()
    gc.enable()
    os.close(requests_r)
    os.close(replies_w)
    server.pid, server.reap, server.forked_here = pid, lambda: os.waitpid(pid, 0), True
    _forked_here = server


def close_unused() -> None:
    """Ends the server fork_here forked where no sweep took it (nothing to train, or an error first)."""
    global _forked_here
    if _forked_here is not None:
        _forked_here.close()
        _forked_here = None


LINGER = 0.1  # seconds a thread Python has joined may take to leave /proc/self/task


def _one_thread() -> bool:
    """This process runs one thread. A thread that Python has joined can stay in /proc/self/task a moment while the
    OS ends it (a fork then was refused now and then under load), so a second task is waited for, up to LINGER,
    when Python itself runs no other thread; a pool that Python does not see (OpenMP, OpenBLAS) stays and costs
    that wait."""
    import threading

    deadline = time.monotonic() + LINGER
    while len(os.listdir("/proc/self/task")) != 1:
        if threading.active_count() > 1 or time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _open_files() -> list[int]:
    """This process's open file descriptors above stderr."""
    listed = [int(fd) for fd in os.listdir("/proc/self/fd")]  # the listing's own descriptor is closed by now

    def is_open(fd: int) -> bool:
        try:
            os.fstat(fd)
        except OSError:
            return False
        return True

    return [fd for fd in listed if fd > 2 and is_open(fd)]


def end_as_python_would(body: Callable[[], object]) -> NoReturn:
    """In a forked child: runs `body`, then ends as a fresh `python` would, never returning into the code that
    forked it: SystemExit's code, an uncaught exception's traceback on stderr and code 1, Ctrl-C's SIGINT."""
    from ablate.train.worker import exit_at_once

    try:
        body()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_at_once(code)


def _write(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    while data:
        data = data[os.write(fd, data) :]


def _tell(replies: int, message: dict[str, Any]) -> None:
    """The server's word to the sweep; where the sweep has gone (a Ctrl-C while a worker started), this process goes
    too, at once and without a traceback: its children die with it (die_with_parent)."""
    try:
        _write(replies, message)
    except BrokenPipeError:
        os._exit(0)


# ---- the server's side -----------------------------------------------------------------------------------------


def serve(requests: int = 0, replies: int = 1) -> NoReturn:
    """Imports what a worker imports, then forks a worker a request until the sweep closes `requests`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the sweep stops its workers itself
    show_command_line([sys.executable, "-m", "ablate.train.forkserver"])
    from ablate.train.worker import bound_primitive_caches

    bound_primitive_caches()
    # What a worker imports, all but a few small modules: torch, and torch._dynamo, which torch.optim's optimizers
    # import when the first is made (half of a worker's imports, sympy among them); the data, the parts, the model,
    # the trainer and the pipeline.
    import torch._dynamo  # noqa: F401

    import ablate.train.pipeline
    import ablate.train.spec  # noqa: F401

    serve_requests(requests, replies, lambda request, fds: _fork(request, replies, fds))


def serve_requests(requests: int, replies: int,
                   fork: Callable[[dict[str, Any], tuple[int, ...]], None]) -> NoReturn:  # fmt: skip
    """Hands each request read from `requests` (JSON lines) to `fork`, with the descriptors its child is to close,
    and says on `replies` when each child ends, until `requests` closes: then this process ends at once."""
    wake_r, wake_w = os.pipe()  # SIGCHLD wakes the select below
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([requests, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _reap(replies)
        if requests not in ready:
            continue
        chunk = os.read(requests, 65536)
        if not chunk:  # the sweep is done (or dead: then the children die with this process)
            os._exit(0)  # at once: tearing down what it imported took 2 s, and it has nothing to flush or release
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            fork(json.loads(line), (requests, replies, wake_r, wake_w))


def _reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _tell(replies, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(request: dict[str, Any], replies: int, server_fds: tuple[int, ...]) -> None:
    """Forks the worker of `request`; answers with its pid once it is set up, or with why it could not start."""
    ready_r, ready_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as error:
        os.close(ready_r)
        os.close(ready_w)
        _tell(replies, {"error": f"fork failed: {error}"})
        return
    if pid == 0:
        os.close(ready_r)
        end_as_python_would(lambda: _become_worker(request, ready_w, server_fds))
    os.close(ready_w)
    answer = os.read(ready_r, 1)  # b"" if it died in its set-up
    os.close(ready_r)
    _tell(replies, {"started": pid} if answer else {"error": "the forked worker died in its set-up"})


def _become_worker(request: dict[str, Any], ready_w: int, server_fds: Iterable[int]) -> NoReturn:
    """In the child: becomes the worker `python -m ablate.worker` would be, trains, and exits with its code."""
    from ablate.train import worker

    os.setsid()
    show_command_line([sys.executable, "-m", "ablate.worker", request["job"]])
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stop = worker.Stop()  # SIGINT, SIGTERM and SIGUSR2 from here on ask it to checkpoint and stop
    die_with_parent()
    for fd in server_fds:  # its pipes to the sweep and its wake-up pipe (0 and 1 are replaced below)
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if request["cores"]:
        os.sched_setaffinity(0, request["cores"])
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    _threads_as_fresh()
    os.write(ready_w, b"1")
    os.close(ready_w)
    worker.exit_at_once(worker.main([request["job"]], stop, forked=True))  # as a fresh worker ends


def _threads_as_fresh() -> None:
    """torch's threads as a fresh process would take them: OMP_NUM_THREADS, else every core it may run on. OpenMP
    read both when the server loaded it, before the job's pinning and environment; a job that pins its threads
    sets them again when it starts (Placement.enter)."""
    import torch

    threads = len(os.sched_getaffinity(0))
    with contextlib.suppress(ValueError):
        threads = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    torch.set_num_threads(max(1, threads))


if __name__ == "__main__":
    die_with_parent()
    serve()
