"""``ARENAPOOL=on``/``off``: the startup hook the wheel puts in site-packages
(``arenapool.pth``), what it installs as the interpreter starts and as libraries are
imported, in the program and in the workers it starts; ``off`` over ``install()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from typing import Any, Dict, Optional, Tuple

import pytest
from conftest import RSS_HELPER, MiB

import arenapool


def run(code: str, arenapool_env: Optional[str], extra: Optional[Dict[str, str]] = None) -> Tuple[Any, str]:
    """``code`` (or the program file ``code`` names, if it ends in ``.py``) in a fresh
    interpreter with ``ARENAPOOL`` set to ``arenapool_env`` (unset if ``None``): the
    JSON of its last line and its standard error."""
    env = {key: value for key, value in os.environ.items() if key not in ("ARENAPOOL", "ARROW_DEFAULT_MEMORY_POOL")}
    if arenapool_env is not None:
        env["ARENAPOOL"] = arenapool_env
    env.update(extra or {})
    out = subprocess.run(
        [sys.executable, code] if code.endswith(".py") else [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        pytest.fail(f"the program failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_the_wheel_puts_the_hook_in_site_packages():
    site_packages = os.path.dirname(os.path.dirname(arenapool.__file__))
    assert site_packages in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    with open(os.path.join(site_packages, "arenapool.pth")) as hook:
        lines = hook.read().splitlines()
    assert len(lines) == 1 and lines[0].startswith("import "), lines
    # The module the line imports, beside it.
    assert os.path.isfile(os.path.join(site_packages, "_arenapool_startup.py"))


def test_the_start_knows_the_values_and_libraries_the_package_knows():
    # _arenapool_startup cannot import the package's lists: it keeps copies.
    import _arenapool_startup
    from arenapool._core import _switch
    from arenapool._integrations import _startup

    assert _arenapool_startup.ON == _switch.ON
    assert _arenapool_startup.LIBRARIES == {name for name, _, _ in _startup._INTEGRATIONS}


# The values understood, as people write them: any case, spaces around ignored.
ON_VALUES = ["on", "ON", "1", "true", "True", " yes ", "YES"]
OFF_VALUES = ["off", "OFF", "0", "false", "False", " no ", "NO"]


@pytest.mark.parametrize("value", [None, "", "  ", *OFF_VALUES])
def test_unset_or_off_imports_nothing(value):
    loaded, err = run("import sys, json; print(json.dumps(sorted(m for m in sys.modules if 'arenapool' in m)))", value)
    assert loaded == [], (value, loaded)
    assert err == "", err


@pytest.mark.parametrize("value", ON_VALUES)
def test_each_value_that_is_on_installs_at_start(value):
    seen, err = run(
        """
        import json, sys
        # The hooks, without the package: it loads when the program imports it.
        started = [name in sys.modules for name in ("_arenapool_startup", "arenapool._arenapool", "arenapool")]
        taking = sys.modules["arenapool._arenapool"].taking()
        from arenapool import _arenapool
        print(json.dumps([started, taking, _arenapool is sys.modules["arenapool._arenapool"]]))
        """,
        value,
    )
    assert seen == [[True, True, False], True, True], (value, seen, err)
    assert err == "", err


# What the rest of the start installs, once the program imports arenapool or one of
# the libraries first.
FIRST_IMPORT = """
import json, sys
import FIRST
import arenapool, arenapool.joblib, joblib
print(json.dumps(["arenapool._integrations._startup" in sys.modules, arenapool.installed(),
                  arenapool.joblib.installed(), arenapool._arenapool.numpy_installed(),
                  [type(f).__module__ for f in sys.meta_path]]))
