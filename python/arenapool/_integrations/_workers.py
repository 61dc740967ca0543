"""Tasks that bring their worker process's memory back: what
:func:`arenapool.joblib.install` and :func:`arenapool.futures.install` send to the
workers of process pools.

A worker of a process pool (loky's, multiprocessing's, ``ProcessPoolExecutor``'s) is
a program of its own: the results it makes, pickles and sends, and the arguments it
receives, go through its own allocators, which keep what was freed (each of loky's
workers kept about 25 MiB after the joblib report's job). A task wrapped in
:class:`InWorker` installs arenapool in the process that runs it, before its first
call there (:func:`arenapool.install`: the hooks, Arrow's default pool, the watcher).
From then on the worker's large blocks go to arenapool's arenas, whose free pages go
back once the worker has made no large block for a second (the idle return), and the
watcher gives back glibc's and pymalloc's free memory every second while no phase is
open: a worker that goes idle gives back what its tasks freed. In the process that
made it (a thread pool, ``n_jobs=1``) it is the function itself.

Each task is not a phase of its own: a phase's end gives back its arenas' free pages,
which the next task faults in again, and cost 2.3 to 3.9 ms per task of a 400 KB result
(against 0.09 ms for the task itself), where installing once costs nothing per task.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from .._core._warnings import warn_once

__all__ = ["InWorker"]

# The process in which install() was called (a child made by fork has to call it
# again: the watcher is not there).
_installed_in = 0


def _install_here() -> None:
    global _installed_in
    _installed_in = os.getpid()
    try:
        from .. import install

        install()
    except Exception as error:  # the task runs all the same
        warn_once(
            "worker:install",
            f"arenapool could not install itself in this worker ({type(error).__name__}: "
            f"{error}): its tasks run without it",
        )


class InWorker:
    """``function``, installing arenapool in the worker process that calls it (see the
    module's docs). Pickled with the function; its repr and name are the function's."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.parent = os.getpid()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pid = os.getpid()
        if pid != self.parent and pid != _installed_in:
            _install_here()
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.function)

    @property
    def __name__(self) -> str:
        return getattr(self.function, "__name__", type(self.function).__name__)
