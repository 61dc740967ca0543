"""Give memory back to the operating system when a parallel phase is done.

A Python program that fans work out (joblib, concurrent.futures, multiprocessing) and
then drops the results usually keeps most of that memory: glibc's malloc holds freed
blocks in per-thread heaps it trims only at the top. arenapool sends large blocks
(CPython's own and numpy's array data) to arenas that are given back to the OS when a
*phase* ends, and from then on each block the moment it is freed::

    import arenapool

    with arenapool.phase():
        results = Parallel(n_jobs=2)(delayed(work)(i) for i in range(4000))
    ...
    del results          # RSS is back where it started

Or, for joblib and concurrent.futures, one call that makes every parallel call a
phase: :func:`arenapool.joblib.install` and :func:`arenapool.futures.install`.

What the phase covers: blocks of at least :func:`threshold` bytes (64 KiB) asked for,
on any thread, while a phase is open, through CPython's allocator (``bytes``,
``bytearray``, pickle's buffers, lists) and through numpy (array data; see
:func:`install`). Smaller blocks, and memory that C libraries take from ``malloc``
themselves, stay where they would be.

For a program as written, and every process it starts, without a line:
``ARENAPOOL=on`` (or ``1``, ``true``, ``yes``) in the environment; ``ARENAPOOL=off``
(or ``0``, ``false``, ``no``) keeps arenapool out whatever the program calls. Any
case; another value counts as unset and warns once for the program.
"""

import sys

# What this module imports as it loads is what a program pays at its first use of
# arenapool (``ARENAPOOL=on`` loads only the extension as the interpreter starts: see
# _arenapool_startup): the extension, the light modules of the core and, under
# ARENAPOOL=on, the rest of its start. The rest is imported when it is first used: the
# names below from their modules by __getattr__, typing's only for type checkers.
# None of these modules has `from __future__ import annotations`, which imports
# `__future__`: their annotations that name typing's types are strings.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Literal, Optional, TypeVar

    _F = TypeVar("_F", bound=Callable[..., Any])

    from ._core._breakdown import Breakdown, breakdown
    from ._core._holders import Release
    from ._core._release import recent_releases, release_others, set_release, use_arrow_jemalloc
    from ._integrations._notebook import load_ipython_extension as load_ipython_extension
    from ._integrations._notebook import unload_ipython_extension as unload_ipython_extension

# _warnings first: if the extension cannot load, the startup hook still finds
# ArenaPoolWarning to say so with.
from ._core._warnings import ArenaPoolWarning

if "t" in sys.abiflags:  # free-threaded: refused before the extension is loaded
    from ._core._build import check_build

    check_build()

from . import _arenapool
from ._arenapool import ArenaPoolError, Memory, Report, memory, rss, trim
from ._core import _arrow, _switch

# Each name imported when first used, and its module (see __getattr__).
_LAZY = {
    "Breakdown": "._core._breakdown",
    "breakdown": "._core._breakdown",
    "Release": "._core._holders",
    "recent_releases": "._core._release",
    "release_others": "._core._release",
    "set_release": "._core._release",
    "use_arrow_jemalloc": "._core._release",
    # %load_ext arenapool and %unload_ext arenapool
    "load_ipython_extension": "._integrations._notebook",
    "unload_ipython_extension": "._integrations._notebook",
}


# What a phase, install() and the names above import at their first use.
_USED_LATER = ("._core._optional", "._core._release", "._core._breakdown", "._core._holders")


def _before_fork() -> None:
    """Before ``fork``, once the hooks are installed: the modules imported at first use
    are imported, or their import on another thread is waited for. A child made while
    another thread is halfway through importing one would wait for ever for that
    import's lock at its own first phase (the thread does not exist in the child)."""
    if _arenapool.raw_state() == "absent":
        return
    import importlib

    for module in _USED_LATER:
        try:
            importlib.import_module(module, __name__)
        except Exception:  # the fork goes on: the child imports it itself
            pass


