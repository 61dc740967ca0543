"""Run a function right after a module is first imported: how ``ARENAPOOL=on``
installs the integrations (joblib's, ``concurrent.futures``'s, Dask's, Ray's) in a
program that imports those libraries later, without importing them itself.

A finder first on ``sys.meta_path`` answers only for the modules it waits for, once
each: it asks the finders after it for the module's spec and hands the spec back with a
loader that runs the module, then the function. Once the module has run, its
``__loader__`` and ``__spec__.loader`` are the original loader again. A function that
raises warns once (:class:`arenapool.ArenaPoolWarning`) and the import goes on.
"""

import sys

from .._core._warnings import warn_once

# Imported as the interpreter starts (ARENAPOOL=on): the finder and the loader are
# plain classes with the methods the import system calls, and typing's and
# importlib's names are only for type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable, Dict, Optional, Sequence, Tuple

__all__ = ["after_import"]

# The modules waited for, and what to run after each. No lock: each change is one
# operation on a dict or a list, atomic under the interpreter's lock (a lock here
# would have to be fork-safe, and imports happen in a child made by fork).
_waiting: "Dict[str, Tuple[Callable[[], None], str]]" = {}


def after_import(name: str, function: "Callable[[], None]", *, library: "Optional[str]" = None) -> None:
    """Call ``function`` once module ``name`` has been imported: now if it is already,
    else right after its first import. A later call for the same name replaces a
    function still waiting. ``library`` (``name`` by default) is the library whose
    integration it installs, named in the warning if it fails (once per library)."""
    if name in sys.modules:
        _run(library or name, function)
        return
    _waiting[name] = (function, library or name)
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _run(name: str, function: "Callable[[], None]") -> None:
    try:
        function()
    except Exception as error:
        warn_once(
            f"after_import:{name}",
            f"arenapool could not install its integration for {name} (ARENAPOOL=on): "
            f"{type(error).__name__}: {error}. {name} runs without it",
            stacklevel=2,
        )


class _Finder:
    """The finder on ``sys.meta_path`` (see the module's docs)."""

    def find_spec(
        self, fullname: str, path: "Optional[Sequence[str]]", target: "Optional[ModuleType]" = None
    ) -> "Optional[ModuleSpec]":
        if fullname not in _waiting:
            return None
        spec = _spec_from_others(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not a module it can wait for
        # The function stays waiting until the module runs: a program may only look for
        # the module (importlib.util.find_spec) and import it later.
        # A loader by the methods the import system calls, not by importlib.abc's class
        # (whose import the interpreter's start would pay).
        spec.loader = _ThenRun(spec.loader, fullname)  # type: ignore[assignment]
        return spec


def _spec_from_others(
    finder: _Finder, fullname: str, path: "Optional[Sequence[str]]", target: "Optional[ModuleType]"
) -> "Optional[ModuleSpec]":
    for other in list(sys.meta_path):
        if other is finder or isinstance(other, _Finder):
            continue
        find_spec = getattr(other, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


class _ThenRun:
    """``loader``, then the function waiting for the module once it has run."""

    def __init__(self, loader: "Any", name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: "ModuleSpec") -> "Optional[ModuleType]":
        module: Optional[ModuleType] = self._loader.create_module(spec)
        return module

    def exec_module(self, module: "ModuleType") -> None:
        # The module sees its own loader while it runs, and keeps it.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        waiting = _waiting.pop(self._name, None)
        if waiting is not None:
            function, library = waiting
            _run(library, function)

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)
