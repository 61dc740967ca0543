"""DuckDB's allocator: the jemalloc its library links (symbols prefixed ``duckdb_je_``),
read and given back through the control that library exports, ``duckdb_je_mallctl``.

DuckDB's jemalloc keeps freed pages for a second (its dirty decay), but only counts
that second while DuckDB allocates: it has no background thread, so a process whose
DuckDB is idle keeps what DuckDB freed last (the pages of a dropped table, of a large
query's intermediates) until DuckDB works again. arenapool asks it to purge them:

- only pages DuckDB's jemalloc counts as free (``arena.<all>.purge``): a live block is
  never touched, and the call is safe while DuckDB works (jemalloc's controls are
  thread-safe; DuckDB's next allocation just takes fresh pages);
- at a phase's end and from :func:`arenapool.release_others`, when it holds at least
  ``min_bytes`` free (see :func:`arenapool.set_release`);
- from the watcher (and a Dask worker's release of dropped data), all of them only
  once DuckDB is idle: its allocation and free counts have not moved since the
  watcher's previous look, a second before, so that a query at work does not lose the
  pages it is about to reuse. While it works, the watcher applies DuckDB's own decay
  (``arena.<all>.decay``): the pages it would give back at its next allocation, those
  freed about a second ago, go back now.

The library is found among those already loaded, from the module that DuckDB's
package loads (``_duckdb``, or ``duckdb.duckdb`` in older releases), and opened with
``RTLD_NOLOAD``: it is never loaded for arenapool. It is used only if it exports the
control and that control answers ``version`` with a jemalloc 5. Nothing here raises:
a DuckDB that cannot be read has no figures, and :func:`unreadable` says why.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Dict, NamedTuple, Optional, Tuple, Union

from ._given_back import Release

__all__ = ["DuckDB", "duckdb", "loaded", "release_duckdb", "unreadable"]

# The modules by which DuckDB's package loads its library, newest first.
_MODULES = ("_duckdb", "duckdb.duckdb")
_PREFIX = "duckdb_je_"
# MALLCTL_ARENAS_ALL: the index that names every arena at once.
_ALL = 4096
_PURGE = f"arena.{_ALL}.purge"
_DECAY = f"arena.{_ALL}.decay"
_SIZES = ("stats.allocated", "stats.active", "stats.resident", "stats.metadata")
# What DuckDB's allocator has done: blocks handed out and freed, small and large, in
# every arena. Unchanged between two looks: DuckDB was idle in between.
_COUNTS = tuple(
    f"stats.arenas.{_ALL}.{size}.{count}" for size in ("small", "large") for count in ("nmalloc", "ndalloc")
)


class DuckDB(NamedTuple):
    """DuckDB's jemalloc, from its own statistics, in bytes."""

    live: int
    """Its pages with live blocks (``stats.active``): tables, query results, DuckDB's
    buffer pool."""
    free: int
    """Its resident pages that hold no live block and no metadata: what a purge gives
    back."""
    metadata: int
    """Its own metadata (``stats.metadata``)."""
    allocated: int
    """Bytes in its live blocks (``stats.allocated``; ``live`` rounds them up to
    pages)."""
    version: str
    """Its jemalloc's version."""


_Word = Union[ctypes.c_size_t, ctypes.c_uint64]


