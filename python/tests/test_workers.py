"""Worker processes come back: after a job of 1,500 tasks each returning 400 KB, each of loky's workers is within 16 MiB of its
idle start, and so is the parent, when the parent installed the integration or
``ARENAPOOL=on`` is set (without either, each worker keeps 25 to 60 MiB). Process
workers of ``concurrent.futures`` and joblib's multiprocessing backend install
arenapool, its watcher included. One fresh program per measurement."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

from conftest import MiB, RSS_HELPER, run_fresh

pytest.importorskip("joblib")

WORKER_RSS = RSS_HELPER + """
import sys, time
import numpy as np
def rss_of(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def result(i):
    return np.ones(50_000) * i
def measured(job, workers, limit=16 << 20, seconds=60):
    '''The parent's RSS over its start after ``job``, and each worker's over its idle
    start: as soon as each is at most ``limit``, or after ``seconds`` (a loaded machine
    may run a worker's last phase end late).'''
    pids = workers()
    time.sleep(1)
    idle = {pid: rss_of(pid) for pid in pids}
    start = rss()
    results = job()
    assert len(results) == 1500
    del results
    gc.collect()
    def grown():
        return [rss() - start, [rss_of(pid) - idle[pid] for pid in pids]]
    def worst():
        parent, workers = grown()
        return max([parent] + workers)
    once_at_most(worst, limit, seconds)
    return grown()
"""

LOKY_CHILDREN = """
def loky_workers():
    pids = []
    for path in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{path}/children") as f:
            pids += f.read().split()
    with_cmdline = {pid: open(f"/proc/{pid}/cmdline", "rb").read() for pid in pids}
    return [pid for pid, line in with_cmdline.items() if b"resource_tracker" not in line]
"""

JOBLIB = WORKER_RSS + LOKY_CHILDREN + """
from joblib import Parallel, delayed
SETTING
Parallel(n_jobs=2)(delayed(result)(i) for i in range(4))  # the workers start
print(json.dumps(measured(lambda: Parallel(n_jobs=2)(delayed(result)(i) for i in range(1500)), loky_workers)))
"""


def program(template: str, setting: str = "") -> str:
    return template.replace("SETTING", setting)


def each_back(parent: float, workers: List[float]) -> None:
    assert len(workers) == 2, workers
    assert parent <= 16 * MiB, (parent / MiB, [w / MiB for w in workers])
    for grown in workers:
        assert grown <= 16 * MiB, (parent / MiB, [w / MiB for w in workers])


def test_joblib_install_brings_each_loky_worker_back():
    parent, workers = run_fresh(program(JOBLIB, "import arenapool.joblib; arenapool.joblib.install()"))
    each_back(parent, workers)


def environment(arenapool_env: Optional[str]) -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "ARENAPOOL"}
    if arenapool_env is not None:
        env["ARENAPOOL"] = arenapool_env
    return env


def test_joblib_with_arenapool_on_brings_each_worker_back():
    parent, workers = run_fresh(program(JOBLIB), env=environment("on"))
    each_back(parent, workers)


# multiprocessing's and concurrent.futures' workers gave back by themselves in every
# workload measured (+0.0 to +3 MiB each without arenapool: 400 KB results, of varied
# sizes, with kept labels, made on threads of the worker): what is tested for them is
# that the integration reaches them.
IN_WORKERS = """
import json, multiprocessing, os, sys
from concurrent.futures import ProcessPoolExecutor
import arenapool, arenapool.futures, arenapool.joblib
from joblib import Parallel, delayed
def state(_):
    return [os.getpid(), arenapool.installed(), arenapool._core._release._watcher_pid == os.getpid()]
if __name__ == "__main__":
    arenapool.futures.install()
    arenapool.joblib.install()
    seen = {}
    for method in ("fork", "spawn"):
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method)) as pool:
            seen[method] = list(pool.map(state, range(4)))
    seen["joblib-multiprocessing"] = Parallel(n_jobs=2, backend="multiprocessing")(delayed(state)(i) for i in range(4))
    seen["threads"] = Parallel(n_jobs=2, backend="threading")(delayed(state)(i) for i in range(4))
    print(json.dumps([os.getpid(), seen]))
"""


def test_process_workers_install_arenapool(tmp_path):
    parent, seen = run_file(tmp_path, IN_WORKERS)
    for pool, tasks in seen.items():
        assert len(tasks) == 4, (pool, tasks)
        for pid, installed, watching in tasks:
            assert (pid == parent) == (pool == "threads"), (pool, tasks)
            assert installed and watching, (pool, tasks)


def run_file(tmp_path, code: str, env: Optional[Dict[str, str]] = None):
    """``code`` as a program file (spawn and forkserver run the main module again)."""
    path = tmp_path / "program.py"
    path.write_text(code)
    return run_fresh(f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')", env=env)


def test_the_report_as_written_with_arenapool_on():
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "s1_joblib.py")
    out = subprocess.run(
        [sys.executable, example], env=environment("on"), capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    start, held, after = (float(x) for x in re.findall(r"(\d+) MiB", out.stdout))
    assert held > start + 1000 and after <= start + 16, out.stdout
