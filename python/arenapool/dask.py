"""Dask: memory back on the client that gathers and on the workers that compute, with
one line::

    import arenapool.dask
    client = Client(...)
    arenapool.dask.install(client)

- **The client.** Every gather of results of ``client`` (of every client, if
  :func:`install` is called without one) is a phase: ``client.gather``,
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
  and dropped goes back after each computation, glibc's free pages, pymalloc's free
  pools and Arrow's pools included (:func:`arenapool.release_others`). When the worker
  drops data it held (results the client released, intermediates no task needs any
  more), what that data held goes back ``idle`` seconds after the last drop. It makes
  Arrow's jemalloc pool the worker's default (:func:`arenapool.use_arrow_jemalloc`):
  Arrow's default, mimalloc, gives back nothing of what tasks' threads made when
  released from any other thread.
  For ``dask worker`` started by hand: ``dask worker --preload arenapool.dask ...``.

Nothing here fails the program's work: a step that cannot run (Arrow's jemalloc pool
where pyarrow has none, a phase that cannot open around a gather or a worker's tasks)
is skipped with an :class:`arenapool.ArenaPoolWarning`, once per process, and the
gather or the task runs without it; a phase's end that fails on a worker is logged
once on the logger ``arenapool``.

Dask's own memory management goes on as before: the nanny's trim threshold
(``MALLOC_TRIM_THRESHOLD_``), spilling, pausing and restarting are untouched; what a
worker spills or drops goes back to the OS at once when it was made in a phase.

Where each worker's memory is: :func:`breakdowns` (``client.run(arenapool.breakdown)``),
``python -m arenapool.where --scheduler ADDRESS``, or each worker's own ``/metrics``
page (Dask's Prometheus endpoint): with ``prometheus_client`` installed, the plugin adds
arenapool's metrics and ``arenapool_holder_bytes{holder,state}`` there
(:mod:`arenapool.prometheus`).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, Dict, Optional

from ._core import _arrow, _optional, _release

try:
    from distributed import Client, Worker
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError as error:
    raise _optional.missing("dask", "dask", error) from error

from . import install as install_hooks, phase, phase_is_open
from ._core._breakdown import Breakdown, breakdown

__all__ = ["WorkerPhases", "breakdowns", "dask_setup", "install", "installed", "uninstall"]

_EXECUTING = ("executing", "long-running")
# The states of a task that occupies a thread: executing, seceded (long-running), and
# cancelled or resumed while it was one of those. A task leaving one of them may leave
# the worker idle.
_RUNNING = _EXECUTING + ("cancelled", "resumed")


class WorkerPhases(WorkerPlugin):
    """A worker plugin: a phase open while the worker executes tasks, ended when it has
    been idle ``idle`` seconds (see the module's docs).

    Args:
        idle: seconds without a task executing before the phase ends (0.1): a worker
            between two tasks of one computation keeps its phase.
        arrow_jemalloc: make Arrow's jemalloc pool the worker's default
            (:func:`arenapool.use_arrow_jemalloc`; skipped with an
            :class:`arenapool.ArenaPoolWarning` where pyarrow has none).
        metrics: add arenapool's metrics and the worker's memory by holder to the
            worker's ``/metrics`` page, if ``prometheus_client`` is installed (Dask's
            workers serve ``prometheus_client``'s default registry there).
    """

    name = "arenapool"

    def __init__(self, idle: float = 0.1, arrow_jemalloc: bool = True, metrics: bool = True) -> None:
        self.idle = _release.checked_seconds("idle", idle)
        self.arrow_jemalloc = arrow_jemalloc
        self.metrics = metrics
        self._worker: Optional[Worker] = None
        self._phase: Optional[phase] = None
        self._ending: Optional[asyncio.TimerHandle] = None
        self._releasing: Optional[asyncio.TimerHandle] = None
        self.phases = 0
        """Phases this worker has ended."""

    def __getstate__(self) -> Dict[str, Any]:
        return {"idle": self.idle, "arrow_jemalloc": self.arrow_jemalloc, "metrics": self.metrics}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def setup(self, worker: Worker) -> None:
        # Each step optional: one that cannot run warns once, and the worker starts.
        if self.arrow_jemalloc:
            _optional.step(_arrow.NO_JEMALLOC, "making Arrow's jemalloc pool the default", _release.use_arrow_jemalloc)
        _optional.step("install", "installing arenapool's hooks on this worker", install_hooks)
        if self.metrics:
            _optional.step("metrics", "adding arenapool's metrics to the /metrics page", _register_metrics)
        self._worker = worker

    def teardown(self, worker: Worker) -> None:
        self._end()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish in _EXECUTING:
            if self._ending is not None:
                self._ending.cancel()
                self._ending = None
            if self._phase is None:
                # Kept only once entered: one that could not open is not ended later.
                self._phase = _optional.open_phase("a Dask worker's tasks")
        elif start in _RUNNING and self._phase is not None and self._ending is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # outside the worker's event loop: end it now if idle
                self._end_if_idle()
                return
            self._ending = loop.call_later(self.idle, self._end_if_idle)
        elif start == "memory" and self._phase is None and self._releasing is None:
            # Data the worker held is dropped (the client released a result, or no task
            # needs it any more): what its holders keep goes back once no more is
            # dropped for `idle` seconds, instead of at the watcher's next second.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # the watcher will
            self._releasing = loop.call_later(self.idle, self._release_dropped)

    def _release_dropped(self) -> None:
        self._releasing = None
        if self._phase is None and not phase_is_open():
            _release.release_others_from(any_thread=True)

    def _end_if_idle(self) -> None:
        self._ending = None
        worker = self._worker
        if worker is not None and worker.state.all_running_tasks:
            return  # a task still runs, seceded or cancelled: leaving it looks again
        self._end()

    def _end(self) -> None:
        if self._ending is not None:
            self._ending.cancel()
            self._ending = None
        if self._releasing is not None:
            self._releasing.cancel()
            self._releasing = None
        opened, self._phase = self._phase, None
        if opened is not None:
            _optional.end_phase(opened, log=True)  # on the worker's event loop
            self.phases += 1


_metrics_registered = False


def _register_metrics() -> None:
    """arenapool's collectors on ``prometheus_client``'s default registry, once per
    process, if ``prometheus_client`` is installed."""
    global _metrics_registered
    if _metrics_registered:
        return
    try:
        from . import prometheus
    except ImportError:
        return
    prometheus.register(breakdown=True)
    _metrics_registered = True


async def dask_setup(worker: Worker) -> None:
    """``dask worker --preload arenapool.dask``: :class:`WorkerPhases` on this worker."""
    await worker.plugin_add(WorkerPhases(), name=WorkerPhases.name)


_original_gather: Optional[Callable[..., Awaitable[Any]]] = None


def _in_phase(gather: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``gather`` (a client's ``_gather``, bound or not) run in a phase."""

    @functools.wraps(gather)
    async def gather_in_phase(*args: Any, **kwargs: Any) -> Any:
        with _optional.phase_or_none("a gather"):
            return await gather(*args, **kwargs)

    gather_in_phase.__arenapool_phase__ = True  # type: ignore[attr-defined]
    return gather_in_phase


def _client_in_phases(client: Client) -> bool:
    return getattr(vars(client).get("_gather"), "__arenapool_phase__", False)


def install(client: Optional[Client] = None, *, workers: bool = True, **plugin: Any) -> None:
    """Every gather a phase, and every ``joblib.Parallel`` call too (if joblib is
    installed): those of ``client`` if given, of every client of the process if not.
    Given ``client`` and ``workers``, :class:`WorkerPhases` on its workers too, made with
    the keyword arguments ``plugin`` (``idle``, ``arrow_jemalloc``, ``metrics``). Calling
    it again changes nothing but the workers' plugin.
    """
    global _original_gather
    if client is None:
        if _original_gather is None:
            _original_gather = Client._gather
            Client._gather = _in_phase(_original_gather)  # type: ignore[method-assign,assignment]
    elif not _client_in_phases(client):
        # The client's own attribute: other clients of the process are left as they are.
        client._gather = _in_phase(client._gather)  # type: ignore[method-assign,assignment]
    try:
        from . import joblib as arenapool_joblib
    except ImportError:
        pass
    else:
        arenapool_joblib.install()
    if client is not None and workers:
        client.register_plugin(WorkerPhases(**plugin), name=WorkerPhases.name)


def uninstall(client: Optional[Client] = None) -> None:
    """Undo :func:`install`: given ``client``, its gathers are no longer phases (unless
    :func:`install` was called without a client) and its workers lose the plugin (a
    phase open on them ends); without, gathers of every client are no longer phases
    but those of clients :func:`install` was given. joblib's calls stay phases until
    :func:`arenapool.joblib.uninstall`."""
    global _original_gather
    if client is None:
        if _original_gather is not None:
            Client._gather = _original_gather  # type: ignore[method-assign,assignment]
            _original_gather = None
        return
    if _client_in_phases(client):
        del client._gather
    try:
        client.unregister_worker_plugin(WorkerPhases.name)
    except ValueError:  # installed with workers=False: no plugin to take off
        pass


def installed(client: Optional[Client] = None) -> bool:
    """Whether :func:`install` is in effect on the client side: for ``client`` if given
    (by itself or for every client), for every client if not."""
    if client is not None and _client_in_phases(client):
        return True
    return _original_gather is not None


def breakdowns(client: Client) -> Dict[str, Breakdown]:
    """Where each worker's memory is: :func:`arenapool.breakdown` on every worker of
    ``client``, by worker address."""
    result: Dict[str, Breakdown] = client.run(breakdown)
    return result
