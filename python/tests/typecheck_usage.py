"""The public API as a program uses it, for the type checker (``mypy``, from
``python/``: see ``[tool.mypy]`` in pyproject.toml) and to run (``python
typecheck_usage.py``, from outside the source tree).

``assert_type`` fails the check if a name's type is not the one written, ``Any``
included (what a module without stubs gives); each ``type: ignore`` below marks a
misuse the checker must reject, and the check fails if it does not (``strict``
reports ignores that are not needed).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterator, List

import numpy as np

import arenapool
import arenapool.dask
import arenapool.futures
import arenapool.joblib

if TYPE_CHECKING:
    from typing_extensions import assert_type

    from arenapool.mpi import MismatchError, OtherRankError, SharedArrayError, ViewsAliveError
else:

    def assert_type(value, _type):
        return value


def phases() -> None:
    arenapool.install(threshold=128 << 10)
    assert_type(arenapool.installed(), bool)
    assert_type(arenapool.threshold(), int)
    arenapool.set_threshold(None)
    with arenapool.phase() as p:
        assert_type(p, arenapool.phase)
        assert_type(arenapool.phase_is_open(), bool)
        arrays = [np.ones(50_000) for _ in range(100)]
    report = p.report
    assert report is not None
    assert_type(report, arenapool.Report)
    assert_type(report.rss_before, int)
    assert_type(report.rss_after, int)
    assert_type(report.returned, int)
    assert_type(report.run_time, float)
    assert_type(report.purge_time, float)
    assert_type(report.arenas, List[int])
    assert_type(report.failed, int)
    assert report.failed == 0 and report.arenas, report
    assert_type(p.released, List[arenapool.Release])
    for released in p.released + arenapool.release_others() + arenapool.recent_releases():
        assert_type(released.holder, str)
        assert_type(released.rss_returned, int)
        assert_type(released.seconds, float)
    arenapool.set_release(glibc=True, arrow=True, duckdb=True, min_bytes=1 << 20, watch=1.0)
    del arrays


def holders() -> None:
    b = arenapool.breakdown()
    assert_type(b, arenapool.Breakdown)
    assert_type(b.rest, int)
    assert_type(b.arenapool_live, int)
    if b.glibc is not None:
        assert_type(b.glibc.in_use, int)
    if b.pymalloc is not None:
        assert_type(b.pymalloc.arenas, int)
    for pool in b.arrow:
        assert_type(pool.allocated, int)
    if b.duckdb is not None:
        assert_type(b.duckdb.free, int)
    for library in b.libraries:
        assert_type(library.name, str)
    assert_type(arenapool.dask.installed(), bool)
    plugin = arenapool.dask.WorkerPhases(idle=0.5)
    assert_type(plugin.phases, int)


@arenapool.phase()
def decorated(n: int) -> float:
    return float(np.ones(n).sum())


def figures() -> None:
    memory = arenapool.memory()
    assert_type(memory, arenapool.Memory)
    for figure in (memory.rss, memory.peak_rss, memory.allocated, memory.active,
                   memory.resident, memory.retained, memory.mapped, memory.metadata):
        assert_type(figure, int)
    assert_type(arenapool.rss(), int)
    assert_type(arenapool.trim(), int)


def square(x: int) -> int:
    return x * x


def scaled(table: np.ndarray, x: int) -> float:
    return float(table[x] * 2)


def maps() -> None:
    with ThreadPoolExecutor(2) as executor:
        squares = arenapool.futures.map(executor, square, range(10), window=2)
        assert_type(squares, Iterator[int])
        assert list(squares) == [x * x for x in range(10)]
        table = np.arange(10.0)
        assert list(arenapool.futures.map(executor, scaled, range(3), state=table)) == [0.0, 2.0, 4.0]
    arenapool.futures.install()
    assert_type(arenapool.futures.installed(), bool)
    arenapool.futures.uninstall()
    arenapool.joblib.install()
    assert_type(arenapool.joblib.installed(), bool)
    arenapool.joblib.uninstall()


def errors() -> None:
    try:
        with arenapool.phase() as p:
            p.__enter__()
    except arenapool.ArenaPoolError as error:
        assert_type(error, arenapool.ArenaPoolError)
        assert isinstance(error, RuntimeError) and "already open" in str(error)


def mpi_errors(mismatch: MismatchError, other: OtherRankError, views: ViewsAliveError) -> List[arenapool.ArenaPoolError]:
    """arenapool.mpi's errors are ArenaPoolErrors (checked only: importing arenapool.mpi
    needs an MPI library)."""
    family: List[SharedArrayError] = [mismatch, other, views]
    assert_type(other.rank, int)
    assert_type(other.error_type, str)
    return list(family)


def misuse() -> None:
    """Calls the checker must reject (never run)."""
    arenapool.set_threshold("64k")  # type: ignore[arg-type]
    arenapool.install(numpy=1.5)  # type: ignore[arg-type]
    arenapool.memory().rss = 0  # type: ignore[misc]
    arenapool.trim(0)  # type: ignore[call-arg]
    arenapool.set_release(watch="1s")  # type: ignore[arg-type]
    text: str = arenapool.rss()  # type: ignore[assignment]
    del text


if __name__ == "__main__":
    phases()
    assert_type(decorated(1000), float)
    assert decorated(1000) == 1000.0
    figures()
    holders()
    maps()
    errors()
    print("ok")
