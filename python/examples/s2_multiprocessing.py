"""A class holds a big array; a process pool maps one of its methods over many inputs.

The program as it is often written (the default here)::

    model = Model(...)                                   # holds a 500 MiB table
    with ProcessPoolExecutor(2) as executor:
        for result in executor.map(model.score, inputs):  # model (and its table) is
            consume(result)                               # pickled with every task

costs far more memory than the table: every task carries a pickled copy of it, and
``executor.map`` submits every task at once, so finished results pile up while the
loop consumes them slowly. The fix is one line::

    for result in arenapool.futures.map(executor, score, inputs, window=2, state=model.table):

(``score(table, task)`` being the method's body as a module-level function): the table
goes to each worker once, read-only through shared memory, and at most two tasks are in
flight at any time.

Run it three ways and compare the parent's peak RSS and the time::

    python s2_multiprocessing.py                  # the table with every task
    python s2_multiprocessing.py --initializer    # the table once per worker, plain map
    python s2_multiprocessing.py --fixed          # arenapool.futures.map, window 2

``--state-mib``, ``--inputs``, ``--result-mib``, ``--workers`` and ``--consume-ms`` set
the scale; ``--initializer`` shows what is left when only the copies are avoided
(results still pile up behind the slow loop).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np

import arenapool
import arenapool.futures

MiB = 1 << 20
Task = Tuple[int, int]  # (input number, result length in float64 elements)


def score(table: np.ndarray, task: Task) -> np.ndarray:
    """The work for one input: a result of ``length`` float64 computed from the table."""
    i, length = task
    start = (i * 7919 * length) % (table.size - length)
    return np.sqrt(table[start : start + length]) + i


class Model:
    """The report's class: it holds the big array its method reads."""

    def __init__(self, state_mib: int) -> None:
        self.table = np.linspace(0.0, 1.0, state_mib * MiB // 8)

    def score(self, task: Task) -> np.ndarray:
        return score(self.table, task)


# --initializer: the table installed once in each worker, the classic global.
_worker_table: Optional[np.ndarray] = None


def _set_worker_table(table: np.ndarray) -> None:
    global _worker_table
    _worker_table = table


def _score_with_worker_table(task: Task) -> np.ndarray:
    assert _worker_table is not None
    return score(_worker_table, task)


def peak_rss() -> int:
    """The process's peak resident set size, in bytes (VmHWM)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def results(args: argparse.Namespace, model: Model, tasks: List[Task]) -> Iterator[Any]:
    """The results, in order, by the chosen way; the executor lives as long as they do."""
    if args.initializer:
        with ProcessPoolExecutor(args.workers, initializer=_set_worker_table, initargs=(model.table,)) as executor:
            yield from executor.map(_score_with_worker_table, tasks)
    elif args.fixed:
        with ProcessPoolExecutor(args.workers) as executor:
            yield from arenapool.futures.map(executor, score, tasks, window=args.window, state=model.table)
    else:
        with ProcessPoolExecutor(args.workers) as executor:
            yield from executor.map(model.score, tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    way = parser.add_mutually_exclusive_group()
    way.add_argument("--fixed", action="store_true", help="arenapool.futures.map(..., window=2, state=table)")
    way.add_argument("--initializer", action="store_true", help="the table once per worker, then executor.map")
    parser.add_argument("--state-mib", type=int, default=500, help="the table's size (default 500)")
    parser.add_argument("--inputs", type=int, default=100, help="how many inputs (default 100)")
    parser.add_argument("--result-mib", type=float, default=4.0, help="each result's size (default 4)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--window", type=int, default=2, help="--fixed: tasks in flight (default 2)")
    parser.add_argument("--consume-ms", type=float, default=20.0, help="time the loop takes per result (default 20)")
    args = parser.parse_args()

    before = arenapool.rss()
    model = Model(args.state_mib)
    length = int(args.result_mib * MiB) // 8
    tasks = [(i, length) for i in range(args.inputs)]

    start = time.perf_counter()
    checksum = 0.0
    for result in results(args, model, tasks):
        time.sleep(args.consume_ms / 1000)  # the slow consumer: saving, plotting...
        checksum += float(result[::4096].sum())
        del result
    elapsed = time.perf_counter() - start

    way = "fixed" if args.fixed else "initializer" if args.initializer else "table with every task"
    state = model.table.nbytes
    bound = state + args.window * length * 8 + 64 * MiB
    peak = peak_rss()
    print(f"{way}: {args.inputs} inputs, {args.workers} workers, state {state / MiB:.0f} MiB, "
          f"results {length * 8 / MiB:.1f} MiB")
    print(f"  parent peak RSS {peak / MiB:.0f} MiB (before the state {before / MiB:.0f} MiB; "
          f"state + {args.window} results + 64 MiB = {bound / MiB:.0f} MiB)")
    print(f"  RSS after {arenapool.rss() / MiB:.0f} MiB; time {elapsed:.2f} s; checksum {checksum:.6g}")


if __name__ == "__main__":
    main()
