"""Shared helpers: a test that measures the process's memory runs its program in a
fresh interpreter, so that nothing else the test run did is in its figures.

Tests marked ``mpi`` (test_mpi.py) skip where mpi4py or mpirun is missing; with
``ARENAPOOL_REQUIRE_MPI=1`` in the environment, such a skip is a failure instead, so
that a run meant to test MPI cannot pass without doing it."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Optional

import pytest

MiB = 1 << 20


def run_in_session(command: List[str], timeout: float, env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """Run ``command`` in a session of its own; past ``timeout`` seconds, kill the
    session (every process it made: a pool's workers, a forked child, which would
    otherwise wait for ever and hold its output open) and fail the test, saying it hung."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(command)} hung: no end within {timeout:g} s\n{stdout}\n{stderr}")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever it left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_fresh(code: str, env: Optional[Dict[str, str]] = None, timeout: float = 600) -> Any:
    """Runs ``code`` in a fresh interpreter (see :func:`run_in_session`: a program that
    hangs fails its test past ``timeout``); returns the JSON of its last line of output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = run_in_session([sys.executable, "-c", textwrap.dedent(code)], timeout, full_env)
    if out.returncode != 0:
        pytest.fail(f"the program failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# For fresh programs that wait for a give-back in the background.
ONCE_AT_MOST = """
import time
def once_at_most(read, limit, seconds=60):
    # What a give-back in the background did: `read()` as soon as it is at most
    # `limit`, or after `seconds` (a loaded machine may run the background work late).
    deadline = time.monotonic() + seconds
    while (value := read()) > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return value
"""

# What every fresh program measuring RSS starts with.
RSS_HELPER = ONCE_AT_MOST + """
import gc, json, os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
"""


@functools.lru_cache(maxsize=None)
def _pymalloc_give_back(mode: str) -> bool:
    code = """
    import json
    from arenapool import _arenapool
    print(json.dumps(_arenapool.install_pymalloc_pools()))
    """
    return bool(run_fresh(code, env={"PYTHONMALLOC": mode} if mode else None))


def require_pymalloc_give_back(mode: str = "") -> None:
    """Skips the test where arenapool cannot give pymalloc's free pools back: where
    ``_arenapool.install_pymalloc_pools()`` says so in a fresh interpreter (with
    ``PYTHONMALLOC=mode`` if given)."""
    if not _pymalloc_give_back(mode):
        setting = f" with PYTHONMALLOC={mode}" if mode else ""
        pytest.skip(f"pymalloc's free pools are not given back on this interpreter{setting} "
                    "(_arenapool.install_pymalloc_pools() is False)")


def require_glibc_figures() -> None:
    """Skips the test where arenapool has no figures of glibc's heaps
    (``arenapool.breakdown().glibc`` is ``None``: the C library is not glibc)."""
    import arenapool

    if arenapool.breakdown().glibc is None:
        pytest.skip("no figures of glibc's heaps here (arenapool.breakdown().glibc is None: "
                    "the C library is not glibc)")


def require_pymalloc_figures() -> None:
    """Skips the test where arenapool has no figures of pymalloc's arenas
    (``arenapool.breakdown().pymalloc`` is ``None``)."""
    import arenapool

    if arenapool.breakdown().pymalloc is None:
        pytest.skip("no figures of pymalloc's arenas here (arenapool.breakdown().pymalloc is None)")


def require_installed(name: str) -> None:
    """Skips the test without the distribution ``name``, read from the installed
    packages' metadata, so that the test process does not import it."""
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"needs {name}, which is not installed")


def require_arrow_strings() -> None:
    """Skips the test without pandas 3 and pyarrow: pandas 3 keeps its strings in Arrow's
    memory, pandas 2 as Python objects. Read from the installed packages' metadata, so
    that the test process does not import them."""
    require_installed("pandas")
    require_installed("pyarrow")
    pandas = importlib.metadata.version("pandas")
    if int(pandas.split(".")[0]) < 3:
        pytest.skip(f"pandas {pandas} keeps strings as Python objects; "
                    "pandas 3 keeps them in Arrow's memory")


# The environment variable that makes a skipped MPI test fail.
REQUIRE_MPI = "ARENAPOOL_REQUIRE_MPI"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"mpi: runs MPI programs; skips without MPI, fails instead if {REQUIRE_MPI}=1"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """With ``ARENAPOOL_REQUIRE_MPI=1``, a skipped ``mpi`` test is reported failed."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or item.get_closest_marker("mpi") is None:
        return
    if os.environ.get(REQUIRE_MPI) != "1":
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"{reason.removeprefix('Skipped: ')}\n"
        f"{REQUIRE_MPI}=1 says the MPI tests must run, not skip: install an MPI library "
        "and mpi4py (Debian and Ubuntu: apt-get install openmpi-bin libopenmpi-dev, then "
        f"pip install mpi4py), or unset {REQUIRE_MPI}"
    )
