"""The libraries in the process that bring an allocator of their own, named, with what
of their memory arenapool can read: what :func:`arenapool.breakdown`'s rest may hold.

Each is found by the shared object it loaded (``/proc/self/maps``), never by importing
anything:

- **DuckDB** (``_duckdb``, ``libduckdb``): its jemalloc, read whole through the control
  its library exports (its own row in the breakdown), unless that control is missing
  or does not answer (:mod:`arenapool._core._duckdb`);
- **polars** (``_polars_runtime``, ``polars.abi3``): its jemalloc exports no control:
  nothing it holds can be read (it gives back by itself, with background threads);
- **Arrow** (``libarrow``): its pools' live buffers are read (their rows), the free
  memory each keeps is not: pyarrow has no counter of it.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, List, NamedTuple, Optional, Set, Tuple

from . import _duckdb

__all__ = ["Library", "libraries"]


class Library(NamedTuple):
    """A library that brings an allocator of its own, loaded in the process."""

    name: str
    """``duckdb``, ``polars`` or ``arrow``."""
    allocator: str
    """The allocator it brings: ``jemalloc``, or ``mimalloc and jemalloc`` (Arrow)."""
    unread: Optional[str]
    """What of its memory the breakdown cannot read, and why: that part is in the rest;
    ``None`` if it reads all of it."""


def _mapped_files() -> Set[str]:
    """The base names of the shared objects mapped in the process."""
    names = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[5:]
                name = os.path.basename(path[0].rstrip("\n")) if path else ""
                if ".so" in name:
                    names.add(name)
    except OSError:
        pass
    return names


def _duckdb_unread() -> Optional[str]:
    if not _duckdb.loaded():
        return "loaded outside DuckDB's Python package: nothing of it is read"
    reason = _duckdb.unreadable()
    return None if reason is None else f"could not read it: {reason}"


# Each library: its name, the allocator it brings, how its shared object's name
# begins, and what of it is not read.
_KNOWN: List[Tuple[str, str, Tuple[str, ...], Callable[[], Optional[str]]]] = [
    ("duckdb", "jemalloc", ("_duckdb.", "duckdb.", "libduckdb."), _duckdb_unread),
    (
        "polars",
        "jemalloc",
        ("_polars_runtime.", "polars.abi3.", "polars.cpython-"),
        lambda: "its jemalloc exports no control: nothing of it is read",
    ),
    (
        "arrow",
        "mimalloc and jemalloc",
        ("libarrow.",),
        lambda: "the free memory its pools keep (pyarrow has no counter of it)",
    ),
]


def _loaded(prefixes: Iterable[str], files: Set[str]) -> bool:
    return any(name.startswith(prefix) for name in files for prefix in prefixes)


def libraries() -> List[Library]:
    """The libraries with an allocator of their own loaded in this process."""
    files = _mapped_files()
    return [
        Library(name, allocator, unread())
        for name, allocator, prefixes, unread in _KNOWN
        if _loaded(prefixes, files)
    ]