class _Control:
    """The control DuckDB's library exports, with the MIB of each name it uses looked
    up once."""

    def __init__(self, library: ctypes.CDLL) -> None:
        mallctl = getattr(library, f"{_PREFIX}mallctl")
        mallctl.restype = ctypes.c_int
        mallctl.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        nametomib = getattr(library, f"{_PREFIX}mallctlnametomib")
        nametomib.restype = ctypes.c_int
        nametomib.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        bymib = getattr(library, f"{_PREFIX}mallctlbymib")
        bymib.restype = ctypes.c_int
        bymib.argtypes = [
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        self._nametomib, self._bymib = nametomib, bymib
        version = ctypes.c_char_p()
        length = ctypes.c_size_t(ctypes.sizeof(version))
        _check("version", mallctl(b"version", ctypes.byref(version), ctypes.byref(length), None, 0))
        self.version = (version.value or b"").decode("ascii", "replace")
        if not self.version.startswith("5."):
            raise OSError(f"its jemalloc is version {self.version!r}, not a jemalloc 5")
        self._mibs: Dict[str, Tuple[ctypes.Array[ctypes.c_size_t], int]] = {
            name: self._mib(name) for name in ("epoch", _PURGE, _DECAY, *_SIZES, *_COUNTS)
        }

    def _mib(self, name: str) -> Tuple["ctypes.Array[ctypes.c_size_t]", int]:
        mib = (ctypes.c_size_t * 8)()
        length = ctypes.c_size_t(len(mib))
        _check(name, self._nametomib(name.encode(), mib, ctypes.byref(length)))
        return mib, length.value

    def _call(self, name: str, old: Optional[_Word] = None, new: Optional[_Word] = None) -> None:
        mib, length = self._mibs[name]
        old_length = ctypes.c_size_t(ctypes.sizeof(old)) if old is not None else None
        _check(
            name,
            self._bymib(
                mib,
                length,
                None if old is None else ctypes.byref(old),
                None if old_length is None else ctypes.byref(old_length),
                None if new is None else ctypes.byref(new),
                0 if new is None else ctypes.sizeof(new),
            ),
        )

    def _read(self, name: str, word: "type[_Word]" = ctypes.c_size_t) -> int:
        value = word()
        self._call(name, old=value)
        return int(value.value)

    def refresh(self) -> None:
        """Its statistics brought up to date (they are snapshots taken at each
        ``epoch``)."""
        self._call("epoch", new=ctypes.c_uint64(1))

    def figures(self) -> DuckDB:
        allocated, active, resident, metadata = (self._read(name) for name in _SIZES)
        return DuckDB(
            live=active,
            free=max(0, resident - active - metadata),
            metadata=metadata,
            allocated=allocated,
            version=self.version,
        )

    def counts(self) -> Tuple[int, ...]:
        return tuple(self._read(name, ctypes.c_uint64) for name in _COUNTS)

    def purge(self) -> None:
        """Every free page of every arena given back."""
        self._call(_PURGE)

    def decay(self) -> None:
        """The free pages of every arena that DuckDB's own decay settings say are due
        given back."""
        self._call(_DECAY)


def _check(name: str, error: int) -> None:
    if error:
        raise OSError(error, f"{_PREFIX}mallctl({name!r}): {os.strerror(error)}")


# The control once found; or why DuckDB's library, loaded, cannot be read (it does not
# change while the process runs). Set whole, so that a thread sees either.
_control: Optional[_Control] = None
_unreadable: Optional[str] = None


def _library_path() -> Optional[str]:
    """The file of DuckDB's library, if DuckDB's package has loaded it."""
    for name in _MODULES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and ".so" in os.path.basename(path):
            return path
    return None


def loaded() -> bool:
    """Whether DuckDB's library is loaded (by DuckDB's package)."""
    return _library_path() is not None


def _found() -> Optional[_Control]:
    global _control, _unreadable
    if _control is not None or _unreadable is not None:
        return _control
    path = _library_path()
    if path is None:
        return None  # not loaded (yet)
    try:
        # RTLD_NOLOAD only looks the library up among those loaded: it runs none of
        # its code (it has run already) and maps nothing.
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        control = _Control(library)
    except AttributeError:
        _unreadable = f"its library exports no {_PREFIX}mallctl"
    except OSError as error:
        _unreadable = str(error)
    else:
        _control = control
    return _control


def unreadable() -> Optional[str]:
    """Why DuckDB's library, loaded, cannot be read; ``None`` if it can or is not
    loaded."""
    _found()
    return _unreadable


def duckdb() -> Optional[DuckDB]:
    """DuckDB's jemalloc now; ``None`` if DuckDB's library is not loaded or cannot be
    read (:func:`unreadable` says why)."""
    control = _found()
    if control is None:
        return None
    try:
        control.refresh()
        return control.figures()
    except OSError:
        return None


# DuckDB's allocation and free counts at the watcher's previous look.
_last_counts: Tuple[int, ...] = ()


def release_duckdb(min_bytes: int, idle_only: bool) -> Optional[Release]:
    """Purge DuckDB's free pages if it holds at least ``min_bytes`` of them; with
    ``idle_only`` (the watcher's look), only if it has allocated and freed nothing
    since the previous such look, else only those its own decay says are due.
    ``None`` when it gave back less than ``min_bytes``. Raises ``OSError`` if the
    control fails (the caller says so once)."""
    global _last_counts
    control = _found()
    if control is None:
        return None
    control.refresh()
    busy = False
    if idle_only:
        counts = control.counts()
        busy, _last_counts = counts != _last_counts, counts
    free = control.figures().free
    if free < max(min_bytes, 1):
        return None
    from .._arenapool import rss

    before = rss()
    started = time.perf_counter()
    if busy:
        control.decay()
    else:
        control.purge()
    seconds = time.perf_counter() - started
    if busy:
        control.refresh()
        if free - control.figures().free < max(min_bytes, 1):
            return None  # nothing was due: not worth a line in recent_releases()
    return Release("duckdb", max(0, before - rss()), seconds)