"""


@pytest.mark.parametrize("first", ["arenapool", "numpy", "joblib"])
def test_the_rest_of_the_start_comes_with_the_first_import_of_arenapool_or_a_library(first):
    seen, err = run(FIRST_IMPORT.replace("FIRST", first), "on")
    *installed, finders = seen
    # numpy's handler too: joblib imports numpy.
    assert installed == [True, True, True, True], (first, seen, err)
    # The integrations' finder waits for the libraries not imported yet; the start's
    # own is gone.
    assert "arenapool._integrations._after_import" in finders, finders
    assert "_arenapool_startup" not in finders, finders
    assert err == "", err


def test_the_extension_has_each_name_its_stub_declares():
    # The extension makes its classes, exception and functions at their first use (the
    # start uses three): each name of the stub's __all__ is found, under that name.
    import ast

    from arenapool import _arenapool

    with open(os.path.join(os.path.dirname(arenapool.__file__), "_arenapool.pyi")) as stub:
        tree = ast.parse(stub.read())
    names = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__"
    )
    assert len(names) == 29, names
    assert _arenapool.__all__ == names
    assert set(names) <= set(dir(_arenapool))
    for name in names:
        assert getattr(_arenapool, name).__name__ == name, name
    with pytest.raises(AttributeError, match="has no attribute 'nothing_of_the_kind'"):
        _arenapool.nothing_of_the_kind  # noqa: B018


def test_on_loads_the_extension_the_import_system_finds():
    # The start finds the extension beside its module without the import system's
    # search: with the spec that search gives, and the package then uses that module.
    seen, err = run(
        """
        import json, sys
        from importlib.machinery import PathFinder
        loaded = sys.modules["arenapool._arenapool"]
        import arenapool
        found = PathFinder.find_spec("arenapool._arenapool", arenapool.__path__)
        print(json.dumps([loaded.__spec__ == found, loaded.__file__ == found.origin, arenapool._arenapool is loaded]))
        """,
        "on",
    )
    assert seen == [True, True, True]
    assert err == "", err


# What ARENAPOOL=on may import as the interpreter starts, beyond what the interpreter
# imports without it: the start's own module and the extension (the package comes
# with the program's first import of it or of a library it serves).
STARTUP_MODULES = {
    "_arenapool_startup",
    "arenapool._arenapool",  # the extension, without its package
}

# The program's own modules and threads, read without importing anything (os is
# imported by site): the modules' names and each thread's name but the main one's.
MODULES_AND_THREADS = """
import os, sys
threads = sorted(open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")
                 if int(task) != os.getpid())
print(str([sorted(sys.modules), threads, "threading" in sys.modules]).replace("'", '"').replace("False", "false").replace("True", "true"))
"""


def test_on_costs_its_start_only_arenapools_light_modules_and_no_thread_of_pythons():
    (plain, plain_threads, _), _ = run(MODULES_AND_THREADS, None)
    (on, on_threads, threading_imported), err = run(MODULES_AND_THREADS, "on")
    assert "_arenapool_startup" in on, on  # it did start
    assert set(on) - set(plain) <= STARTUP_MODULES, sorted(set(on) - set(plain) - STARTUP_MODULES)
    # No thread of Python's (threading is not even imported): the watcher starts with
    # the first library it gives back for, or phase.
    assert plain_threads == [] and not threading_imported, (plain_threads, threading_imported)
    # Nor the extension's: the hooks' idle return starts once they have taken 4 MiB.
    assert on_threads == [], on_threads
    assert err == "", err


def test_on_starts_the_idle_return_once_the_hooks_took_4_mib_and_it_gives_back():
    # No thread for 2 MiB of large blocks, read before the program imports anything
    # (from 3.14 on, each module read from a file takes a buffer of 128 KiB); 64 MiB
    # then start the idle return (made by the main thread between two bytecodes), which
    # gives the 64 MiB back once they are freed.
    seen, err = run(
        """
import os
def threads():
    return sorted(open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")
                  if int(task) != os.getpid())
small = [bytes(2**20) for _ in range(2)]
after_2_mib = threads()
"""
        + RSS_HELPER
        + """
def no_idle_return():
    return "arenapool-idle" not in threads()  # False (0) once it runs: for once_at_most
start = rss()
big = [bytearray(2**20) for _ in range(64)]
started = not once_at_most(no_idle_return, 0, seconds=30)
held = rss() - start
del big
left = once_at_most(lambda: rss() - start, 16 * 2**20)
print(json.dumps([after_2_mib, started, held, left]))
""",
        "on",
    )
    after_2_mib, started, held, left = seen
    assert after_2_mib == [], after_2_mib
    assert started, "no idle return 30 s after the hooks took 66 MiB"
    assert held > 48 * MiB, f"{held / MiB:.0f} MiB held with 64 MiB alive"
    assert left <= 16 * MiB, f"{left / MiB:.0f} MiB still held 60 s after the 64 MiB were freed"
    assert err == "", err


# A first fork in a program that has not imported logging: the handlers for fork that
# logging registers when it is imported (one takes its lock before, two release it
# after) must all run, or none.
FIRST_FORK = """
import json, os, sys
logging_before = "logging" in sys.modules
pid = os.fork()
if pid == 0:
    import logging
    logging.getLogger("child").warning("from the child")
    os._exit(0)
