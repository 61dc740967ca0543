"""``python -m arenapool.bench``: the field reports' programs, with glibc's malloc as it
is, with the recipes users are given, and with arenapool, each run in a fresh process.

Prints, for each program and configuration: the parent's RSS at the start, after the
parallel call and after ``del`` + ``gc.collect()`` (MiB), the call's wall time and the
parent's CPU time (seconds), as medians over ``--runs`` fresh processes with the
smallest and largest in parentheses. Parent CPU is the steadier figure for speed on a
busy machine.

Programs:

- ``joblib``: the joblib report: ``Parallel(n_jobs=2)`` over ``--tasks`` tasks (4,000)
  each returning ``np.ones(50000)`` (400 KB: 1.5 GiB of results), loky backend.
- ``threads``: the same results made in the workers of a ``ThreadPoolExecutor`` of
  two threads.

Configurations: ``glibc`` (nothing done), ``trim-threshold``
(``MALLOC_TRIM_THRESHOLD_=65536``, what Dask sets), ``malloc_trim`` (``malloc_trim(0)``
called after ``del``), ``arenapool`` (:func:`arenapool.joblib.install`, or a phase
around the thread pool's map). ``--threshold`` sets the size from which arenapool's
hooks take blocks (:func:`arenapool.set_threshold`) in the ``arenapool`` configuration.

``--dask`` runs the Dask rows instead (see ``arenapool._bench._dask``): the client that
gathers (with the scheduler in its process, and in one of its own), joblib's dask
backend, the workers, a string groupby, with Dask's defaults and with
:func:`arenapool.dask.install`.

``--ray`` runs the Ray rows instead (see ``arenapool._bench._ray``): the driver that gets
results (in the object store, and inline), the workers after array work and a string
groupby, with Ray's defaults and with :mod:`arenapool.ray`.

``--state`` measures report 001 instead: a large read-only numpy array (``--state-mib``,
256) that every task reads (``table[i::100] * 2``, a result of 1/100 of it), over
``--inputs`` inputs (100) on a ``ProcessPoolExecutor`` of two workers, under each
start method of ``--start-methods`` (fork, forkserver, spawn):

- ``report``: the report's own program: an ``initializer`` that stores the array,
  passed in ``initargs``, in a global of each worker, then bounded submit/wait (two
  tasks in flight, each result consumed as it comes);
- ``arenapool``: ``arenapool.futures.map(executor, fn, inputs, window=2,
  state=array)``.

It prints the parent's peak RSS (VmHWM), the workers' peak PSS, the peak of
``/dev/shm``'s use above its start, the peak of the three together (sampled every
10 ms: the parent's PSS, the workers' PSS and ``/dev/shm``; the pages of ``/dev/shm``
files that the processes map are counted once, in ``/dev/shm``), and the wall time
from making the executor to its shutdown.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set

if TYPE_CHECKING:
    from concurrent.futures import Future

    import numpy

CONFIGS = ["glibc", "trim-threshold", "malloc_trim", "arenapool"]
PROGRAMS = ["joblib", "threads"]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _results(_: int) -> numpy.ndarray:
    """One task's result, made in a worker thread."""
    import numpy as np

    return np.ones(50_000)


