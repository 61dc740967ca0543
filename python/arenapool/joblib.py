"""Every ``joblib.Parallel`` call a phase, with one call: :func:`install`.

::

    import arenapool.joblib
    arenapool.joblib.install()

    results = Parallel(n_jobs=2)(delayed(work)(i) for i in range(4000))
    del results           # the memory goes back to the OS here

Each ``Parallel(...)(tasks)`` call then runs inside :func:`arenapool.phase`: with the
process backends (loky, the default, and multiprocessing), the results the parent
unpickles go to the phase's arenas; with the threading backend, the arrays the worker
threads make too. The
phase ends when the call returns its list, or, with ``return_as="generator"`` (or
``"generator_unordered"``), when the generator is exhausted, closed or collected.

The workers of the process backends come back too: each task goes to them wrapped so
that the worker installs arenapool before its first task
(:class:`arenapool._integrations._workers.InWorker`): what the tasks freed goes back
once the worker has been idle for a second (arenapool's idle return, and the watcher for glibc's and
pymalloc's free memory). Without it, each loky
worker kept about 25 MiB more than its idle start after 4,000 tasks of 400 KB results,
for as long as loky keeps it (300 s idle by default); with it, at most 4 MiB more (what
importing arenapool takes, in a worker whose first task came during the job).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator, Optional

from ._core import _optional

try:
    import joblib
except ImportError as error:
    raise _optional.missing("joblib", "joblib", error) from error

from . import phase
from ._integrations._workers import InWorker

__all__ = ["install", "installed", "uninstall"]

_original_call: Optional[Callable[..., Any]] = None


def _ended_when_done(output: Iterator[Any], opened: Optional[phase]) -> Iterator[Any]:
    """``output``, then the end of ``opened`` (also if it is closed or collected)."""
    try:
        yield from output
    finally:
        _optional.end_phase(opened)


def _in_workers(iterable: Iterable[Any]) -> Iterable[Any]:
    """The tasks of ``iterable`` (``delayed``'s triples), each function wrapped in
    :class:`InWorker`; a list if ``iterable`` has a length (joblib reads it), else
    lazily."""
    tasks = (
        (InWorker(task[0]), *task[1:]) if isinstance(task, tuple) and len(task) == 3 and callable(task[0]) else task
        for task in iterable
    )
    return list(tasks) if hasattr(iterable, "__len__") else tasks


def _in_phase(call: Callable[..., Any]) -> Callable[..., Any]:
    """``Parallel.__call__`` (``call``), each call a phase."""

    @functools.wraps(call)
    def call_in_phase(self: joblib.Parallel, iterable: Iterable[Any]) -> Any:
        opened = _optional.open_phase("a joblib.Parallel call")
        try:
            output = call(self, _in_workers(iterable))
        except BaseException:
            _optional.end_phase(opened)
            raise
        if isinstance(output, list):
            _optional.end_phase(opened)
            return output
        return _ended_when_done(output, opened)

    return call_in_phase


def install() -> None:
    """Make every ``joblib.Parallel`` call a phase (see the module's docs). Calling it
    again changes nothing; :func:`uninstall` undoes it."""
    global _original_call
    if _original_call is not None:
        return
    _original_call = joblib.Parallel.__call__
    joblib.Parallel.__call__ = _in_phase(_original_call)


def uninstall() -> None:
    """Give ``joblib.Parallel`` its own ``__call__`` back. Calls already running end
    their phases as they would have."""
    global _original_call
    if _original_call is None:
        return
    joblib.Parallel.__call__ = _original_call
    _original_call = None


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _original_call is not None
