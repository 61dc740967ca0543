"""Fork safety: children forked while other threads open and end phases and allocate.

With the hooks installed, ``--threads`` threads (3) loop: open a phase, allocate and
free numpy arrays of 8 to 64 MiB and a burst of small objects (pymalloc's arenas made
and unmapped, its free pools given back at the phase's end), end the phase, allocate
and free one more array, pause up to ``--pause-ms`` (100). Meanwhile the main thread starts ``--forks`` children (500)
with multiprocessing's ``fork`` context, one every ``--interval-ms`` (10), at most
``--in-flight`` (32) alive at a time. Each child opens a phase of its own, allocates
and frees an array, and exits 0, or 3 if it saw a phase open at its start (a phase
open in the parent is not open in the child); it also makes and drops small objects
and gives back pymalloc's free pools. A child still alive ``--deadline``
seconds (20) after it was started counts as hung, and is killed.

Prints one JSON line: the counts of children that exited 0, hung, saw a phase open
(exit status 3), or failed otherwise, and the seconds the run took. Exits 1 unless
every child exited 0. ``tests/test_fork.py`` runs it with fewer forks::

    python tests/fork_safety.py --forks 500
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import threading
import time
from typing import Dict, List, Tuple

import numpy as np

import arenapool

MiB = 1 << 20
PHASE_OPEN_IN_CHILD = 3  # a child's exit status when it sees a phase open at its start


def churn(stop: threading.Event, seed: int, pause: float) -> None:
    """One thread's work until ``stop``: phases, each allocating and freeing arrays,
    then a pause of up to ``pause`` seconds with an array made and freed outside a
    phase (so that some children are forked while no phase is open)."""
    rng = random.Random(seed)
    while not stop.is_set():
        with arenapool.phase():
            arrays = [np.ones(rng.randrange(8, 65) * MiB // 8) for _ in range(rng.randint(1, 2))]
            del arrays
            small_objects()
        array = np.ones(rng.randrange(8, 65) * MiB // 8)
        del array
        stop.wait(rng.random() * pause)


kept: List[Tuple[int, int]] = []


def small_objects() -> None:
    """Some MiB of small objects, one in 4,096 kept: pymalloc makes arenas, and leaves
    free pools in them when the rest are dropped."""
    objects = [(i, i + 1) for i in range(100_000)]
    kept.extend(objects[::4096])
    del kept[:-1000]


def child() -> None:
    """A child's work: open a phase, allocate and free, exit 0; exit 3 instead if it
    saw a phase open at its start."""
    saw_a_phase = arenapool.phase_is_open()
    with arenapool.phase():
        array = np.ones(8 * MiB // 8)
        del array
        small_objects()
    arenapool.release_others()
    if saw_a_phase:
        os._exit(PHASE_OPEN_IN_CHILD)


def run(
    forks: int, threads: int, pause: float, interval: float, in_flight: int, deadline: float
) -> Dict[str, float]:
    """Start ``forks`` children while ``threads`` threads churn; the counts of each end."""
    arenapool.install()
    context = multiprocessing.get_context("fork")
    stop = threading.Event()
    workers = [threading.Thread(target=churn, args=(stop, seed, pause), daemon=True) for seed in range(threads)]
    for worker in workers:
        worker.start()
    counts = {"exited 0": 0, "hung": 0, "saw a phase open": 0, "failed": 0}
    alive: List[Tuple[multiprocessing.process.BaseProcess, float]] = []
    started = 0
    start = time.monotonic()

    def reap() -> None:
        now = time.monotonic()
        still: List[Tuple[multiprocessing.process.BaseProcess, float]] = []
        for process, born in alive:
            if process.exitcode is None and now - born > deadline:
                process.kill()
                process.join()
                counts["hung"] += 1
            elif process.exitcode is None:
                still.append((process, born))
            elif process.exitcode == 0:
                counts["exited 0"] += 1
            elif process.exitcode == PHASE_OPEN_IN_CHILD:
                counts["saw a phase open"] += 1
            else:
                counts["failed"] += 1
        alive[:] = still

    try:
        while started < forks or alive:
            reap()
            if started < forks and len(alive) < in_flight:
                process = context.Process(target=child)
                process.start()
                alive.append((process, time.monotonic()))
                started += 1
            time.sleep(interval)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        for process, _ in alive:
            process.kill()
    result: Dict[str, float] = {"forks": forks, **counts}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forks", type=int, default=500, help="children to start (500)")
    parser.add_argument("--threads", type=int, default=3, help="threads churning phases (3)")
    parser.add_argument("--pause-ms", type=float, default=100.0,
                        help="most milliseconds a thread pauses between its phases (100)")
    parser.add_argument("--interval-ms", type=float, default=10.0,
                        help="milliseconds between two forks (10)")
    parser.add_argument("--in-flight", type=int, default=32, help="children alive at a time, at most (32)")
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds before a child counts as hung (20)")
    args = parser.parse_args()
    result = run(
        args.forks, args.threads, args.pause_ms / 1000, args.interval_ms / 1000, args.in_flight, args.deadline
    )
    print(json.dumps(result), flush=True)
    return 0 if result["exited 0"] == args.forks else 1


if __name__ == "__main__":
    sys.exit(main())
