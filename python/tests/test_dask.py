"""`arenapool.dask`: the client that gathers and the workers that compute, on a
`LocalCluster` of 2 worker processes, each test in a fresh process (memory asserted
with margins, never time)."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("distributed")

import arenapool.dask

from conftest import ONCE_AT_MOST, MiB, run_fresh

CLUSTER = ONCE_AT_MOST + """
import gc, json
import numpy as np
import arenapool, arenapool.dask
from distributed import Client, LocalCluster

def ones(_):
    return np.ones(50_000)

def total(arrays):
    return float(sum(a[0] for a in arrays))

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        {install}
        client.submit(ones, -1).result()
        gc.collect()
{body}
"""


def run_cluster(body: str, install: str = "arenapool.dask.install(client)", config: str = "") -> object:
    indented = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return run_fresh(config + CLUSTER.format(install=install, body=indented), timeout=300)


GATHER = """
start = arenapool.rss()
results = client.gather(client.map(ones, range(1500)))   # 600 MB
held = arenapool.rss()
del results
gc.collect()
print(json.dumps([start, held, once_at_most(arenapool.rss, start + 48 * 2**20)]))
"""


def test_client_gives_back_what_it_gathered():
    start, held, after = run_cluster(GATHER)
    assert held >= start + 400 * MiB, (start, held, after)
    assert after <= start + 48 * MiB, (start, held, after)


def test_client_joblib_dask_backend():
    start, held, after = run_cluster(
        """
import joblib
start = arenapool.rss()
with joblib.parallel_backend("dask"):
    results = joblib.Parallel()(joblib.delayed(ones)(i) for i in range(1500))
held = arenapool.rss()
del results
gc.collect()
print(json.dumps([start, held, once_at_most(arenapool.rss, start + 48 * 2**20)]))
"""
    )
    assert held >= start + 400 * MiB, (start, held, after)
    assert after <= start + 48 * MiB, (start, held, after)


# Without the nanny's trim setting, glibc keeps what the workers' tasks freed once a
# freed 1 MiB block has raised its mmap threshold (field report S1): the plugin's
# phases give it back.
NO_NANNY_TRIM = """
import ctypes, dask, distributed  # distributed brings its configuration
dask.config.config["distributed"]["nanny"]["pre-spawn-environ"].pop("MALLOC_TRIM_THRESHOLD_")

def raise_mmap_threshold():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(1 << 20))

def labelled(i):
    # The report's results, and one small label in ten that the worker keeps.
    from distributed import get_worker
    if i % 10 == 0:
        worker = get_worker()
        worker.labels = getattr(worker, "labels", []) + [bytes(1000)]
    return np.ones(50_000)
"""


def test_workers_give_back_between_computations():
    figures = run_cluster(
        """
rss = lambda: sum(client.run(arenapool.rss).values())
client.run(raise_mmap_threshold)
start = rss()
futures = client.map(labelled, range(3000))         # 1.2 GB over the two workers
sums = [client.submit(total, futures[i:i + 100]) for i in range(0, 3000, 100)]
client.gather(sums)
held = rss()
del futures, sums
after = once_at_most(rss, start + 96 * 2**20)
phases = sum(client.run(lambda dask_worker: dask_worker.plugins["arenapool"].phases).values())
print(json.dumps([start, held, after, phases]))
""",
        config=NO_NANNY_TRIM,
    )
    start, held, after, phases = figures
    assert held >= start + 800 * MiB, figures
    assert after <= start + 96 * MiB, figures  # two workers
    assert phases >= 2, figures


def test_workers_give_back_what_dropped_data_held():
    # The worker keeps one small object in 8,192 of a result made of 1 M of them: when
    # the client releases the result, pymalloc's arenas stay, their other pools free.
    # The watcher is off, and the task's phase ends before the drop: what gives them
    # back is the plugin, on the drop.
    start, held, after = run_cluster(
        """
import distributed

def made(_):
    objects = [(j, j + 1) for j in range(1_000_000)]
    distributed.get_worker().kept = objects[::8192]
    return objects

client.run(lambda: arenapool.set_release(watch=0))
rss = lambda: sum(client.run(arenapool.rss).values())
start = rss()
def phases_ended():
    while any(client.run(arenapool.phase_is_open).values()):
        time.sleep(0.05)
    return sum(client.run(lambda dask_worker: dask_worker.plugins["arenapool"].phases).values())

before = phases_ended()
future = client.submit(made, 0)
distributed.wait(future)
while phases_ended() == before:  # until the task's phase has ended, the result held
    time.sleep(0.05)
held = rss()
del future
print(json.dumps([start, held, once_at_most(rss, start + (held - start) / 2, 10)]))
"""
    )
    assert held >= start + 48 * MiB, (start, held)
    assert after <= start + (held - start) / 2, (start, held, after)


def test_workers_give_back_what_a_string_groupby_held():
    figures = run_cluster(
        """
import dask.dataframe as dd, pandas as pd
def frame(seed, rows):
    rng = np.random.default_rng(seed)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    return pd.DataFrame({"k": "key" + keys, "v": rng.random(rows)})
client.run(lambda: __import__("pandas") and None)
before = arenapool.dask.breakdowns(client)
result = dd.from_map(frame, range(4), rows=1_000_000).groupby("k")["v"].sum().compute()
del result
def back(after):  # the test's three conditions, for each worker
    return all(
        sum(p.allocated for p in b.arrow) == 0 and b.rest <= 28 * 2**20
        and b.anonymous <= before[worker].anonymous + 96 * 2**20
        for worker, b in after.items()
    )
deadline = time.monotonic() + 60
while not back(after := arenapool.dask.breakdowns(client)) and time.monotonic() < deadline:
    time.sleep(0.25)