_, status = os.waitpid(pid, 0)
import logging
logging.getLogger("parent").warning("from the parent")
print(json.dumps({"logging_before": logging_before, "status": status}))
"""


def test_the_first_fork_runs_every_fork_handler_of_logging_or_none():
    # arenapool imports the modules its phases use later before a fork (see
    # arenapool._before_fork); logging, imported there for the first time, registered
    # its handlers halfway through the fork, and Python ran the two after it, which
    # released a lock nobody held: "RuntimeError: cannot release un-acquired lock" in
    # the parent and in the child, at the first fork of any such program.
    seen, err = run(FIRST_FORK, "on")
    assert seen == {"logging_before": False, "status": 0}, seen
    assert "un-acquired" not in err and "Exception ignored" not in err, err
    assert err.count("from the") == 2, err


ON = """
import json, os, sys
from arenapool import _arenapool
from arenapool._core import _release
seen = {"installed": _arenapool.taking(), "numpy_before": "numpy" in sys.modules,
        "pyarrow_before": "pyarrow" in sys.modules, "watcher_before": _release._watcher_pid == os.getpid()}
import numpy, joblib, concurrent.futures, pyarrow
import arenapool.joblib, arenapool.futures
seen.update(numpy=_arenapool.numpy_installed(), joblib=arenapool.joblib.installed(),
            futures=arenapool.futures.installed(), pool=pyarrow.default_memory_pool().backend_name,
            watcher=_release._watcher_pid == os.getpid())
print(json.dumps(seen))
"""


def test_on_installs_at_start_and_each_integration_at_its_import():
    seen, err = run(ON, "on")
    assert seen == {
        "installed": True,
        "numpy_before": False,
        "pyarrow_before": False,
        "watcher_before": False,  # started with the first library it gives back for
        "watcher": True,
        "numpy": True,
        "joblib": True,
        "futures": True,
        "pool": "jemalloc",
    }, (seen, err)
    assert "Warning" not in err, err


def test_on_installs_dask_and_ray_at_their_import():
    pytest.importorskip("distributed")
    pytest.importorskip("ray")
    seen, err = run(
        """
        import json, dask, distributed, ray
        import arenapool.dask, arenapool.ray
        print(json.dumps([arenapool.dask.installed(), dask.config.get("distributed.worker.preload"),
                          arenapool.ray.installed()]))
        """,
        "on",
    )
    assert seen == [True, ["arenapool.dask"], True], (seen, err)


WORKERS = """
import json, multiprocessing, os
from concurrent.futures import ProcessPoolExecutor
def state(_):
    import sys
    arenapool = sys.modules.get("arenapool")
    if arenapool is None:
        return [False, False]
    return [arenapool.installed(), arenapool._core._release._watcher_pid == os.getpid()]
if __name__ == "__main__":
    seen = {}
    for method in ("fork", "spawn", "forkserver"):
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method)) as pool:
            # submit, not map: Executor.map's tasks install arenapool themselves.
            seen[method] = [future.result() for future in [pool.submit(state, i) for i in range(2)]]
    print(json.dumps(seen))
"""


def test_on_reaches_workers_of_every_start_method(tmp_path):
    # spawn and forkserver run the main module again: a file, not -c.
    program = tmp_path / "workers.py"
    program.write_text(WORKERS)
    seen, err = run(str(program), "on")
    assert seen == {method: [[True, True]] * 2 for method in ("fork", "spawn", "forkserver")}, (seen, err)


def test_a_module_looked_for_before_its_import_gets_its_integration_at_the_import():
    seen, err = run(
        """
        import importlib.util, json, sys
        found = importlib.util.find_spec("joblib") is not None and "joblib" not in sys.modules
        import joblib
        import arenapool.joblib
        print(json.dumps([found, arenapool.joblib.installed()]))
        """,
        "on",
    )
    assert seen == [True, True], (seen, err)


@pytest.mark.parametrize("value", ["off", "0", "FALSE", " no "])
def test_off_wins_over_install(value):
    seen, err = run(
        """
        import json, warnings
        import arenapool
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            arenapool.install()
            arenapool.install()
            with arenapool.phase():
                pass
        print(json.dumps([arenapool.installed(), [(w.category.__name__, str(w.message)) for w in caught]]))
        """,
        value,
    )
    installed, caught = seen
    assert not installed
    assert len(caught) == 1 and caught[0][0] == "ArenaPoolWarning", caught
    assert f"ARENAPOOL={value.strip()} in the environment" in caught[0][1], caught


def test_an_integration_that_fails_warns_and_the_import_goes_on(tmp_path):
    # A joblib without Parallel: arenapool.joblib cannot install.
    (tmp_path / "joblib.py").write_text("answer = 42\n")
    seen, err = run(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import joblib
        print(json.dumps([joblib.answer, [(w.category.__name__, str(w.message)) for w in caught]]))
        """,
        "on",
        {"PYTHONPATH": str(tmp_path)},
    )
    answer, caught = seen
    assert answer == 42
    assert [category for category, _ in caught] == ["ArenaPoolWarning"], caught
    assert "joblib" in caught[0][1], caught


