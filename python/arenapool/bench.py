"""``python -m arenapool.bench``: the field reports' programs, with glibc's malloc as it
is, with the recipes users are given, and with arenapool, each run in a fresh process.

Prints, for each program and configuration: the parent's RSS at the start, after the
parallel call and after ``del`` + ``gc.collect()`` (MiB), the most any worker process
holds above its start right after ``del`` and two seconds later (MiB), the call's wall
time, the parent's CPU time and the worker processes' CPU time over the call
(seconds), and the wall time and the workers' CPU time as ratios to glibc's of the same
round of runs: medians over ``--runs`` fresh processes, the configurations' runs
interleaved, with the smallest and largest in parentheses.

Programs:

- ``joblib``: the joblib report: ``Parallel(n_jobs=2)`` over ``--tasks`` tasks (4,000)
  each returning ``np.ones(50000)`` (400 KB: 1.5 GiB of results), loky backend, the
  workers warmed first by a call of a few tasks.
- ``futures``: the same tasks through ``ProcessPoolExecutor(2).map`` (one task per
  message, the executor's default), the workers warmed first.
- ``pool``: the same through ``multiprocessing.Pool(2).map`` (which sends the tasks
  and their results in chunks of several hundred), the workers warmed first.
- ``threads``: the same results made in the workers of a ``ThreadPoolExecutor`` of
  two threads (no worker processes: their columns are empty).

The process pools use the interpreter's default start method (``fork`` on Linux
before Python 3.14, ``forkserver`` from 3.14 on).

Configurations: ``glibc`` (nothing done), ``trim-threshold``
(``MALLOC_TRIM_THRESHOLD_=65536``, what Dask sets), ``malloc_trim`` (``malloc_trim(0)``
called after ``del``), ``arenapool`` (:func:`arenapool.joblib.install`;
:func:`arenapool.futures.install` for ``futures``; a phase around the map for
``pool``, whose workers call :func:`arenapool.install` as their initializer, and for
``threads``), ``ARENAPOOL=on`` (the variable set, nothing in the program).
``--threshold`` sets the size from which arenapool's hooks take blocks
(:func:`arenapool.set_threshold`) in the ``arenapool`` configuration.

``--guard`` measures only what a change could make slower, and prints one line per
figure, ``guard <name> <ratio> <low> <high>``: the ratio arenapool/glibc, median and
range over ``--runs`` interleaved pairs of fresh processes: for the joblib report's
program, ``report_wall`` and ``report_workers_cpu`` with ``ARENAPOOL=on``,
``report_wall_install`` and ``report_workers_cpu_install`` with
:func:`arenapool.joblib.install`; ``futures_wall`` and ``pool_wall``, the wall time of
the ``futures`` and ``pool`` programs with ``ARENAPOOL=on``; and ``start``, the
interpreter's start (``python -c pass``) with ``ARENAPOOL=on`` against without, over
``--starts`` interleaved pairs (21), printed after a line ``start <ms added> <ms with>
<ms without>`` (medians); and ``start_numpy``, the same for ``python -c "import numpy"``,
which adds what ``ARENAPOOL=on`` does as numpy is first imported (numpy's handler, the
rest of :func:`arenapool.install`).

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
import importlib.util
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

CONFIGS = ["glibc", "trim-threshold", "malloc_trim", "arenapool", "ARENAPOOL=on"]
PROGRAMS = ["joblib", "futures", "pool", "threads"]


def _rss_mib(pid: str = "self") -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _results(_: int) -> numpy.ndarray:
    """One task's result, made in a worker thread."""
    import numpy as np

    return np.ones(50_000)


