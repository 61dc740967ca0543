"""Field report S3's loop, fixed: a node-shared array made and dropped N times in flat memory.

An MPI program run on several ranks, for example::

    mpirun -n 2 python mpi_loop.py 20000

Each iteration makes a 100,000-float64 (800 KB) node-shared array with
``arenapool.mpi.shared_array``, writes it on rank 0, waits on a barrier, and reads
it back on every other rank (on rank 0 itself when it runs alone). Every rank
reads ``VmRSS`` and ``RssShmem`` from ``/proc/self/status`` after a warm-up and at
the end, and rank 0 prints one line per rank. The program exits with status 1 when
either figure grew by more than the limit (1 MiB) on any rank, 0 otherwise.

``--leak MODE`` runs the broken loops of the report instead, with plain mpi4py, to
show that the measurement catches them:

- ``--leak window``: a new window every iteration, never freed (the report's
  program): every rank grows by the array's size per iteration.
- ``--leak comm``: the window is freed after a barrier, but every iteration splits
  a new node communicator and never frees it: a few KB per iteration.

Linux only (the figures come from ``/proc``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict

import numpy as np
from mpi4py import MPI

from arenapool.mpi import shared_array

ELEMENTS = 100_000  # 800 KB of float64, as in the report
MIB = 1 << 20


def memory_status() -> Dict[str, int]:
    """This process's VmRSS and RssShmem, in bytes."""
    figures = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssShmem"):
                figures[name] = int(value.split()[0]) * 1024
    return figures


def check(a: np.ndarray, iteration: int) -> None:
    """Read every element of this iteration's array and check what rank 0 wrote."""
    total = float(a.sum())
    if total != float(iteration) * a.size or a[0] != iteration or a[-1] != iteration:
        raise AssertionError(f"iteration {iteration}: read {total}, not {iteration} * {a.size}")


def write_then_read(comm: MPI.Intracomm, a: np.ndarray, iteration: int) -> None:
    """The node's first rank writes the array; after a barrier, the others read it."""
    if comm.rank == 0:
        a[:] = iteration
    comm.Barrier()
    if comm.rank != 0 or comm.size == 1:
        check(a, iteration)


def fixed_iteration(comm: MPI.Intracomm, iteration: int) -> None:
    """One iteration with the fix: the array lives exactly as long as its block."""
    with shared_array(comm, ELEMENTS) as a:
        write_then_read(comm, a, iteration)


def leaking_window_iteration(comm: MPI.Intracomm, node: MPI.Intracomm, iteration: int) -> None:
    """The report's iteration: a new window, overwriting the previous one, never freed."""
    window = MPI.Win.Allocate_shared(ELEMENTS * 8 if node.rank == 0 else 0, 8, comm=node)
    buffer, _ = window.Shared_query(0)
    a = np.ndarray((ELEMENTS,), dtype=np.float64, buffer=buffer)
    write_then_read(comm, a, iteration)


def leaking_comm_iteration(comm: MPI.Intracomm, iteration: int) -> None:
    """The window is freed after a barrier, but the node communicator is not."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    window = MPI.Win.Allocate_shared(ELEMENTS * 8 if node.rank == 0 else 0, 8, comm=node)
    buffer, _ = window.Shared_query(0)
    a = np.ndarray((ELEMENTS,), dtype=np.float64, buffer=buffer)
    write_then_read(comm, a, iteration)
    del a, buffer
    comm.Barrier()
    window.Free()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("iterations", nargs="?", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1_000,
                        help="iterations before the first measurement (default 1000)")
    parser.add_argument("--leak", choices=("window", "comm"),
                        help="run a broken loop of the report instead of the fixed one")
    parser.add_argument("--limit-mib", type=float, default=1.0,
                        help="growth allowed after the warm-up, per figure (default 1 MiB)")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.iterations:
        parser.error("need 0 <= --warmup < iterations")

    comm = MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    mode = args.leak or "fixed"
    comm.Barrier()
    started = time.perf_counter()
    before = memory_status()
    for iteration in range(1, args.iterations + 1):
        if mode == "fixed":
            fixed_iteration(comm, iteration)
        elif mode == "window":
            leaking_window_iteration(comm, node, iteration)
        else:
            leaking_comm_iteration(comm, iteration)
        if iteration == args.warmup:
            before = memory_status()
    after = memory_status()
    seconds = time.perf_counter() - started

    limit = args.limit_mib * MIB
    growth = {name: after[name] - before[name] for name in after}
    grew = any(value > limit for value in growth.values())
    figures = ", ".join(
        f"{name} {before[name] / MIB:.1f} -> {after[name] / MIB:.1f} MiB "
        f"({growth[name] / MIB:+.2f})"
        for name in ("VmRSS", "RssShmem")
    )
    line = (
        f"rank {comm.rank}: {mode}, {args.iterations} iterations in {seconds:.1f} s "
        f"({args.iterations / seconds:.0f} per second); iteration {args.warmup} -> "
        f"{args.iterations}: {figures}: "
        f"{'GREW by more than' if grew else 'flat, within'} {args.limit_mib:g} MiB"
    )
    lines = comm.gather(line, root=0)
    if comm.rank == 0:
        print("\n".join(lines), flush=True)
    any_grew = comm.allreduce(grew, op=MPI.LOR)
    if mode != "window":
        node.Free()  # the leaking window mode's windows still use it
    return 1 if any_grew else 0


if __name__ == "__main__":
    sys.exit(main())
