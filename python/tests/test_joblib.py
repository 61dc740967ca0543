"""`arenapool.joblib.install()`: every `Parallel` call a phase, for the joblib report's
program (S1), its generator modes and the threading backend."""

from __future__ import annotations

import numpy as np
import pytest

joblib = pytest.importorskip("joblib")

import arenapool
import arenapool.joblib
from arenapool import _arenapool

from conftest import MiB, RSS_HELPER, run_fresh

S1 = RSS_HELPER + """
import numpy as np
from joblib import Parallel, delayed
{fix}
start = rss()
rounds = []
for _ in range(3):
    results = Parallel(n_jobs=2)(delayed(np.ones)(50_000) for _ in range(1500))
    held = rss()
    del results
    gc.collect()
    rounds.append([held, rss()])
print(json.dumps([start, rounds]))
"""


def test_s1_every_round_back_to_start():
    start, rounds = run_fresh(S1.format(fix="import arenapool.joblib; arenapool.joblib.install()"))
    for held, after in rounds:
        assert held > start + 400 * MiB, (start, rounds)  # 600 MB of results were held
        assert after <= start + 16 * MiB, (start, rounds)


@pytest.fixture
def installed():
    arenapool.joblib.install()
    yield
    arenapool.joblib.uninstall()


def test_install_is_idempotent_and_undone(installed):
    wrapped = joblib.Parallel.__call__
    arenapool.joblib.install()
    assert joblib.Parallel.__call__ is wrapped and arenapool.joblib.installed()
    arenapool.joblib.uninstall()
    assert not arenapool.joblib.installed()
    assert joblib.Parallel.__call__ is not wrapped
    arenapool.joblib.install()


def phase_open(_):
    return arenapool.phase_is_open()


def test_each_call_is_a_phase(installed):
    assert joblib.Parallel(n_jobs=2, backend="threading")(joblib.delayed(phase_open)(i) for i in range(8)) == [True] * 8
    assert not arenapool.phase_is_open()


@pytest.mark.parametrize("return_as", ["generator", "generator_unordered"])
def test_generators_end_the_phase_when_exhausted_or_closed(installed, return_as):
    out = joblib.Parallel(n_jobs=2, return_as=return_as)(joblib.delayed(np.ones)(10) for _ in range(6))
    assert arenapool.phase_is_open()
    assert sum(a.sum() for a in out) == 60
    assert not arenapool.phase_is_open()
    out = joblib.Parallel(n_jobs=2, return_as=return_as)(joblib.delayed(np.ones)(10) for _ in range(6))
    next(out)
    out.close()
    assert not arenapool.phase_is_open()


def ours(_):
    return _arenapool.owns(np.ones(50_000).__array_interface__["data"][0])


def test_threading_backend_workers_get_numpys_handler(installed):
    assert all(joblib.Parallel(n_jobs=2, backend="threading")(joblib.delayed(ours)(i) for i in range(8)))


def fails(i):
    if i == 3:
        raise ValueError("task 3")
    return i


def test_an_error_in_a_task_ends_the_phase(installed):
    with pytest.raises(ValueError, match="task 3"):
        joblib.Parallel(n_jobs=2)(joblib.delayed(fails)(i) for i in range(8))
    assert not arenapool.phase_is_open()
