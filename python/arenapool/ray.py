"""Ray: memory back on the driver that gets results and on the workers that compute.

One line on each side, and a decorator on the remote functions::

    import ray
    import arenapool.ray

    arenapool.ray.install()                             # the driver: every ray.get a phase
    ray.init(runtime_env=arenapool.ray.runtime_env())   # the workers: arenapool's hooks

    @ray.remote
    @arenapool.ray.task                                 # a phase while tasks run
    def work(i): ...

- **The driver.** :func:`install` makes every call of ``ray.get`` a phase: what the
  driver unpickles from the results goes to the phase's arenas, and the phase's end
  starts the watcher that gives back glibc's free pages (:func:`arenapool.release_others`)
  once the program drops the results.

  What that reaches depends on where Ray puts a result. Ray hands numpy arrays over
  without copying them: a result above Ray's inline limit (100 KiB by default) is read
  in place from the object store, shared memory that Ray's store owns, and one below it
  from the buffer its core worker received the reply in, which the core worker took
  from glibc's ``malloc``. A phase gives back neither while the program holds the
  arrays. Once they are dropped, glibc's free pages go back with the phase (the
  watcher's trim); the object store's do not: Ray keeps its store's pages for the next
  objects until ``ray.shutdown()``. The pages of the store that the driver has read
  are counted in its RSS (``shared`` in :func:`arenapool.breakdown`), though they are
  Ray's store's memory and not the driver's. What the driver copies out of a result
  (``bytes``, strings, lists, a pandas frame of Python objects) is its own, and goes to
  the phase's arenas.
- **The workers.** :func:`runtime_env` is a ``runtime_env`` whose
  ``worker_process_setup_hook`` is :func:`setup_worker`: in every worker process Ray
  starts for the job, it installs arenapool's hooks (:func:`arenapool.install`) and
  makes Arrow's jemalloc pool the default (:func:`arenapool.use_arrow_jemalloc`):
  Arrow's default, mimalloc, gives back nothing of what a task's thread made when
  released from any other thread. From then on, what tasks free goes back to the OS
  once the worker has done no large-block work for a second (arenapool's idle
  return, which trims glibc's heaps too).
- **Tasks.** Ray tells a worker's Python code nothing when a task starts or ends: no
  hook, no plugin, no event. :func:`task`, a decorator for the remote functions (and
  actor methods), tells it: a phase opens when a decorated task starts and ends when
  the worker has had none running for ``idle`` seconds (0.1), so a worker between two
  tasks of one computation keeps its phase and a worker done with a computation gives
  back what its tasks made and dropped (their arenas' free pages, glibc's free pages,
  Arrow's pools) at once, instead of after the idle return's second.

Where each worker's memory is: :func:`breakdowns`; a function in every worker:
:func:`run_on_workers`.

Ray's own memory management goes on as before: the object store, spilling, the memory
monitor that kills workers near the node's limit are untouched.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
import time
from typing import Any, AsyncIterator, Callable, Dict, Generator, List, Mapping, Optional, Tuple, TypeVar, cast

from ._core import _arrow, _optional, _release

try:
    import ray
except ImportError as error:
    raise _optional.missing("ray", "ray", error) from error

from . import install as install_hooks, phase
from ._arenapool import ArenaPoolError
from ._core._breakdown import Breakdown, breakdown

__all__ = [
    "TaskPhases",
    "breakdowns",
    "install",
    "installed",
    "run_on_workers",
    "runtime_env",
    "setup_worker",
    "task",
    "task_phases",
    "uninstall",
]

IDLE_VAR = "ARENAPOOL_RAY_IDLE"
"""The environment variable that carries :func:`runtime_env`'s ``idle`` to the workers."""
ARROW_JEMALLOC_VAR = "ARENAPOOL_RAY_ARROW_JEMALLOC"
"""The environment variable that carries :func:`runtime_env`'s ``arrow_jemalloc``."""

_SETUP_HOOK = "arenapool.ray.setup_worker"

F = TypeVar("F", bound=Callable[..., Any])