def _after_fork_in_child() -> None:
    """In a child made by ``fork``: the thread of the idle return is its parent's, not
    there; the child starts its own if the hooks take blocks (a pool's worker made by
    ``fork`` never calls :func:`install` itself)."""
    _arenapool.start_idle_return_in_child()


import os as _os  # noqa: E402

_os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
del _os


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # from now on found without this call
    return value

__all__ = [
    "ArenaPoolError",
    "ArenaPoolWarning",
    "Breakdown",
    "Memory",
    "Release",
    "Report",
    "breakdown",
    "install",
    "installed",
    "memory",
    "phase",
    "phase_is_open",
    "recent_releases",
    "release_others",
    "rss",
    "set_release",
    "set_threshold",
    "stats",
    "threshold",
    "trim",
    "uninstall",
    "use_arrow_jemalloc",
]

__version__ = "0.1.0"


def _numpy_ready() -> bool:
    """Whether numpy can be imported, and has the memory handler API (1.22 on)."""
    try:
        import numpy
    except ImportError:
        return False
    major, minor = (int(part) for part in numpy.__version__.split(".")[:2])
    return (major, minor) >= (1, 22)


def install(*, numpy: "Optional[bool]" = None, threshold: "Optional[int]" = None) -> None:
    """Install arenapool's hooks: large blocks then go to arenapool's arenas.

    - A hook on CPython's raw allocator, for the whole process: it wraps the allocator
      in place (the system ``malloc``, ``PYTHONMALLOC=debug``'s checks,
      ``tracemalloc``, another library's hook) and passes it every block below the
      threshold and every block that is not arenapool's. While ``tracemalloc`` traces,
      the hook goes under it (``tracemalloc`` then traces arenapool's blocks too), so
      that ``tracemalloc.stop()`` leaves it in place; where ``tracemalloc`` traces under
      another library's hook, ``install()`` raises :class:`ArenaPoolError` saying so.
    - numpy's memory handler: numpy's default handler is wrapped in place, so every
      thread and context that has not set a handler of its own gets arenapool's
      (worker threads of any pool, the threads that unpickle a pool's results). A
      context that set one of its own (``PyDataMem_SetHandler``) gets a wrapper of it
      when ``install()`` is called there. Arrays of 4 MiB and more are advised huge
      pages as numpy's own handler advises them, unless numpy's setting for it
      (``numpy._core.multiarray._set_madvise_hugepage``) is off when ``install()`` runs.
    - CPython's arena allocator, wrapped once per process to know pymalloc's arenas, so
      that a phase's end can give back the pages of its free pools (where pymalloc is
      the object allocator and its pools are larger than a page; see
      :func:`set_release`). It only records blocks, and stays after :func:`uninstall`.

    - Arrow's default memory pool, set to give back what it frees, from any thread
      (see :func:`use_arrow_jemalloc`), once per process, unless
      ``set_release(arrow=False)`` was called before: before pyarrow is imported,
      ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` for when it is; after, if its default is
      still mimalloc's, the default becomes Arrow's jemalloc pool from now on, and what
      mimalloc's holds goes back through a release on the main thread (the only one
      mimalloc's release reaches from outside: see :func:`release_others`). A program
      that chose its pool (``ARROW_DEFAULT_MEMORY_POOL``, ``pyarrow.set_memory_pool``)
      keeps it.
    - The watcher, which gives back what the program drops while no phase is open,
      every second (see :func:`set_release`).

    The watcher (``arenapool-release``) and the thread of the idle return
    (``arenapool-idle``) run from then on: on Python 3.12 and later, each ``os.fork()``
    warns that the process has threads (``DeprecationWarning``), arenapool's included.
    A child made by ``fork`` starts its own idle return at the fork, and its watcher
    when it installs or opens a phase.

    With ``ARENAPOOL=off`` (or ``0``, ``false``, ``no``, any case) in the environment,
    ``install()`` does nothing, and says so once for the program
    (:class:`ArenaPoolWarning`; not again in the workers it starts): the variable
    rules arenapool out whatever the program calls. ``ARENAPOOL=on`` (or ``1``,
    ``true``, ``yes``) installs the hooks as the interpreter starts, and the rest with
    the first library it integrates with (see the package's README).

    Installing again is cheap and changes nothing but the threshold (and wraps the
    calling context's own handler if it has one). :func:`phase` installs the hooks if
    they are not installed. All of it is thread-safe and needs no lock on the
    allocation path: the hooks run without the interpreter's lock as CPython's and
    numpy's allocators do.

    Args:
        numpy: ``True``: wrap numpy's handler, raising if numpy (1.22 or later) cannot
            be imported; ``False``: leave numpy alone; ``None`` (the default): wrap it
            if numpy is available.
        threshold: the size in bytes from which blocks go to arenapool (default
            64 KiB; see :func:`set_threshold`).
    """
    # Before the hooks: what an import allocates lives as long as its module, and a
    # block of the hooks' that lives for good keeps them in CPython's chain (uninstall).
    from ._core import _release

    if _install_hooks(numpy=numpy, threshold=threshold):
        _release.start_watcher()


