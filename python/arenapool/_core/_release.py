"""When the last phase ends, the process's other allocators give back what they hold
too: glibc (``malloc_trim(0)``), pymalloc (the pages of its free pools), Arrow's
pools (``release_unused()``) and DuckDB's jemalloc (a purge of its free pages), each
only when its own counters say it has enough free to pay for the call. A watcher
thread then does the same every ``watch`` seconds while no phase is open, for what is
dropped after the phase (a data frame built in it and deleted later).
"""

from __future__ import annotations

import collections
import os
import sys
import threading
from typing import Callable, Deque, List, Optional, Tuple

from . import _arrow, _duckdb, _holders
from ._optional import log_once
from ._warnings import warn_once
from .._arenapool import phase_is_open, pymalloc_arenas_made
from ._given_back import Release

__all__ = ["recent_releases", "release_others", "set_release", "start_watcher", "use_arrow_jemalloc"]

_MiB = 2**20

_glibc_on = True
_pymalloc_on = True
_arrow_on = True
_duckdb_on = True
_min_bytes = 1 * _MiB
_watch: Optional[float] = 1.0

# Held by the one release under way (``release_others``). A release allocates, so a
# collection may run in it, and a finalizer of that collection may end a phase and
# call ``release_others`` again on the same thread: that call returns at once with
# nothing (`_depth` says the thread is inside its own release), and asks the release
# under way for one more pass (`_asked_again`), for what was freed since it began.
# A call from another thread (a phase's end while the watcher releases) waits for the
# release under way to end, then makes its own pass, so that what its phase freed is
# in what it returns; the watcher's release stops before its next holder once a call
# waits for it (`_wanted`) or a phase is open. A call waits `_WAIT_FOR_OTHER` seconds
# at most (the holders' calls wait for nothing of another thread's), then returns with
# nothing and asks again.
_releasing = threading.RLock()
_depth = 0
_wanted = False
_WAIT_FOR_OTHER = 10.0
_asked_again = False
# glibc's in-use and free bytes after its last trim: a trim is worth its call only if
# at least `_min_bytes` is free and the heaps changed by as much since.
_glibc_mark: Optional[Tuple[int, int]] = None
# pymalloc since its last look: the most allocated blocks seen (sys.getallocatedblocks()),
# and the arenas it had made at the look (-1 before the first). A look is worth it once
# it has made an arena since (a phase's work may have freed its objects by its end), or
# freed enough blocks.
_pymalloc_high = 0
_pymalloc_arenas = -1
# Blocks freed since the last look before pymalloc's free pools are looked at again:
# at 16 to 512 bytes each, from 64 KiB to 2 MiB.
_PYMALLOC_FREED_BLOCKS = 4096
_recent: Deque[Release] = collections.deque(maxlen=64)


def set_release(
    *,
    glibc: Optional[bool] = None,
    pymalloc: Optional[bool] = None,
    arrow: Optional[bool] = None,
    duckdb: Optional[bool] = None,
    min_bytes: Optional[int] = None,
    watch: Optional[float] = None,
) -> None:
    """Switch what a phase's end gives back besides arenapool's own arenas; arguments
    left out keep their setting.

    Args:
        glibc: ``malloc_trim(0)`` when glibc's heaps hold at least ``min_bytes`` free
            and have changed by as much since the last trim (on by default).
        pymalloc: give back the pages of pymalloc's free pools when at least
            ``min_bytes`` of them are resident (on by default): pymalloc unmaps an arena
            of 1 MiB only once every pool in it is free, so a few objects that live on
            keep the free pools around them. Each free pool (16 KiB) keeps its first
            page. Arenas made after :func:`arenapool.install`, each proven pymalloc's
            before a byte of it is touched: every pool header checked, and pymalloc's
            own count of its arenas accounting for every block of that size CPython's
            arena allocator handed out. It is off for the process, and
            ``breakdown().pymalloc.off`` says why, where pymalloc is not the object
            allocator (``PYTHONMALLOC=malloc``), where its pools are a page each
            (CPython 3.9), once another arena allocator is set over arenapool's
            (``PyObject_SetArenaAllocator``), once an interpreter other than the main
            one has existed, and once a block another caller took from the arena
            allocator cannot be told apart from pymalloc's arenas. While
            ``tracemalloc`` traces (CPython then hides pymalloc's statistics), it
            waits, and ``off`` says so; it comes back at the first phase after
            ``tracemalloc.stop()``.
        arrow: ``release_unused()`` on each of Arrow's pools that has freed at least
            ``min_bytes`` since its last release (but the jemalloc pool up to pyarrow
            26, whose release gives nothing back), if pyarrow is already imported (on
            by default; pyarrow is never imported for it); off before
            :func:`arenapool.install`, Arrow's default pool is left as it is too.
        duckdb: purge the free pages of DuckDB's jemalloc when it holds at least
            ``min_bytes`` of them, if DuckDB's library is loaded (on by default; it is
            never loaded for it): only pages its allocator counts as free, never a live
            block. The watcher purges them all once DuckDB is idle (it has allocated
            and freed nothing for one ``watch``); while it works, only those DuckDB's
            own decay says are due (freed about a second ago).
        min_bytes: the least a holder must have free for the call (1 MiB).
        watch: seconds between the watcher's checks, while no phase is open, for
            memory dropped after a phase ended (1.0); ``0`` stops the watcher.
    """
    global _glibc_on, _pymalloc_on, _arrow_on, _duckdb_on, _min_bytes, _watch
    if min_bytes is not None:
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            raise ValueError(f"min_bytes must be an int of 0 or more (bytes), not {min_bytes!r}")
        _min_bytes = min_bytes
    if watch is not None:
        _watch = checked_seconds("watch", watch, "or 0 to stop the watcher") or None
        _wake.set()  # a running watcher takes the new interval, or stops
    if glibc is not None:
        _glibc_on = bool(glibc)
    if pymalloc is not None:
        _pymalloc_on = bool(pymalloc)
    if arrow is not None:
        _arrow_on = bool(arrow)
    if duckdb is not None:
        _duckdb_on = bool(duckdb)


