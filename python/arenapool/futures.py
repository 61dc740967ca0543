"""Memory-bounded maps over ``concurrent.futures`` executors, each one a phase.

The problem this module solves: a class holds a large array, and a process pool maps
one of its methods over many inputs::

    class Model:
        def __init__(self):
            self.table = np.load("table.npy")          # 500 MiB

        def score(self, i):
            return self.table[i::100] * 2               # a result of a few MiB

    with ProcessPoolExecutor(2) as executor:
        for result in executor.map(model.score, range(100)):
            save(result)                                # slower than the workers

Two things make this use far more memory than one table:

- ``model.score`` is a bound method: pickling it pickles ``model``, so the whole table
  is copied into every task, in the parent (which pickles it) and in the workers.
- ``Executor.map`` submits every task at once, and the pool keeps the workers busy: when
  the loop body is slower than the workers, finished results pile up in the parent,
  up to all of them. (Python 3.14's ``buffersize`` argument bounds that; earlier
  versions have nothing.)

:func:`map` fixes both, in one line::

    import arenapool.futures

    def score(table, i):                                # a module-level function
        return table[i::100] * 2

    with ProcessPoolExecutor(2) as executor:
        for result in arenapool.futures.map(executor, score, range(100),
                                            window=2, state=model.table):
            save(result)

The table reaches the workers without a copy for each: workers that the ``fork``
start method makes inherit it, sharing its pages with the parent; under ``spawn`` and
``forkserver`` it goes once into shared memory, which every worker reads in place. At
most ``window`` tasks are submitted and not yet handed to you, and each result is
yours alone to drop. The parent's peak memory is then the table plus about
``window`` results, however slow the loop is. The whole map is a
:class:`arenapool.phase`, so the memory of the results goes back to the operating
system when you drop them.

:func:`install` is the other tool: it makes every ``Executor.map`` call of the program
(``ThreadPoolExecutor``, ``ProcessPoolExecutor``, and the executors built on
``concurrent.futures.Executor``) a phase, without changing anything else about it::

    arenapool.futures.install()
    with ThreadPoolExecutor(4) as executor:
        results = list(executor.map(work, inputs))     # a phase, from call to last result
    del results                                         # the memory goes back to the OS

Arrays that worker threads make are covered too: arenapool's numpy handler is numpy's
default in every thread (see :func:`arenapool.install`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import mmap
import os
import pickle
import secrets
import struct
import tempfile
import threading
import warnings
from concurrent.futures import Executor, Future
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, TypeVar

from . import ArenaPoolError, phase
from ._core import _optional
from ._integrations._workers import InWorker

__all__ = ["install", "installed", "map", "uninstall"]

T = TypeVar("T")
R = TypeVar("R")


class _Unset:
    """The type of :data:`_UNSET`: "no state was given" (``None`` is a valid state)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()

# A function whose pickle is larger than this carries data with every task: warn.
_BIG_FUNCTION = 1 << 20


# --------------------------------------------------------------------------------------
# Which executors run their workers in threads.
# --------------------------------------------------------------------------------------


def _runs_in_threads(executor: Executor) -> bool:
    """Whether the executor's workers are threads of this interpreter."""
    interpreters = getattr(concurrent.futures, "InterpreterPoolExecutor", None)
    if interpreters is not None and isinstance(executor, interpreters):
        return False  # each worker is an interpreter of its own: like another process
    return isinstance(executor, concurrent.futures.ThreadPoolExecutor)


def _on_executor_thread(executor: Executor) -> bool:
    """Whether the calling thread is one of the executor's own.

    Waiting there for the executor's futures could wait forever (a map's iterator
    collected by the garbage collector while a worker thread or a process pool's
    management thread runs).
    """
    current = threading.current_thread()
    if current in getattr(executor, "_threads", ()):
        return True
    return current is getattr(executor, "_executor_manager_thread", None)


def _start_method(executor: Executor) -> Optional[str]:
    """How a ``ProcessPoolExecutor`` starts its workers (``"fork"``, ``"spawn"``,
    ``"forkserver"``), from its multiprocessing context; ``None`` for any other
    executor (loky, MPI pools...) or when the context does not say."""
    if not isinstance(executor, concurrent.futures.ProcessPoolExecutor):
        return None
    get_start_method = getattr(getattr(executor, "_mp_context", None), "get_start_method", None)
    if not callable(get_start_method):
        return None
    try:
        method = get_start_method(allow_none=False)
    except Exception:  # a context of another kind: take it as not forking
        return None
    return method if isinstance(method, str) else None


