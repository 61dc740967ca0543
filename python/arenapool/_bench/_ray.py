"""``python -m arenapool.bench --ray``: the first field report's results got by a Ray
driver, and array work and a string groupby on Ray's workers, on a local Ray instance of
2 CPUs, with Ray's defaults and with arenapool (:func:`arenapool.ray.install` on the
driver, :func:`arenapool.ray.runtime_env` for the workers, the remote functions
decorated with :func:`arenapool.ray.task`), each run in a fresh process.

Rows (``--ray-rows``):

- ``get``: the driver maps ``--tasks`` tasks (4,000) each returning ``np.ones(50000)``
  (400 KB, above Ray's inline limit: each result is in the object store), gets the
  results, deletes them: the driver's RSS, and the part of it that is the object store's
  shared memory (``RssShmem``).
- ``get-inline``: the same with ``np.ones(10000)`` (80 KB, below the inline limit: each
  result comes back in the task's reply, into the driver's core worker's heap).
- ``workers``: the same 400 KB tasks, each group of 100 results summed by a task on the
  workers, then 100 tasks each adding a 1,000 x 1,000 array to its transpose: the
  workers' anonymous RSS (``RssAnon``: their own memory, without the object store's
  pages they map), added up.
- ``groupby``: 8 tasks, each making a frame of ``--rows`` / 8 rows (1 M) with string keys
  (pandas' ``str``, in Arrow's memory), grouping and summing it: the workers' anonymous
  RSS, added up.

Figures: MiB above the start (after Ray is up and each worker has run a task) with the
results held and after they are deleted, 0.3 s and 2 s later; the wall time of the work
and the CPU time the driver spent in it. For the worker rows, each worker's
:func:`arenapool.breakdown` after the row.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Dict, List

from ._suite import Table, fresh_runs, print_worker_figures, worker_figures

ROWS = ["get", "get-inline", "workers", "groupby"]
CONFIGS = ["defaults", "arenapool"]
_MiB = 2**20


def _ones(_: int) -> Any:
    import numpy as np

    return np.ones(50_000)


def _small_ones(_: int) -> Any:
    import numpy as np

    return np.ones(10_000)


def _total(*arrays: Any) -> float:
    return float(sum(a[0] for a in arrays))


def _matrix(seed: int) -> float:
    import numpy as np

    x = np.random.default_rng(seed).random((1_000, 1_000))
    return float((x + x.T).mean())


def _grouped(seed: int, rows: int) -> float:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    frame = pd.DataFrame({"k": "key" + keys, "v": rng.random(rows)})
    return float(frame.groupby("k")["v"].sum().sum())


def _status(name: str, pid: str = "self") -> int:
    """A figure of ``/proc/PID/status`` in bytes (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def child(row: str, config: str, tasks: int, rows: int) -> Dict[str, Any]:
    """One fresh process: one row in one configuration; returns its figures."""
    import ray

    import arenapool
    import arenapool.ray

    functions = {
        "ones": _ones, "small_ones": _small_ones, "total": _total, "matrix": _matrix, "grouped": _grouped,
    }
    options: Dict[str, Any] = {"num_cpus": 2, "include_dashboard": False}
    if config == "arenapool":
        arenapool.ray.install()
        options["runtime_env"] = arenapool.ray.runtime_env()
        functions = {name: arenapool.ray.task(f) for name, f in functions.items()}
    remote = {name: ray.remote(f) for name, f in functions.items()}
    ray.init(**options)
    try:
        on_workers = row in ("workers", "groupby")
        ray.get([remote["ones"].remote(-1) for _ in range(4)])
        if row == "groupby":
            ray.get([remote["grouped"].remote(i, 1_000) for i in range(4)])  # pandas' pages
        gc.collect()
        time.sleep(1.0)
        if on_workers:
            workers = list(arenapool.ray.breakdowns())  # "node:pid" of each worker
            pids = [worker.rpartition(":")[2] for worker in workers]

            def measure() -> int:
                return sum(_status("RssAnon", pid) for pid in pids)

            start = measure()
        else:

            def measure() -> int:
                return arenapool.rss()

            start = measure()

        began, cpu = time.perf_counter(), time.process_time()
        if row in ("get", "get-inline"):
            made = remote["ones" if row == "get" else "small_ones"]
            results: Any = ray.get([made.remote(i) for i in range(tasks)])
        elif row == "workers":
            refs = [remote["ones"].remote(i) for i in range(tasks)]
            sums = [remote["total"].remote(*refs[i : i + 100]) for i in range(0, tasks, 100)]
            results = ray.get(sums)
            del refs, sums
            results += ray.get([remote["matrix"].remote(i) for i in range(100)])
        else:
            results = ray.get([remote["grouped"].remote(i, rows // 8) for i in range(8)])
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        held, shared_held = measure(), _status("RssShmem")
        del results
        gc.collect()
        time.sleep(0.3)
        soon = measure()
        time.sleep(1.7)
        after, shared_after = measure(), _status("RssShmem")
        figures: Dict[str, Any] = {
            "held": (held - start) / _MiB,
            "soon": (soon - start) / _MiB,
            "after": (after - start) / _MiB,
            "shared": shared_after / _MiB,
            "wall": wall,
            "cpu": cpu,
        }
        if on_workers:
            figures["breakdown"] = [
                worker_figures(b)
                for worker, b in arenapool.ray.breakdowns().items()
                if worker in workers
            ]
        else:
            figures["shared_held"] = shared_held / _MiB
        return figures
    finally:
        ray.shutdown()


def main(table: Table) -> int:
    """The table (see :class:`Table`)."""
    runs, tasks, rows, cell = table.runs, table.tasks, table.rows, table.cell
    table.head(
        f"Ray, a local instance of 2 CPUs; {tasks} tasks of np.ones(50000), groupby of {rows} rows; "
        f"{runs} fresh processes each; MiB above the start (the driver's RSS, or the workers' RssAnon "
        "added up), wall time in s",
        ["row", "configuration", "held", "0.3 s after del", "2 s after del", "of which shared",
         "wall", "driver CPU"],
    )
    for row in table.chosen:
        for config in table.configs:
            figures = fresh_runs("--ray-child", row, config, tasks, rows, runs)
            shared = cell([f["shared"] for f in figures]) if row.startswith("get") else "–"
            print(f"| {row} | {config} | {cell([f['held'] for f in figures])} | {cell([f['soon'] for f in figures])}"
                  f" | {cell([f['after'] for f in figures])} | {shared}"
                  f" | {cell([f['wall'] for f in figures], 2)} | {cell([f['cpu'] for f in figures], 2)} |",
                  flush=True)
            print_worker_figures(figures)
    return 0
