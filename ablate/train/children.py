"""The processes a sweep starts, as they are made: SIGINT and SIGTERM held back across the fork and released in the
child, and a child that dies with its parent. Used by the local launcher's fresh workers and by the fork server
(ablate.train.forkserver), fresh or forked from the sweep."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Holds back SIGINT and SIGTERM while this process forks: one that comes meanwhile is handled as the block ends.
    Python cannot raise a handler's KeyboardInterrupt inside a callback around fork (logging's lock release, run
    when a Popen with a preexec_fn forks): it printed "Exception ignored" with a traceback and went on, and a sweep
    Ctrl-C'd as it started a worker trained on to the end. A child forked in the block starts with them held: it
    calls `released_in_child` first."""
    parent = os.getpid()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        if os.getpid() == parent:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def released_in_child() -> None:
    """In a child forked under `signals_held`: drops a SIGINT or SIGTERM that came for the parent (a terminal's Ctrl-C
    reaches the whole process group, the child too before it leaves it), takes their defaults (a worker sets its own
    handlers), then lets them through."""
    for sig in HELD:
        signal.signal(sig, signal.SIG_IGN)  # discards one pending
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


def a_child_of_the_sweep() -> None:
    """A worker's or a fresh server's preexec_fn: signals released, and SIGKILL when the sweep dies."""
    released_in_child()
    die_with_parent()


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies, even by SIGKILL, so no orphan keeps training."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
