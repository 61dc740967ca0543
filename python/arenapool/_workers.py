"""Tasks that bring their worker process's memory back: what
:func:`arenapool.joblib.install` and :func:`arenapool.futures.install` send to the
workers of process pools.

A worker of a process pool (loky's, multiprocessing's, ``ProcessPoolExecutor``'s) is
a program of its own: the results it makes, pickles and sends, and the arguments it
receives, go through its own allocators, which keep what was freed (glibc keeps tens
of MiB after a few thousand tasks). A task wrapped in :class:`InWorker` installs
arenapool in the process that runs it, once, before its first call there
(:func:`arenapool.install`: the hooks, Arrow's default pool, the watcher), and runs
each call as a phase, so that what the task made goes back when it is freed, and what
other allocators hold free goes back when the phase ends (:func:`arenapool.release_others`).
In the process that made it (a thread pool, ``n_jobs=1``) it is the function itself.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ._warnings import warn_once
__all__ = ["InWorker"]


class InWorker:
    """``function``, installing arenapool in the worker process that calls it and
    running each call there as a phase (see the module's docs). Pickled with the
    function; its repr and name are the function's."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.parent = os.getpid()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if os.getpid() == self.parent:
            return self.function(*args, **kwargs)
        from . import phase

        opened = phase()
        try:
            opened.__enter__()
        except Exception as error:  # the task runs all the same
            warn_once(
                "worker:phase",
                f"arenapool could not open a phase in this worker ({type(error).__name__}: "
                f"{error}): its tasks run without one",
            )
            return self.function(*args, **kwargs)
        try:
            return self.function(*args, **kwargs)
        finally:
            try:
                opened.__exit__(None, None, None)
            except Exception as error:  # the task's result or exception goes on
                warn_once(
                    "worker:phase-end",
                    f"arenapool could not end a phase in this worker ({type(error).__name__}: {error})",
                )

    def __repr__(self) -> str:
        return repr(self.function)

    @property
    def __name__(self) -> str:
        return getattr(self.function, "__name__", type(self.function).__name__)
