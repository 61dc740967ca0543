"""Where a process's memory is: its RSS broken down by holder, each figure read from the
holder's own counter, what the last phase gave back, and its workers' (its child
processes') memory.

::

    >>> print(arenapool.breakdown())
    This process (pid 10181) holds 29.1 MiB of memory (RSS):
                                               MiB
      code and mapped files                     13.7   the interpreter's and libraries' code, files it maps
      shared memory                              0.0
      its own memory                            15.4   held by:
        Python objects (pymalloc)                9.0   7.6 in use, 1.4 free; 9 arenas
        C libraries and numpy (glibc's malloc)   4.9   4.9 in use, 0.0 free
        arenapool's arenas                       5.0   0.2 in use, 0.0 free, 4.9 of its own bookkeeping
        not counted by any holder above          0.0   none: the figures above add up to 3.4 MiB more ...
    Last phase: ended 0.01 s ago after 0.50 s. RSS 28.7 MiB at its start, 29.1 MiB at its end ...
      Its arenas gave 400.1 MiB of pages back to the OS while it ran and at its end ...
    Workers (child processes): none.

``python -m arenapool.where`` prints it for a fresh interpreter, and ``python -m
arenapool.where PID`` what can be read of a running process from outside it; in a
running program, ``print(arenapool.breakdown())`` (``%arenapool`` in a notebook, as a
table with a chart), and on Dask workers ``client.run(arenapool.breakdown)``.

The holders:

- **code and mapped files**, **shared memory**: the kernel's ``RssFile`` and
  ``RssShmem``. Everything below is the process's own memory, ``RssAnon``.
- **arenapool's arenas**: its allocator's statistics (:func:`arenapool.memory`): pages
  with live blocks, free pages not given back yet, its own bookkeeping (metadata).
- **glibc's malloc**: ``mallinfo2()`` (``mallinfo()`` before glibc 2.33, whose
  figures wrap at 4 GiB: the row says so): bytes in use (numpy's arrays outside
  arenapool, Arrow's system pool, every C library's ``malloc``) and free in its heaps.
  glibc counts its free bytes whether resident or not: after ``malloc_trim`` gave
  pages back they stay in its figure. The breakdown shows what of it can still be
  resident, and says how much of glibc's count is not.
- **pymalloc**: CPython's allocator of objects up to 512 bytes, from the statistics
  ``sys._debugmallocstats()`` prints: bytes in allocated blocks, and the rest of its
  arenas that is resident; the pages of its free pools that are not (given back, see
  :func:`arenapool.set_release`) are shown apart, and so is why they are not given
  back, where they are not.
- **Arrow**: each of pyarrow's memory pools (only if pyarrow is already imported; it
  is never imported here): ``bytes_allocated()`` and ``max_memory()``. pyarrow does
  not say how much freed memory a pool still holds: that is in "not counted". The
  ``system`` pool's bytes are glibc's, counted there.
- **DuckDB**: its jemalloc (only if DuckDB's library is loaded; it is never loaded
  here), from its own statistics, read through the control its library exports: pages
  with live blocks, free pages not given back yet (a phase's end and the watcher purge
  them, see :func:`arenapool.set_release`), its own bookkeeping (metadata).
- **numpy**: while ``tracemalloc`` traces, the bytes of array data traced in numpy's
  domain; they are arenapool's or glibc's, counted there.
- **not counted**: the process's own memory that no holder above accounts for: thread
  stacks, other allocators (Arrow's freed memory, BLAS), the interpreter's own
  mappings. Never negative: where the holders' figures add up to more than the
  process's own memory, the breakdown says which figure counts memory that is not
  resident. The libraries loaded that bring an allocator of their own (DuckDB, polars,
  Arrow) are named there, each with what of its memory could not be read.
"""

from __future__ import annotations

import collections
import html
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Deque, List, NamedTuple, Optional, Sequence

from . import _duckdb, _holders, _libraries, _processes
from .._arenapool import memory
from ._duckdb import DuckDB
from ._given_back import Release
from ._holders import ArrowPool, Glibc, Pymalloc
from ._libraries import Library
from ._processes import Child

