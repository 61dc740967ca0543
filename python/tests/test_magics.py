"""``%load_ext arenapool``, ``%arenapool`` and ``%unload_ext arenapool`` answer: each says
what it did, ``--help`` helps, an unknown argument is an error, and unloading undoes
what loading did. In IPython's own shell, in a fresh process."""

from __future__ import annotations

import pytest

from conftest import run_fresh

pytest.importorskip("IPython")

SHELL = """
import contextlib, io, json
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()

def cell(code):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = shell.run_cell(code)
    return [result.success, out.getvalue() + err.getvalue()]
"""


def test_magics_answer_and_unload_undoes_load():
    pytest.importorskip("joblib")
    r = run_fresh(
        SHELL
        + """
import arenapool, arenapool.joblib, arenapool.futures
before = [arenapool.installed(), arenapool.joblib.installed(), arenapool.futures.installed()]
loaded = cell("%load_ext arenapool")
again = cell("%load_ext arenapool")
loaded_state = [arenapool.installed(), arenapool.joblib.installed(), arenapool.futures.installed()]
helped = cell("%arenapool --help")
wrong = cell("%arenapool foo")
shown = cell("%arenapool")
unloaded = cell("%unload_ext arenapool")
after = [arenapool.installed(), arenapool.joblib.installed(), arenapool.futures.installed()]
gone = cell("%arenapool")
print(json.dumps([before, loaded, again, loaded_state, helped, wrong, shown, unloaded, after, gone]))
"""
    )
    before, loaded, again, loaded_state, helped, wrong, shown, unloaded, after, gone = r
    assert before == [False, False, False], before
    assert loaded[0] and "arenapool loaded in this kernel" in loaded[1], loaded
    assert "joblib.Parallel" in loaded[1] and "Gave back" in loaded[1], loaded
    assert again[0] and "already loaded" in again[1], again
    assert loaded_state == [True, True, True], loaded_state
    assert helped[0] and "%arenapool --help" in helped[1] and "%unload_ext" in helped[1], helped
    assert not wrong[0] and "takes no arguments" in wrong[1] and "'foo'" in wrong[1], wrong
    assert shown[0] and "kernel (pid " in shown[1] and "MiB of memory (RSS)" in shown[1], shown
    assert unloaded[0] and "arenapool unloaded" in unloaded[1] and "joblib.Parallel" in unloaded[1], unloaded
    assert after == [False, False, False], after
    assert not gone[0], gone


def test_unload_leaves_what_the_notebook_installed_itself():
    pytest.importorskip("joblib")
    r = run_fresh(
        SHELL
        + """
import arenapool, arenapool.joblib
arenapool.install()
arenapool.joblib.install()
cell("%load_ext arenapool")
cell("%unload_ext arenapool")
print(json.dumps([arenapool.installed(), arenapool.joblib.installed()]))
"""
    )
    assert r == [True, True], r