class TaskPhases:
    """A process's phase while :func:`task`-decorated calls run: opened when the first
    starts, ended once none has run for ``idle`` seconds, by a thread of its own.

    Where no phase can open, the calls run without one (an
    :class:`arenapool.ArenaPoolWarning`, once); a phase whose end fails is logged once
    on the logger ``arenapool`` and the thread goes on ending the next ones.

    Each process has one (:func:`task_phases`); :func:`setup_worker` sets its ``idle``.
    """

    def __init__(self, idle: float = 0.1) -> None:
        self.idle = _release.checked_seconds("idle", idle)
        self._changed = threading.Condition(threading.Lock())
        self._running = 0
        self._idle_since = 0.0
        self._phase: Optional[phase] = None
        self._ender: Optional[threading.Thread] = None
        self.phases = 0
        """Phases this process has ended."""

    def set_idle(self, idle: float) -> None:
        """Seconds with no task running before the phase ends (0.1)."""
        checked = _release.checked_seconds("idle", idle)
        with self._changed:
            self.idle = checked
            self._changed.notify()

    @property
    def running(self) -> int:
        """Decorated calls running now."""
        return self._running

    def started(self) -> None:
        """A decorated call starts: the phase opens if it is not open."""
        with self._changed:
            if self._phase is None:
                # None if no phase can open (warned once): the call runs without one.
                self._phase = _optional.open_phase("a Ray task")
            self._running += 1
            if self._ender is None:
                self._ender = threading.Thread(target=self._end_when_idle, name="arenapool-ray", daemon=True)
                self._ender.start()

    def finished(self) -> None:
        """A decorated call has returned or raised."""
        with self._changed:
            self._running -= 1
            if self._running == 0:
                self._idle_since = time.monotonic()
                self._changed.notify()

    def _end_when_idle(self) -> None:
        while True:
            with self._changed:
                while True:
                    if self._phase is not None and self._running == 0:
                        remaining = self._idle_since + self.idle - time.monotonic()
                        if remaining <= 0:
                            break
                        self._changed.wait(remaining)
                    else:
                        self._changed.wait()
                opened, self._phase = self._phase, None
            # Outside the lock: a task that starts meanwhile opens a phase of its own.
            if opened is not None:
                _optional.end_phase(opened, log=True)  # logged once; this thread goes on
                self.phases += 1

    def _after_fork_in_child(self) -> None:
        # The child has no phase open and none of the parent's threads.
        self._changed = threading.Condition(threading.Lock())
        self._running = 0
        self._phase = None
        self._ender = None


_task_phases = TaskPhases()
os.register_at_fork(after_in_child=_task_phases._after_fork_in_child)


# Module-level, so that a decorated function pickled by value (Ray sends remote functions
# to the workers with cloudpickle) refers to them by name and reaches the worker's own
# TaskPhases, instead of carrying a copy of the driver's.
def _started() -> None:
    _task_phases.started()


def _finished() -> None:
    _task_phases.finished()


def task_phases() -> TaskPhases:
    """This process's :class:`TaskPhases` (``phases``: how many it has ended)."""
    return _task_phases


