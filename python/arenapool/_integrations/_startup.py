"""``ARENAPOOL=on``: arenapool for a whole program, without a line of its code.

The wheel puts ``arenapool.pth`` and ``_arenapool_startup`` in site-packages. Python
runs the ``.pth`` file's one line as it starts (before the program, before numpy or
pyarrow is imported); the line reads the environment variable and, only when it is set
to a value that is not off (``off``, ``0``, ``false``, ``no``, any case), imports
``_arenapool_startup`` and calls its ``start()``. When the value is on (``on``, ``1``,
``true``, ``yes``), that loads the extension without this package and installs its
hooks, and leaves the rest to this module: it imports it at the first import of a library below,
before the library runs, and the package imports it at its end. Another value (one not
understood) comes here at once, and warns once for the program (see
:mod:`arenapool._core._switch`).

This module, as it is imported:

- installs arenapool's hooks (:func:`arenapool.install` but the watcher; they are in
  already, so this is what comes with them: Arrow's default pool set to give back what
  it frees, chosen when pyarrow loads; see :func:`arenapool.install`);
- installs each integration when its library is first imported: numpy's memory
  handler (``numpy``), :func:`arenapool.joblib.install` (``joblib``),
  :func:`arenapool.futures.install` (``concurrent.futures``),
  :func:`arenapool.dask.install` and ``arenapool.dask`` as a preload of every Dask
  worker the process starts (``distributed``), :func:`arenapool.ray.install` (``ray``);
  with the first of them, or ``pyarrow`` or ``duckdb``, the rest of
  :func:`arenapool.install`: the watcher that gives back what the program (or
  DuckDB's allocator) drops while no phase is open;
- starts the watcher again in each child made by ``fork``, once it has run.

It starts no thread of Python's: ``python -c pass`` pays the extension's load and the
hooks' install, and imports no module of the package (``tests/test_startup.py`` lists
what it imports). The watcher waits for one of those libraries, or a phase's end
(which starts it too): before either, what the hooks' arenas and glibc's heaps hold
free goes back when the process goes idle, through the hooks' idle return (the
extension's thread, which this module's install starts, and which starts before it
once the hooks have taken 4 MiB of blocks: it cannot be started from inside the
allocator); pymalloc's free pools wait for the watcher.

Child processes inherit the variable: workers started by ``spawn``, ``forkserver``,
loky, Dask's nanny or Ray's raylet run the start at their own. Nothing here raises
into the program's start: what cannot be done warns once
(:class:`arenapool.ArenaPoolWarning`) and the program runs without it.
"""

import os
import sys

from .. import _install_hooks, install
from .._core import _switch
from ._after_import import after_import

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional, Tuple

__all__ = ["start"]


def _all_of_install() -> None:
    """:func:`arenapool.install`, the watcher included, without importing numpy for it."""
    install(numpy=None if "numpy" in sys.modules else False)


def _numpy() -> None:
    install()  # numpy is imported: its memory handler too


def _joblib() -> None:
    from .. import joblib

    _all_of_install()
    joblib.install()


def _futures() -> None:
    from .. import futures

    _all_of_install()
    futures.install()


def _dask() -> None:
    import dask

    from .. import dask as arenapool_dask

    _all_of_install()
    arenapool_dask.install()
    preloads = list(dask.config.get("distributed.worker.preload", default=None) or [])
    if "arenapool.dask" not in preloads:
        dask.config.set({"distributed.worker.preload": [*preloads, "arenapool.dask"]})


def _ray() -> None:
    from .. import ray

    _all_of_install()
    ray.install()


# Each library, arenapool's module for it, and what installs the integration.
_INTEGRATIONS: "Tuple[Tuple[str, Optional[str], Callable[[], None]], ...]" = (
    ("numpy", None, _numpy),
    ("pyarrow", None, _all_of_install),
    ("duckdb", None, _all_of_install),
    ("joblib", "arenapool.joblib", _joblib),
    ("concurrent.futures", "arenapool.futures", _futures),
    ("distributed", "arenapool.dask", _dask),
    ("ray", "arenapool.ray", _ray),
)


def _watcher_in_children_made_by_fork() -> None:
    """Once the watcher's module is imported (and has registered its own handler, which
    clears the parent's watcher out of the child): each child made by ``fork`` starts
    its own."""
    from .._core import _release

    os.register_at_fork(after_in_child=_release.start_watcher)


def _once_loaded(own: "Optional[str]", integration: "Callable[[], None]") -> "Callable[[], None]":
    """``integration``, unless arenapool's own module for the library is halfway
    through its import (it imports the library first, which brings the program here):
    then it runs when that module has run (see :func:`start`)."""

    def run() -> None:
        module = sys.modules.get(own) if own is not None else None
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            return
        integration()

    return run


def start() -> None:
    """What ``ARENAPOOL=on`` does as the interpreter starts (see the module's docs)."""
    if _switch.setting() != "on" or not _install_hooks(numpy=False):
        return
    after_import("arenapool._core._release", _watcher_in_children_made_by_fork, library="arenapool's watcher")
    for name, own, integration in _INTEGRATIONS:
        after_import(name, _once_loaded(own, integration))
        if own is not None:  # the library may first be imported by arenapool's module
            after_import(own, integration, library=name)


try:
    start()
except Exception as error:  # never into the program's start
    _switch.warn_about_variable(
        f"{_switch.VARIABLE}={_switch.value()}: arenapool could not install itself as the "
        f"interpreter started ({type(error).__name__}: {error}); the program runs without it"
    )
