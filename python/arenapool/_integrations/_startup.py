"""``ARENAPOOL=on``: arenapool for a whole program, without a line of its code.

The wheel puts ``arenapool.pth`` in site-packages, whose one line Python runs as it
starts (before the program, before numpy or pyarrow is imported). The line reads the
environment variable and, only when it is set and not ``off``, imports this module,
which:

- installs arenapool's hooks (:func:`arenapool.install`), with Arrow's default pool set
  to give back what it frees (it is chosen when pyarrow loads; see
  :func:`arenapool.install`), and the watcher that gives back what the program drops
  while no phase is open;
- installs each integration when its library is first imported: numpy's memory
  handler (``numpy``), :func:`arenapool.joblib.install` (``joblib``),
  :func:`arenapool.futures.install` (``concurrent.futures``),
  :func:`arenapool.dask.install` and ``arenapool.dask`` as a preload of every Dask
  worker the process starts (``distributed``), :func:`arenapool.ray.install` (``ray``);
- starts the watcher again in each child made by ``fork``.

Child processes inherit the variable: workers started by ``spawn``, ``forkserver``,
loky, Dask's nanny or Ray's raylet run this at their own start. Nothing here raises
into the program's start: what cannot be done warns once
(:class:`arenapool.ArenaPoolWarning`) and the program runs without it.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Tuple

from .. import install
from .._core import _release, _switch
from .._core._warnings import warn_once
from ._after_import import after_import

__all__ = ["start"]


def _numpy() -> None:
    install()  # numpy is imported: its memory handler too


def _joblib() -> None:
    from .. import joblib

    joblib.install()


def _futures() -> None:
    from .. import futures

    futures.install()


def _dask() -> None:
    import dask

    from .. import dask as arenapool_dask

    arenapool_dask.install()
    preloads = list(dask.config.get("distributed.worker.preload", default=None) or [])
    if "arenapool.dask" not in preloads:
        dask.config.set({"distributed.worker.preload": [*preloads, "arenapool.dask"]})


def _ray() -> None:
    from .. import ray

    ray.install()


# Each library, arenapool's module for it, and what installs the integration.
_INTEGRATIONS: Tuple[Tuple[str, Optional[str], Callable[[], None]], ...] = (
    ("numpy", None, _numpy),
    ("joblib", "arenapool.joblib", _joblib),
    ("concurrent.futures", "arenapool.futures", _futures),
    ("distributed", "arenapool.dask", _dask),
    ("ray", "arenapool.ray", _ray),
)


def _once_loaded(own: Optional[str], integration: Callable[[], None]) -> Callable[[], None]:
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
    if _switch.setting() != "on":
        return
    install(numpy=None if "numpy" in sys.modules else False)  # never imported for it
    _release.start_watcher()
    os.register_at_fork(after_in_child=_release.start_watcher)
    for name, own, integration in _INTEGRATIONS:
        after_import(name, _once_loaded(own, integration))
        if own is not None:  # the library may first be imported by arenapool's module
            after_import(own, integration, library=name)


try:
    start()
except Exception as error:  # never into the program's start
    warn_once(
        "startup",
        f"ARENAPOOL=on: arenapool could not install itself as the interpreter started "
        f"({type(error).__name__}: {error}); the program runs without it",
        stacklevel=2,
    )