def task(function: F) -> F:
    """Decorate a remote function or an actor method (below ``@ray.remote``): while
    calls of it run in a process, that process has a phase open, ended once no
    decorated call has run there for ``idle`` seconds (see :class:`TaskPhases`).

    Plain functions, ``async def`` functions and generators (Ray's streaming tasks)
    alike; a generator's call runs until it is exhausted or closed.

    Raises:
        TypeError: ``function`` is already a remote function or actor class
            (``@arenapool.ray.task`` goes below ``@ray.remote``), or is not callable.
    """
    if hasattr(function, "remote"):
        raise TypeError(
            f"arenapool.ray.task takes the function itself, not {function!r}, which Ray has made "
            "remote: write @ray.remote above @arenapool.ray.task"
        )
    if inspect.isclass(function) or not callable(function):
        raise TypeError(
            f"arenapool.ray.task decorates a function or an actor's method, not {function!r}: "
            "for an actor, decorate its methods"
        )
    wrapper: Callable[..., Any]
    if inspect.isasyncgenfunction(function):

        async def async_generator_task(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            _started()
            try:
                async for item in function(*args, **kwargs):
                    yield item
            finally:
                _finished()

        wrapper = async_generator_task
    elif inspect.iscoroutinefunction(function):

        async def coroutine_task(*args: Any, **kwargs: Any) -> Any:
            _started()
            try:
                return await function(*args, **kwargs)
            finally:
                _finished()

        wrapper = coroutine_task
    elif inspect.isgeneratorfunction(function):

        def generator_task(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            _started()
            try:
                return (yield from function(*args, **kwargs))
            finally:
                _finished()

        wrapper = generator_task
    else:

        def plain_task(*args: Any, **kwargs: Any) -> Any:
            _started()
            try:
                return function(*args, **kwargs)
            finally:
                _finished()

        wrapper = plain_task
    return cast(F, functools.wraps(function)(wrapper))


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook`` (see :func:`runtime_env`): makes Arrow's
    jemalloc pool the default unless ``ARENAPOOL_RAY_ARROW_JEMALLOC=0``, installs
    arenapool's hooks, and sets :func:`task`'s ``idle`` from ``ARENAPOOL_RAY_IDLE``.

    To call from a setup hook of one's own, in every worker process before its first
    task.

    A step that cannot run (pyarrow without its jemalloc pool, hooks that cannot be
    installed) is skipped with an :class:`arenapool.ArenaPoolWarning`, once, and the
    worker starts all the same.

    Raises:
        ValueError: ``ARENAPOOL_RAY_IDLE`` is not a number of seconds.
    """
    idle = os.environ.get(IDLE_VAR)
    if idle is not None:
        try:
            seconds = float(idle)
        except ValueError:
            raise ValueError(f"{IDLE_VAR} must be a number of seconds, 0 or more; got {idle!r}") from None
        _task_phases.set_idle(seconds)
    # Each step optional: one that cannot run warns once, and the worker starts.
    if os.environ.get(ARROW_JEMALLOC_VAR, "1") != "0":
        _optional.step(_arrow.NO_JEMALLOC, "making Arrow's jemalloc pool the default", _release.use_arrow_jemalloc)
    _optional.step("install", "installing arenapool's hooks on this worker", install_hooks)


def runtime_env(
    env: Optional[Mapping[str, Any]] = None, *, idle: float = 0.1, arrow_jemalloc: bool = True
) -> Dict[str, Any]:
    """A ``runtime_env`` for ``ray.init``, ``.options`` or a job: ``env`` (a dict, or
    none) with :func:`setup_worker` as its ``worker_process_setup_hook`` and its
    settings in ``env_vars``.

    Args:
        env: a runtime environment to add to (``pip``, ``env_vars``, ...); it is not
            changed.
        idle: seconds with no :func:`task` running before a worker's phase ends.
        arrow_jemalloc: make Arrow's jemalloc pool the workers' default.

    Raises:
        ValueError: ``env`` has a ``worker_process_setup_hook`` of its own (Ray runs
            one): call :func:`setup_worker` from it instead; or ``idle`` is negative.
    """
    seconds = _release.checked_seconds("idle", idle)
    merged = dict(env or {})
    hook = merged.get("worker_process_setup_hook")
    if hook is not None and hook != _SETUP_HOOK:
        raise ValueError(
            f"this runtime_env has a worker_process_setup_hook already ({hook!r}), and Ray runs one "
            "per worker: call arenapool.ray.setup_worker() from it instead"
        )
    merged["worker_process_setup_hook"] = _SETUP_HOOK
    merged["env_vars"] = {
        **dict(merged.get("env_vars") or {}),
        IDLE_VAR: repr(seconds),
        ARROW_JEMALLOC_VAR: "1" if arrow_jemalloc else "0",
    }
    return merged


_original_get: Optional[Callable[..., Any]] = None


def _in_phase(get: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(get)
    def get_in_phase(*args: Any, **kwargs: Any) -> Any:
        with _optional.phase_or_none("a ray.get"):
            return get(*args, **kwargs)

    return get_in_phase


def install() -> None:
    """Make every call of ``ray.get`` a phase (see the module's docs). Calling it again
    changes nothing; :func:`uninstall` undoes it.

    It replaces the attribute ``ray.get``: a name bound by ``from ray import get``
    before the call keeps Ray's own, and so does ``await`` on an ``ObjectRef``.
    """
    global _original_get
    if _original_get is None:
        _original_get = ray.get
        ray.get = _in_phase(_original_get)


def uninstall() -> None:
    """Undo :func:`install`: ``ray.get`` is Ray's own again."""
    global _original_get
    if _original_get is not None:
        ray.get = _original_get
        _original_get = None


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _original_get is not None


@ray.remote(num_cpus=0)
class _Barrier:
    """Holds every caller of :meth:`wait` until ``parties`` have called it."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.all_here = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_here.set()
        await self.all_here.wait()


R = TypeVar("R")


@ray.remote(num_cpus=1)
def _once_all_run(barrier: Any, function: Callable[[], Any]) -> Tuple[str, int, Any]:
    ray.get(barrier.wait.remote())
    return ray.get_runtime_context().get_node_id(), os.getpid(), function()


def run_on_workers(function: Callable[[], R], *, timeout: Optional[float] = 60.0) -> Dict[str, R]:
    """``function()`` in as many worker processes as the cluster has CPUs, its results
    by ``"node id:pid"`` of the worker: ``run_on_workers(arenapool.trim)``, say.

    Ray has no call that runs a function in every worker: this runs one task per CPU,
    each held until all have started, so that each runs in a worker of its own (Ray
    picks them, its idle workers first). It waits for workers that are busy, and for
    Ray to start new ones if need be; a worker Ray keeps beyond the cluster's CPU count
    is not reached. ``function`` must pickle (Ray's cloudpickle takes lambdas).

    Raises:
        ArenaPoolError: the cluster has no CPU.
        ray.exceptions.GetTimeoutError: the tasks did not all run within ``timeout``
            seconds (``None``: no limit).
    """
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < 1:
        raise ArenaPoolError(
            "arenapool.ray.run_on_workers() needs a Ray cluster with at least one CPU: call ray.init()"
        )
    barrier = _Barrier.remote(cpus)  # type: ignore[attr-defined]
    try:
        get = _original_get or ray.get  # no phase: the results are small
        results: List[Tuple[str, int, R]] = get(
            [_once_all_run.remote(barrier, function) for _ in range(cpus)], timeout=timeout
        )
    finally:
        ray.kill(barrier)
    return {f"{node}:{pid}": result for node, pid, result in results}


def breakdowns(*, timeout: Optional[float] = 60.0) -> Dict[str, Breakdown]:
    """Where the workers' memory is: :func:`arenapool.breakdown` in each worker that
    :func:`run_on_workers` reaches, by ``"node id:pid"``."""
    return run_on_workers(breakdown, timeout=timeout)
