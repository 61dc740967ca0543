"""``python -m arenapool.where``: where memory is.

- ``python -m arenapool.where PID``: what can be read of a running process from outside
  it (its RSS, its proportional share, what is its own, its children's memory), and
  what cannot (who holds its memory inside it: run ``print(arenapool.breakdown())``
  there, or ``%arenapool`` in its notebook).
- ``python -m arenapool.where``: the breakdown of this fresh interpreter (see
  :func:`arenapool.breakdown`): what a Python process holds before any work.
- ``python -m arenapool.where --scheduler ADDRESS``: each worker's of a Dask cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence

from ._core import _processes
from ._core._breakdown import breakdown

__all__ = ["main", "process_report"]

_MiB = 2**20


def _mib(nbytes: int) -> str:
    return f"{nbytes / _MiB:.1f} MiB"


def process_report(pid: int) -> Optional[str]:
    """What can be read of process ``pid``'s memory from outside it, in words; ``None``
    if there is no such process."""
    figures = _processes.read(pid)
    if figures is None:
        return None
    status, rollup = figures.status, figures.rollup
    lines: List[str] = [f"Process {pid} ({figures.name})"]
    if "VmRSS" in status:
        lines.append(
            f"  resident (RSS)              {_mib(status['VmRSS']):>12}   at most {_mib(status.get('VmHWM', 0))} so far"
        )
        lines.append(f"    code and mapped files     {_mib(status.get('RssFile', 0)):>12}")
        lines.append(f"    shared memory             {_mib(status.get('RssShmem', 0)):>12}")
        lines.append(f"    its own memory            {_mib(status.get('RssAnon', 0)):>12}")
        if status.get("VmSwap"):
            lines.append(f"  swapped out                 {_mib(status['VmSwap']):>12}")
    else:
        lines.append("  its status cannot be read (it is exiting, or is a kernel thread)")
    if rollup:
        lines.append(
            f"  its share (PSS)             {_mib(rollup.get('Pss', 0)):>12}   pages it shares with other "
            "processes divided among them"
        )
        private = rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)
        lines.append(f"  its alone (private)         {_mib(private):>12}   what would go if it exited")
    else:
        lines.append(f"  its share (PSS) and private memory cannot be read: {figures.rollup_error}")
    if figures.children:
        total = sum(c.rss for c in figures.children)
        lines.append(f"  workers (child processes): {len(figures.children)}, {_mib(total)} resident")
        for c in figures.children:
            lines.append(f"  {'  ' * c.depth}pid {c.pid:<8} {_mib(c.rss):>12} ({_mib(c.anonymous)} own)   {c.name}")
    else:
        lines.append("  workers (child processes): none")
    lines.append(
        "  Who holds its own memory (arenapool, glibc's malloc, pymalloc, Arrow, DuckDB) is counted only inside "
        "the process: run print(arenapool.breakdown()) in it, or %arenapool in its notebook."
    )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m arenapool.where [PID] [--scheduler ADDRESS]``."""
    parser = argparse.ArgumentParser(
        prog="python -m arenapool.where",
        description="Where memory is: a running process's (PID), this fresh interpreter's by "
        "holder, or each worker's of a Dask cluster.",
    )
    parser.add_argument(
        "pid",
        nargs="?",
        type=int,
        metavar="PID",
        help="a running process: what can be read of its memory from outside it (/proc/PID)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a Dask scheduler's address (tcp://host:8786): the breakdown of each of its workers",
    )
    args = parser.parse_args(argv)
    if args.pid is not None:
        if args.scheduler is not None:
            parser.error("give a PID or --scheduler, not both")
        report = process_report(args.pid)
        if report is None:
            sys.exit(f"python -m arenapool.where: no process {args.pid}")
        print(report)
        return
    if args.scheduler is None:
        print(breakdown())
        print(
            f"(This is a fresh interpreter, pid {os.getpid()}. For a running program: "
            "python -m arenapool.where PID, or print(arenapool.breakdown()) inside it.)"
        )
        return
    try:
        from distributed import Client
    except ImportError:
        sys.exit("--scheduler needs Dask's distributed: pip install 'arenapool[dask]'")
    with Client(args.scheduler, timeout=10) as client:
        for worker, figures in sorted(client.run(breakdown).items()):
            print(f"{worker}\n{figures}")


if __name__ == "__main__":
    main()
