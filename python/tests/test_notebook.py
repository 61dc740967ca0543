"""``%load_ext arenapool`` and ``%arenapool`` in a real IPython kernel, driven through
``jupyter_client`` as a notebook drives it, cell by cell: field report S1's job (4,000
results of ``np.ones(50000)`` from 2 loky workers) in the kernel, then ``del``. The
kernel is a process of its own, whose RSS the test reads."""

from __future__ import annotations

import sys

import pytest

import importlib.util

from conftest import MiB

pytest.importorskip("joblib")
manager = pytest.importorskip("jupyter_client.manager")
pytest.importorskip("ipykernel")

# Its Dask part runs where Dask is installed (the Debian chroots' runs leave it out).
DASK_INSTALLED = importlib.util.find_spec("distributed") is not None

LOADED = "%load_ext arenapool"

JOB = """
import numpy as np
from joblib import Parallel, delayed

def ones(_):
    return np.ones(50_000)

warm = Parallel(n_jobs=2)(delayed(ones)(i) for i in range(100))  # loky's workers start
del warm
"""

DASK = """
from distributed import Client, LocalCluster
cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
client = Client(cluster)
"""


def run_cell(client, code: str) -> str:
    """Runs ``code`` as a cell; what it printed (its error's traceback fails the test)."""
    printed = []

    def output(message) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] in ("display_data", "execute_result"):
            printed.append(message["content"]["data"].get("text/plain", "") + "\n")
            if "<svg" in message["content"]["data"].get("text/html", ""):
                printed.append("(and its HTML table, with a chart)\n")
        elif message["msg_type"] == "error":
            printed.append("\n".join(message["content"]["traceback"]))

    reply = client.execute_interactive(code, timeout=120, output_hook=output)
    assert reply["content"]["status"] == "ok", "".join(printed)
    return "".join(printed)


def resident(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_load_ext_gives_back_the_kernels_results(tmp_path):
    kernel, client = manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        pid, executable = run_cell(client, "import os, sys; print(os.getpid(), sys.executable)").split()
        assert executable == sys.executable, "the kernel is not this environment's Python"
        loaded = run_cell(client, LOADED)
        run_cell(client, JOB)
        start = resident(int(pid))
        run_cell(client, "results = Parallel(n_jobs=2)(delayed(ones)(i) for i in range(4000))")  # 1.6 GB
        held = resident(int(pid))
        run_cell(client, "del results")
        after = resident(int(pid))
        shown = run_cell(client, "%arenapool")
        # Dask, imported after the extension was loaded: its client's workers get the
        # plugin at the cell's end, and %arenapool shows them (where Dask is installed).
        if DASK_INSTALLED:
            run_cell(client, DASK)
            plugged = run_cell(client, "print(all(client.run(lambda dask_worker: 'arenapool' in dask_worker.plugins).values()))")
            workers = run_cell(client, "%arenapool")
            unloaded = run_cell(client, "%unload_ext arenapool")
            unplugged = run_cell(client, "print(any(client.run(lambda dask_worker: 'arenapool' in dask_worker.plugins).values()))")
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)
    assert held >= start + 1000 * MiB, (start, held)
    assert after <= start + 16 * MiB, (start, held, after)
    assert f"kernel (pid {pid})" in shown and "MiB of memory (RSS)" in shown and "arenapool's arenas" in shown, shown
    assert "(and its HTML table, with a chart)" in shown, shown
    # The kernel's loky workers are its children, shown with it.
    assert "Workers (child processes): " in shown and "Workers (child processes): none" not in shown, shown
    assert "Gave back" in loaded and "joblib.Parallel" in loaded, loaded
    if DASK_INSTALLED:
        assert plugged.strip() == "True", plugged
        # %unload_ext takes the plugin off the workers %load_ext gave it to.
        assert "every Dask worker's tasks" in unloaded and unplugged.strip() == "False", (unloaded, unplugged)
        assert workers.count("Dask worker tcp://") == 1 and workers.count("MiB of memory (RSS)") == 2, workers
