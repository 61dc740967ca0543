"""The other holders of a Python process's memory, each read from its own counter, and
given back where the holder can be asked to.

- glibc's ``malloc``: ``mallinfo2()`` (glibc 2.33 and later; ``mallinfo()`` before,
  whose figures wrap at 4 GiB), given back with ``malloc_trim(0)``.
- pymalloc, CPython's allocator of small objects: the figures CPython prints for
  ``sys._debugmallocstats()``, written by ``_PyObject_DebugMallocStats`` into a memory
  stream instead of standard error, and which pages of its free pools are resident
  (``mincore``); the pages of free pools given back (see
  :func:`release_pymalloc`).
- Arrow's memory pools, when pyarrow is already imported (never imported here):
  ``bytes_allocated()`` of each, given back with ``release_unused()`` (not the
  jemalloc pool's up to pyarrow 26, whose release does nothing: see
  :func:`release_arrow`).
- numpy's array data, while ``tracemalloc`` traces: the bytes traced in numpy's
  domain.

Everything here is read through ``ctypes``, under the interpreter's lock, and fails
soft: a holder that cannot be read is ``None``, never an exception.
"""

from __future__ import annotations

import ctypes
import re
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ._given_back import Release

__all__ = [
    "ArrowPool",
    "Glibc",
    "Pymalloc",
    "Release",
    "arrow_pools",
    "glibc",
    "numpy_traced",
    "pymalloc",
    "release_arrow",
    "release_glibc",
    "release_pymalloc",
]


_MALLINFO_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _MallInfo2(ctypes.Structure):
    """``struct mallinfo2`` (glibc 2.33 on): ``size_t`` fields."""

    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO_FIELDS]


class _MallInfo(ctypes.Structure):
    """``struct mallinfo``: ``int`` fields, into which glibc stores its ``size_t``
    figures cut to 32 bits. Read as unsigned, each is the figure modulo 4 GiB."""

    _fields_ = [(name, ctypes.c_uint) for name in _MALLINFO_FIELDS]


# glibc's counters, newest first: the first the C library has is read.
_MALLINFO_FUNCTIONS: Tuple[str, ...] = ("mallinfo2", "mallinfo")
_MALLINFO_STRUCTS = {"mallinfo2": _MallInfo2, "mallinfo": _MallInfo}


class Glibc(NamedTuple):
    """glibc's heaps, from ``mallinfo2()`` (``mallinfo()`` before glibc 2.33), in
    bytes."""

    in_use: int
    """Bytes in blocks handed out (``uordblks``) and in blocks mapped on their own
    (``hblkhd``)."""
    free: int
    """Bytes of free blocks in the heaps (``fordblks``), resident or not: pages
    ``malloc_trim`` gave back stay counted here."""
    counter: str = "mallinfo2"
    """The counter read: ``mallinfo2`` (glibc 2.33 and later), or ``mallinfo`` (older
    glibc), whose figures are 32-bit: each is read modulo 4 GiB, so heaps of 4 GiB or
    more show less than they hold. ``malloc_trim`` runs on either."""


class Pymalloc(NamedTuple):
    """pymalloc's arenas, from CPython's own statistics, in bytes."""

    in_use: int
    """Bytes in allocated blocks."""
    free: int
    """The rest of its arenas that is resident: blocks available in used pools, unused
    pools, headers."""
    arenas: int
    """Arenas allocated now."""
    given_back: int = 0
    """Bytes of its free pools' pages that are not resident: given back (see
    :func:`arenapool.set_release`), or never touched. Not counted in ``free``."""
    off: Optional[str] = None
    """Why its free pools are not given back in this process; ``None`` while they are
    (see :func:`arenapool.set_release`)."""


class ArrowPool(NamedTuple):
    """One of Arrow's memory pools, from its own counters, in bytes."""

    backend: str
    """``mimalloc``, ``jemalloc`` or ``system`` (``malloc``: glibc's heaps)."""
    allocated: int
    """``bytes_allocated()``: bytes in live buffers."""
    peak: int
    """``max_memory()``: the most it ever had allocated."""
    is_default: bool
    """Whether it is ``pyarrow.default_memory_pool()``."""


_libc: Optional[Any] = None
_mallinfo: Optional[Any] = None
_mallinfo_name = ""
_libc_read = False


def _glibc_functions() -> Optional[Any]:
    """The C library, if it is glibc (with ``malloc_trim``)."""
    global _libc, _libc_read, _mallinfo, _mallinfo_name
    if not _libc_read:
        _libc_read = True
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 (only glibc has it)
            libc.malloc_trim.restype = ctypes.c_int
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.open_memstream.restype = ctypes.c_void_p
            libc.open_memstream.argtypes = [
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_size_t),
            ]
            libc.fclose.argtypes = [ctypes.c_void_p]
            libc.free.argtypes = [ctypes.c_void_p]
            _libc = libc
        except (OSError, AttributeError):
            return None
        for name in _MALLINFO_FUNCTIONS:
            function = getattr(libc, name, None)
            if function is not None:
                function.restype = _MALLINFO_STRUCTS[name]
                function.argtypes = []
                _mallinfo, _mallinfo_name = function, name
                break
    return _libc