def _workers_not_started(executor: Executor) -> bool:
    """Whether none of a ``ProcessPoolExecutor``'s workers has been started yet (it
    starts them at ``submit``)."""
    processes = getattr(executor, "_processes", None)
    return isinstance(processes, dict) and not processes


# --------------------------------------------------------------------------------------
# State inherited by workers that fork starts while the map runs.
# --------------------------------------------------------------------------------------

# The states of the maps running in this process that hand theirs over by fork, by
# token. A worker forked while a map runs has this dictionary, state included, in its
# copy of the parent's memory: pages shared with the parent until one of them writes.
_inherited: Dict[str, Any] = {}


def _call_with_inherited(fn: Callable[[Any, T], R], token: str, x: T) -> R:
    """A task of :func:`map` with ``state=`` handed over by fork, in a worker:
    ``fn(state, x)``."""
    try:
        state = _inherited[token]
    except KeyError:
        raise ArenaPoolError(
            "arenapool.futures.map: this worker has not inherited the map's state: it was "
            "not forked from the process that called map while the map ran. Give map a "
            "ProcessPoolExecutor of this process whose workers it starts (a new one)"
        ) from None
    return fn(state, x)


# --------------------------------------------------------------------------------------
# State sent to process workers once, through a file in shared memory.
# --------------------------------------------------------------------------------------

# The file: a header, a table of the out-of-band buffers (offset and length of each),
# the pickle stream, then each buffer at an offset that is a multiple of the page size.
_MAGIC = b"APSTATE1"
_HEADER = struct.Struct("<8s16sQQQ")  # magic, token, stream offset, stream length, buffers
_ENTRY = struct.Struct("<QQ")  # buffer offset, buffer length
_TOKEN_BYTES = 8  # token_hex(8): 16 characters


def _state_directory(nbytes: int) -> str:
    """Where state files go: ``/dev/shm`` (memory, no disk) if it can take ``nbytes``.

    A ``/dev/shm`` too small for the state (containers often make it 64 MiB) or
    missing (off Linux) gives the temporary directory instead; the workers map the
    file from the page cache either way.
    """
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        try:
            stats = os.statvfs(shm)
        except OSError:
            pass
        else:
            if stats.f_bavail * stats.f_frsize >= nbytes + (1 << 20):
                return shm
    return tempfile.gettempdir()


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``, straight from its memory (no copy)."""
    while data:
        written = os.pwrite(fd, data, offset)
        data = data[written:]
        offset += written


class _StateFile(NamedTuple):
    """A state written for the workers: the file's path and the token that names it."""

    path: str
    token: str


def _write_state(state: Any) -> _StateFile:
    """Pickle ``state`` into a new file: protocol 5, the large buffers out of band.

    The buffers (numpy arrays' data, ``bytes``, anything that supports pickle's
    out-of-band buffers) are written from their own memory: the parent makes no copy
    of them, and does not map the file.
    """
    buffers: List[pickle.PickleBuffer] = []
    try:
        stream = pickle.dumps(state, protocol=5, buffer_callback=buffers.append)
    except Exception as error:
        raise TypeError(
            f"arenapool.futures.map: state= must be picklable to go to the workers, "
            f"and this {type(state).__name__} is not: {error}"
        ) from error
    views = [buffer.raw() for buffer in buffers]
    page = mmap.PAGESIZE
    stream_offset = _HEADER.size + _ENTRY.size * len(views)
    layout: List[Tuple[int, int]] = []
    end = stream_offset + len(stream)
    for view in views:
        start = _round_up(end, page)
        layout.append((start, view.nbytes))
        end = start + view.nbytes
    token = secrets.token_hex(_TOKEN_BYTES)
    fd, path = tempfile.mkstemp(prefix="arenapool-state-", dir=_state_directory(end))
    try:
        header = _HEADER.pack(_MAGIC, token.encode("ascii"), stream_offset, len(stream), len(views))
        table = b"".join(_ENTRY.pack(start, length) for start, length in layout)
        _pwrite_all(fd, memoryview(header + table), 0)
        _pwrite_all(fd, memoryview(stream), stream_offset)
        for view, (start, _) in zip(views, layout):
            _pwrite_all(fd, view, start)
        os.ftruncate(fd, end)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return _StateFile(path, token)


