"""Where a process's memory is: its RSS broken down by holder, each figure read from the
holder's own counter.

::

    >>> print(arenapool.breakdown())
    RSS 412.3 MiB: files 48.1, shared 0.0, anonymous 364.2 MiB
      arenapool               live      12.0   free       0.0   metadata 9.1
      glibc                   in use    61.4   free     180.2
      pymalloc                in use    30.2   free       3.8   (34 arenas)
      arrow:mimalloc default  allocated  0.0   peak     141.8
      rest                              67.5   (anonymous, no holder's)

``python -m arenapool.where`` prints it for a fresh interpreter, or, with
``--scheduler ADDRESS``, for every worker of a Dask cluster; in a running program,
``print(arenapool.breakdown())``, and on Dask workers
``client.run(arenapool.breakdown)``.

The holders:

- **files** and **shared**: the kernel's ``RssFile`` and ``RssShmem`` (the program's
  and its libraries' code, mapped files; shared memory). Everything below is in the
  anonymous rest, ``RssAnon``.
- **arenapool**: its allocator's statistics (:func:`arenapool.memory`): pages with
  live blocks, free pages not given back yet, metadata.
- **glibc**: ``mallinfo2()`` (``mallinfo()`` before glibc 2.33, whose figures wrap at
  4 GiB: the row says so): bytes in use (numpy's arrays outside arenapool, Arrow's
  system pool, every C library's ``malloc``) and free in its heaps. Its free bytes are
  counted whether resident or not: after ``malloc_trim`` they stay free in its
  figures but are no longer resident, and the rest can then come out negative.
- **pymalloc**: CPython's allocator of objects up to 512 bytes, from the statistics
  ``sys._debugmallocstats()`` prints: bytes in allocated blocks, and the rest of its
  arenas (1 MiB each) that is resident; the pages of its free pools that are not
  (given back, see :func:`arenapool.set_release`) are shown apart, and so is why they
  are not given back, where they are not.
- **Arrow**: each of pyarrow's memory pools (only if pyarrow is already imported; it
  is never imported here): ``bytes_allocated()`` and ``max_memory()``. pyarrow does
  not say how much freed memory a pool still holds; that is in the rest, and
  :func:`arenapool.release_others` says how much of it went back. The ``system``
  pool's bytes are glibc's, counted there.
- **DuckDB**: its jemalloc (only if DuckDB's library is loaded; it is never loaded
  here), from its own statistics, read through the control its library exports: pages
  with live blocks, free pages not given back yet (a phase's end and the watcher purge
  them, see :func:`arenapool.set_release`), metadata.
- **numpy**: while ``tracemalloc`` traces, the bytes of array data traced in numpy's
  domain; they are arenapool's or glibc's, counted there.
- **rest**: the anonymous RSS no holder above accounts for: thread stacks, other
  allocators (Arrow's freed memory, BLAS), the interpreter's own mappings. The
  libraries loaded that bring an allocator of their own (DuckDB, polars, Arrow) are
  named, each with what of its memory could not be read and is in the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import _duckdb, _holders, _libraries
from .._arenapool import memory
from ._duckdb import DuckDB
from ._holders import ArrowPool, Glibc, Pymalloc
from ._libraries import Library

__all__ = ["ArrowPool", "Breakdown", "DuckDB", "Glibc", "Library", "Pymalloc", "breakdown"]

_MiB = 2**20


def _status() -> Dict[str, int]:
    """``RssAnon``, ``RssFile`` and ``RssShmem`` of ``/proc/self/status``, in bytes."""
    figures = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("RssAnon", "RssFile", "RssShmem"):
                    figures[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return figures


@dataclass(frozen=True)
class Breakdown:
    """A process's RSS by holder, in bytes (see :func:`breakdown`). Pickles, so
    that ``client.run(arenapool.breakdown)`` brings it back from Dask's workers."""

    rss: int
    """The process's resident set size."""
    files: int
    """Resident pages of mapped files (``RssFile``): code of the program and its
    libraries."""
    shared: int
    """Resident shared memory (``RssShmem``)."""
    anonymous: int
    """The rest of the RSS (``RssAnon``), which the holders below share."""
    arenapool_live: int
    """arenapool's pages that hold live blocks."""
    arenapool_free: int
    """arenapool's free pages not given back yet."""
    arenapool_metadata: int
    """arenapool's allocator's own metadata."""
    glibc: Optional[Glibc]
    """glibc's heaps (``None`` where the C library is not glibc 2.33 or later)."""
    pymalloc: Optional[Pymalloc]
    """pymalloc's arenas (``None`` without pymalloc: ``PYTHONMALLOC=malloc``)."""
    arrow: List[ArrowPool] = field(default_factory=list)
    """Arrow's memory pools, if pyarrow is imported."""
    numpy: Optional[int] = None
    """numpy's array data traced by ``tracemalloc`` (``None`` unless it traces)."""
    duckdb: Optional[DuckDB] = None
    """DuckDB's jemalloc (``None`` unless DuckDB's library is loaded and can be read:
    ``libraries`` then says why not)."""
    libraries: List[Library] = field(default_factory=list)
    """The libraries loaded that bring an allocator of their own, each with what of its
    memory is not read here (and so is in the rest)."""

    @property
    def attributed(self) -> int:
        """The anonymous bytes the holders account for (numpy's and Arrow's system pool's
        are glibc's or arenapool's, and counted there)."""
        total = self.arenapool_live + self.arenapool_free + self.arenapool_metadata
        if self.glibc is not None:
            total += self.glibc.in_use + self.glibc.free
        if self.pymalloc is not None:
            total += self.pymalloc.in_use + self.pymalloc.free
        total += sum(pool.allocated for pool in self.arrow if pool.backend != "system")
        if self.duckdb is not None:
            total += self.duckdb.live + self.duckdb.free + self.duckdb.metadata
        return total

    @property
    def rest(self) -> int:
        """Anonymous RSS that no holder accounts for (negative when a holder counts free
        memory that is not resident, as glibc does after ``malloc_trim``)."""
        return self.anonymous - self.attributed

    def __str__(self) -> str:
        def row(name: str, first: str, a: int, second: str = "", b: Optional[int] = None, note: str = "") -> str:
            text = f"  {name:<23} {first:<9} {a / _MiB:9.1f}"
            if b is not None:
                text += f"   {second:<4} {b / _MiB:9.1f}"
            return text + (f"   {note}" if note else "")

        lines = [
            f"RSS {self.rss / _MiB:.1f} MiB: files {self.files / _MiB:.1f}, shared "
            f"{self.shared / _MiB:.1f}, anonymous {self.anonymous / _MiB:.1f}",
            row(
                "arenapool", "live", self.arenapool_live, "free", self.arenapool_free,
                f"metadata {self.arenapool_metadata / _MiB:.1f}",
            ),
        ]
        if self.glibc is not None:
            note = "" if self.glibc.counter == "mallinfo2" else f"{self.glibc.counter}: modulo 4 GiB"
            lines.append(row("glibc", "in use", self.glibc.in_use, "free", self.glibc.free, note))
        else:
            lines.append("  glibc                   (not glibc: no figures)")
        if self.pymalloc is not None:
            note = f"{self.pymalloc.arenas} arenas"
            if self.pymalloc.given_back:
                note += f", {self.pymalloc.given_back / _MiB:.1f} MiB of free pools given back"
            if self.pymalloc.off is not None:
                note += f"; free pools not given back: {self.pymalloc.off}"
            lines.append(row("pymalloc", "in use", self.pymalloc.in_use, "free", self.pymalloc.free, note))
        else:
            lines.append("  pymalloc                (no figures: not in use, or tracemalloc traces)")
        for pool in self.arrow:
            name = f"arrow:{pool.backend}" + (" default" if pool.is_default else "")
            note = "glibc's" if pool.backend == "system" else ""
            lines.append(row(name, "allocated", pool.allocated, "peak", pool.peak, note))
        if self.duckdb is not None:
            note = f"metadata {self.duckdb.metadata / _MiB:.1f}"
            lines.append(row("duckdb", "live", self.duckdb.live, "free", self.duckdb.free, note))
        if self.numpy is not None:
            lines.append(row("numpy (traced)", "arrays", self.numpy, note="arenapool's or glibc's"))
        unread = [f"{lib.name} ({lib.allocator}): {lib.unread}" for lib in self.libraries if lib.unread]
        note = "anonymous, no holder's" + ("; not read: " + "; ".join(unread) if unread else "")
        lines.append(row("rest", "", self.rest, note=note))
        return "\n".join(lines)


def breakdown() -> Breakdown:
    """The process's RSS now, by holder (see :func:`breakdown`)."""
    arenapool = memory()
    status = _status()
    anonymous = status.get("RssAnon", arenapool.rss)
    return Breakdown(
        rss=arenapool.rss,
        files=status.get("RssFile", 0),
        shared=status.get("RssShmem", 0),
        anonymous=anonymous,
        arenapool_live=arenapool.active,
        arenapool_free=max(0, arenapool.resident - arenapool.active - arenapool.metadata),
        arenapool_metadata=arenapool.metadata,
        glibc=_holders.glibc(),
        pymalloc=_holders.pymalloc(),
        arrow=_holders.arrow_pools(),
        numpy=_holders.numpy_traced(),
        duckdb=_duckdb.duckdb(),
        libraries=_libraries.libraries(),
    )
