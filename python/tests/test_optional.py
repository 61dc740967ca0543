"""Nothing optional fails the program's work: each optional step that cannot run (Arrow's
jemalloc pool, the hooks, a phase, a holder's release, a phase's end) is skipped with
one ArenaPoolWarning or one log record, and the program's call returns its result. The
faults are injected by replacing a function in a fresh process."""

from __future__ import annotations

import pytest

from conftest import require_installed, run_fresh

# What each program starts with: ArenaPoolWarnings and the logger's records, counted.
RECORDED = """
import json, logging, time, warnings
import arenapool
from arenapool import _arenapool
warnings.simplefilter("always")
seen = warnings.catch_warnings(record=True)
caught = seen.__enter__()
logged = []
class Kept(logging.Handler):
    def emit(self, record):
        logged.append(record.getMessage())
logging.getLogger("arenapool").addHandler(Kept())
def said():
    return [str(w.message) for w in caught if issubclass(w.category, arenapool.ArenaPoolWarning)]
def wait_for(done):
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, "not done in 60 s"
        time.sleep(0.01)
"""

NO_ARROW_JEMALLOC = """
import pyarrow
pyarrow.supported_memory_backends = lambda: ["mimalloc", "system"]  # a build without it
"""


@pytest.mark.parametrize(
    "setup",
    [
        "import arenapool.dask, types\n"
        "arenapool.dask.WorkerPhases(metrics=False).setup(types.SimpleNamespace())",
        "import arenapool.ray\narenapool.ray.setup_worker()",
    ],
    ids=["dask", "ray"],
)
def test_worker_setup_goes_on_without_arrows_jemalloc(setup):
    require_installed("pyarrow")
    require_installed("distributed" if "dask" in setup else "ray")
    installed, warned = run_fresh(
        RECORDED + NO_ARROW_JEMALLOC + setup + "\nprint(json.dumps([arenapool.installed(), said()]))"
    )
    assert installed, warned
    assert len(warned) == 1 and "Arrow's jemalloc pool" in warned[0], warned


# A phase that cannot open: the allocator can make no more arenas, or the hooks cannot
# be installed.
NO_PHASE = {
    "arena limit": """
def refused():
    raise arenapool.ArenaPoolError("no more arenas (injected)")
_arenapool.enter_phase = refused
""",
    "install fails": """
def refused():
    raise arenapool.ArenaPoolError("cannot install (injected)")
_arenapool.install_raw = refused
""",
}


@pytest.mark.parametrize("fault", NO_PHASE)
def test_gather_runs_without_a_phase(fault):
    require_installed("distributed")
    results, warned = run_fresh(
        RECORDED
        + NO_PHASE[fault]
        + """
import arenapool.dask
from distributed import Client, LocalCluster
if __name__ == "__main__":
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        arenapool.dask.install(client, workers=False)
        results = [client.gather(client.submit(sum, [i, 1])) for i in range(2)]
        print(json.dumps([results, said()]))
""",
        timeout=300,
    )
    assert results == [1, 2]
    assert len(warned) == 1 and "a phase for a gather" in warned[0], warned


@pytest.mark.parametrize("fault", NO_PHASE)
def test_joblib_and_executor_map_run_without_a_phase(fault):
    require_installed("joblib")
    results, warned = run_fresh(
        RECORDED
        + NO_PHASE[fault]
        + """
import arenapool.joblib, arenapool.futures
from concurrent.futures import ThreadPoolExecutor
from joblib import Parallel, delayed
arenapool.joblib.install()
arenapool.futures.install()
listed = Parallel(n_jobs=2, backend="threading")(delayed(abs)(-i) for i in range(4))
lazy = list(Parallel(n_jobs=2, backend="threading", return_as="generator")(delayed(abs)(-i) for i in range(4)))
with ThreadPoolExecutor(2) as pool:
    mapped = list(pool.map(abs, [-1, -2]))
    ordered = list(arenapool.futures.map(pool, abs, [-3, -4]))
print(json.dumps([[listed, lazy, mapped, ordered], said()]))
""",
    )
    assert results == [[0, 1, 2, 3], [0, 1, 2, 3], [1, 2], [3, 4]], results
    assert len(warned) == 1 and "which runs without one" in warned[0], warned


def test_ray_get_and_task_run_without_a_phase():
    require_installed("ray")
    results, warned = run_fresh(
        RECORDED
        + NO_PHASE["arena limit"]
        + """
import ray, arenapool.ray
if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False)
    arenapool.ray.install()
    got = [ray.get(ray.put(i)) for i in range(2)]
    ran = [arenapool.ray.task(lambda i: i * 10)(i) for i in range(2)]  # what a worker runs
    ray.shutdown()
    print(json.dumps([got + ran, said()]))
""",
        timeout=300,
    )
    assert results == [0, 1, 0, 10]
    assert len(warned) == 1 and "a phase for a ray.get" in warned[0], warned


