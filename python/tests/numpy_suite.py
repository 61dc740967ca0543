"""numpy's own tests give the same results with arenapool's hooks installed as without.

Runs numpy's test modules ``test_multiarray``, ``test_numeric`` and ``test_ufunc``
twice, each time in a fresh interpreter: once as they are, and once with
:func:`arenapool.install` called before the first test (the hooks' threshold at the
phase threshold, so that as many blocks as can be are arenapool's) and each test run
inside a phase. Compares the counts of passed, failed, skipped, xfailed and xpassed
tests and of errors; exits non-zero if they differ.

A few of numpy's tests skip themselves when the machine has less free memory than they
need (18 GB for one): tests that skipped for memory in one run only count as passed in
both, and are reported.

    python tests/numpy_suite.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, Tuple

MODULES = ["test_multiarray", "test_numeric", "test_ufunc"]

PLUGIN = '''
import pytest
import arenapool

def pytest_configure(config):
    arenapool.install(numpy=True, threshold=arenapool._arenapool.phase_threshold())

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    arenapool.install()  # numpy's handler in the context the test runs in
    assert arenapool._arenapool.numpy_installed()
    with arenapool.phase():
        yield
'''

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")
MEMORY_SKIP = re.compile(r"^SKIPPED \[(\d+)\] .*memory required", re.M)


def run(hooked: bool) -> Tuple[Dict[str, int], int]:
    """One run: the summary's counts, and how many tests skipped for lack of memory."""
    import numpy

    package = "numpy._core.tests" if hasattr(numpy, "_core") else "numpy.core.tests"
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--pyargs"]
    args += [f"{package}.{module}" for module in MODULES]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as plugin_dir:
        if hooked:
            with open(os.path.join(plugin_dir, "arenapool_hooks.py"), "w") as f:
                f.write(PLUGIN)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (plugin_dir, env.get("PYTHONPATH")) if p)
            args += ["-p", "arenapool_hooks"]
        started = time.perf_counter()
        out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=plugin_dir)
        took = time.perf_counter() - started
    lines = out.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in SUMMARY.findall(summary)}
    print(f"{'with' if hooked else 'without'} arenapool: {summary or out.stderr[-2000:]} ({took:.0f} s)", flush=True)
    if not counts.get("passed"):
        print(out.stdout[-3000:], out.stderr[-3000:], sep="\n")
    return counts, sum(int(n) for n in MEMORY_SKIP.findall(out.stdout))


def main() -> int:
    plain, plain_memory = run(hooked=False)
    hooked, hooked_memory = run(hooked=True)
    for counts, skipped, other in ((plain, plain_memory, hooked_memory), (hooked, hooked_memory, plain_memory)):
        if skipped > other:
            print(f"{skipped - other} test(s) skipped for lack of free memory in one run only: counted as passed")
            counts["passed"] = counts.get("passed", 0) + skipped - other
            counts["skipped"] -= skipped - other
    if plain != hooked or not plain.get("passed"):
        print(f"numpy's tests differ: without arenapool {plain}, with {hooked}")
        return 1
    print(f"numpy's tests: the same with and without arenapool ({plain})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
