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
around the thread pool's map).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

CONFIGS = ["glibc", "trim-threshold", "malloc_trim", "arenapool"]
PROGRAMS = ["joblib", "threads"]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _results(_: int):
    """One task's result, made in a worker thread."""
    import numpy as np

    return np.ones(50_000)


def _child(program: str, config: str, tasks: int, rounds: int) -> None:
    """One fresh process: the program, ``rounds`` times back to back; prints JSON."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from joblib import Parallel, delayed

    if config == "arenapool":
        import arenapool
        import arenapool.joblib

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


def _run(program: str, config: str, tasks: int, rounds: int) -> List[Dict[str, float]]:
    env = dict(os.environ)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if config == "trim-threshold":
        env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    out = subprocess.run(
        [sys.executable, "-m", "arenapool.bench", "--child", program, config, str(tasks), str(rounds)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cell(values: List[float], digits: int = 0) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m arenapool.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per configuration (5)")
    parser.add_argument("--tasks", type=int, default=4000, help="tasks per parallel call (4000)")
    parser.add_argument("--rounds", type=int, default=1, help="parallel calls back to back in each process (1)")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated: " + ", ".join(PROGRAMS))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        program, config, tasks, rounds = args.child
        _child(program, config, int(tasks), int(rounds))
        return 0
    programs = [p for p in args.programs.split(",") if p]
    configs = [c for c in args.configs.split(",") if c]
    for name, chosen, known in (("program", programs, PROGRAMS), ("configuration", configs, CONFIGS)):
        for c in chosen:
            if c not in known:
                parser.error(f"unknown {name} {c!r}: choose from {', '.join(known)}")
    print(f"{args.tasks} tasks of np.ones(50000), 2 workers, {args.runs} fresh processes each,"
          f" {args.rounds} round(s) per process; RSS in MiB, times in s")
    print()
    print("| program | configuration | start | held | after del + gc (every round) | wall | parent CPU |")
    print("|---|---|---|---|---|---|---|")
    for program in programs:
        for config in configs:
            runs = [_run(program, config, args.tasks, args.rounds) for _ in range(args.runs)]
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