def glibc() -> Optional[Glibc]:
    """glibc's heaps now; ``None`` where the C library is not glibc."""
    if _glibc_functions() is None or _mallinfo is None:
        return None
    info = _mallinfo()
    return Glibc(in_use=info.uordblks + info.hblkhd, free=info.fordblks, counter=_mallinfo_name)


def _rss() -> int:
    from .._arenapool import rss

    return rss()


def release_glibc() -> Optional[Release]:
    """``malloc_trim(0)``: glibc gives back every whole free page of its heaps."""
    libc = _glibc_functions()
    if libc is None:
        return None
    before = _rss()
    started = time.perf_counter()
    libc.malloc_trim(0)
    seconds = time.perf_counter() - started
    return Release("glibc", max(0, before - _rss()), seconds)


_STAT = re.compile(r"^(#?[^=]*?)\s*=\s*([\d,]+)\s*$")


def _debug_malloc_stats() -> Optional[str]:
    """The text of ``sys._debugmallocstats()``, written to memory; ``None`` if pymalloc
    is not the object allocator (``PYTHONMALLOC=malloc``) or it cannot be read."""
    libc = _glibc_functions()
    if libc is None:
        return None
    try:
        stats = ctypes.pythonapi._PyObject_DebugMallocStats
    except AttributeError:
        return None
    stats.argtypes = [ctypes.c_void_p]
    stats.restype = ctypes.c_int
    buffer = ctypes.c_void_p()
    size = ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
        return None
    try:
        printed = stats(stream)
    finally:
        libc.fclose(stream)  # sets buffer and size
    try:
        text = ctypes.string_at(buffer.value, size.value).decode("ascii", "replace") if buffer.value else ""
    finally:
        libc.free(buffer)
    return text if printed else None


def parse_pymalloc(text: str) -> Optional[Pymalloc]:
    """pymalloc's figures from the text ``sys._debugmallocstats()`` prints."""
    figures: Dict[str, int] = {}
    arena_bytes = 0
    for line in text.splitlines():
        match = _STAT.match(line.strip())
        if match is None:
            continue
        name, value = match.group(1).strip(), int(match.group(2).replace(",", ""))
        if name.endswith("bytes/arena"):
            arena_bytes = value
        elif name not in figures:  # the first "Total" is the arenas'
            figures[name] = value
    try:
        in_use = figures["# bytes in allocated blocks"]
        arenas = figures["# arenas allocated current"]
    except KeyError:
        return None
    return Pymalloc(in_use=in_use, free=max(0, arena_bytes - in_use), arenas=arenas)


def pymalloc() -> Optional[Pymalloc]:
    """pymalloc's arenas now; ``None`` if pymalloc is not in use or cannot be read."""
    from .._arenapool import pymalloc_free_pools, pymalloc_pools_off

    text = _debug_malloc_stats()
    figures = None if text is None else parse_pymalloc(text)
    if figures is None:
        return None
    _, not_resident = pymalloc_free_pools()
    return figures._replace(
        free=max(0, figures.free - not_resident), given_back=not_resident, off=pymalloc_pools_off()
    )


def release_pymalloc(min_bytes: int) -> Optional[Release]:
    """Give back the pages of pymalloc's free pools, if at least ``min_bytes`` of them
    are resident: pymalloc unmaps an arena only once all of its pools are free, and
    otherwise keeps the pages of its free pools (16 KiB each). Each free pool keeps its
    first page, which holds its header. Only arenas proven pymalloc's are touched, made
    after :func:`arenapool.install`; where the give-back is off, ``Pymalloc.off`` says
    why. ``None`` when it gave nothing back."""
    from .._arenapool import give_back_pymalloc_pools, pymalloc_free_pools

    resident, _ = pymalloc_free_pools()
    if resident < max(min_bytes, 1):
        return None
    before = _rss()
    started = time.perf_counter()
    give_back_pymalloc_pools()
    seconds = time.perf_counter() - started
    return Release("pymalloc", max(0, before - _rss()), seconds)


def _pools() -> List[Tuple[Any, bool]]:
    """Arrow's pools, each once, with whether it is the default; empty if pyarrow has
    not been imported."""
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return []
    try:
        default = pa.default_memory_pool()
        pools: List[Tuple[Any, bool]] = [(default, True)]
        seen = {default.backend_name}
        for backend in pa.supported_memory_backends():
            if backend in seen:
                continue
            seen.add(backend)
            pools.append((getattr(pa, f"{backend}_memory_pool")(), False))
    except Exception:  # an old or broken pyarrow: no figures, no failure
        return []
    return pools