def _child(program: str, config: str, tasks: int, rounds: int, threshold: int = 0) -> None:
    """One fresh process: the program, ``rounds`` times back to back; prints JSON."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from joblib import Parallel, delayed

    if config == "arenapool":
        import arenapool
        import arenapool.joblib

        if threshold:
            arenapool.set_threshold(threshold)
        arenapool.install()
        arenapool.joblib.install()
    rows = []
    start = _rss_mib()
    for _ in range(rounds):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if program == "joblib":
            results = Parallel(n_jobs=2)(delayed(np.ones)(50_000) for _ in range(tasks))
        elif config == "arenapool":
            import arenapool

            with arenapool.phase():
                with ThreadPoolExecutor(2) as pool:
                    results = list(pool.map(_results, range(tasks)))
        else:
            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(_results, range(tasks)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        held = _rss_mib()
        del results
        gc.collect()
        if config == "malloc_trim":
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rows.append({"start": start, "held": held, "after": _rss_mib(), "wall": wall, "cpu": cpu})
    print(json.dumps(rows))


# --------------------------------------------------------------------------------------
# --state: report 001, a large array for every worker
# --------------------------------------------------------------------------------------

START_METHODS = ["fork", "forkserver", "spawn"]
STATE_WAYS = ["report", "arenapool"]
_WORKERS = 2
_WINDOW = 2

# In a worker of the report's program: the array its initializer stored.
_table: Any = None


def _store_table(table: Any) -> None:
    """The report's initializer: the array in a global of the worker."""
    global _table
    _table = table


def _scaled_rows(table: Any, i: int) -> Any:
    """One task: reads every page of the table, returns 1/100 of it."""
    return table[i::100] * 2


def _report_task(i: int) -> Any:
    """The report's task: the same work on the array its initializer stored."""
    return _scaled_rows(_table, i)


