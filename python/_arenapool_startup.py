"""What ``ARENAPOOL=on`` runs as the interpreter starts, before the ``arenapool`` package.

The wheel puts this module and ``arenapool.pth`` in site-packages. The ``.pth`` line
imports this module and calls :func:`start` when the variable is set to a value that
is not off; see :mod:`arenapool._core._switch` for the values. When the value is on,
:func:`start`:

- loads arenapool's extension alone, as ``arenapool._arenapool`` (from the package
  beside this module, without the import system's search, when no earlier entry of
  ``sys.path`` can hold another ``arenapool``), and installs its hooks: CPython's raw
  allocator's and pymalloc's arenas';
- leaves the hooks' idle return (the extension's thread, which gives back what the
  hooks' arenas hold free once the process is idle) to start once the hooks have taken
  4 MiB of blocks: a program that allocates less stays a process of one thread;
- does the same in each child made by ``fork`` (a child of a parent whose thread
  started starts its own at once);
- waits for the first import of ``numpy``, ``pyarrow``, ``duckdb``, ``joblib``,
  ``concurrent.futures``, ``distributed`` or ``ray``. The finder it puts first on
  ``sys.meta_path`` then imports :mod:`arenapool._integrations._startup`, which
  installs the rest for that library and the others, and steps aside. An import of
  ``arenapool`` itself does the same at the package's end.

It loads no module of the package: the package's modules cost a program that never
uses them about 0.8 ms of its start, about as much as the extension and its hooks
together. For any other value (one not understood) it imports
:mod:`arenapool._integrations._startup` at once, which warns once about it.

Nothing here raises into the program's start: :func:`start` turns an error into a
warning, and a library's import that fails to hand over warns once and goes on without
arenapool's integration for it. The ``.pth`` line holds no more than the test of the
value and the call: the interpreter compiles it at every start.
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Optional, Sequence, Tuple

__all__ = ["LIBRARIES", "ON", "start", "started"]

# The values that are on, in lower case: arenapool._core._switch.ON (a test keeps them
# equal; this module cannot import that one without loading the package).
ON = ("on", "1", "true", "yes")

# The libraries whose first import hands over to arenapool._integrations._startup:
# those of its _INTEGRATIONS (a test keeps them equal).
LIBRARIES = frozenset(("numpy", "pyarrow", "duckdb", "joblib", "concurrent.futures", "distributed", "ray"))

_FULL = "arenapool._integrations._startup"

_EXTENSION = "arenapool._arenapool"


def _load_extension() -> "ModuleType":
    """arenapool's extension, loaded and in ``sys.modules`` as ``arenapool._arenapool``
    while its package is not: ``from . import _arenapool`` in the package finds it
    there when the package is imported."""
    external, bootstrap = _import_system()
    location = _beside(external.EXTENSION_SUFFIXES)
    spec: Optional[ModuleSpec]
    if location is not None:
        loader = external.ExtensionFileLoader(_EXTENSION, location)
        spec = external.spec_from_file_location(_EXTENSION, location, loader=loader)
    else:
        package = external.PathFinder.find_spec("arenapool")
        locations = package.submodule_search_locations if package is not None else None
        spec = external.PathFinder.find_spec(_EXTENSION, locations) if locations else None
    if spec is None or spec.loader is None:
        # Not the package this module came with, or none: its own import says why.
        __import__(_EXTENSION)
        return sys.modules[_EXTENSION]
    extension: ModuleType = bootstrap.module_from_spec(spec)
    spec.loader.exec_module(extension)
    sys.modules[spec.name] = extension
    return extension


def _beside(suffixes: "Sequence[str]") -> "Optional[str]":
    """The extension file of the ``arenapool`` package beside this module, when that
    package is the one ``import arenapool`` finds: no entry of ``sys.path`` before this
    module's folder holds anything named ``arenapool`` or ``arenapool.py``, or is a file
    (a zip file). Found with a few ``stat`` calls, where the import system's search
    costs the start about 0.1 ms (it lists folders the start does not import from
    otherwise). ``None`` where in doubt: the search decides then."""
    here = os.path.dirname(__file__)
    try:
        for entry in sys.path:
            if entry == here:
                break
            folder = entry or os.curdir
            if (
                os.path.isfile(folder)
                or os.path.exists(os.path.join(folder, "arenapool"))
                or os.path.exists(os.path.join(folder, "arenapool.py"))
            ):
                return None
        else:
            return None
        package = os.path.join(here, "arenapool")
        names = os.listdir(package)
    except (OSError, TypeError, ValueError):  # an entry that is not a path
        return None
    # In the order the import system tries them: the interpreter's own suffix first.
    for suffix in suffixes:
        if "_arenapool" + suffix in names:
            return os.path.join(package, "_arenapool" + suffix)
    return None


def _import_system() -> "Tuple[Any, Any]":
    """The import system's own modules, which the interpreter loaded as it began
    (``PathFinder``, the extension loader and ``spec_from_file_location`` in the first,
    ``module_from_spec`` in the second): importlib's modules would be imported for
    them."""
    external = sys.modules.get("_frozen_importlib_external")
    bootstrap = sys.modules.get("_frozen_importlib")
    if external is not None and bootstrap is not None:
        return external, bootstrap
    from importlib import _bootstrap, _bootstrap_external  # the same modules, by name

    return _bootstrap_external, _bootstrap


class _HandOver:
    """The finder first on ``sys.meta_path`` until one of :data:`LIBRARIES` is imported
    (see the module's docs)."""

    def find_spec(
        self, fullname: str, path: "Optional[Sequence[str]]", target: "Optional[ModuleType]" = None
    ) -> "Optional[ModuleSpec]":
        handed_over = _FULL in sys.modules  # by this finder, or by the package's import
        if fullname not in LIBRARIES and not handed_over:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:  # another thread removed it
            pass
        if not handed_over:
            try:
                __import__(_FULL)
            except Exception as error:
                _warn(f"arenapool could not install its integration for {fullname} (ARENAPOOL=on): "
                      f"{type(error).__name__}: {error}. {fullname} runs without it")
        # The answer of the finders as they are now, asked here: the import system goes
        # on through sys.meta_path as it stood, and with this finder gone from it, it
        # would skip the one after. The integrations' own finder, first among them once
        # it is in, waits for this library too.
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec: Optional[ModuleSpec] = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


def _warn(message: str) -> None:
    """Warns with ``message`` at the variable, as an ArenaPoolWarning if arenapool's
    warnings could be loaded."""
    import warnings

    category = getattr(sys.modules.get("arenapool._core._warnings"), "ArenaPoolWarning", RuntimeWarning)
    warnings.warn_explicit(message, category, "<environment: ARENAPOOL>", 0, module="arenapool")


# Whether start() installed the hooks: the package, when it is imported, then does the
# rest of the start.
started = False

# Whether start() ran: site runs a .pth line each time it adds the directory, twice in
# a virtual environment, and start() acts (and warns) once.
_ran = False


def start() -> None:
    """What ``ARENAPOOL=on`` does as the interpreter starts (see the module's docs):
    ``arenapool.pth`` calls it. An error is a warning: the program runs without
    arenapool."""
    global started, _ran
    if _ran:
        return
    _ran = True
    try:
        if os.environ.get("ARENAPOOL", "").strip().lower() not in ON:
            __import__(_FULL)  # it warns about the value
            return
        extension = _load_extension()
        # The idle return's thread starts once the hooks have taken a few MiB of blocks.
        extension.install_raw(idle_return_now=False)
        extension.install_pymalloc_pools()
        os.register_at_fork(after_in_child=extension.start_idle_return_in_child)
        started = True
        sys.meta_path.insert(0, _HandOver())
    except Exception as error:
        _warn(f"ARENAPOOL={os.environ.get('ARENAPOOL', '').strip()}: arenapool could not be imported "
              f"({type(error).__name__}: {error}); the program runs without it")
