"""The builds arenapool refuses: a free-threaded CPython gets an ImportError naming its
build before the extension is loaded (simulated in a fresh interpreter, whose
``sys.abiflags`` has the ``t`` of a free-threaded build)."""

from __future__ import annotations

import sys

from conftest import run_fresh

IMPORT = """
import json, sys
{setting}
try:
    import arenapool
    error = None
except ImportError as e:
    error = str(e)
print(json.dumps([error, "arenapool._arenapool" in sys.modules]))
"""

FREE_THREADED = """
sys.abiflags += "t"
"""


def test_free_threaded_build_is_refused_before_the_extension_loads():
    error, loaded = run_fresh(IMPORT.format(setting=FREE_THREADED))
    assert error is not None, "imported on a free-threaded build"
    version = "%d.%d" % sys.version_info[:2]
    assert "free-threaded" in error and f"{version}t" in error, error
    assert not loaded


def test_build_with_the_gil_imports():
    error, loaded = run_fresh(IMPORT.format(setting=""))
    assert error is None and loaded