def _install_hooks(*, numpy: "Optional[bool]" = None, threshold: "Optional[int]" = None) -> bool:
    """:func:`install` but the watcher; whether the hooks are installed (``False``
    under ``ARENAPOOL=off``). What ``ARENAPOOL=on`` does as the interpreter starts."""
    if _switch.off():
        if _switch.first_in_program():  # once for the program: its workers install too
            import warnings

            warnings.warn(
                f"{_switch.VARIABLE}={_switch.value()} in the environment: arenapool.install() "
                f"does nothing, and no phase sends memory to arenapool. Unset it to let the "
                f"program install arenapool",
                ArenaPoolWarning,
                stacklevel=3,
            )
        return False
    if numpy is not None and not isinstance(numpy, bool):
        raise TypeError(
            f"arenapool.install(numpy=...) takes True, False or None, not "
            f"{type(numpy).__name__} {numpy!r}"
        )
    if threshold is not None:
        set_threshold(threshold)
    _arenapool.install_raw()
    _arenapool.install_pymalloc_pools()
    if numpy is None:
        numpy = _numpy_ready()
    elif numpy and not _numpy_ready():
        raise ImportError(
            "arenapool.install(numpy=True) needs numpy 1.22 or later: pip install 'numpy>=1.22'"
        )
    if numpy:
        _arenapool.install_numpy_default()
        _arenapool.install_numpy()
    _arrow.give_back_by_default()
    return True


def uninstall() -> bool:
    """Stop sending blocks to arenapool, and take the hooks out where that is safe.

    Both hooks stop taking blocks at once; each still frees its own. The raw
    allocator's hook leaves CPython's chain only once none of its blocks is alive and
    no hook installed after it wraps it. numpy's default handler stays wrapped (arrays
    made with it, before or after, free through it), passing every block to numpy's
    own; a context's own handler that :func:`install` wrapped is put back.

    Returns:
        Whether the raw allocator's hook has left CPython's chain.
    """
    if "numpy" in sys.modules and _numpy_ready():
        _arenapool.uninstall_numpy()
    return _arenapool.uninstall_raw() == "absent"


def installed() -> bool:
    """Whether the hook on CPython's raw allocator is installed and taking blocks."""
    return _arenapool.raw_state() != "absent" and _arenapool.taking()


def threshold() -> int:
    """The size, in bytes, from which the hooks send blocks to arenapool (64 KiB)."""
    return _arenapool.threshold()