if TYPE_CHECKING:
    from .._arenapool import Report

__all__ = [
    "ArrowPool",
    "Breakdown",
    "Child",
    "DuckDB",
    "Glibc",
    "Holder",
    "Library",
    "PhaseEnd",
    "Pymalloc",
    "breakdown",
    "record_phase",
]

_MiB = 2**20


def _mib(nbytes: float) -> str:
    return f"{nbytes / _MiB:.1f}"


@dataclass(frozen=True)
class PhaseEnd:
    """What one phase did, recorded when it ended (the last phase open then), in bytes."""

    ended: float
    """When it ended (``time.time()``)."""
    run_time: float
    """Seconds from its start to its end."""
    rss_before: int
    """The process's RSS when it began."""
    rss_after: int
    """The process's RSS when it ended, before its results were dropped."""
    pages_returned: int
    """Bytes of pages the phase's arenas (and the allocator's others) gave back to the
    OS from its start to its end: :attr:`arenapool.Report.returned`. A page given back
    while the phase ran, then used again and given back again, counts each time, so
    this can be more than the phase ever held."""
    released: List[Release] = field(default_factory=list)
    """What glibc, pymalloc, Arrow's pools and DuckDB gave back at its end."""


# The last phases that ended, oldest first: what the breakdown's last phase and its chart
# of RSS show.
_phases: Deque[PhaseEnd] = collections.deque(maxlen=12)
# A child made by fork starts with none: the parent's phases are not its own.
os.register_at_fork(after_in_child=_phases.clear)


def record_phase(report: "Report", released: Sequence[Release]) -> None:
    """Keeps what a phase that ended did (the last one open then), for the breakdown."""
    _phases.append(
        PhaseEnd(
            time.time(), report.run_time, report.rss_before, report.rss_after, report.returned, list(released)
        )
    )


class Holder(NamedTuple):
    """One row of the process's own memory, as the breakdown prints it."""

    name: str
    """What holds it, in plain words (``Python objects (pymalloc)``)."""
    held: Optional[int]
    """Bytes of the process's own memory it holds (``None``: no figure, or counted in
    another row)."""
    detail: str
    """What the figure is made of, or why there is none."""