def test_ray_ender_survives_a_failing_phase_end():
    require_installed("ray")
    phases, still_open, logged = run_fresh(
        RECORDED
        + """
import arenapool.ray
end = arenapool.phase.__exit__
def failing(self, *exc):
    end(self, *exc)
    raise RuntimeError("phase end fails (injected)")
arenapool.phase.__exit__ = failing
phases = arenapool.ray.TaskPhases(idle=0)
for n in (1, 2):  # the second phase is ended by the same thread
    phases.started()
    phases.finished()
    wait_for(lambda: phases.phases == n)
print(json.dumps([phases.phases, arenapool.phase_is_open(), logged]))
"""
    )
    assert phases == 2 and not still_open
    assert len(logged) == 1 and "phase end fails (injected)" in logged[0], logged


def test_dask_worker_phase_that_cannot_open_is_not_ended():
    require_installed("distributed")
    opened, raised, warned = run_fresh(
        RECORDED
        + NO_PHASE["arena limit"]
        + """
import types
import arenapool.dask
from distributed.worker_state_machine import WorkerState
plugin = arenapool.dask.WorkerPhases(arrow_jemalloc=False, metrics=False)
plugin.setup(types.SimpleNamespace(state=WorkerState()))
raised = []
def transition(*states):
    try:  # as Dask's worker calls its plugins: what one raises is logged, and it goes on
        plugin.transition("a", *states)
    except Exception as error:
        raised.append(str(error))
transition("ready", "executing")
transition("executing", "memory")  # outside an event loop: ends at once
print(json.dumps([arenapool.phase_is_open(), raised, said()]))
"""
    )
    assert not opened and raised == [], raised
    assert len(warned) == 1 and "a phase for a Dask worker's tasks" in warned[0], warned


def test_dask_worker_phase_follows_running_tasks():
    require_installed("distributed")
    # The worker's own state machine's sets, changed as Dask changes them: a seceded
    # task keeps the phase open; a cancelled one ends it when its thread is done.
    seen = run_fresh(
        """
import json, types
import arenapool, arenapool.dask
from distributed.worker_state_machine import TaskState, WorkerState
state = WorkerState()
plugin = arenapool.dask.WorkerPhases(arrow_jemalloc=False, metrics=False)
plugin.setup(types.SimpleNamespace(state=state))
seceded, other, cancelled = TaskState("seceded"), TaskState("other"), TaskState("cancelled")
seen = []
def step(ts, start, finish, running):
    # running: the set the task is in after the transition, or None
    state.executing.discard(ts)
    state.long_running.discard(ts)
    if running is not None:
        running.add(ts)
    plugin.transition(ts.key, start, finish)  # outside an event loop: looks at once
    seen.append(arenapool.phase_is_open())
step(seceded, "ready", "executing", state.executing)
step(seceded, "executing", "long-running", state.long_running)
step(other, "ready", "executing", state.executing)
step(other, "executing", "memory", None)                  # the seceded task still runs
step(cancelled, "ready", "executing", state.executing)
step(seceded, "long-running", "memory", None)
step(cancelled, "executing", "cancelled", state.executing)  # its thread still runs
step(cancelled, "cancelled", "released", None)            # and is done: the worker is idle
print(json.dumps(seen))
"""
    )
    assert seen == [True, True, True, True, True, True, True, False], seen


def test_a_failing_holder_is_logged_once_and_the_others_still_asked():
    failures, arrow_asked, logged, warned = run_fresh(
        RECORDED
        + """
from arenapool._core import _holders
failures = []
def failing():
    failures.append(1)
    raise OSError("malloc_trim fails (injected)")
_holders.release_glibc = failing
arrow_asked = []
_holders.release_arrow = lambda *args: arrow_asked.append(1) or []
arenapool.set_release(min_bytes=0, watch=0.01)
with arenapool.phase():  # its end asks every holder, then starts the watcher
    pass
wait_for(lambda: len(failures) >= 3)  # the phase's end, and the watcher twice
print(json.dumps([len(failures), len(arrow_asked), logged, said()]))
"""
    )
    assert failures >= 3 and arrow_asked >= failures - 1, (failures, arrow_asked)
    assert len(logged) == 1 and "glibc" in logged[0] and "injected" in logged[0], logged
    assert len(warned) == 1 and "glibc" in warned[0], warned
