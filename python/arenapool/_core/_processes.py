"""What the kernel says of a process's memory, for this process and any other one that
can be read: ``/proc/PID/status`` (its RSS, split into files, shared and anonymous
memory), ``/proc/PID/smaps_rollup`` (its proportional share, PSS, and what is private)
and its child processes (the workers of a pool, a cluster's processes), each read from
``/proc``. Nothing here raises for a process that has gone or that cannot be read: its
figures are ``None``, with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

__all__ = ["Child", "ProcessFigures", "children", "read", "status"]

_STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSwap")
_ROLLUP_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Private_Clean", "Private_Dirty", "Swap")


def _kib_fields(path: str, wanted: Tuple[str, ...]) -> Dict[str, int]:
    """The ``name: N kB`` lines of ``path`` whose name is ``wanted``, in bytes."""
    figures: Dict[str, int] = {}
    with open(path) as lines:
        for line in lines:
            name, _, value = line.partition(":")
            if name in wanted:
                figures[name] = int(value.split()[0]) * 1024
    return figures


def status(pid: object = "self") -> Dict[str, int]:
    """``VmRSS``, ``VmHWM`` (the peak), ``RssAnon``, ``RssFile``, ``RssShmem`` and
    ``VmSwap`` of ``/proc/PID/status``, in bytes; empty if it cannot be read."""
    try:
        return _kib_fields(f"/proc/{pid}/status", _STATUS_FIELDS)
    except (OSError, ValueError, IndexError):
        return {}


def _name(pid: int) -> str:
    """The process's command line, shortened (its ``comm`` if it has none)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        words = []
    if not words:
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f.read().strip()
        except OSError:
            return "?"
    words[0] = os.path.basename(words[0])
    text = " ".join(" ".join(words).split())  # a program given with -c spans lines
    return text if len(text) <= 60 else text[:57] + "..."


def _parents() -> Dict[int, List[int]]:
    """Every process's children, by parent, from ``/proc/*/stat``."""
    by_parent: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # The command name, in parentheses, may hold spaces and parentheses itself.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            by_parent.setdefault(int(fields[1]), []).append(int(entry))
    return by_parent


@dataclass(frozen=True)
class Child:
    """A process started by this one (or by one of its children), in bytes."""

    pid: int
    name: str
    """Its command line, shortened."""
    rss: int
    """Its resident set size (``VmRSS``): with the pages of files and shared memory it
    maps, which other processes may map too."""
    anonymous: int
    """Its own memory (``RssAnon``): what it allocated, shared with no one but a parent
    that forked it, until either writes."""
    depth: int = 1
    """1 for a child, 2 for a child's child, and so on."""


def children(pid: Optional[int] = None) -> List[Child]:
    """The processes ``pid`` (this process by default) started, and theirs, depth first;
    those gone or unreadable meanwhile are left out."""
    root = os.getpid() if pid is None else pid
    try:
        by_parent = _parents()
    except OSError:
        return []
    found: List[Child] = []

    def visit(parent: int, depth: int) -> None:
        for child in sorted(by_parent.get(parent, [])):
            figures = status(child)
            if "VmRSS" in figures:  # a zombie has none
                found.append(Child(child, _name(child), figures["VmRSS"], figures.get("RssAnon", 0), depth))
            if depth < 8:
                visit(child, depth + 1)

    visit(root, 1)
    return found


@dataclass(frozen=True)
class ProcessFigures:
    """What can be read of another process's memory from outside it, in bytes."""

    pid: int
    name: str
    status: Dict[str, int]
    """``/proc/PID/status``'s figures (see :func:`status`); empty if unreadable."""
    rollup: Dict[str, int]
    """``/proc/PID/smaps_rollup``'s: ``Rss``, ``Pss`` (its share of pages it shares,
    each divided among the processes that map it), ``Pss_Anon``, ``Pss_File``,
    ``Pss_Shmem``, ``Private_Clean``, ``Private_Dirty``, ``Swap``; empty if unreadable."""
    rollup_error: Optional[str]
    """Why ``rollup`` is empty (another user's process needs the rights of a debugger)."""
    children: List[Child]


def read(pid: int) -> Optional[ProcessFigures]:
    """Process ``pid``'s figures; ``None`` if there is no such process."""
    if not os.path.exists(f"/proc/{pid}"):
        return None
    rollup: Dict[str, int] = {}
    error: Optional[str] = None
    try:
        rollup = _kib_fields(f"/proc/{pid}/smaps_rollup", _ROLLUP_FIELDS)
    except PermissionError:
        error = "permission denied: reading another user's process needs the rights to debug it (root, or the same user)"
    except FileNotFoundError:
        error = "this kernel has no /proc/PID/smaps_rollup (Linux 4.14 and later have it)"
    except (OSError, ValueError, IndexError) as e:
        error = f"{type(e).__name__}: {e}"
    return ProcessFigures(pid, _name(pid), status(pid), rollup, error, children(pid))