@dataclass(frozen=True)
class Breakdown:
    """A process's RSS by holder, in bytes (see :func:`breakdown`), with what the last
    phases did and its child processes' memory. ``print()`` it for text; a notebook
    shows it as a table with a chart of RSS over the last phases. Pickles, so that
    ``client.run(arenapool.breakdown)`` brings it back from Dask's workers."""

    rss: int
    """The process's resident set size."""
    files: int
    """Resident pages of mapped files (``RssFile``): code of the program and its
    libraries."""
    shared: int
    """Resident shared memory (``RssShmem``)."""
    anonymous: int
    """The rest of the RSS (``RssAnon``), the process's own memory, which the holders
    below share."""
    arenapool_live: int
    """arenapool's pages that hold live blocks."""
    arenapool_free: int
    """arenapool's free pages not given back yet."""
    arenapool_metadata: int
    """arenapool's allocator's own metadata."""
    glibc: Optional[Glibc]
    """glibc's heaps (``None`` where the C library is not glibc)."""
    pymalloc: Optional[Pymalloc]
    """pymalloc's arenas (``None`` without pymalloc: ``PYTHONMALLOC=malloc``)."""
    arrow: List[ArrowPool] = field(default_factory=list)
    """Arrow's memory pools, if pyarrow is imported."""
    numpy: Optional[int] = None
    """numpy's array data traced by ``tracemalloc`` (``None`` unless it traces)."""
    pid: int = 0
    """The process's id."""
    phases: List[PhaseEnd] = field(default_factory=list)
    """The last phases that ended in the process (up to 12), oldest first."""
    children: List[Child] = field(default_factory=list)
    """The processes it started (pool workers, a cluster's processes), and theirs."""
    peak_rss: int = 0
    """The process's peak RSS since it started (``VmHWM``)."""
    duckdb: Optional[DuckDB] = None
    """DuckDB's jemalloc (``None`` unless DuckDB's library is loaded and can be read:
    ``libraries`` then says why not)."""
    libraries: List[Library] = field(default_factory=list)
    """The libraries loaded that bring an allocator of their own, each with what of its
    memory is not read here (and so is in what no holder counts)."""

    @property
    def attributed(self) -> int:
        """The anonymous bytes the holders account for (numpy's and Arrow's system pool's
        are glibc's or arenapool's, and counted there). glibc's free bytes are counted
        whether resident or not."""
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
        """``anonymous - attributed``, signed: negative when a holder counts free memory
        that is not resident, as glibc does after ``malloc_trim``. What the breakdown
        prints is :attr:`not_counted` and :attr:`counted_not_resident`."""
        return self.anonymous - self.attributed

    @property
    def not_counted(self) -> int:
        """The process's own memory that no holder accounts for (0 or more)."""
        return max(0, self.rest)

    @property
    def counted_not_resident(self) -> int:
        """What the holders' figures count beyond the process's own memory: free
        memory already given back to the OS (glibc's, after ``malloc_trim``), or
        figures read a moment apart (0 or more)."""
        return max(0, -self.rest)

    def holders(self) -> List[Holder]:
        """The rows of the process's own memory, each holder's, then what none counts."""
        rows: List[Holder] = []
        over = self.counted_not_resident
        if self.pymalloc is not None:
            p = self.pymalloc
            detail = f"{_mib(p.in_use)} in use, {_mib(p.free)} free; {p.arenas} arenas"
            if p.given_back:
                detail += f", {_mib(p.given_back)} MiB of free pools given back"
            if p.off is not None:
                detail += f"; free pools not given back: {p.off}"
            rows.append(Holder("Python objects (pymalloc)", p.in_use + p.free, detail))
        else:
            rows.append(Holder("Python objects (pymalloc)", None, "no figures: PYTHONMALLOC=malloc, or tracemalloc traces"))
        if self.glibc is not None:
            g = self.glibc
            free = max(0, g.free - over)
            over -= g.free - free
            detail = f"{_mib(g.in_use)} in use, {_mib(free)} free"
            if free < g.free:
                detail += f" (glibc counts {_mib(g.free)} free: about {_mib(g.free - free)} of it is given back already)"
            if g.counter != "mallinfo2":
                detail += f"; {g.counter}: figures modulo 4 GiB"
            rows.append(Holder("C libraries and numpy (glibc's malloc)", g.in_use + free, detail))
        else:
            rows.append(Holder("C libraries and numpy (malloc)", None, "no figures: the C library is not glibc"))
        own = self.arenapool_live + self.arenapool_free + self.arenapool_metadata
        rows.append(
            Holder(
                "arenapool's arenas",
                own,
                f"{_mib(self.arenapool_live)} in use, {_mib(self.arenapool_free)} free, "
                f"{_mib(self.arenapool_metadata)} of its own bookkeeping",
            )
        )
        for pool in self.arrow:
            name = f"Arrow, {pool.backend} pool" + (" (default)" if pool.is_default else "")
            if pool.backend == "system":
                rows.append(Holder(name, None, f"{_mib(pool.allocated)} in use, counted in glibc's malloc"))
            else:
                rows.append(Holder(name, pool.allocated, f"in use; {_mib(pool.peak)} at most so far"))
        if self.duckdb is not None:
            d = self.duckdb
            rows.append(
                Holder(
                    "DuckDB (its jemalloc)",
                    d.live + d.free + d.metadata,
                    f"{_mib(d.live)} in use, {_mib(d.free)} free, {_mib(d.metadata)} of its own bookkeeping",
                )
            )
        if self.numpy is not None:
            rows.append(Holder("numpy arrays (traced)", None, f"{_mib(self.numpy)}, counted in arenapool or glibc above"))
        unread = [f"{lib.name} ({lib.allocator}): {lib.unread}" for lib in self.libraries if lib.unread]
        not_read = "; not read: " + "; ".join(unread) if unread else ""
        if over > 0:
            rows.append(
                Holder(
                    "not counted by any holder above",
                    0,
                    f"none: the figures above add up to {_mib(over)} MiB more than its own memory "
                    "(some count pages not touched yet, or read a moment apart)" + not_read,
                )
            )
        else:
            rows.append(
                Holder(
                    "not counted by any holder above",
                    self.not_counted,
                    "thread stacks, other allocators (BLAS, Arrow's freed memory), the interpreter's own" + not_read,
                )
            )
        return rows

    def phase_lines(self) -> List[str]:
        """What the last phase did, in words (empty if none has ended)."""
        if not self.phases:
            return ["Last phase: none has ended in this process."]
        last = self.phases[-1]
        ago = max(0.0, time.time() - last.ended)
        lines = [
            f"Last phase: ended {_seconds(ago)} ago after {_seconds(last.run_time)}. RSS "
            f"{_mib(last.rss_before)} MiB at its start, {_mib(last.rss_after)} MiB at its end "
            f"(its results still held), {_mib(self.rss)} MiB now.",
            f"  Its arenas gave {_mib(last.pages_returned)} MiB of pages back to the OS while it ran and at "
            f"its end (a page used again and given back again counts each time).",
        ]
        if last.released:
            given = ", ".join(f"{r.holder} {_mib(r.rss_returned)} MiB" for r in last.released)
            lines.append(f"  At its end, the other holders gave back (RSS fell by): {given}.")
        return lines

    def children_lines(self) -> List[str]:
        """The workers' memory, in words."""
        if not self.children:
            return ["Workers (child processes): none."]
        total = sum(c.rss for c in self.children)
        own = sum(c.anonymous for c in self.children)
        lines = [
            f"Workers (child processes): {len(self.children)}, {_mib(total)} MiB resident, "
            f"{_mib(own)} MiB of it their own memory:"
        ]
        for c in self.children:
            indent = "  " * c.depth
            lines.append(f"{indent}pid {c.pid:<8} {_mib(c.rss):>9} MiB ({_mib(c.anonymous)} own)   {c.name}")
        return lines

    def __str__(self) -> str:
        who = f"This process (pid {self.pid})" if self.pid else "This process"
        lines = [f"{who} holds {_mib(self.rss)} MiB of memory (RSS):", f"{'':42} MiB"]

        def row(indent: int, name: str, held: Optional[int], detail: str) -> str:
            figure = "" if held is None else _mib(held)
            label = " " * indent + name
            return f"{label:<42}{figure:>6}   {detail}".rstrip()

        lines.append(row(2, "code and mapped files", self.files, "the interpreter's and libraries' code, files it maps"))
        lines.append(row(2, "shared memory", self.shared, ""))
        lines.append(row(2, "its own memory", self.anonymous, "held by:"))
        lines.extend(row(4, h.name, h.held, h.detail) for h in self.holders())
        lines.extend(self.phase_lines())
        lines.extend(self.children_lines())
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's text display: the same as ``print()``."""
        printer.text(str(self))

    def _repr_html_(self) -> str:
        """The breakdown as an HTML table, with a chart of RSS over the last phases:
        what a notebook shows for ``display(breakdown())``."""
        e = html.escape
        who = f"pid {self.pid}" if self.pid else "this process"
        cells = [
            ("code and mapped files", self.files, "the interpreter's and libraries' code, files it maps", 0),
            ("shared memory", self.shared, "", 0),
            ("its own memory", self.anonymous, "held by:", 0),
        ] + [(h.name, h.held, h.detail, 1) for h in self.holders()]
        body = "".join(
            f"<tr><td style='text-align:left;padding-left:{0.3 + 1.2 * level}em'>{e(name)}</td>"
            f"<td style='text-align:right'>{'' if held is None else _mib(held)}</td>"
            f"<td style='text-align:left'>{e(detail)}</td></tr>"
            for name, held, detail, level in cells
        )
        parts = [
            f"<div class='arenapool-breakdown'><p><b>{e(who)}</b>: {_mib(self.rss)} MiB of memory (RSS)</p>",
            "<table><thead><tr><th style='text-align:left'>held by</th><th>MiB</th>"
            f"<th style='text-align:left'>what it is</th></tr></thead><tbody>{body}</tbody></table>",
        ]
        chart = self._rss_chart()
        if chart:
            parts.append(chart)
        parts.extend(f"<p>{e(line)}</p>" for line in self.phase_lines()[:1])
        parts.extend(f"<p style='margin-left:1.2em'>{e(line.strip())}</p>" for line in self.phase_lines()[1:])
        child_lines = self.children_lines()
        parts.append(f"<p>{e(child_lines[0])}</p>")
        if self.children:
            rows = "".join(
                f"<tr><td>{c.pid}</td><td style='text-align:right'>{_mib(c.rss)}</td>"
                f"<td style='text-align:right'>{_mib(c.anonymous)}</td><td style='text-align:left'>{e(c.name)}</td></tr>"
                for c in self.children
            )
            parts.append(
                "<table><thead><tr><th>pid</th><th>RSS, MiB</th><th>own, MiB</th>"
                f"<th style='text-align:left'>command</th></tr></thead><tbody>{rows}</tbody></table>"
            )
        parts.append("</div>")
        return "".join(parts)

    def _rss_chart(self) -> str:
        """A small inline SVG: RSS at the start and end of each of the last phases, and
        now; empty if no phase has ended."""
        if not self.phases:
            return ""
        points = []
        for p in self.phases:
            points.append((p.ended - p.run_time, p.rss_before))
            points.append((p.ended, p.rss_after))
        points.append((max(time.time(), points[-1][0]), self.rss))
        width, height, pad = 320.0, 90.0, 16.0
        t0, t1 = points[0][0], points[-1][0]
        top = max(r for _, r in points) or 1
        span = (t1 - t0) or 1.0

        def xy(t: float, r: int) -> str:
            x = pad + (t - t0) / span * (width - 2 * pad)
            y = height - pad - r / top * (height - 2 * pad)
            return f"{x:.1f},{y:.1f}"

        line = " ".join(xy(t, r) for t, r in points)
        return (
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
            f"role='img' aria-label='RSS over the last {len(self.phases)} phases'>"
            f"<title>RSS over the last {len(self.phases)} phases, and now</title>"
            f"<polyline fill='none' stroke='#3465a4' stroke-width='2' points='{line}'/>"
            f"<text x='{pad}' y='11' font-size='10'>RSS, top {_mib(top)} MiB</text>"
            f"<text x='{width - pad}' y='{height - 3}' font-size='10' text-anchor='end'>"
            f"now {_mib(self.rss)} MiB</text></svg>"
        )


def _seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.0f} min"


def breakdown() -> Breakdown:
    """Who holds this process's memory now, in MiB with plain words when printed:
    ``print(arenapool.breakdown())``, or ``%arenapool`` in a notebook.

    The process's RSS split into code and files, shared memory and its own memory;
    its own memory by holder, each from the holder's own counter (pymalloc's objects,
    glibc's ``malloc`` and numpy, arenapool's arenas, Arrow's pools if pyarrow is
    imported, DuckDB's jemalloc if its library is loaded), and what none of them
    counts (never negative: where the counters add up to more, it says which counts
    memory already given back; the libraries whose allocators cannot be read are
    named there); what the last phase gave back; and the memory of the process's
    children (pool workers). Reading it costs a few milliseconds (pymalloc's
    statistics, ``/proc``)."""
    arenapool = memory()
    status = _processes.status()
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
        pid=os.getpid(),
        phases=list(_phases),
        children=_processes.children(),
        peak_rss=arenapool.peak_rss,
        duckdb=_duckdb.duckdb(),
        libraries=_libraries.libraries(),
    )

