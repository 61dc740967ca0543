"""``python -m arenapool.bench --dask``: the first field report's work and a string
groupby on a Dask ``LocalCluster`` (2 worker processes, one thread each; for the
``remote`` row, a scheduler and workers in processes of their own), with Dask's
defaults and with :func:`arenapool.dask.install`, each run in a fresh process.

Rows (``--dask-rows``):

- ``gather``: the client maps ``--tasks`` tasks (4,000) each returning
  ``np.ones(50000)`` (400 KB), gathers the results, deletes them: the client's RSS.
  A ``LocalCluster`` runs its scheduler in the client's process: its records are in
  the figures.
- ``remote``: the same, with the scheduler and the 2 workers in processes of their own
  (``dask scheduler``, ``dask worker``), as on a cluster: the client's RSS alone.
- ``joblib``: the joblib report's program under ``joblib.parallel_backend("dask")``:
  the client's RSS.
- ``workers``: the same tasks, each result summed on the workers and never gathered,
  then a ``dask.array`` reduction (a 10,000 x 10,000 array of 1,000 x 1,000 chunks):
  the workers' RSS, added up.
- ``groupby``: a ``dask.dataframe`` of ``--rows`` rows (8 M) in 8 partitions made on
  the workers, string keys (pandas' ``str``, in Arrow's memory), grouped and summed,
  the result computed and deleted: the workers' RSS, added up.
- ``pandas``: the same frame and groupby in one process without Dask, a quarter of the
  rows: its RSS. With arenapool: :func:`arenapool.install` before pandas is imported
  (which sets Arrow's default pool to give back), and a phase around the work.

Figures: RSS above the start (after the cluster is up and has run one task) with the
results held and after they are deleted (1 s later, as Dask releases them), the wall
time of the work, and the CPU time the client's process spent in it (steadier than the
wall time on a busy machine; for ``pandas``, the process's own).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List

from ._suite import Table, fresh_runs, print_worker_figures, worker_figures

ROWS = ["gather", "remote", "joblib", "workers", "groupby", "pandas"]
CONFIGS = ["defaults", "arenapool"]
_MiB = 2**20


def _ones(_: int) -> Any:
    import numpy as np

    return np.ones(50_000)


def _total(arrays: List[Any]) -> float:
    return float(sum(a[0] for a in arrays))


def _frame(seed: int, rows: int) -> Any:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    return pd.DataFrame({"k": "key" + keys, "v": rng.random(rows)})


def _import_pandas() -> None:
    import dask.dataframe  # noqa: F401
    import pandas  # noqa: F401


def _rss() -> int:
    from arenapool import rss

    return rss()


def _workers_rss(client: Any) -> int:
    return sum(client.run(_rss).values())


@contextlib.contextmanager
def _remote_cluster() -> Iterator[str]:
    """A scheduler and 2 workers of 1 thread, each a process of its own started by
    Dask's command line; the scheduler's address."""
    with tempfile.TemporaryDirectory() as directory:
        scheduler_file = os.path.join(directory, "scheduler.json")
        started = [
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", scheduler_file,
                 "--no-dashboard", "--port", "0"],
                stderr=subprocess.DEVNULL,
            )
        ]
        try:
            address = None
            while address is None:  # until the scheduler has written its file whole
                if started[0].poll() is not None:
                    raise RuntimeError("dask scheduler exited before it started")
                try:
                    with open(scheduler_file) as text:
                        address = json.load(text)["address"]
                except (OSError, ValueError, KeyError):
                    time.sleep(0.05)
            started += [
                subprocess.Popen(
                    [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                     "--no-dashboard"],
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(2)
            ]
            yield address
        finally:
            for process in started:
                process.terminate()
            for process in started:
                process.wait()


def child(row: str, config: str, tasks: int, rows: int) -> Dict[str, Any]:
    """One fresh process: one row in one configuration; returns its figures."""
    import arenapool

    if row == "pandas":
        if config == "arenapool":
            arenapool.install()  # before pandas imports pyarrow
        import pandas  # noqa: F401 (its libraries' pages before the start)

        start = _rss()
        began, cpu = time.perf_counter(), time.process_time()
        if config == "arenapool":
            with arenapool.phase():
                frame = _frame(0, rows // 4)
                result = frame.groupby("k")["v"].sum()
        else:
            frame = _frame(0, rows // 4)
            result = frame.groupby("k")["v"].sum()
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        held = _rss()
        del frame, result
        gc.collect()
        return {"held": (held - start) / _MiB, "after": (_rss() - start) / _MiB, "wall": wall, "cpu": cpu}

    from distributed import Client, LocalCluster

    import arenapool.dask

    with contextlib.ExitStack() as stack:
        if row == "remote":
            address = stack.enter_context(_remote_cluster())
        else:
            address = stack.enter_context(
                LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
            )
        with Client(address) as client:
            client.wait_for_workers(2)
            if config == "arenapool":
                arenapool.dask.install(client)
            client.submit(_ones, -1).result()
            if row == "groupby":
                client.run(_import_pandas)  # their libraries' pages before the start
            on_workers = row in ("workers", "groupby")
            start = _workers_rss(client) if on_workers else _rss()
            began, cpu = time.perf_counter(), time.process_time()
            if row in ("gather", "remote"):
                results = client.gather(client.map(_ones, range(tasks)))
            elif row == "joblib":
                import joblib

                with joblib.parallel_backend("dask"):
                    results = joblib.Parallel()(joblib.delayed(_ones)(i) for i in range(tasks))
            elif row == "workers":
                import dask.array as da

                futures = client.map(_ones, range(tasks))
                chunks = [client.submit(_total, futures[i : i + 100]) for i in range(0, tasks, 100)]
                results = [sum(client.gather(chunks))]
                del futures, chunks
                x = da.random.random((10_000, 10_000), chunks=(1_000, 1_000))
                results.append((x + x.T).mean().compute())
            else:
                import dask.dataframe as dd

                parts = 8
                frame = dd.from_map(_frame, range(parts), rows=rows // parts)
                results = frame.groupby("k")["v"].sum().compute()
                del frame
            wall, cpu = time.perf_counter() - began, time.process_time() - cpu
            held = _workers_rss(client) if on_workers else _rss()
            del results
            gc.collect()
            time.sleep(1.0)
            after = _workers_rss(client) if on_workers else _rss()
            figures: Dict[str, Any] = {
                "held": (held - start) / _MiB,
                "after": (after - start) / _MiB,
                "wall": wall,
                "cpu": cpu,
            }
            if on_workers:
                figures["breakdown"] = [
                    worker_figures(b)
                    for b in arenapool.dask.breakdowns(client).values()
                ]
            return figures


def main(table: Table) -> int:
    """The table (see :class:`Table`)."""
    runs, tasks, rows, cell = table.runs, table.tasks, table.rows, table.cell
    table.head(
        f"Dask LocalCluster (remote: dask scheduler and dask worker processes), 2 worker processes of "
        f"1 thread; {tasks} tasks of np.ones(50000), "
        f"groupby of {rows} rows; {runs} fresh processes each; MiB above the start, wall time in s",
        ["row", "configuration", "held", "after del", "wall", "client CPU"],
    )
    for row in table.chosen:
        for config in table.configs:
            figures = fresh_runs("--dask-child", row, config, tasks, rows, runs)
            print(f"| {row} | {config} | {cell([f['held'] for f in figures])} | {cell([f['after'] for f in figures])}"
                  f" | {cell([f['wall'] for f in figures], 2)} | {cell([f['cpu'] for f in figures], 2)} |",
                  flush=True)
            print_worker_figures(figures)
    return 0
