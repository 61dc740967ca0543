"""Dask: memory back on the client that gathers and on the workers that compute, with
one line::

    import arenapool.dask
    client = Client(...)
    arenapool.dask.install(client)

- **The client.** Every gather of results is a phase: ``client.gather``,
  ``client.compute(...).result()``, ``future.result()``, ``dask.compute`` and
  ``collection.compute()`` (all of them gather), and every ``joblib.Parallel`` call,
  the ones under ``joblib.parallel_backend("dask")`` included (see
  :mod:`arenapool.joblib`). The results the client receives and unpickles go to the
  phase's arenas and back to the OS when the program drops them. ``persist`` keeps its
  results on the workers: nothing reaches the client.
- **The workers.** :class:`WorkerPhases`, a worker plugin, registered on every worker
  of ``client`` (and on workers that join later): it installs arenapool's hooks in the
  worker process, opens a phase when a task starts executing and ends it when the
  worker has had no task executing for ``idle`` seconds (0.1), so what the tasks made
  and dropped goes back after each computation, glibc's free pages and Arrow's pools
  included (:func:`arenapool.release_others`). It makes Arrow's jemalloc pool the
  worker's default (:func:`arenapool.use_arrow_jemalloc`): Arrow's default, mimalloc,
  gives back nothing of what tasks' threads made when released from any other thread.
  For ``dask worker`` started by hand: ``dask worker --preload arenapool.dask ...``.

Dask's own memory management goes on as before: the nanny's trim threshold
(``MALLOC_TRIM_THRESHOLD_``), spilling, pausing and restarting are untouched; what a
worker spills or drops goes back to the OS at once when it was made in a phase.

Where each worker's memory is: :func:`breakdowns` (``client.run(arenapool.breakdown)``),
or ``python -m arenapool.where --scheduler ADDRESS``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, Dict, Optional

from distributed import Client, Worker
from distributed.diagnostics.plugin import WorkerPlugin

from . import _release, install as install_hooks, phase
from ._breakdown import Breakdown, breakdown

__all__ = ["WorkerPhases", "breakdowns", "dask_setup", "install", "installed", "uninstall"]

_EXECUTING = ("executing", "long-running")


class WorkerPhases(WorkerPlugin):
    """A worker plugin: a phase open while the worker executes tasks, ended when it has
    been idle ``idle`` seconds (see the module's docs).

    Args:
        idle: seconds without a task executing before the phase ends (0.1): a worker
            between two tasks of one computation keeps its phase.
        arrow_jemalloc: make Arrow's jemalloc pool the worker's default
            (:func:`arenapool.use_arrow_jemalloc`).
    """

    name = "arenapool"

    def __init__(self, idle: float = 0.1, arrow_jemalloc: bool = True) -> None:
        if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle >= 0:
            raise ValueError(f"idle must be a number of seconds, 0 or more; got {idle!r}")
        self.idle = float(idle)
        self.arrow_jemalloc = arrow_jemalloc
        self._worker: Optional[Worker] = None
        self._phase: Optional[phase] = None
        self._ending: Optional[asyncio.TimerHandle] = None
        self.phases = 0
        """Phases this worker has ended."""

    def __getstate__(self) -> Dict[str, Any]:
        return {"idle": self.idle, "arrow_jemalloc": self.arrow_jemalloc}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def setup(self, worker: Worker) -> None:
        if self.arrow_jemalloc:
            _release.use_arrow_jemalloc()
        install_hooks()
        self._worker = worker

    def teardown(self, worker: Worker) -> None:
        self._end()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish in _EXECUTING:
            if self._ending is not None:
                self._ending.cancel()
                self._ending = None
            if self._phase is None:
                self._phase = phase()
                self._phase.__enter__()
        elif start in _EXECUTING and self._phase is not None and self._ending is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # outside the worker's event loop: end it now if idle
                self._end_if_idle()
                return
            self._ending = loop.call_later(self.idle, self._end_if_idle)

    def _end_if_idle(self) -> None:
        self._ending = None
        worker = self._worker
        if worker is not None and worker.state.executing_count > 0:
            return  # a task still runs: its end schedules another check
        self._end()

    def _end(self) -> None:
        if self._ending is not None:
            self._ending.cancel()
            self._ending = None
        opened, self._phase = self._phase, None
        if opened is not None:
            opened.__exit__(None, None, None)
            self.phases += 1


async def dask_setup(worker: Worker) -> None:
    """``dask worker --preload arenapool.dask``: :class:`WorkerPhases` on this worker."""
    await worker.plugin_add(WorkerPhases(), name=WorkerPhases.name)


_original_gather: Optional[Callable[..., Awaitable[Any]]] = None


def _in_phase(gather: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(gather)
    async def gather_in_phase(self: Client, *args: Any, **kwargs: Any) -> Any:
        with phase():
            return await gather(self, *args, **kwargs)

    return gather_in_phase


def install(client: Optional[Client] = None, *, workers: bool = True, **plugin: Any) -> None:
    """Every gather of every client a phase, every ``joblib.Parallel`` call too (if
    joblib is installed), and, given ``client`` and ``workers``, :class:`WorkerPhases`
    on its workers, made with the keyword arguments ``plugin`` (``idle``,
    ``arrow_jemalloc``). Calling it again changes nothing but the workers' plugin.
    """
    global _original_gather
    if _original_gather is None:
        _original_gather = Client._gather
        Client._gather = _in_phase(_original_gather)  # type: ignore[method-assign,assignment]
    try:
        from . import joblib as arenapool_joblib
    except ImportError:
        pass
    else:
        arenapool_joblib.install()
    if client is not None and workers:
        client.register_plugin(WorkerPhases(**plugin), name=WorkerPhases.name)


def uninstall(client: Optional[Client] = None) -> None:
    """Undo :func:`install`: gathers are no longer phases (joblib's calls stay phases
    until :func:`arenapool.joblib.uninstall`), and, given ``client``, its workers lose
    the plugin (a phase open on them ends)."""
    global _original_gather
    if _original_gather is not None:
        Client._gather = _original_gather  # type: ignore[method-assign,assignment]
        _original_gather = None
    if client is not None:
        client.unregister_worker_plugin(WorkerPhases.name)


def installed() -> bool:
    """Whether :func:`install` is in effect on the client side."""
    return _original_gather is not None


def breakdowns(client: Client) -> Dict[str, Breakdown]:
    """Where each worker's memory is: :func:`arenapool.breakdown` on every worker of
    ``client``, by worker address."""
    result: Dict[str, Breakdown] = client.run(breakdown)
    return result