class _Loaded(NamedTuple):
    """A state loaded in a worker, and the identity of the file it came from."""

    value: Any
    path: str
    file_id: Tuple[int, int]


# The states loaded in this (worker) process, oldest first: at most _KEEP, so that a
# worker serving map after map does not keep every old state mapped.
_KEEP = 2
_loaded: "collections.OrderedDict[str, _Loaded]" = collections.OrderedDict()
_loading = threading.Lock()


def _file_is_there(entry: _Loaded) -> bool:
    """Whether the file a state came from still exists (its map has not ended)."""
    try:
        stats = os.stat(entry.path)
    except OSError:
        return False
    return (stats.st_dev, stats.st_ino) == entry.file_id


def _read_state(path: str, token: str) -> _Loaded:
    """Map the state file read-only and unpickle it, its buffers as views of the map."""
    try:
        with open(path, "rb") as file:
            stats = os.fstat(file.fileno())
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"arenapool.futures.map: this worker cannot find the map's state file {path}: "
            "state= needs workers on the machine of the process that calls map (they read "
            "the state from its shared memory), and the map must not have ended"
        ) from error
    data = memoryview(mapped)
    magic, file_token, stream_offset, stream_length, count = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC or file_token.decode("ascii") != token:
        raise ArenaPoolError(f"arenapool.futures.map: {path} is not the state file of this map")
    buffers = []
    for index in range(count):
        start, length = _ENTRY.unpack_from(data, _HEADER.size + _ENTRY.size * index)
        buffers.append(data[start : start + length])
    value = pickle.loads(data[stream_offset : stream_offset + stream_length], buffers=buffers)
    return _Loaded(value, path, (stats.st_dev, stats.st_ino))


def _load_state(path: str, token: str) -> Any:
    """The state of a map, in a worker: read from its file on first use, then cached."""
    entry = _loaded.get(token)
    if entry is not None:
        return entry.value
    with _loading:
        entry = _loaded.get(token)
        if entry is None:
            for old in [key for key, kept in _loaded.items() if not _file_is_there(kept)]:
                del _loaded[old]
            while len(_loaded) >= _KEEP:
                _loaded.popitem(last=False)
            entry = _read_state(path, token)
            _loaded[token] = entry
    return entry.value


def _call_with_state(fn: Callable[[Any, T], R], path: str, token: str, x: T) -> R:
    """A task of :func:`map` with ``state=``, in a worker: ``fn(state, x)``."""
    return fn(_load_state(path, token), x)


# --------------------------------------------------------------------------------------
# arenapool.futures.map
# --------------------------------------------------------------------------------------


class _SizeLimitReached(Exception):
    """Raised by :class:`_CountingSink` to stop pickling once the limit is passed."""


class _CountingSink:
    """A file for ``pickle.Pickler`` that only counts bytes, and stops past a limit."""

    def __init__(self, limit: int) -> None:
        self.size = 0
        self.limit = limit

    def add(self, nbytes: int) -> None:
        self.size += nbytes
        if self.size > self.limit:
            raise _SizeLimitReached

    def write(self, data: Any) -> int:
        nbytes = memoryview(data).nbytes
        self.add(nbytes)
        return nbytes


def _warn_if_big(fn: Callable[..., Any]) -> None:
    """Warn if ``fn`` pickles to more than 1 MiB, which it would do with every task.

    Counts the bytes without making them: large buffers (numpy arrays' data) are
    counted, not copied, and pickling stops at the limit.
    """
    sink = _CountingSink(_BIG_FUNCTION)
    pickler = pickle.Pickler(sink, protocol=5, buffer_callback=lambda buffer: sink.add(memoryview(buffer).nbytes))
    try:
        pickler.dump(fn)
    except _SizeLimitReached:
        warnings.warn(
            f"arenapool.futures.map: {fn!r} pickles to more than {_BIG_FUNCTION >> 20} MiB, "
            "which would be sent with every task: a bound method or a closure carries its "
            "object's data. Pass the data as state= and make fn a module-level function "
            "fn(state, x).",
            RuntimeWarning,
            stacklevel=3,
        )
    except Exception:
        pass  # not picklable here: the executor reports that itself (it may use cloudpickle)