def _unshared_pss(pid: int) -> int:
    """A process's PSS in bytes, without its share of shared-memory files (those count
    in ``/dev/shm``'s use); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            fields = dict(line.split(":", 1) for line in rollup if ":" in line and not line.startswith(" "))
    except (OSError, ValueError):
        return 0

    def kib(name: str) -> int:
        value = fields.get(name)
        return int(value.split()[0]) * 1024 if value else 0

    return kib("Pss") - kib("Pss_Shmem")


def _shm_used() -> int:
    """Bytes in use in ``/dev/shm``."""
    stats = os.statvfs("/dev/shm")
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


class _Sampler(threading.Thread):
    """Samples, every ``interval`` seconds, the parent's and the workers' PSS and the use
    of ``/dev/shm``, keeping each one's peak and the peak of their sum."""

    def __init__(self, workers: Callable[[], List[int]], interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.workers = workers
        self.interval = interval
        self.stopped = threading.Event()
        self.shm_start = _shm_used()
        self.peak_workers = self.peak_shm = self.peak_total = 0

    def sample(self) -> None:
        parent = _unshared_pss(os.getpid())
        workers = sum(_unshared_pss(pid) for pid in self.workers())
        shm = max(0, _shm_used() - self.shm_start)
        self.peak_workers = max(self.peak_workers, workers)
        self.peak_shm = max(self.peak_shm, shm)
        self.peak_total = max(self.peak_total, parent + workers + shm)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.sample()


def _worker_pids(executors: List[Any]) -> List[int]:
    """The process ids of the executors' workers now."""
    pids: List[int] = []
    for executor in executors:
        while True:
            try:
                pids.extend(dict(executor._processes or {}))
                break
            except RuntimeError:  # the pool changed it while it was read
                continue
    return pids


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _state_child(method: str, way: str, state_mib: int, inputs: int) -> None:
    """One fresh process: the report's program or arenapool's, under ``method``; prints
    JSON."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import numpy as np

    import arenapool.futures
    from arenapool import bench  # the functions by this name, which workers import

    context = multiprocessing.get_context(method)
    table = np.linspace(0.0, 1.0, state_mib * 2**20 // 8)
    executors: List[Any] = []
    sampler = _Sampler(lambda: _worker_pids(executors))
    sampler.start()
    checksum = 0.0
    start = time.perf_counter()
    if way == "report":
        with ProcessPoolExecutor(
            _WORKERS, mp_context=context, initializer=bench._store_table, initargs=(table,)
        ) as executor:
            executors.append(executor)
            todo = iter(range(inputs))
            pending: Set[Future[Any]] = set()
            while True:
                for i in itertools.islice(todo, _WINDOW - len(pending)):
                    pending.add(executor.submit(bench._report_task, i))
                if not pending:
                    break
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    checksum += float(future.result()[::4096].sum())
                del future, done
    else:
        with ProcessPoolExecutor(_WORKERS, mp_context=context) as executor:
            executors.append(executor)
            results = arenapool.futures.map(executor, bench._scaled_rows, range(inputs), window=_WINDOW, state=table)
            for result in results:
                checksum += float(result[::4096].sum())
                del result
    wall = time.perf_counter() - start
    sampler.stop()
    print(json.dumps({
        "parent_peak_rss": _peak_rss(),
        "workers_peak_pss": sampler.peak_workers,
        "shm_peak": sampler.peak_shm,
        "total_peak": sampler.peak_total,
        "wall": wall,
        "checksum": checksum,
    }))


def _state_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    methods = [m for m in args.start_methods.split(",") if m]
    for method in methods:
        if method not in START_METHODS:
            parser.error(f"unknown start method {method!r}: choose from {', '.join(START_METHODS)}")
    print(f"report 001: a {args.state_mib} MiB array read by every task, {args.inputs} inputs, "
          f"{_WORKERS} worker processes, {_WINDOW} tasks in flight, {args.runs} fresh processes each; "
          "memory in MiB, wall time in s")
    print()
    print("| start method | program | parent peak RSS | workers' peak PSS | /dev/shm peak "
          "| peak of all three | wall |")
    print("|---|---|---|---|---|---|---|")
    mib = 2**20
    for method in methods:
        checksums: List[float] = []
        for way in STATE_WAYS:
            runs = []
            for _ in range(args.runs):
                out = subprocess.run(
                    [sys.executable, "-m", "arenapool.bench", "--state-child", method, way,
                     str(args.state_mib), str(args.inputs)],
                    check=True, capture_output=True, text=True,
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            checksums.extend(run["checksum"] for run in runs)
            print(
                f"| {method} | {way} | {_cell([r['parent_peak_rss'] / mib for r in runs])}"
                f" | {_cell([r['workers_peak_pss'] / mib for r in runs])}"
                f" | {_cell([r['shm_peak'] / mib for r in runs])}"
                f" | {_cell([r['total_peak'] / mib for r in runs])}"
                f" | {_cell([r['wall'] for r in runs], 2)} |",
                flush=True,
            )
        # The report's program adds the results up in the order they finish.
        if not all(math.isclose(c, checksums[0], rel_tol=1e-9) for c in checksums):
            raise RuntimeError(f"{method}: the programs' results differ: checksums {checksums}")
    return 0


def _run(program: str, config: str, tasks: int, rounds: int, threshold: int = 0) -> List[Dict[str, float]]:
    env = dict(os.environ)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if config == "trim-threshold":
        env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    out = subprocess.run(
        [sys.executable, "-m", "arenapool.bench", "--child", program, config, str(tasks), str(rounds),
         str(threshold)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    rounds_figures: List[Dict[str, float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rounds_figures


def _table_head(intro: str, columns: List[str]) -> None:
    """Prints ``intro``, a blank line and a Markdown table's head."""
    print(intro)
    print()
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def _cell(values: List[float], digits: int = 0) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def _suite(name: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> Optional[int]:
    """``--dask`` or ``--ray`` (``name``), and their runs in fresh processes; ``None`` if
    neither is asked for."""
    import importlib

    if getattr(args, f"{name}_child"):
        row, config, tasks, rows = getattr(args, f"{name}_child")
        suite = importlib.import_module(f"arenapool._bench._{name}")
        print(json.dumps(suite.child(row, config, int(tasks), int(rows))))
        return 0
    if not getattr(args, name):
        return None
    suite = importlib.import_module(f"arenapool._bench._{name}")
    rows = _chosen(parser, "row", getattr(args, f"{name}_rows"), suite.ROWS)
    configs = _chosen(parser, "configuration", getattr(args, f"{name}_configs"), suite.CONFIGS)
    from ._bench._suite import Table

    result: int = suite.main(Table(args.runs, args.tasks, args.rows, rows, configs, _cell, _table_head))
    return result


def _chosen(parser: argparse.ArgumentParser, name: str, text: str, known: List[str]) -> List[str]:
    """The comma-separated choices of ``text``, each one of ``known`` (else a usage error)."""
    chosen = [c for c in text.split(",") if c]
    for c in chosen:
        if c not in known:
            parser.error(f"unknown {name} {c!r}: choose from {', '.join(known)}")
    return chosen


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m arenapool.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per configuration (5)")
    parser.add_argument("--tasks", type=int, default=4000, help="tasks per parallel call (4000)")
    parser.add_argument("--rounds", type=int, default=1, help="parallel calls back to back in each process (1)")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated: " + ", ".join(PROGRAMS))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--state", action="store_true",
                        help="report 001 instead: a large array that every task reads, under each start method")
    parser.add_argument("--state-mib", type=int, default=256, help="--state: the array's size (256)")
    parser.add_argument("--inputs", type=int, default=100, help="--state: how many inputs (100)")
    parser.add_argument("--start-methods", default=",".join(START_METHODS),
                        help="--state: comma-separated: " + ", ".join(START_METHODS))
    parser.add_argument("--threshold", type=int, default=0,
                        help="bytes from which arenapool's hooks take blocks in the arenapool configuration"
                        " (default: arenapool's, 64 KiB)")
    for name, what, rows in (
        ("dask", "gather, the same with the scheduler in its own process, joblib's dask backend, workers, a string "
         "groupby (needs dask, distributed, pandas and pyarrow)", "gather,remote,joblib,workers,groupby,pandas"),
        ("ray", "the driver's get, inline results, workers, a string groupby (needs ray, pandas and pyarrow)",
         "get,get-inline,workers,groupby"),
    ):
        parser.add_argument(f"--{name}", action="store_true", help=f"the {name.capitalize()} rows instead: {what}")
        parser.add_argument(f"--{name}-rows", default=rows,
                            help=f"--{name}: comma-separated: {rows.replace(',', ', ')}")
        parser.add_argument(f"--{name}-configs", default="defaults,arenapool",
                            help=f"--{name}: comma-separated: defaults, arenapool")
        parser.add_argument(f"--{name}-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=8_000_000, help="--dask, --ray: the groupby's rows (8 M)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--state-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        program, config, tasks, rounds, threshold = args.child
        _child(program, config, int(tasks), int(rounds), int(threshold))
        return 0
    for suite in ("dask", "ray"):
        done = _suite(suite, args, parser)
        if done is not None:
            return done
    if args.state_child:
        method, way, state_mib, inputs = args.state_child
        _state_child(method, way, int(state_mib), int(inputs))
        return 0
    if args.state:
        return _state_main(args, parser)
    programs = _chosen(parser, "program", args.programs, PROGRAMS)
    configs = _chosen(parser, "configuration", args.configs, CONFIGS)
    if args.threshold and args.threshold < 0:
        parser.error("--threshold must be positive")
    threshold = f", arenapool's threshold {args.threshold} bytes" if args.threshold else ""
    _table_head(
        f"{args.tasks} tasks of np.ones(50000), 2 workers, {args.runs} fresh processes each,"
        f" {args.rounds} round(s) per process{threshold}; RSS in MiB, times in s",
        ["program", "configuration", "start", "held", "after del + gc (every round)", "wall", "parent CPU"],
    )
    for program in programs:
        for config in configs:
            runs = [_run(program, config, args.tasks, args.rounds, args.threshold) for _ in range(args.runs)]
            rounds = [r for run in runs for r in run]
            print(
                f"| {program} | {config} | {_cell([r['start'] for r in rounds])} | {_cell([r['held'] for r in rounds])}"
                f" | {_cell([r['after'] for r in rounds])} | {_cell([r['wall'] for r in rounds], 2)}"
                f" | {_cell([r['cpu'] for r in rounds], 2)} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