def set_threshold(nbytes: "Optional[int]") -> None:
    """Set the size, in bytes, from which the hooks send blocks to arenapool, at once.

    ``None`` restores the default, 64 KiB. A lower threshold catches more blocks and
    costs more calls into the arenas. The threshold goes from the phase threshold
    (32 KiB and one byte: smaller blocks would not be given back when a phase ends) to
    ``sys.maxsize`` (the largest block CPython and numpy can ask for); anything else
    raises ``ValueError``. A threshold above every block the program makes sends none
    to arenapool; to stop the hooks taking blocks, call :func:`uninstall` instead.
    """
    if nbytes is not None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"threshold must be an int (bytes) or None, not {type(nbytes).__name__}")
        smallest = _arenapool.phase_threshold()
        if not smallest <= nbytes <= sys.maxsize:
            raise ValueError(
                f"threshold must be from {smallest} (the phase threshold: smaller blocks would "
                f"not be given back when a phase ends) to {sys.maxsize} (sys.maxsize, the "
                f"largest block there can be) bytes, or None for the default (65536); got "
                f"{nbytes}. To stop the hooks taking blocks, call arenapool.uninstall()"
            )
    _arenapool.set_threshold(nbytes)


def stats() -> "Dict[str, float]":
    """A snapshot of what the allocator holds and what work gave back, under the names
    of arenapool's Prometheus metrics: ``name`` for a metric with one series,
    ``name{label="value",...}`` (labels in alphabetical order) for each series of the
    others. Among them:

    - ``arenapool_jemalloc_{allocated,active,metadata,resident,mapped,retained,dirty,muzzy}_bytes``:
      what arenapool's allocator holds, for the whole process;
    - ``arenapool_arena_resident_bytes{kind="..."}`` (and ``active``, ``dirty``,
      ``muzzy``, ``huge_page_resident``): what its arenas of each kind hold: ``phase``,
      ``idle``, ``automatic`` (the allocator's own), ``pool``, ``scope``, ``raw`` (the
      hooks' outside phases);
    - ``arenapool_work_ended_total{name="",work="phase"}``,
      ``arenapool_work_returned_bytes_total{...}``, ``arenapool_returned_bytes_total``:
      running totals since the process started.

    One snapshot costs about 50 microseconds with a dozen arenas, more with many. For
    a Prometheus endpoint, :mod:`arenapool.prometheus` has a ``prometheus_client``
    collector of the same metrics.
    """
    figures: Dict[str, float] = {}
    for name, _help, _kind, series in _arenapool.metrics():
        for labels, value in series:
            if labels:
                pairs = ",".join(f'{key}="{_escape(labels[key])}"' for key in sorted(labels))
                figures[f"{name}{{{pairs}}}"] = value
            else:
                figures[name] = value
    return figures


def _escape(value: str) -> str:
    """A label value as Prometheus' text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def phase_is_open() -> bool:
    """Whether a phase is open, on any thread."""
    return _arenapool.phase_is_open()


class _PhaseClass(type):
    """The type of :class:`phase`: ``with arenapool.phase:`` (without the parentheses)
    raises a ``TypeError`` that says what to write, instead of Python's "'type' object
    does not support the context manager protocol"."""

    def __enter__(cls) -> None:
        raise TypeError(
            "`with arenapool.phase:` uses the class itself: write `with arenapool.phase():` "
            "(with parentheses), or `with arenapool.phase() as p:` to read p.report after the block"
        )

    def __exit__(cls, *exc: "Any") -> None:  # pragma: no cover - __enter__ always raises
        return None