print(json.dumps([[b.anonymous, b.rest, [p.allocated for p in b.arrow]] for b in before.values()]
                 + [[b.anonymous, b.rest, [p.allocated for p in b.arrow]] for b in map(after.get, before)]))
"""
    )
    before, after = figures[:2], figures[2:]
    for (anon_before, _, _), (anon_after, rest, arrow) in zip(before, after):
        assert sum(arrow) == 0, figures
        # Arrow's freed buffers, which no counter shows, would be in the rest.
        assert rest <= 28 * MiB, figures
        assert anon_after <= anon_before + 96 * MiB, figures


def test_install_with_a_client_leaves_other_clients_alone():
    # Phases counted by what each gather ends; an in-process cluster, no memory asserted.
    ended = run_fresh(
        """
        import json
        import arenapool, arenapool.dask
        from distributed import Client, LocalCluster

        def phases():
            return arenapool.stats()['arenapool_work_ended_total{name="",work="phase"}']

        if __name__ == "__main__":
            with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \\
                    Client(cluster) as mine, Client(cluster) as other:
                arenapool.dask.install(mine, workers=False)
                counts = [phases()]
                mine.gather(mine.submit(sum, [1, 2]))
                counts.append(phases())
                other.gather(other.submit(sum, [3, 4]))
                counts.append(phases())
                installed = [arenapool.dask.installed(mine), arenapool.dask.installed(other)]
                arenapool.dask.uninstall(mine)
                mine.gather(mine.submit(sum, [5, 6]))
                counts.append(phases())
                installed.append(arenapool.dask.installed(mine))
                arenapool.dask.install()  # every client
                other.gather(other.submit(sum, [7, 8]))
                counts.append(phases())
                print(json.dumps([counts, installed]))
        """,
        timeout=300,
    )
    counts, installed = ended
    steps = [b - a for a, b in zip(counts, counts[1:])]
    assert steps == [1, 0, 0, 1], counts
    assert installed == [True, False, False], installed


def test_preload_installs_the_plugin():
    plugins = run_fresh(
        """
        import json
        from distributed import Client, LocalCluster
        if __name__ == "__main__":
            with LocalCluster(n_workers=1, processes=True, dashboard_address=None,
                              preload=["arenapool.dask"]) as cluster, Client(cluster) as client:
                names = client.run(lambda dask_worker: sorted(dask_worker.plugins))
                print(json.dumps(list(names.values())))
        """,
        timeout=300,
    )
    assert all("arenapool" in names for names in plugins), plugins


@pytest.mark.parametrize("metrics", [True, False])
def test_workers_metrics_page_has_arenapools(metrics):
    pages = run_fresh(
        f"""
        import json, urllib.request
        import arenapool.dask
        from distributed import Client, LocalCluster
        if __name__ == "__main__":
            with LocalCluster(n_workers=1, processes=True, dashboard_address=None) as cluster, \\
                    Client(cluster) as client:
                arenapool.dask.install(client, metrics={metrics})
                ports = client.run(lambda dask_worker: dask_worker.http_server.port)
                pages = [urllib.request.urlopen(f"http://127.0.0.1:{{port}}/metrics").read().decode()
                         for port in ports.values()]
                print(json.dumps(pages))
        """,
        timeout=300,
    )
    for page in pages:
        assert ("arenapool_jemalloc_resident_bytes" in page) == metrics, page[:2000]
        assert ('arenapool_holder_bytes{holder="pymalloc",state="in_use"}' in page) == metrics
        assert "dask_worker_tasks" in page  # Dask's own metrics are still there


def test_plugin_pickles_without_its_state_and_checks_idle():
    plugin = arenapool.dask.WorkerPhases(idle=0.5, arrow_jemalloc=False, metrics=False)
    copy = pickle.loads(pickle.dumps(plugin))
    assert (copy.idle, copy.arrow_jemalloc, copy.metrics, copy.phases) == (0.5, False, False, 0)
    with pytest.raises(ValueError, match="idle"):
        arenapool.dask.WorkerPhases(idle=-1)


def test_spilling_goes_on_with_the_plugin():
    spilled, right, held = run_fresh(
        """
        import json
        import numpy as np
        import arenapool, arenapool.dask
        from distributed import Client, LocalCluster, wait

        def filled(i):
            return np.full(50_000, float(i))

        def first(a):
            return a[0]

        if __name__ == "__main__":
            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                              memory_limit="300MiB") as cluster, Client(cluster) as client:
                arenapool.dask.install(client)
                futures = client.map(filled, range(2000))   # 800 MB for two workers of 300 MiB
                wait(futures)
                spilled = sum(client.run(lambda dask_worker: len(dask_worker.data.slow)).values())
                total = sum(client.gather(client.map(first, futures)))
                held = sum(client.run(arenapool.rss).values())
                print(json.dumps([spilled, bool(total == sum(range(2000))), held]))
        """,
        timeout=300,
    )
    assert spilled > 0 and right, (spilled, right)
    assert held <= 600 * MiB, held  # what is spilled is not also kept


def test_where_reports_each_worker():
    out = run_fresh(
        """
        import json, subprocess, sys
        from distributed import LocalCluster
        if __name__ == "__main__":
            with LocalCluster(n_workers=2, processes=True, dashboard_address=None) as cluster:
                where = subprocess.run([sys.executable, "-m", "arenapool.where", "--scheduler",
                                        cluster.scheduler_address], capture_output=True, text=True)
                print(json.dumps([where.returncode, where.stdout, where.stderr]))
        """,
        timeout=300,
    )
    code, stdout, stderr = out
    assert code == 0, stderr
    assert stdout.count("MiB of memory (RSS)") == 2 and stdout.count("tcp://") == 2, stdout
