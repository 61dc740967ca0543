"""DuckDB's jemalloc as one of the process's holders: its free pages go back at a
phase's end and, with ``ARENAPOOL=on``, once DuckDB is idle, with the connection open;
its live blocks are never touched; ``breakdown()`` shows it as a row of its own and
names the libraries whose allocators it cannot read. One fresh program per
measurement; DuckDB is never imported into the test process."""

from __future__ import annotations

import os
from typing import Dict

from conftest import MiB, RSS_HELPER, require_installed, run_fresh

# A table of 3 M rows: about 70 MiB in DuckDB's jemalloc.
TABLE = "CREATE TABLE {name} AS SELECT i AS id, i % 1000 AS k, random() AS v FROM range(3000000) r(i)"

START = RSS_HELPER + """
import duckdb
SETTING
con = duckdb.connect()
con.execute("CREATE TABLE warm AS SELECT i FROM range(1000) r(i)").fetchall()
con.execute("DROP TABLE warm")
gc.collect()
start = rss()
"""


def environment(arenapool: str = "") -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "ARENAPOOL"}
    if arenapool:
        env["ARENAPOOL"] = arenapool
    return env


def test_a_phase_end_gives_back_a_dropped_table_and_keeps_the_live_one():
    require_installed("duckdb")
    code = START.replace("SETTING", "import arenapool; arenapool.install()") + f"""
con.execute("{TABLE.format(name='kept')}")
total = con.execute("SELECT count(*), sum(id), sum(k) FROM kept").fetchone()
with arenapool.phase():
    con.execute("{TABLE.format(name='dropped')}")
    held = rss()
    con.execute("DROP TABLE dropped")
    free = arenapool.breakdown().duckdb.free
after = rss()
figures = arenapool.breakdown().duckdb
again = con.execute("SELECT count(*), sum(id), sum(k) FROM kept").fetchone()
print(json.dumps([start, held, free, after, figures.free, figures.live, total, again]))
"""
    start, held, free, after, free_after, live, total, again = run_fresh(code, env=environment())
    assert held >= start + 120 * MiB, (start, held)  # both tables were there
    assert free >= 48 * MiB, free / MiB  # the dropped one: free in DuckDB's own counters
    assert free_after < 8 * MiB, free_after / MiB
    assert after <= held - 48 * MiB, ((held - after) / MiB, free / MiB)
    assert live >= 48 * MiB, live / MiB  # the kept table is live, and whole
    assert again == total


def test_arenapool_on_gives_back_once_duckdb_is_idle():
    require_installed("duckdb")
    code = START.replace("SETTING", "") + f"""
con.execute("{TABLE.format(name='t')}")
con.execute("SELECT k, count(*), sum(v) FROM t GROUP BY k").fetchall()
held = rss()
con.execute("DROP TABLE t")
after = once_at_most(rss, start + 16 * 2**20)
import arenapool
print(json.dumps([start, held, after, [r.holder for r in arenapool.recent_releases()]]))
"""
    # DuckDB 1.4 (CPython 3.9's) gives a dropped table back by itself within seconds;
    # 2.0 keeps it while idle, and there only the watcher's purge brings it back.
    start, held, after, releases = run_fresh(code, env=environment("on"))
    assert held >= start + 48 * MiB, (start, held)
    assert after <= start + 16 * MiB, ((after - start) / MiB, releases)


def test_breakdown_has_a_duckdb_row_and_names_the_allocators_it_cannot_read():
    require_installed("duckdb")
    require_installed("pyarrow")
    code = """
import json
import arenapool, duckdb, pyarrow
con = duckdb.connect()
con.execute("CREATE TABLE t AS SELECT i, random() AS v FROM range(2000000) r(i)")
figures = arenapool.breakdown()
print(json.dumps([figures.duckdb._asdict(), [list(library) for library in figures.libraries],
                  str(figures).splitlines()]))
"""
    duckdb, libraries, lines = run_fresh(code, env=environment())
    assert duckdb["live"] >= 16 * MiB, duckdb  # the table
    assert duckdb["version"].startswith("5."), duckdb
    assert ["duckdb", "jemalloc", None] in libraries, libraries  # read whole: its own row
    arrow = [library for library in libraries if library[0] == "arrow"]
    assert arrow and arrow[0][2], libraries  # what its pools keep free is not read
    assert any(line.strip().startswith("DuckDB (its jemalloc)") for line in lines), lines
    rest = next(line for line in lines if line.strip().startswith("not counted by any holder above"))
    assert "arrow" in rest and "duckdb" not in rest, rest


def test_a_library_without_the_control_is_not_read_and_raises_nothing():
    # A module that says it is DuckDB's, whose file is a library loaded already but
    # not DuckDB's: no figures, a reason, nothing given back, no exception.
    code = """
import json, sys, types
import arenapool
from arenapool import _arenapool
from arenapool._core import _duckdb
fake = types.ModuleType("_duckdb")
fake.__file__ = _arenapool.__file__
sys.modules["_duckdb"] = fake
released = arenapool.release_others()
print(json.dumps([_duckdb.duckdb(), _duckdb.unreadable(), [r.holder for r in released],
                  arenapool.breakdown().duckdb]))
"""
    figures, reason, released, row = run_fresh(code, env=environment())
    assert figures is None and row is None
    assert reason == "its library exports no duckdb_je_mallctl", reason
    assert "duckdb" not in released


def test_the_rest_names_polars_by_its_runtime_library(monkeypatch):
    # polars 2 loads its code from _polars_runtime_<n>/_polars_runtime.abi3.so, older
    # releases from polars/polars.abi3.so; neither exports its jemalloc's control.
    from arenapool._core import _libraries

    for mapped in ("_polars_runtime.abi3.so", "polars.abi3.so"):
        monkeypatch.setattr(_libraries, "_mapped_files", lambda mapped=mapped: {mapped, "libc.so.6"})
        (polars,) = _libraries.libraries()
        assert polars.name == "polars" and polars.allocator == "jemalloc", polars
        assert polars.unread, polars
