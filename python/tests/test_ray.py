"""`arenapool.ray`: the driver that gets results and the workers that compute, on a local
Ray instance of 2 CPUs, each test that measures memory in a fresh process (memory
asserted with margins, never time)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

import arenapool.ray

from conftest import ONCE_AT_MOST, MiB, run_fresh

RAY = ONCE_AT_MOST + """
import gc, json
import numpy as np
import ray
import arenapool, arenapool.ray

def anonymous(pid):
    with open(f"/proc/{{pid}}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))

{functions}

if __name__ == "__main__":
    ray.init(num_cpus=2, object_store_memory=200 << 20, include_dashboard=False{init})
{body}
    ray.shutdown()
"""


def run_ray(body: str, functions: str = "", init: str = "") -> object:
    indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return run_fresh(RAY.format(functions=functions, init=init, body=indented), timeout=300)


def test_driver_gives_back_inline_results():
    # Results below Ray's inline limit (100 KiB) come back in the tasks' replies, into the
    # core worker's glibc heap, and numpy's arrays are read in place there: the phase's
    # end starts the trim that gives those pages back once the results are dropped.
    start, held, after = run_ray(
        """
arenapool.ray.install()
ray.get([small.remote(-1) for _ in range(4)])
gc.collect()
start = arenapool.rss()
results = ray.get([small.remote(i) for i in range(4000)])   # 320 MB
held = arenapool.rss()
del results
gc.collect()
print(json.dumps([start, held, once_at_most(arenapool.rss, start + 48 * 2**20)]))
""",
        functions="""
@ray.remote
def small(_):
    return np.ones(10_000)
""",
    )
    assert held >= start + 250 * MiB, (start, held, after)
    assert after <= start + 48 * MiB, (start, held, after)


GROUPBY = """
def frame(seed, rows):
    import pandas as pd
    rng = np.random.default_rng(seed)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    f = pd.DataFrame({{"k": "key" + keys, "v": rng.random(rows)}})
    return float(f.groupby("k")["v"].sum().sum())

grouped = ray.remote({decorated})
"""

MEASURED_GROUPBY = """
ray.get([grouped.remote(i, 1_000) for i in range(4)])        # the workers import pandas
pids = [worker.rpartition(":")[2] for worker in arenapool.ray.breakdowns()]
assert len(set(pids)) == 2, pids
rss = lambda: sum(anonymous(pid) for pid in pids)
time.sleep(1.5)
start = rss()
ray.get([grouped.remote(i, 1_000_000) for i in range(8)])
after = once_at_most(rss, start + {limit} * 2**20, {seconds})
phases = sum(arenapool.ray.run_on_workers(lambda: arenapool.ray.task_phases().phases).values())
print(json.dumps([start, after, phases]))
"""


def test_workers_hooks_give_back_a_string_groupby():
    # The setup hook alone: Arrow's jemalloc pool, and arenapool's hooks whose idle return
    # gives back what the tasks dropped once a worker has been quiet for a second.
    start, after, phases = run_ray(
        MEASURED_GROUPBY.format(limit=40, seconds=60),
        functions=GROUPBY.format(decorated="frame"),
        init=", runtime_env=arenapool.ray.runtime_env()",
    )
    assert after <= start + 40 * MiB, (start, after)
    assert phases == 0, phases


def test_workers_task_phases_give_back_at_once():
    # With the decorator, each worker's phase ends 0.1 s after its last task: its memory
    # is back before the idle return's second.
    start, after, phases = run_ray(
        MEASURED_GROUPBY.format(limit=16, seconds=0.3),
        functions=GROUPBY.format(decorated="arenapool.ray.task(frame)"),
        init=", runtime_env=arenapool.ray.runtime_env()",
    )
    assert phases >= 2, phases
    assert after <= start + 16 * MiB, (start, after)


def test_task_decorator_checks_its_order_and_keeps_the_signature():
    import ray

    def work(x: int, *, scale: float = 2.0) -> float:
        return x * scale

    decorated = arenapool.ray.task(work)
    assert decorated(3) == 6.0 and decorated.__name__ == "work"
    with pytest.raises(TypeError, match="@ray.remote above @arenapool.ray.task"):
        arenapool.ray.task(ray.remote(work))
    with pytest.raises(TypeError, match="decorate its methods"):
        arenapool.ray.task(type("Actor", (), {}))


def test_runtime_env_adds_to_the_callers_and_refuses_a_second_hook():
    env = {"pip": ["numpy"], "env_vars": {"A": "1"}}
    made = arenapool.ray.runtime_env(env, idle=0.5, arrow_jemalloc=False)
    assert made["worker_process_setup_hook"] == "arenapool.ray.setup_worker"
    assert made["env_vars"] == {"A": "1", "ARENAPOOL_RAY_IDLE": "0.5", "ARENAPOOL_RAY_ARROW_JEMALLOC": "0"}
    assert made["pip"] == ["numpy"] and env == {"pip": ["numpy"], "env_vars": {"A": "1"}}
    with pytest.raises(ValueError, match="setup_worker"):
        arenapool.ray.runtime_env({"worker_process_setup_hook": "mine.setup"})
    with pytest.raises(ValueError, match="idle"):
        arenapool.ray.runtime_env(idle=-1)
