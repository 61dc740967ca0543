"""The MPI report (S3): "a shared-memory window made in a loop grows memory until it crashes".

The program as its author wrote it: on every iteration (up to 10^8 of them), each rank
splits off the ranks of its node, makes a 100,000-double shared-memory window on them
with ``MPI.Win.Allocate_shared``, puts a NumPy array on it, and overwrites the previous
window with the new one. Nothing frees the old window (mpi4py never frees one by
itself), so every rank grows by 800 KB per iteration. The growth is shared memory:
``RssShmem`` in ``/proc/self/status``, not a file in ``ls /dev/shm``, since OpenMPI
removes the file's name as soon as every rank has mapped it.

Freeing it by hand takes every rank calling ``win.Free()`` after a barrier, with no
array left on the memory, and ``node.Free()`` too, or each iteration still keeps a few
KB. With ``--fixed``, one ``with arenapool.mpi.shared_array(...)`` line does all of that
and the loop runs in flat memory (the lines marked below).

    mpirun -n 2 python examples/s3_mpi.py               # about +790 MiB per rank in 1,000 iterations
    mpirun -n 2 python examples/s3_mpi.py --fixed       # under 1 MiB
    mpirun -n 2 python examples/s3_mpi.py --untouched   # the windows made, never written or read

Rank 0 writes the array and every rank reads it, so each window's 800 KB is in every
rank's RSS. ``--untouched`` makes the report's windows and never writes or reads them:
every rank still grows, by about 26 KB per iteration (4 KB of it shared memory) in
place of 800 KB.

``--iterations`` (1,000) and ``--every`` (200) set the length and how often rank 0
prints every rank's growth since the start.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from arenapool.mpi import shared_array

N = 100_000  # doubles: 800 KB


def leaked_window(comm: MPI.Intracomm) -> np.ndarray:
    """The report's window, as its author made it: never freed, overwritten by the
    next iteration's."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    size = N * 8 if node.rank == 0 else 0
    win = MPI.Win.Allocate_shared(size, 8, comm=node)  # overwrites the previous window
    buf, itemsize = win.Shared_query(0)
    return np.ndarray(buffer=buf, dtype="d", shape=(N,))


def report_iteration(comm: MPI.Intracomm, step: int) -> float:
    """One iteration as the report's author wrote it: the window is never freed."""
    a = leaked_window(comm)
    if comm.rank == 0:
        a[:] = step
    comm.Barrier()
    return float(a.sum())


def untouched_iteration(comm: MPI.Intracomm, step: int) -> float:
    """The report's iteration with the array never written or read."""
    a = leaked_window(comm)
    comm.Barrier()
    return float(step * a.size)


def fixed_iteration(comm: MPI.Intracomm, step: int) -> float:
    """The same iteration with the fix."""
    with shared_array(comm, N) as a:  # the fix: one line for the five that make node, win, a
        if comm.rank == 0:
            a[:] = step
        comm.Barrier()
        total = float(a.sum())
    return total  # `a` must not be used from here on: its memory is gone


def memory_mib() -> tuple[float, float]:
    """This process's VmRSS and RssShmem, in MiB."""
    figures = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssShmem"):
                figures[name] = int(value.split()[0]) / 1024
    return figures["VmRSS"], figures["RssShmem"]


def main() -> None:
    parser = argparse.ArgumentParser(description="Field report S3's loop, broken or fixed.")
    parser.add_argument("--fixed", action="store_true", help="use arenapool.mpi.shared_array")
    parser.add_argument("--untouched", action="store_true",
                        help="the report's loop with the arrays never written or read")
    parser.add_argument("--iterations", type=int, default=1_000)
    parser.add_argument("--every", type=int, default=200)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    if args.fixed and args.untouched:
        parser.error("--fixed and --untouched are two different loops: choose one")
    iteration = fixed_iteration if args.fixed else untouched_iteration if args.untouched else report_iteration
    start_rss, start_shmem = memory_mib()
    began = time.perf_counter()
    for step in range(1, args.iterations + 1):
        total = iteration(comm, step)
        assert total == step * N, f"rank {comm.rank} read {total} in iteration {step}"
        if step % args.every == 0 or step == args.iterations:
            rss, shmem = memory_mib()
            growth = comm.gather((rss - start_rss, shmem - start_shmem), root=0)
            if comm.rank == 0:
                ranks = "  ".join(
                    f"rank {rank}: VmRSS {rss:+7.1f} MiB, RssShmem {shmem:+7.1f} MiB"
                    for rank, (rss, shmem) in enumerate(growth)
                )
                print(f"iteration {step:>7}  {ranks}", flush=True)
    if comm.rank == 0:
        seconds = time.perf_counter() - began
        mode = "fixed" if args.fixed else "untouched" if args.untouched else "as reported"
        print(f"{mode}: {args.iterations} iterations in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