def _loky_workers() -> List[int]:
    """The process ids of joblib's loky workers now."""
    from joblib.externals.loky import reusable_executor

    executor = reusable_executor._executor
    return sorted(dict(executor._processes or {})) if executor is not None else []


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
        if program == "futures":
            import arenapool.futures

            arenapool.futures.install()
    workers: List[int] = []
    processes: Any = None
    if program == "joblib":
        # The report's workers were warm: started, and their first tasks run.
        Parallel(n_jobs=2)(delayed(os.getpid)() for _ in range(20))
        time.sleep(1.0)
        workers = _loky_workers()
    elif program in ("futures", "pool"):
        processes = _process_pool(program, config)
        time.sleep(1.0)
        workers = _pool_workers(processes)
    rows = []
    start = _rss_mib()
    for _ in range(rounds):
        workers_start = [_rss_mib(str(pid)) for pid in workers]
        workers_cpu0 = sum(_cpu_seconds(pid) for pid in workers)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if program == "joblib":
            results = Parallel(n_jobs=2)(delayed(np.ones)(50_000) for _ in range(tasks))
        elif program == "futures":
            results = list(processes.map(np.ones, [50_000] * tasks))
        elif program == "pool" and config == "arenapool":
            import arenapool

            with arenapool.phase():
                results = processes.map(np.ones, [50_000] * tasks)
        elif program == "pool":
            results = processes.map(np.ones, [50_000] * tasks)
        elif config == "arenapool":
            import arenapool

            with arenapool.phase():
                with ThreadPoolExecutor(2) as pool:
                    results = list(pool.map(_results, range(tasks)))
        else:
            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(_results, range(tasks)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        row: Dict[str, Optional[float]] = {"wall": wall, "cpu": cpu}
        if workers:
            row["workers_cpu"] = sum(_cpu_seconds(pid) for pid in workers) - workers_cpu0
        row["held"] = _rss_mib()
        del results
        gc.collect()
        if config == "malloc_trim":
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        row["start"], row["after"] = start, _rss_mib()
        if workers:
            row["workers_after"] = max(_rss_mib(str(pid)) - s for pid, s in zip(workers, workers_start))
            time.sleep(2.0)
            row["workers_idle"] = max(_rss_mib(str(pid)) - s for pid, s in zip(workers, workers_start))
        rows.append(row)
    if program == "futures":
        processes.shutdown()
    elif program == "pool":
        processes.close()
        processes.join()
    print(json.dumps(rows))


def _process_pool(program: str, config: str) -> Any:
    """The two worker processes of ``program`` (``futures``: a ``ProcessPoolExecutor``,
    ``pool``: a ``multiprocessing.Pool``), under the interpreter's default start method,
    warmed by a map of a few tasks. With arenapool, a pool's workers install it before
    their first task (an ``initializer``; those made by ``fork`` have it already), and
    ``arenapool.futures.install()`` does it for an executor's."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if program == "futures":
        executor = ProcessPoolExecutor(2)
        list(executor.map(abs, range(20)))
        return executor
    initializer = None
    if config == "arenapool":
        import arenapool

        initializer = arenapool.install
    pool = multiprocessing.Pool(2, initializer=initializer)
    pool.map(abs, range(20))
    return pool


def _pool_workers(processes: Any) -> List[int]:
    """The process ids of a ``ProcessPoolExecutor``'s or ``multiprocessing.Pool``'s
    workers now."""
    if hasattr(processes, "_pool"):  # multiprocessing.Pool
        return sorted(worker.pid for worker in processes._pool)
    return sorted(_worker_pids([processes]))


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


def _env(config: str) -> Dict[str, str]:
    """The environment of a fresh process in configuration ``config``: this one's, with
    the variables the configurations set, set as ``config`` has them."""
    env = dict(os.environ)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    env.pop("ARENAPOOL", None)
    if config == "trim-threshold":
        env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    if config == "ARENAPOOL=on":
        env["ARENAPOOL"] = "on"
    return env


def _run(program: str, config: str, tasks: int, rounds: int, threshold: int = 0) -> List[Dict[str, float]]:
    env = _env(config)
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
    if not values:
        return "–"
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
    parser.add_argument("--guard", action="store_true",
                        help="only the ratios a slower change would move, one line each: guard <name> <ratio> <low> <high>")
    parser.add_argument("--starts", type=int, default=21,
                        help="--guard: pairs of `python -c pass`, and of `python -c 'import numpy'`, "
                             "with ARENAPOOL=on and without (21)")
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
    if args.guard:
        if args.starts < 1:
            parser.error("--starts must be at least 1")
        return _guard(args)
    programs = _chosen(parser, "program", args.programs, PROGRAMS)
    configs = _chosen(parser, "configuration", args.configs, CONFIGS)
    if args.threshold and args.threshold < 0:
        parser.error("--threshold must be positive")
    threshold = f", arenapool's threshold {args.threshold} bytes" if args.threshold else ""
    _table_head(
        f"{args.tasks} tasks of np.ones(50000), 2 workers, {args.runs} fresh processes each (interleaved),"
        f" {args.rounds} round(s) per process{threshold}; RSS in MiB, times in s, ratios to glibc's",
        ["program", "configuration", "start", "held", "after del + gc (every round)", "workers after del",
         "workers 2 s later", "wall", "wall vs glibc", "parent CPU", "workers' CPU", "workers' CPU vs glibc"],
    )
    for program in programs:
        runs = _interleaved(program, configs, args)
        for config in configs:
            rounds = [r for run in runs[config] for r in run]
            print(
                f"| {program} | {config} | {_cell(_column(rounds, 'start'))} | {_cell(_column(rounds, 'held'))}"
                f" | {_cell(_column(rounds, 'after'))} | {_cell(_column(rounds, 'workers_after'))}"
                f" | {_cell(_column(rounds, 'workers_idle'))} | {_cell(_column(rounds, 'wall'), 2)}"
                f" | {_cell(_ratios(runs, config, 'wall'), 2)} | {_cell(_column(rounds, 'cpu'), 2)}"
                f" | {_cell(_column(rounds, 'workers_cpu'), 2)} | {_cell(_ratios(runs, config, 'workers_cpu'), 2)} |",
                flush=True,
            )
    return 0


def _interleaved(program: str, configs: List[str], args: argparse.Namespace) -> Dict[str, List[List[Dict[str, float]]]]:
    """``args.runs`` fresh processes of each configuration, one of each in turn (so that
    what else the machine does weighs on all alike)."""
    runs: Dict[str, List[List[Dict[str, float]]]] = {config: [] for config in configs}
    for _ in range(args.runs):
        for config in configs:
            runs[config].append(_run(program, config, args.tasks, args.rounds, args.threshold))
    return runs


def _column(rounds: List[Dict[str, float]], key: str) -> List[float]:
    return [r[key] for r in rounds if r.get(key) is not None]


def _ratios(runs: Dict[str, List[List[Dict[str, float]]]], config: str, key: str) -> List[float]:
    """``key`` in ``config``'s rounds over the same round of glibc's run of the same turn
    (empty without glibc's runs)."""
    if "glibc" not in runs:
        return []
    return [
        mine[key] / base[key]
        for ours, glibc in zip(runs[config], runs["glibc"])
        for mine, base in zip(ours, glibc)
        if mine.get(key) is not None and base.get(key)
    ]


# Each guard's name, and the program, configuration and figure it is the ratio of.
GUARDS = [
    ("report_wall", "joblib", "ARENAPOOL=on", "wall"),
    ("report_workers_cpu", "joblib", "ARENAPOOL=on", "workers_cpu"),
    ("report_wall_install", "joblib", "arenapool", "wall"),
    ("report_workers_cpu_install", "joblib", "arenapool", "workers_cpu"),
    ("futures_wall", "futures", "ARENAPOOL=on", "wall"),
    ("pool_wall", "pool", "ARENAPOOL=on", "wall"),
]


def _guard(args: argparse.Namespace) -> int:
    """``--guard``: the figures a regression would move, as ratios to glibc's; one line
    each, ``guard <name> <ratio> <low> <high>``."""
    for program in dict.fromkeys(program for _, program, _, _ in GUARDS):
        guards = [(name, config, key) for name, of, config, key in GUARDS if of == program]
        configs = ["glibc"] + sorted({config for _, config, _ in guards})
        runs = _interleaved(program, configs, args)
        for name, config, key in guards:
            ratios = _ratios(runs, config, key) or [math.nan]  # nan: glibc's figure was 0
            print(f"guard {name} {statistics.median(ratios):.3f} {min(ratios):.3f} {max(ratios):.3f}", flush=True)
    _start_guard(args.starts)
    return 0


def _start_ms(env: Dict[str, str], code: str) -> float:
    """The wall time of ``python -c <code>`` in a fresh interpreter, in ms."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - started) * 1e3


def _start_pairs(starts: int, code: str) -> Dict[str, List[float]]:
    """``python -c <code>`` with ``ARENAPOOL=on`` and without, ``starts`` pairs, each
    pair's order the other way round from the last's: the times in ms, by side."""
    times: Dict[str, List[float]] = {"on": [], "plain": []}
    for i in range(starts):
        order = [("plain", _env("glibc")), ("on", _env("ARENAPOOL=on"))]
        if i % 2:
            order.reverse()
        for key, env in order:
            times[key].append(_start_ms(env, code))
    return times


def _print_start_ratio(name: str, times: Dict[str, List[float]]) -> None:
    """The guard line ``name``: the pairs' ratios of ``ARENAPOOL=on`` to without."""
    ratios = [a / b for a, b in zip(times["on"], times["plain"])]
    print(f"guard {name} {statistics.median(ratios):.3f} {min(ratios):.3f} {max(ratios):.3f}", flush=True)


def _start_guard(starts: int) -> None:
    """The ``start`` guard: ``python -c pass`` with ``ARENAPOOL=on`` against without;
    and ``start_numpy``, ``python -c "import numpy"`` the same way, where numpy is
    installed."""
    times = _start_pairs(starts, "pass")
    with_on, without = statistics.median(times["on"]), statistics.median(times["plain"])
    print(f"start {with_on - without:+.1f} {with_on:.1f} {without:.1f}", flush=True)
    _print_start_ratio("start", times)
    if importlib.util.find_spec("numpy") is not None:
        _print_start_ratio("start_numpy", _start_pairs(starts, "import numpy"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
