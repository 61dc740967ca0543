"""Run a function on the main thread, soon, from any thread: for the holders whose
release reaches only the calling thread's memory (Arrow's mimalloc pool), when the
thread that made it is the main one.

``Py_AddPendingCall`` asks the interpreter to call a C function on the main thread
between two bytecodes of its Python code (as it runs signal handlers): at once while
the main thread runs Python, when it comes back to Python while it waits in C (a
``sleep``, a blocking read), never while it stays in C. One call is pending at a time;
a request made while one is pending is that one.
"""

from __future__ import annotations

import ctypes
from typing import Callable, List, Optional

__all__ = ["call_soon"]

# The function pending, if one is: a list whose append and pop are atomic under the
# interpreter's lock. No lock here: the main thread could be holding it when it runs
# the pending call.
_slot: List[Callable[[], None]] = []


def _run(_argument: Optional[int]) -> int:
    """The pending call, on the main thread with the interpreter's lock held. Never
    raises (a C callback must not): what it calls fails soft."""
    try:
        function = _slot.pop() if _slot else None
        if function is not None:
            function()
    except BaseException:  # noqa: BLE001: nothing may leave a C callback
        pass
    return 0


_PENDING_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
# Kept alive for as long as the interpreter may call it.
_callback = _PENDING_CALL(_run)
_add_pending_call: Optional[Callable[..., int]] = None
try:
    _add = ctypes.pythonapi.Py_AddPendingCall
    _add.argtypes = [_PENDING_CALL, ctypes.c_void_p]
    _add.restype = ctypes.c_int
    _add_pending_call = _add
except AttributeError:  # an interpreter without it: nothing runs there
    pass


def call_soon(function: Callable[[], None]) -> bool:
    """Ask the main thread to call ``function`` soon (see the module's docs); whether
    it is pending. ``function`` must not raise (what it raises is dropped)."""
    if _add_pending_call is None:
        return False
    if _slot:
        return True
    _slot.append(function)
    if _add_pending_call(_callback, None) != 0:  # the queue of pending calls is full
        _slot.clear()
        return False
    return True