class phase(metaclass=_PhaseClass):
    """A process-wide phase: a ``with`` block, or a decorator.

    While a phase is open, on every thread of the process, large blocks go to the
    phase's arenas; when the last open phase ends, their free pages go back to the OS,
    and from then on each block the moment it is freed (the results, when you drop
    them). Phases nest and overlap, from any threads. If the block raises, the phase
    ends and the exception goes on.

    After the block, :attr:`report` holds the phase's :class:`Report` (inside the
    block it is ``None``: the phase has not ended, and there is nothing to report yet)::

        with arenapool.phase() as p:
            results = run_everything()
        print(p.report)       # ran 5.1 s; RSS 40.0 MiB at the start, 1.5 GiB at the end; ...

    When the last open phase ends, the process's other allocators give back their free
    memory too, each if it holds enough: glibc's heaps (``malloc_trim(0)``), pymalloc's
    free pools, and Arrow's pools if pyarrow is imported (``release_unused()``, but the
    jemalloc pool's up to pyarrow 26, which gives nothing back); :attr:`released` says what
    each gave back and how long it took, and :func:`set_release` switches them. Until
    the next phase opens, a watcher thread does the same every second for what the
    program drops later.

    As a decorator, ``@arenapool.phase()`` and ``@arenapool.phase`` are the same: each
    call of the function is a phase of its own.

    Entering a phase installs the hooks if they are not installed (see
    :func:`install`). The process's first phase makes the phase arenas, one per CPU:
    under an address-space limit (``ulimit -v``) that the program has already filled,
    entering raises :class:`ArenaPoolError` saying so. A phase is process-wide in the
    process that opened it: a child made by ``fork`` starts with no phase open (it may
    open its own).
    """

    report: "Optional[Report]"
    """The phase's :class:`Report` once it has ended; ``None`` before and inside the
    block."""
    released: "List[Release]"
    """What glibc, pymalloc, Arrow's pools and DuckDB gave back when the phase ended
    (empty before, and when another phase was still open)."""
    _open: "Optional[_arenapool.OpenPhase]"

    def __new__(cls, function: "Optional[Callable[..., Any]]" = None) -> "Any":
        if function is None:
            return super().__new__(cls)
        if not callable(function):
            raise TypeError(
                f"arenapool.phase takes no arguments, not {type(function).__name__} "
                f"{function!r}: write `with arenapool.phase():` or `@arenapool.phase()`"
            )
        return cls()(function)  # @arenapool.phase without parentheses

    def __init__(self, function: None = None) -> None:
        self.report = None
        self.released = []
        self._open = None

    def __call__(self, function: "_F") -> "_F":
        """``function`` as a phase: each call of it a phase of its own (calls may
        overlap)."""
        import functools  # here, not at the top: not imported as the interpreter starts

        @functools.wraps(function)
        def in_a_phase(*args: "Any", **kwargs: "Any") -> "Any":
            with phase():
                return function(*args, **kwargs)

        return in_a_phase  # type: ignore[return-value]  # wraps: the same signature

    def __enter__(self) -> "phase":
        if self._open is not None:
            raise ArenaPoolError("this phase is already open: make a new arenapool.phase() for each block")
        install()
        self._open = _arenapool.enter_phase()
        return self

    def __exit__(self, *exc: "Any") -> "Literal[False]":
        opened, self._open = self._open, None
        if opened is None:
            if self.report is not None:
                raise ArenaPoolError(
                    "this arenapool.phase() has already ended: __exit__ was called twice. "
                    "Call __exit__ once for each __enter__ (a `with` block does)"
                )
            raise ArenaPoolError(
                "this arenapool.phase() was never entered: call __enter__ before __exit__, "
                "or use it as `with arenapool.phase():`"
            )
        self.report = opened.end()
        if not _arenapool.phase_is_open() and not _switch.off():
            from ._core import _optional, _release

            try:
                self.released = _release.release_others()
            except Exception as error:  # MemoryError, say: the phase has ended all the same
                _optional.log_once("phase end", "arenapool could not give other holders' memory back", error)
            from ._core._breakdown import record_phase

            record_phase(self.report, self.released)
            _release.start_watcher()
        return False

    def __repr__(self) -> str:
        state = "open" if self._open is not None else ("ended" if self.report else "not entered")
        return f"<arenapool.phase {state}>"


def __dir__() -> "List[str]":
    """``dir(arenapool)``: the public API (``__all__``) and the submodules imported so
    far (``arenapool.joblib``...), not the names the package uses inside."""
    modules = [
        name
        for name, value in globals().items()
        if not name.startswith("_") and getattr(value, "__name__", "").startswith(__name__ + ".")
        and type(value) is type(sys)
    ]
    return sorted({*__all__, *modules, "__version__"})


# Under ARENAPOOL=on the interpreter's start loaded the extension and installed its
# hooks alone (see _arenapool_startup, outside the package); the rest of that start
# comes with the package.
if getattr(sys.modules.get("_arenapool_startup"), "started", False):
    from ._integrations import _startup as _startup  # noqa: E402