def arrow_on() -> bool:
    """Whether arenapool may ask Arrow's pools to give back (``set_release(arrow=...)``)."""
    return _arrow_on


def checked_seconds(name: str, value: object, zero: str = "0 or more") -> float:
    """``value`` as a number of seconds, 0 or more (``zero`` says what 0 means in the
    message); ``ValueError`` naming ``name`` if it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds, {zero}; got {value!r}")
    return float(value)


def _glibc_worth_it(figures: _holders.Glibc) -> bool:
    if figures.free < _min_bytes:
        return False
    if _glibc_mark is None:
        return True
    in_use, free = _glibc_mark
    return abs(figures.in_use - in_use) + abs(figures.free - free) >= _min_bytes


def _pymalloc_worth_a_look() -> bool:
    global _pymalloc_high
    blocks = sys.getallocatedblocks()
    _pymalloc_high = max(_pymalloc_high, blocks)
    return pymalloc_arenas_made() != _pymalloc_arenas or _pymalloc_high - blocks >= _PYMALLOC_FREED_BLOCKS


def release_others() -> List[Release]:
    """Ask glibc, pymalloc, Arrow's pools and DuckDB's jemalloc to give back their free
    memory now, each only if it holds enough (see :func:`set_release`); what each gave
    back and how long it took.

    Arrow's default pool on Linux is mimalloc's, whose release reaches only the memory
    of the thread that calls it: buffers made on other threads (a thread pool's, Dask's
    workers') stay held. :func:`arenapool.install` and :func:`use_arrow_jemalloc` make
    Arrow's jemalloc pool the default instead; what mimalloc's pool still holds, the
    watcher asks the main thread to release.

    One release runs at a time. A call made while another thread's is under way (the
    watcher's, another phase's end) waits for it to end, then asks every holder itself:
    what it returns counts what was freed before the call. A call made on a thread
    inside its own release (by a finalizer that a collection inside the release ran)
    returns at once with nothing, and the release under way asks every holder once more
    when it is done, for what was freed meanwhile.
    """
    return release_others_from(any_thread=False)


def release_others_from(*, any_thread: bool, yields: bool = False) -> List[Release]:
    """:func:`release_others`; with ``any_thread``, from a thread that made none of Arrow's
    buffers (the watcher, a Dask worker's event loop): see :func:`_holders.release_arrow`.
    With ``yields`` (the watcher's), it stops before its next holder once a phase is open
    or another thread's call waits for it."""
    global _asked_again, _depth, _wanted
    if not _releasing.acquire(blocking=False):
        _wanted = True  # another thread's release is under way
        if not _releasing.acquire(timeout=_WAIT_FOR_OTHER):
            _asked_again = True
            return []
    if _depth:  # this thread's own release, re-entered
        _releasing.release()
        _asked_again = True
        return []
    _depth += 1
    _wanted = False
    try:
        done: List[Release] = []
        for _ in range(2):  # the pass asked for, and one more if asked again meanwhile
            _asked_again = False
            for holder, on, release in _RELEASES:
                if yields and (_wanted or phase_is_open()):
                    break
                if not on():
                    continue
                try:
                    done.extend(release(any_thread))
                except Exception as error:  # the others are asked all the same
                    _release_failed(holder, error)
            if not _asked_again:
                break
        _recent.extend(done)  # one call, atomic: no lock
        return done
    finally:
        _depth -= 1
        _releasing.release()


def _release_glibc(_any_thread: bool) -> List[Release]:
    global _glibc_mark
    done = []
    figures = _holders.glibc()
    if figures is not None and _glibc_worth_it(figures):
        released = _holders.release_glibc()
        if released is not None:
            done.append(released)
        after = _holders.glibc()
        _glibc_mark = None if after is None else (after.in_use, after.free)
    return done


def _release_pymalloc(_any_thread: bool) -> List[Release]:
    global _pymalloc_high, _pymalloc_arenas
    if not _pymalloc_worth_a_look():
        return []
    released = _holders.release_pymalloc(_min_bytes)
    _pymalloc_high = sys.getallocatedblocks()
    _pymalloc_arenas = pymalloc_arenas_made()
    return [] if released is None else [released]


def _release_arrow(any_thread: bool) -> List[Release]:
    # What a release on the main thread gives back later is kept with the others.
    return _holders.release_arrow(_min_bytes, any_thread, _recent.extend)


def _release_duckdb(any_thread: bool) -> List[Release]:
    # The watcher's and the frameworks' calls come while DuckDB may be at work.
    released = _duckdb.release_duckdb(_min_bytes, idle_only=any_thread)
    return [] if released is None else [released]


# Each holder: its name, whether it is switched on, its release.
_RELEASES: List[Tuple[str, Callable[[], bool], Callable[[bool], List[Release]]]] = [
    ("glibc", lambda: _glibc_on, _release_glibc),
    ("pymalloc", lambda: _pymalloc_on, _release_pymalloc),
    ("arrow", lambda: _arrow_on, _release_arrow),
    ("duckdb", lambda: _duckdb_on, _release_duckdb),
]


def _release_failed(holder: str, error: Exception) -> None:
    """A holder's release failed: said once per holder, as an :class:`ArenaPoolWarning`
    and, with its traceback, on the logger ``arenapool`` (the watcher's failures reach
    no caller). It is asked again at the next phase's end and by the watcher."""
    message = f"giving back {holder}'s free memory failed (the other holders were asked; it is asked again each time)"
    log_once(f"release {holder}", message, error)
    warn_once(
        f"release {holder}",
        f"arenapool: {message}: {type(error).__name__}: {error} (its traceback is on the logger 'arenapool')",
        stacklevel=4,
    )


def recent_releases() -> List[Release]:
    """The last 64 releases of other allocators, oldest first: at phases' ends and by
    the watcher."""
    return list(_recent)  # a copy in one call, atomic: no lock (it allocates)


_watcher_pid = 0
_wake = threading.Event()


def _watch_loop() -> None:
    global _watcher_pid
    while True:
        interval = _watch
        if _watcher_pid != os.getpid():
            return
        if interval is None:
            _watcher_pid = 0
            return
        _wake.wait(interval)
        _wake.clear()
        if not phase_is_open():
            try:
                release_others_from(any_thread=True, yields=True)
            except Exception as error:  # MemoryError, say: tried again next time
                log_once("watcher", "arenapool's watcher could not give memory back", error)


def start_watcher() -> None:
    """Start the watcher (one per process) if ``watch`` is set and it is not running."""
    global _watcher_pid
    if _watch is None or _watcher_pid == os.getpid():
        return
    _watcher_pid = os.getpid()  # a child made by fork starts its own
    try:
        threading.Thread(target=_watch_loop, name="arenapool-release", daemon=True).start()
    except RuntimeError:  # no thread can start now (an address-space limit): next time
        _watcher_pid = 0


def use_arrow_jemalloc(*, at_once: bool = True) -> bool:
    """Make Arrow's jemalloc pool its default, so that the memory of Arrow's buffers
    (pandas' strings, Parquet's pages) goes back after they are dropped, from whatever
    thread made them, without a call.

    Arrow's default pool on Linux, mimalloc's, keeps freed memory until
    ``release_unused()`` is called on the very thread that made the buffers; jemalloc's
    gives it back by itself: within about two seconds as Arrow sets it up, at once with
    ``at_once`` (Arrow's jemalloc then purges each freed page as it is freed: the
    environment variable ``JE_ARROW_MALLOC_CONF`` is set to
    ``dirty_decay_ms:0,muzzy_decay_ms:0`` unless it is set already). A page freed while
    another thread purges the same arena, as a thread does when it ends, waits for that
    arena's next purge. If pyarrow is imported, its default pool is set now (buffers
    made before stay in their pool) and ``at_once`` reaches only the arenas Arrow's
    jemalloc makes from then on; if not, ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` is set
    for when it is (pyarrow is never imported here). Returns whether the pool was set
    now.

    Raises:
        ArenaPoolError: pyarrow was built without its jemalloc pool.
    """
    import sys

    pa = sys.modules.get("pyarrow")
    if pa is None:
        _arrow.jemalloc_when_pyarrow_loads(at_once)
        return False
    if "jemalloc" not in pa.supported_memory_backends():
        from .._arenapool import ArenaPoolError

        raise ArenaPoolError(
            "this pyarrow was built without its jemalloc pool: install pyarrow's wheel from "
            "PyPI, or call arenapool.release_others() on the threads that drop Arrow's buffers"
        )
    if at_once and _arrow.JEMALLOC_CONF not in os.environ:
        pa.jemalloc_set_decay_ms(0)
    pa.set_memory_pool(pa.jemalloc_memory_pool())
    return True


def _after_fork_in_child() -> None:
    """In a child made by ``fork``: the watcher is not there, and may have held the lock
    or the event's when the parent forked; the child gets its own."""
    global _releasing, _depth, _wake, _watcher_pid
    _releasing = threading.RLock()
    _depth = 0
    _wake = threading.Event()
    _watcher_pid = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
