"""What a newcomer meets first at the prompt: errors that say what to write, the names
``dir()`` lists, signatures and reprs in units a person reads, and the optional
packages' errors that say which extra to install."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from concurrent.futures import ThreadPoolExecutor

import pytest

import arenapool
import arenapool.futures


def test_phase_without_parentheses_says_to_write_them():
    with pytest.raises(TypeError, match=r"write `with arenapool.phase\(\):`"):
        with arenapool.phase:  # type: ignore[attr-defined]
            pass


def test_dir_lists_the_public_api_only():
    names = set(dir(arenapool))
    assert set(arenapool.__all__) <= names
    for internal in ("Any", "Callable", "Dict", "contextlib", "sys", "warn_once", "check_build", "_arenapool"):
        assert internal not in names, internal
    # Every public name still works.
    for name in arenapool.__all__:
        assert getattr(arenapool, name) is not None


def test_release_others_has_no_private_parameter_and_release_reads_in_mib():
    assert list(inspect.signature(arenapool.release_others).parameters) == []
    hints = typing.get_type_hints(arenapool.Release)
    assert hints == {"holder": str, "rss_returned": int, "seconds": float}, hints
    assert "ForwardRef" not in str(inspect.signature(arenapool.Release))
    r = arenapool.Release("glibc", 3 * 2**20 + 2**19, 0.0123456789)
    assert repr(r) == "Release(holder='glibc', rss_returned=3.5 MiB, seconds=12.3 ms)", repr(r)
    assert str(r) == "glibc gave back 3.5 MiB in 12.3 ms"


def test_docstrings_say_what_they_show():
    assert "breakdown" not in (arenapool.breakdown.__doc__ or "").split("(see")[-1][:30]
    assert "MiB" in (arenapool.breakdown.__doc__ or "")
    assert "off Linux" not in (arenapool.rss.__doc__ or "")
    assert "None" in (arenapool.phase.__doc__ or "")


def work_x_state(x, state):
    return x


def work_one(x):
    return x


def test_futures_map_with_state_checks_the_signature_at_the_call():
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(TypeError, match=r"def work_one\(state, x\)"):
            arenapool.futures.map(pool, work_one, range(3), state=1)
        with pytest.raises(TypeError, match=r"the state comes first.*def work_x_state\(state, x\)"):
            arenapool.futures.map(pool, work_x_state, range(3), state=1)
        assert list(arenapool.futures.map(pool, lambda s, x: s + x, range(3), state=10)) == [10, 11, 12]
        assert list(arenapool.futures.map(pool, max, range(3), state=1)) == [1, 1, 2]  # a builtin


@pytest.mark.parametrize("module, package", [("joblib", "joblib"), ("dask", "distributed"), ("ray", "ray")])
def test_an_integration_without_its_package_names_the_extra(module, package):
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        f"try:\n    import arenapool.{module}\n"
        "except ModuleNotFoundError as error:\n    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'arenapool[{module}]'" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("suite, package", [("dask", "dask"), ("ray", "ray")])
def test_bench_without_the_package_prints_the_childs_error_and_the_extra(suite, package, tmp_path):
    # A package that cannot be imported, ahead of the installed one on the path.
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(
        f"raise ModuleNotFoundError('No module named {package!r}', name={package!r})\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "arenapool.bench", f"--{suite}", "--runs", "1", "--tasks", "10", "--rows", "1000"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert out.returncode != 0
    assert "ModuleNotFoundError" in out.stderr and f"pip install 'arenapool[{suite}]'" in out.stderr, out.stderr
    assert "CalledProcessError" not in out.stderr, out.stderr


def test_python_dash_m_arenapool_says_what_it_is():
    out = subprocess.run([sys.executable, "-m", "arenapool"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"arenapool {arenapool.__version__}"), out.stdout
    assert "python -m arenapool.where" in out.stdout and "python -m arenapool.bench" in out.stdout