def arrow_pools() -> List[ArrowPool]:
    """Arrow's memory pools, if pyarrow is imported (empty list otherwise)."""
    return [
        ArrowPool(pool.backend_name, pool.bytes_allocated(), pool.max_memory(), is_default)
        for pool, is_default in _pools()
    ]


# Per pool backend: its total_bytes_allocated() and bytes_allocated() at its last
# release, to tell how much it has freed since.
_arrow_marks: Dict[str, Tuple[int, int]] = {}


def arrow_freed_since_release(pool: Any) -> int:
    """Bytes the pool has freed since it was last asked to give back its free memory
    (since its start if never): an upper bound of what it can give back."""
    total, allocated = pool.total_bytes_allocated(), pool.bytes_allocated()
    total_then, allocated_then = _arrow_marks.get(pool.backend_name, (0, 0))
    return int((total - total_then) - (allocated - allocated_then))


# mimalloc's release_unused() collects the calling thread's heap only: from any other
# thread it gives back nothing of what that thread's buffers held.
_THREAD_BOUND = ("mimalloc",)

# The jemalloc pool's release_unused() asks its jemalloc for the control
# "arena.MALLCTL_ARENAS_ALL.purge" (the macro's name stringified, not its value), which
# jemalloc does not know: the call gives nothing back, up to pyarrow 26.
_RELEASE_DOES_NOTHING_UP_TO = {"jemalloc": 26}


def _release_does_nothing(backend: str) -> bool:
    """Whether the ``release_unused()`` of pool ``backend`` is known to give nothing
    back in the pyarrow imported (a later pyarrow is asked, and its figure listed)."""
    last = _RELEASE_DOES_NOTHING_UP_TO.get(backend)
    if last is None:
        return False
    try:
        major = int(str(sys.modules["pyarrow"].__version__).split(".")[0])
    except (KeyError, AttributeError, ValueError):  # a pyarrow with no version: ask it
        return False
    return major <= last


def release_arrow(
    min_bytes: int, any_thread: bool = False, on_main_thread: Optional[Callable[[List[Release]], None]] = None
) -> List[Release]:
    """``release_unused()`` on every Arrow pool that has freed at least ``min_bytes``
    since its last release. With ``any_thread`` (a call from a thread that made none of
    Arrow's buffers), only the pools whose release reaches every thread's memory; the
    others (mimalloc's) are released on the main thread, soon (see
    :mod:`arenapool._core._main_thread`), and ``on_main_thread`` gets what that gave
    back. A pool whose release gives nothing back (the jemalloc pool's up to pyarrow 26)
    is not asked, and not listed: its freed pages go back by its own decay, at once with
    :func:`arenapool.use_arrow_jemalloc`."""
    done = []
    for pool, is_default in _pools():
        if _release_does_nothing(pool.backend_name):
            continue
        if arrow_freed_since_release(pool) < min_bytes:
            continue
        if any_thread and pool.backend_name in _THREAD_BOUND:
            if on_main_thread is not None:
                _release_on_main_thread(min_bytes, on_main_thread)
            continue
        before = _rss()
        started = time.perf_counter()
        try:
            _release_unused(pool, is_default)
        except Exception:  # a pool that cannot release is left as it is
            continue
        seconds = time.perf_counter() - started
        _arrow_marks[pool.backend_name] = (pool.total_bytes_allocated(), pool.bytes_allocated())
        done.append(Release(f"arrow:{pool.backend_name}", max(0, before - _rss()), seconds))
    return done


def _release_unused(pool: Any, is_default: bool) -> None:
    """``pool.release_unused()``, for a pool that is not the default too: pyarrow's
    ``MemoryPool.release_unused()`` releases the default pool, whichever pool it is
    called on (pyarrow 26), so the pool is made the default for the call. Buffers that
    other threads make meanwhile (a few microseconds) go to that pool."""
    pa = sys.modules["pyarrow"]
    if is_default:
        pool.release_unused()
        return
    default = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        pool.release_unused()
    finally:
        pa.set_memory_pool(default)


def _release_on_main_thread(min_bytes: int, report: Callable[[List[Release]], None]) -> None:
    from . import _main_thread

    def release() -> None:
        if _main_thread_is_current():
            report(release_arrow(min_bytes))

    _main_thread.call_soon(release)


def _main_thread_is_current() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def numpy_traced() -> Optional[int]:
    """Bytes of numpy's array data alive, as ``tracemalloc`` traces them in numpy's
    domain; ``None`` unless numpy is imported and ``tracemalloc`` is tracing."""
    import tracemalloc

    np = sys.modules.get("numpy")
    if np is None or not tracemalloc.is_tracing():
        return None
    domain = getattr(getattr(np, "lib", None), "tracemalloc_domain", None)
    if domain is None:
        return None
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, domain)])
    return sum(stat.size for stat in snapshot.statistics("filename"))
