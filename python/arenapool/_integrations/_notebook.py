"""arenapool in a Jupyter notebook (IPython): ``%load_ext arenapool``, and the line
magic ``%arenapool``.

``%load_ext arenapool`` installs arenapool's hooks in the kernel (:func:`arenapool.install`)
and its integrations: every ``joblib.Parallel`` call a phase if joblib is installed
(:mod:`arenapool.joblib`), every ``concurrent.futures`` ``Executor.map`` a phase
(:mod:`arenapool.futures`), and, once the notebook has imported them (Dask's and Ray's
imports are not made for it), every Dask gather and ``ray.get`` a phase, and
:class:`arenapool.dask.WorkerPhases` on the workers of Dask's default client (the last
``Client`` made), checked before and after each cell.

``%arenapool`` prints where the kernel's memory is (:func:`arenapool.breakdown`), and
where each worker's is for Dask's default client (:func:`arenapool.dask.breakdowns`).

Each integration is optional: one that cannot be installed is skipped with an
:class:`arenapool.ArenaPoolWarning`, once, and the others are installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import weakref
from typing import Any, Callable, List, Set

from .._core import _optional
from .._core._breakdown import breakdown

__all__ = ["load_ipython_extension"]

# Dask clients whose workers have been given the plugin, not kept alive by it.
_clients: "weakref.WeakSet[Any]" = weakref.WeakSet()
_checkers: List[Callable[..., None]] = []
# The integrations installed (or tried) in this kernel.
_integrated: Set[str] = set()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext arenapool``: the hooks and the integrations (see the module's docs),
    and the line magic ``%arenapool``. Loading it again changes nothing."""
    from .. import install

    install()
    _integrate("joblib", "joblib")
    _integrate("concurrent.futures", "futures")
    _integrate_imported()
    ipython.register_magic_function(_arenapool_magic, magic_kind="line", magic_name="arenapool")
    if not _checkers:
        _checkers.append(_integrate_imported_after_cell)
        ipython.events.register("pre_run_cell", _integrate_imported_after_cell)
        ipython.events.register("post_run_cell", _integrate_imported_after_cell)


def _integrate(module: str, integration: str) -> None:
    """arenapool's integration ``integration`` installed, if ``module`` is installed
    and it was not installed already."""
    if integration in _integrated:
        return
    if module not in sys.modules and importlib.util.find_spec(module) is None:
        return
    _integrated.add(integration)  # tried once: one that fails warns once

    def install() -> None:
        importlib.import_module(f"arenapool.{integration}").install()

    _optional.step(f"notebook {integration}", f"arenapool.{integration}.install()", install)


def _integrate_imported() -> None:
    """Dask's and Ray's integrations, for those the kernel has imported."""
    if "distributed" in sys.modules:
        _integrate("distributed", "dask")
        _optional.step("notebook dask workers", "WorkerPhases on the default client's workers", _dask_workers)
    if "ray" in sys.modules:
        _integrate("ray", "ray")


def _integrate_imported_after_cell(*_: Any) -> None:
    _integrate_imported()


def _dask_workers() -> None:
    """:class:`arenapool.dask.WorkerPhases` on the workers of Dask's default client,
    once per client."""
    from distributed import default_client

    import arenapool.dask

    try:
        client = default_client()
    except ValueError:  # no client yet
        return
    if client in _clients or client.status != "running":
        return
    _clients.add(client)
    arenapool.dask.install(client)


def _arenapool_magic(line: str) -> None:
    """``%arenapool``: where the kernel's memory is, and each Dask worker's."""
    print(f"kernel (pid {os.getpid()})")
    print(breakdown())
    if "distributed" not in sys.modules:
        return
    from distributed import default_client

    import arenapool.dask

    try:
        client = default_client()
    except ValueError:
        return
    for address, figures in sorted(arenapool.dask.breakdowns(client).items()):
        print(f"\nDask worker {address}")
        print(figures)
