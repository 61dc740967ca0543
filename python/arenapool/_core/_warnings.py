"""What arenapool skipped, said once, while the program's own work goes on.

Every part of arenapool beyond the hooks is optional to the program that uses it:
Arrow's pool, pymalloc's free pools, glibc's heaps, a phase that cannot open, a
release that fails. When one of them cannot run, arenapool warns once with an
:class:`ArenaPoolWarning` naming what was skipped and why, and the program's call
goes on as it would without arenapool. Turn the warnings into errors while testing
with ``warnings.simplefilter("error", arenapool.ArenaPoolWarning)``, or silence them
with ``"ignore"``.
"""

from __future__ import annotations

import _thread
import os

__all__ = ["ArenaPoolWarning", "first_time", "warn_once"]


class ArenaPoolWarning(UserWarning):
    """An optional part of arenapool was skipped; the program's own work went on.

    The message names the part and what to do about it, if anything.
    """


_said: set[str] = set()
# A lock of ``_thread``'s, not ``threading``'s: this module is imported as the
# interpreter starts (``ARENAPOOL=on``), where ``threading`` would cost its imports.
_said_lock = _thread.allocate_lock()


def warn_once(key: str, message: str, *, stacklevel: int = 3) -> None:
    """Warns with ``message`` the first time ``key`` is seen in this process.

    ``stacklevel`` counts from the caller of ``warn_once`` (the default names the
    caller's caller: the user's code that called into arenapool).
    """
    if not first_time(key):
        return
    import warnings  # here, not at the top: not imported as the interpreter starts

    warnings.warn(message, ArenaPoolWarning, stacklevel=stacklevel)


def first_time(key: str) -> bool:
    """Whether ``key`` is seen for the first time in this process (it is from now on)."""
    with _said_lock:
        if key in _said:
            return False
        _said.add(key)
        return True


def _after_fork_in_child() -> None:
    """A child made by ``fork`` while another thread held the lock would wait for it
    for ever: it gets its own."""
    global _said_lock
    _said_lock = _thread.allocate_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