def _check_window(window: Optional[int], executor: Executor) -> int:
    """The window: ``window`` checked, or by default the executor's number of workers."""
    if window is None:
        workers = getattr(executor, "_max_workers", None)
        if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0:
            return workers
        return os.cpu_count() or 1
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(
            f"arenapool.futures.map: window must be a positive int (the most tasks in "
            f"flight) or None (one per worker), not {type(window).__name__} {window!r}"
        )
    if window < 1:
        raise ValueError(f"arenapool.futures.map: window must be at least 1, not {window}")
    return window


def map(
    executor: Executor,
    fn: Callable[..., R],
    inputs: Iterable[Any],
    *,
    window: Optional[int] = None,
    state: Any = _UNSET,
) -> Iterator[R]:
    """``fn`` over ``inputs`` on ``executor``, in order, with at most ``window`` in flight.

    Returns an iterator of ``fn(x)`` (or ``fn(state, x)``) for each ``x`` of
    ``inputs``, in the order of ``inputs``. It submits the first ``window`` tasks when
    you ask for the first result, and one more each time you ask for the next one: at
    most ``window`` tasks are ever submitted and not yet handed to you, so results
    never pile up behind a slow loop, and ``inputs`` is read only as far as needed (it
    may be endless). Keep ``window`` at the number of workers (the default) to hold
    about that many results at a time; one more keeps every worker busy while you
    work on a result.

    The whole map is one :class:`arenapool.phase`: it opens at the first ``next()``
    and ends when the iterator is exhausted, closed (``close()``, or a ``break`` out of
    a ``for`` loop over it, once the iterator is dropped), garbage-collected, or when
    ``fn`` raises. If ``fn`` raises for an input, the results before it are
    handed to you, then its exception is raised where its result would be; the
    tasks not started yet are cancelled. When the iterator ends early (an exception,
    ``close()``, collection), it cancels the tasks not started and waits for those
    already running (at most ``window``), dropping their results, so that no task of
    the map runs after it, then ends the phase. (It does not wait when that happens
    on one of the executor's own threads, where waiting could wait forever.)

    With ``state``, ``fn`` is called as ``fn(state, x)``, and ``state`` reaches the
    workers without a copy for each, in the way the executor allows:

    - On a ``ThreadPoolExecutor``, ``state`` is passed as it is (same object).
    - On a ``ProcessPoolExecutor`` whose start method is ``fork`` (its
      ``mp_context``; the default on Linux before Python 3.14), whose workers have not
      started yet (a new executor: it starts them at the map's first ``submit``):
      inherited. ``state`` is put where the workers find it before they are forked,
      so each worker has the parent's object, its pages shared with the parent until
      one of them writes: nothing is pickled or copied, and ``state`` need not be
      picklable. The workers keep it until they exit, as with an ``initializer`` that
      sets a global. A change a worker makes stays in that worker.
    - On any other executor (``spawn`` and ``forkserver`` process pools, the defaults
      from Python 3.14 on Linux and on macOS and Windows; a ``fork`` pool whose
      workers were started before the map, which cannot inherit it; loky, MPI pools
      and other executors, taken to run their workers in other processes of this
      machine): through shared memory.
      ``state`` is pickled once (protocol 5, large buffers such as numpy arrays' data
      out of band) into a file in ``/dev/shm`` (the temporary directory if
      ``/dev/shm`` is missing or too small), and each task carries only the file's
      name. A worker reads the file at its first task of the map, mapping it
      read-only, so numpy arrays in ``state`` are views of the shared pages: one copy
      of the data for all the workers (while the map runs, the machine holds the data
      twice: your copy and the shared one). Its numpy arrays come back with
      ``flags.writeable`` False; arrays that are not contiguous (a slice with a
      step) go inside the pickle instead, and each worker gets a writeable copy of
      its own: pass ``np.ascontiguousarray(a)`` to share them. A worker keeps the two
      most recent states it has read, and drops those of ended maps when it reads
      another. The file is deleted when the map ends (workers that still map it keep
      their view).
    - Either way, treat ``state`` as **read-only**, and do not change it while the map
      runs: a worker sees it as it was when the worker started (fork) or when the map
      began (shared memory).
    - ``fn`` must be picklable by reference (a module-level function), as always with
      process pools. A warning says so if it pickles to more than 1 MiB: a bound
      method of the object that holds the data would be sent with every task.
    - An executor made with an ``initializer`` of its own keeps it: the initializer
      runs first in each worker, as usual. The classic alternative to ``state=``, an
      initializer that sets a global from ``initargs``, ties the data to the pool: it
      is pickled for each worker under the spawn and forkserver start methods (a copy
      in every worker), and it does nothing for the results.

    Args:
        executor: a ``concurrent.futures.Executor`` (anything with ``submit``).
        fn: the function; picklable by reference for process pools.
        inputs: any iterable, read lazily.
        window: the most tasks submitted and not yet handed to you, at least 1.
            ``None`` (the default): the executor's number of workers if it says
            (``_max_workers``), else ``os.cpu_count()``.
        state: read-only data for every task: ``fn(state, x)``; inherited by forked
            workers, or sent to the workers once through shared memory.

    Returns:
        An iterator (a generator) of the results, in input order.

    Raises:
        TypeError: ``executor`` has no ``submit``, ``fn`` is not callable, ``inputs``
            is not iterable, ``window`` is not an int; at the first ``next()``,
            ``state`` goes through shared memory and cannot be pickled.
        ValueError: ``window`` is less than 1.
    """
    if not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"arenapool.futures.map: executor must be a concurrent.futures.Executor "
            f"(with a submit method), not {type(executor).__name__}"
        )
    if not callable(fn):
        raise TypeError(f"arenapool.futures.map: fn must be callable, not {type(fn).__name__}")
    if state is not _UNSET:
        _check_takes_state(fn)
    window = _check_window(window, executor)
    inputs = iter(inputs)
    threads = _runs_in_threads(executor)
    if not threads:
        _warn_if_big(fn)
    return _ordered_map(executor, fn, inputs, window, state, threads)


