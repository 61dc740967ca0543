"""Phases from Python: the block, the decorator, nesting, errors, reports, figures."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import arenapool
from arenapool import _arenapool

from conftest import MiB, RSS_HELPER, run_fresh


def test_a_phase_is_open_inside_and_reports_after():
    with arenapool.phase() as p:
        assert arenapool.phase_is_open()
        scratch = [np.ones(1 << 17) for _ in range(64)]  # 64 MiB, freed inside
        del scratch
    assert not arenapool.phase_is_open()
    report = p.report
    assert isinstance(report, arenapool.Report)
    assert report.returned >= 60 * MiB, report
    assert report.run_time >= 0 and report.purge_time >= 0
    assert report.arenas and report.rss_before > 0 and report.rss_after > 0
    assert report.failed == 0, report  # no attempt to give pages back was refused
    assert "pages back to the OS" in str(report) and "failed" not in str(report)
    assert repr(report).startswith("Report(") and repr(report).endswith(", failed=0)")


def test_decorator_and_overlapping_calls():
    @arenapool.phase()
    def work(n):
        assert arenapool.phase_is_open()
        return np.ones(n).sum()

    results = []
    threads = [threading.Thread(target=lambda: results.append(work(100_000))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [100_000.0] * 4
    assert not arenapool.phase_is_open()


def test_nested_phases_end_with_the_outer_one():
    with arenapool.phase():
        with arenapool.phase():
            pass
        assert arenapool.phase_is_open()
    assert not arenapool.phase_is_open()


def test_an_exception_ends_the_phase_and_goes_on():
    with pytest.raises(KeyError):
        with arenapool.phase():
            raise KeyError("inside")
    assert not arenapool.phase_is_open()


def test_a_phase_object_is_not_entered_twice():
    p = arenapool.phase()
    with p:
        with pytest.raises(arenapool.ArenaPoolError, match="already open"):
            p.__enter__()
    assert not arenapool.phase_is_open()


def test_exit_without_enter_is_a_clear_error():
    p = arenapool.phase()
    with pytest.raises(arenapool.ArenaPoolError, match="never entered: call __enter__ before __exit__"):
        p.__exit__(None, None, None)
    assert repr(p) == "<arenapool.phase not entered>"


def test_a_second_exit_is_a_clear_error():
    p = arenapool.phase()
    with p:
        pass
    with pytest.raises(arenapool.ArenaPoolError, match="already ended: __exit__ was called twice"):
        p.__exit__(None, None, None)
    assert isinstance(p.report, arenapool.Report)  # the first exit's report stays
    with p:  # a phase that has ended may be entered again
        assert arenapool.phase_is_open()
    assert not arenapool.phase_is_open()


def test_arenapool_error_is_the_packages_own_and_pickles():
    # Errors raised in worker processes reach the parent pickled.
    error = arenapool.ArenaPoolError("why, and what to do")
    assert isinstance(error, RuntimeError)
    assert type(error).__module__ == "arenapool" and type(error).__qualname__ == "ArenaPoolError"
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is arenapool.ArenaPoolError and str(again) == "why, and what to do"


def test_phase_without_parentheses_is_a_decorator():
    @arenapool.phase
    def work(n):
        """Sums ones."""
        assert arenapool.phase_is_open()
        return np.ones(n).sum()

    assert work(100_000) == 100_000.0
    assert work(10) == 10.0  # each call a phase of its own
    assert work.__name__ == "work" and work.__doc__ == "Sums ones."
    assert not arenapool.phase_is_open()


def test_phase_with_an_argument_says_how_to_write_it():
    with pytest.raises(TypeError, match=r"takes no arguments.*`@arenapool.phase\(\)`"):
        arenapool.phase(5)


def test_memory_and_trim():
    m = arenapool.memory()
    assert m.rss > 0 and m.peak_rss >= m.rss
    assert "RSS" in str(m) and repr(m).startswith("Memory(")
    assert arenapool.trim() >= 0
    assert arenapool.rss() > 0


def test_phase_gives_results_back_when_dropped():
    # Threads of the process's own, inside one phase. Each
    # first frees a 1 MiB block, as a worker that has done any work has: glibc then
    # raises its mmap threshold, and keeps the 400 KB results in its heaps.
    after = run_fresh(
        RSS_HELPER
        + """
import threading, numpy as np, arenapool
start = rss()
with arenapool.phase():
    results = []
    def worker():
        np.ones(1 << 17)
        results.extend(np.ones(50_000) for _ in range(500))
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
held = rss()
del results; gc.collect()
print(json.dumps([start, held, rss()]))
"""
    )
    start, held, end = after
    assert held > start + 300 * MiB, after  # the results were there
    assert end <= start + 16 * MiB, after
