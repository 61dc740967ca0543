"""Shared helpers: a test that measures the process's memory runs its program in a
fresh interpreter, so that nothing else the test run did is in its figures.

Tests marked ``mpi`` (test_mpi.py) skip where mpi4py or mpirun is missing; with
``ARENAPOOL_REQUIRE_MPI=1`` in the environment, such a skip is a failure instead, so
that a run meant to test MPI cannot pass without doing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, Optional

import pytest

MiB = 1 << 20


def run_fresh(code: str, env: Optional[Dict[str, str]] = None, timeout: float = 600) -> Any:
    """Runs ``code`` in a fresh interpreter; returns the JSON of its last line of output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        pytest.fail(f"the program failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# What every fresh program measuring RSS starts with.
RSS_HELPER = """
import gc, json, os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
"""


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