def _check_takes_state(fn: Callable[..., Any]) -> None:
    """With ``state=``, ``fn`` is called as ``fn(state, x)``: a ``TypeError`` here, in the
    caller, if its signature cannot take that (``def work(x)``), or if it names its
    second parameter ``state`` (``def work(x, state)``, which would get the state as
    ``x``). Callables without a signature to read (some builtins) pass unchecked."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    name = getattr(fn, "__name__", "fn")
    positional = [
        p.name for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    advice = f"write `def {name}(state, x):`, state first, then the input"
    try:
        signature.bind(None, None)
    except TypeError as error:
        raise TypeError(
            f"arenapool.futures.map(..., state=...) calls {name}(state, x) for each input x, and "
            f"{name}{signature} cannot take two arguments ({error}): {advice}"
        ) from None
    if "state" in positional[1:2]:
        raise TypeError(
            f"arenapool.futures.map(..., state=...) calls {name}(state, x): the state comes first, "
            f"and {name}{signature} would get it as {positional[0]!r}: {advice}"
        )


def _stop(executor: Executor, pending: Deque[Future[Any]]) -> None:
    """Cancel the tasks not started; wait for the running ones (see :func:`map`)."""
    running = [future for future in pending if not future.cancel()]
    pending.clear()
    if running and not _on_executor_thread(executor):
        concurrent.futures.wait(running)


def _ordered_map(
    executor: Executor,
    fn: Callable[..., R],
    inputs: Iterator[Any],
    window: int,
    state: Any,
    threads: bool,
) -> Iterator[R]:
    """The generator behind :func:`map`."""
    with _optional.phase_or_none("arenapool.futures.map"):
        pending: Deque[Future[R]] = collections.deque()
        shared: Optional[_StateFile] = None
        inherited: Optional[str] = None
        try:
            if threads:
                call = fn if state is _UNSET else functools.partial(fn, state)
            elif state is _UNSET:
                call = fn
            else:
                if _start_method(executor) == "fork":
                    # In place before the first submit, which forks the workers.
                    token = secrets.token_hex(_TOKEN_BYTES)
                    _inherited[token] = state
                    if _workers_not_started(executor):
                        inherited = token
                    else:  # workers forked before this map cannot have it
                        del _inherited[token]
                if inherited is not None:
                    call = functools.partial(_call_with_inherited, fn, inherited)
                else:
                    shared = _write_state(state)
                    call = functools.partial(_call_with_state, fn, shared.path, shared.token)
            for x in itertools.islice(inputs, window):
                pending.append(executor.submit(call, x))
            while pending:
                # Neither the future nor its result stays referenced here once yielded.
                yield pending.popleft().result()
                # The caller asks for the next result: one task takes the place of the last.
                for x in itertools.islice(inputs, 1):
                    pending.append(executor.submit(call, x))
        finally:
            _stop(executor, pending)
            if inherited is not None:
                del _inherited[inherited]
            if shared is not None:
                try:
                    os.unlink(shared.path)
                except FileNotFoundError:
                    pass


# --------------------------------------------------------------------------------------
# arenapool.futures.install: every Executor.map a phase
# --------------------------------------------------------------------------------------

_wrapped_map: Callable[..., Iterator[Any]] = Executor.map  # the Executor.map we wrap
_in_chain = False  # whether our wrapper is (or was left) in Executor.map's place
_active = False  # whether the wrapper makes phases (else it only passes calls on)


def _results_in_phase(results: Iterator[R], opened: Optional[phase]) -> Iterator[R]:
    """``results``, ending the phase when exhausted, closed or collected.

    Started (primed) at once, so that its ``finally`` runs even if it is never iterated.
    """
    try:
        yield  # type: ignore[misc]  # the priming step
        yield from results
    finally:
        close = getattr(results, "close", None)
        try:
            if close is not None:
                close()
        finally:
            _optional.end_phase(opened)


@functools.wraps(Executor.map)
def _phase_map(self: Executor, fn: Callable[..., R], *iterables: Iterable[Any], **kwargs: Any) -> Iterator[R]:
    """``Executor.map``, in a phase that ends with its result iterator."""
    if not _active:
        return _wrapped_map(self, fn, *iterables, **kwargs)
    opened = _optional.open_phase("an Executor.map call")
    if not _runs_in_threads(self):
        fn = InWorker(fn)
    try:
        results = _wrapped_map(self, fn, *iterables, **kwargs)
    except BaseException:
        _optional.end_phase(opened)
        raise
    iterator = _results_in_phase(results, opened)
    next(iterator)
    return iterator


def install() -> None:
    """Make every ``concurrent.futures.Executor.map`` call a phase.

    The phase opens when ``map`` is called and ends when its result iterator is
    exhausted, closed or garbage-collected. This covers ``ThreadPoolExecutor`` and
    ``ProcessPoolExecutor`` (whose ``map`` calls ``Executor.map``) and the executors
    built on ``concurrent.futures.Executor`` that do the same. Everything else about
    ``map`` stays: all its arguments (``timeout``, ``chunksize``, and ``buffersize`` on
    Python 3.14) are passed on, and it submits every task at once, as it always did
    before 3.14 (use :func:`map` to bound the tasks in flight). On an executor whose
    workers are processes (``ProcessPoolExecutor``, loky's), the function goes to them
    wrapped so that each worker installs arenapool before its first task
    (:class:`arenapool._integrations._workers.InWorker`): the workers' memory comes back
    too, once they are idle. On a thread pool the function is passed on as it is.

    Installing again changes nothing; :func:`uninstall` puts ``Executor.map`` back.
    """
    global _wrapped_map, _in_chain, _active
    if not _in_chain:
        _wrapped_map = Executor.__dict__["map"]
        Executor.map = _phase_map  # type: ignore[assignment]
        _in_chain = True
    _active = True


def uninstall() -> None:
    """Put back the ``Executor.map`` that :func:`install` wrapped.

    If another library has wrapped ``Executor.map`` since, its wrapper stays and ours
    inside it only passes calls on. Maps already running keep their phase until their
    iterators end. Uninstalling when not installed does nothing.
    """
    global _in_chain, _active
    _active = False
    if _in_chain and Executor.__dict__.get("map") is _phase_map:
        Executor.map = _wrapped_map  # type: ignore[method-assign]
        _in_chain = False


def installed() -> bool:
    """Whether :func:`install` is in force: ``Executor.map`` calls are phases."""
    return _active
