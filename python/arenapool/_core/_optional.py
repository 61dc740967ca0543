"""The optional steps the integrations take around a program's own work, each of which
is skipped, said once, when it cannot run: a phase around a gather, a ``ray.get`` or a
task; Arrow's jemalloc pool on a worker; a holder's release.

A step that cannot run in the program's own call warns once with an
:class:`ArenaPoolWarning` (see :mod:`arenapool._core._warnings`); one that fails on a
thread of arenapool's own (the watcher, a worker's phase ender) or of the framework's (a Dask
worker's event loop) logs once, with its traceback, on the logger ``arenapool``, where
a warning would reach no one who could act on it. Either way the work goes on.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Dict, Iterator, Optional, TypeVar

from ._warnings import first_time, warn_once

if TYPE_CHECKING:  # imported where it is used: the package imports this module
    import logging

    from .. import phase

__all__ = ["end_phase", "log_once", "logger", "missing", "open_phase", "phase_or_none", "step"]


def logger() -> logging.Logger:
    """arenapool's logger: a holder whose release fails, a phase whose end fails on a
    thread of arenapool's own; once each, at ``WARNING``.

    :mod:`logging` is imported here, when a failure is logged, not with this module:
    the package imports this module before each ``fork`` (see ``_before_fork``), and
    :mod:`logging`, imported for the first time there, would register its own handlers
    for ``fork`` halfway through one: Python would run the two that release its lock
    after that ``fork`` without the one that takes it before, and print ``RuntimeError:
    cannot release un-acquired lock`` in the parent and in the child, at the first
    ``fork`` of every program that had not imported :mod:`logging` yet."""
    import logging

    return logging.getLogger("arenapool")

_logged: Dict[str, object] = {}

T = TypeVar("T")


def missing(module: str, extra: str, error: ImportError) -> ModuleNotFoundError:
    """The error of importing ``arenapool.<module>`` without the package it integrates
    with: what is missing and the pip extra that installs it (``error``, the import's
    own, is its cause: ``raise missing(...) from error``)."""
    needed = error.name or extra
    message = (
        f"arenapool.{module} needs {needed}, which is not installed here ({error}): "
        f"pip install 'arenapool[{extra}]'"
    )
    return ModuleNotFoundError(message, name=error.name)


def log_once(key: str, message: str, error: BaseException) -> None:
    """Logs ``message`` and ``error``'s traceback on the logger ``arenapool``, the first
    time ``key`` is seen in this process; later failures of the same ``key`` are not
    logged (a holder that always fails would fill the log every second)."""
    if not first_time(_logged, key):
        return
    logger().warning("%s: %s: %s", message, type(error).__name__, error, exc_info=error)


def step(key: str, what: str, run: Callable[[], T]) -> Optional[T]:
    """``run()``; if it raises, an :class:`ArenaPoolWarning` (once per ``key``) saying
    that arenapool skipped ``what`` and why, and ``None``."""
    try:
        return run()
    except Exception as error:  # optional: the program's work goes on without it
        warn_once(key, f"arenapool skipped {what}: {type(error).__name__}: {error}", stacklevel=4)
        return None


def open_phase(what: str) -> "Optional[phase]":
    """A phase entered for ``what`` (``"a gather"``, say); ``None``, after an
    :class:`ArenaPoolWarning` (once per process), if none could open: the hooks could
    not be installed, or the allocator can make no more arenas."""
    from .. import phase

    opened = phase()
    entered = step(
        "phase",
        f"a phase for {what}, which runs without one (its memory is not given back at its end)",
        opened.__enter__,
    )
    return None if entered is None else opened


def end_phase(opened: "Optional[phase]", *, log: bool = False) -> None:
    """Ends ``opened`` (nothing if ``None``). If that fails, an :class:`ArenaPoolWarning`
    once, or with ``log`` (on a thread of arenapool's own or the framework's) a log
    record once: the phase has ended all the same (its arenas closed first)."""
    if opened is None:
        return
    try:
        opened.__exit__(None, None, None)
    except Exception as error:
        message = "arenapool could not finish a phase's end; the work goes on, the next phase ends as usual"
        if log:
            log_once("phase end", message, error)
        else:
            warn_once("phase end", f"{message}: {type(error).__name__}: {error}", stacklevel=3)


@contextlib.contextmanager
def phase_or_none(what: str) -> Iterator[None]:
    """A phase around the block if one can open (see :func:`open_phase`); the block
    runs either way, and what it raises goes on."""
    opened = open_phase(what)
    try:
        yield
    finally:
        end_phase(opened)