def test_a_value_not_understood_warns_at_the_variable_and_the_program_runs():
    seen, err = run("import json, sys; print(json.dumps('arenapool._integrations._startup' in sys.modules))", "maybe")
    assert seen is True
    # One warning, placed at the variable, naming its value and the values understood;
    # no line of arenapool's or of the interpreter's start.
    assert err.splitlines() == [
        "<environment: ARENAPOOL>:0: ArenaPoolWarning: ARENAPOOL='maybe' is not a value arenapool "
        "understands, so it runs as if ARENAPOOL were unset. ARENAPOOL=on (or 1, true, yes) installs "
        "arenapool in every process of the program; ARENAPOOL=off (or 0, false, no) keeps it out; any case"
    ], err


# A program with loky's workers and resource tracker, each a process that starts with
# the variable.
JOBLIB_PROGRAM = """
import json
from joblib import Parallel, delayed
SETUP
print(json.dumps(sum(Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(100)))))
"""


@pytest.mark.parametrize(
    "value, setup",
    [("maybe", ""), ("off", "import arenapool.joblib; arenapool.joblib.install()")],
)
def test_one_warning_about_the_variable_for_a_whole_program(tmp_path, value, setup):
    pytest.importorskip("joblib")
    program = tmp_path / "program.py"
    program.write_text(JOBLIB_PROGRAM.replace("SETUP", setup))
    seen, err = run(str(program), value)
    assert seen == 4950
    said = [line for line in err.splitlines() if "ArenaPoolWarning" in line]
    assert len(said) == 1 and "ARENAPOOL=" in said[0] and value in said[0], err


def test_an_arenapool_that_cannot_be_imported_warns_and_the_program_runs(tmp_path):
    # An arenapool package that fails to import, found first on the path.
    (tmp_path / "arenapool").mkdir()
    (tmp_path / "arenapool" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    seen, err = run("import json; print(json.dumps('ran'))", "on", {"PYTHONPATH": str(tmp_path)})
    assert seen == "ran"
    assert err.count("arenapool could not be imported (ImportError: broken on purpose)") == 1, err
    assert "Traceback" not in err and "Error processing line" not in err, err


@pytest.mark.parametrize("own", ["arenapool.joblib", "arenapool.dask", "arenapool.ray"])
def test_arenapools_own_module_imported_before_its_library(own):
    # arenapool.joblib imports joblib first thing: the integration runs once it is done.
    pytest.importorskip(own.split(".")[1] if own != "arenapool.dask" else "distributed")
    seen, err = run(
        f"""
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import {own}
        print(json.dumps([{own}.installed(), [str(w.message) for w in caught if "arenapool" in str(w.message)]]))
        """,
        "on",
    )
    assert seen == [True, []], (seen, err)


DASK_WORKERS = """
import json, os, sys
from distributed import Client, LocalCluster
def state(dask_worker):
    arenapool = sys.modules.get("arenapool")
    return [bool(arenapool and arenapool.installed()), "arenapool" in dask_worker.plugins]
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            print(json.dumps(sorted(client.run(state).values())))
"""


def test_on_reaches_dask_workers_started_by_a_cluster(tmp_path):
    pytest.importorskip("distributed")
    program = tmp_path / "dask_workers.py"
    program.write_text(DASK_WORKERS)
    seen, err = run(str(program), "on")
    assert seen == [[True, True], [True, True]], (seen, err)


RAY_WORKERS = """
import json, os, sys
import ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
@ray.remote
def state():
    arenapool = sys.modules.get("arenapool")
    return bool(arenapool and arenapool.installed())
seen = ray.get([state.remote() for _ in range(2)])
ray.shutdown()
print(json.dumps(seen))
"""


def test_on_reaches_ray_workers():
    pytest.importorskip("ray")
    seen, err = run(RAY_WORKERS, "on")
    assert seen == [True, True], (seen, err)


def test_the_start_s_finder_stepping_aside_skips_no_other_finder():
    # The import system goes on through sys.meta_path as it stood: a finder that takes
    # itself out and answers nothing would make it skip the next one (here the
    # interpreter's finder of built-in modules).
    seen, err = run(
        """
        import importlib, importlib.machinery, json, sys
        import arenapool, _arenapool_startup
        name = next(n for n in sorted(sys.builtin_module_names) if n not in sys.modules)
        finder = _arenapool_startup._HandOver()
        sys.meta_path.insert(sys.meta_path.index(importlib.machinery.BuiltinImporter), finder)
        module = importlib.import_module(name)
        print(json.dumps([module.__spec__.origin, finder in sys.meta_path]))
        """,
        "on",
    )
    assert seen == ["built-in", False], (seen, err)
