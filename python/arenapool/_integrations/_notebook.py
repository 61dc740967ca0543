"""arenapool in a Jupyter notebook (IPython): ``%load_ext arenapool``, the line magic
``%arenapool``, and ``%unload_ext arenapool``.

``%load_ext arenapool`` installs arenapool's hooks in the kernel (:func:`arenapool.install`)
and its integrations: every ``joblib.Parallel`` call a phase if joblib is installed
(:mod:`arenapool.joblib`), every ``concurrent.futures`` ``Executor.map`` a phase
(:mod:`arenapool.futures`), and, once the notebook has imported them (Dask's and Ray's
imports are not made for it), every Dask gather and ``ray.get`` a phase, and
:class:`arenapool.dask.WorkerPhases` on the workers of Dask's default client (the last
``Client`` made), checked before and after each cell. It then asks glibc, pymalloc,
Arrow and DuckDB to give back what they hold free (:func:`arenapool.release_others`): a kernel
already stuck with the memory of an earlier job gets it back at once. It prints what it
installed and what that gave back.

``%arenapool`` shows where the kernel's memory is (:func:`arenapool.breakdown`: a table
and a chart of RSS over the last phases where the notebook shows HTML, text elsewhere),
and each worker's for Dask's default client (:func:`arenapool.dask.breakdowns`).
``%arenapool --help`` says so; any other argument is an error.

``%unload_ext arenapool`` undoes what ``%load_ext`` did: the integrations it installed
are uninstalled, the hooks too if it installed them, and the magic and its cell checks
are gone.

Each integration is optional: one that cannot be installed is skipped with an
:class:`arenapool.ArenaPoolWarning`, once, and the others are installed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shlex
import sys
import weakref
from typing import Any, Callable, List, Set

from .._core import _optional
from .._core._breakdown import breakdown

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

# Dask clients whose workers have been given the plugin, not kept alive by it.
_clients: "weakref.WeakSet[Any]" = weakref.WeakSet()
_checkers: List[Callable[..., None]] = []
# The integrations tried in this kernel, and those %load_ext installed (to undo).
_integrated: Set[str] = set()
_installed_here: List[str] = []
# Whether %load_ext installed the hooks (they were not installed before it).
_hooks_installed_here = False
_loaded = False

_MiB = 2**20

_NAMES = {
    "joblib": "every joblib.Parallel call",
    "futures": "every concurrent.futures Executor.map",
    "dask": "every Dask gather",
    "ray": "every ray.get",
}

HELP = """\
%arenapool: where the kernel's memory is.

  %arenapool           who holds the kernel's memory (MiB), what the last phase gave
                       back, the workers' (child processes') memory, and each Dask
                       worker's for the default client; a table and a chart of RSS
                       over the last phases where the notebook shows HTML
  %arenapool --help    this help

