"""The CPython builds arenapool runs on: those with the GIL (the global interpreter
lock). Checked before the extension is loaded, so that a free-threaded build gets an
error that says so instead of the extension failing to initialise."""

import sys


def check_build() -> None:
    """Raises ``ImportError`` on a free-threaded CPython (``Py_GIL_DISABLED``, 3.13t on):
    arenapool's hooks and its give-back of pymalloc's pools rely on the GIL, and its
    wheel is for the stable ABI, which those builds do not load."""
    # "t" in the ABI flags marks a free-threaded build (PEP 703); read from sys, not
    # sysconfig, whose import and build data the interpreter's start would pay.
    if "t" not in sys.abiflags:
        return
    version = "%d.%d" % sys.version_info[:2]
    raise ImportError(
        f"arenapool does not support free-threaded CPython: {sys.executable} is CPython "
        f"{version}t, a build without the GIL (Py_GIL_DISABLED). Run the program on the "
        f"default build of CPython {version} (python{version}, not python{version}t)"
    )