%load_ext arenapool installs arenapool in the kernel (and gives back what it holds
free); %unload_ext arenapool undoes it. In a script: print(arenapool.breakdown())."""


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext arenapool``: the hooks and the integrations (see the module's docs),
    the line magic ``%arenapool``, and a give-back of what the kernel holds free now;
    prints what it did. Loading it again changes nothing."""
    global _hooks_installed_here, _loaded
    from .. import install, installed, release_others, rss

    if _loaded:
        print("arenapool is already loaded in this kernel: %arenapool shows where its memory is.")
        return
    _loaded = True
    _hooks_installed_here = not installed()
    install()
    _integrate("joblib", "joblib")
    _integrate("concurrent.futures", "futures")
    _integrate_imported()
    ipython.register_magic_function(_arenapool_magic, magic_kind="line", magic_name="arenapool")
    if not _checkers:
        _checkers.append(_integrate_imported_after_cell)
        ipython.events.register("pre_run_cell", _integrate_imported_after_cell)
        ipython.events.register("post_run_cell", _integrate_imported_after_cell)
    before = rss()
    released = release_others()
    after = rss()
    phases = [_NAMES[name] for name in _installed_here]
    waiting = [
        _NAMES[name]
        for name, module in (("dask", "distributed"), ("ray", "ray"))
        if name not in _installed_here and importlib.util.find_spec(module) is not None
    ]
    hooks = "the hooks" if installed() else "not the hooks (ARENAPOOL=off)"
    lines = [f"arenapool loaded in this kernel (pid {os.getpid()})."]
    lines.append(f"  Installed: {hooks}" + (f"; phases around {' and '.join(phases)}." if phases else "."))
    if waiting:
        lines.append(f"  Once the notebook imports them: phases around {' and '.join(waiting)}.")
    given = sum(r.rss_returned for r in released)
    lines.append(
        f"  Gave back {given / _MiB:.1f} MiB the kernel held free: RSS {before / _MiB:.1f} -> {after / _MiB:.1f} MiB."
    )
    lines.append("  %arenapool shows where the memory is; %unload_ext arenapool undoes this.")
    print("\n".join(lines))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext arenapool``: undoes what ``%load_ext arenapool`` did, and says what."""
    global _hooks_installed_here, _loaded
    from .. import uninstall

    undone = []
    if _clients:
        import arenapool.dask

        for client in list(_clients):
            if client.status == "running":  # its workers lose the plugin
                _optional.step(
                    "notebook dask workers off",
                    "taking WorkerPhases off the workers",
                    functools.partial(arenapool.dask.uninstall, client),
                )
        _clients.clear()
        undone.append("every Dask worker's tasks")
    for name in reversed(_installed_here):
        module = sys.modules.get(f"arenapool.{name}")
        if module is not None:
            module.uninstall()
            undone.append(_NAMES[name])
    _installed_here.clear()
    _integrated.clear()
    for checker in _checkers:
        for event in ("pre_run_cell", "post_run_cell"):
            try:
                ipython.events.unregister(event, checker)
            except ValueError:
                pass
    _checkers.clear()
    ipython.magics_manager.magics["line"].pop("arenapool", None)
    hooks = ""
    if _hooks_installed_here:
        hooks = "; the hooks uninstalled (blocks they made are still freed by arenapool)"
        uninstall()
        _hooks_installed_here = False
    _loaded = False
    what = " and ".join(undone) + ": no longer phases" if undone else "no integration had been installed"
    print(f"arenapool unloaded: {what}{hooks}; %arenapool removed.")


def _integrate(module: str, integration: str) -> None:
    """arenapool's integration ``integration`` installed, if ``module`` is installed
    and it was not installed already."""
    if integration in _integrated:
        return
    if module not in sys.modules and importlib.util.find_spec(module) is None:
        return
    _integrated.add(integration)  # tried once: one that fails warns once

    def install() -> bool:
        imported = importlib.import_module(f"arenapool.{integration}")
        if imported.installed():
            return False  # the program installed it: %unload_ext leaves it
        imported.install()
        return True

    if _optional.step(f"notebook {integration}", f"arenapool.{integration}.install()", install):
        _installed_here.append(integration)


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


def _show(title: str, figures: Any) -> None:
    """``figures`` under ``title``: rich where the front end shows HTML, text elsewhere."""
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - the magic runs in IPython
        print(title)
        print(figures)
        return
    print(title)
    display(figures)


def _arenapool_magic(line: str) -> None:
    """``%arenapool``: where the kernel's memory is, and each Dask worker's
    (``%arenapool --help`` says more)."""
    from IPython.core.error import UsageError

    try:
        words = shlex.split(line)
    except ValueError as error:
        raise UsageError(f"%arenapool: {error}") from None
    if words in (["--help"], ["-h"]):
        print(HELP)
        return
    if words:
        raise UsageError(f"%arenapool takes no arguments, not {line.strip()!r}: %arenapool --help says what it shows")
    _show(f"kernel (pid {os.getpid()})", breakdown())
    if "distributed" not in sys.modules:
        return
    from distributed import default_client

    import arenapool.dask

    try:
        client = default_client()
    except ValueError:
        return
    for address, figures in sorted(arenapool.dask.breakdowns(client).items()):
        _show(f"\nDask worker {address}", figures)
