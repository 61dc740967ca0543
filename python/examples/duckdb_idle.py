"""DuckDB's freed memory while it is idle: a table of ROWS rows (34 M: 1.1 GB), three
group-by + joins fetched with ``.df()``, each deleted, then ``DROP TABLE``, the
connection open throughout. Prints one JSON line of RSS figures (MiB): at the start,
2 s and 10 s after each ``del`` and after the drop, how many seconds until RSS was
back (within 16 MiB of the table alone after a query, within 64 of the start after
the drop), and the seconds each query took.

    python examples/duckdb_idle.py                    # plain CPython: DuckDB keeps it
    ARENAPOOL=on python examples/duckdb_idle.py       # the watcher gives it back
    python examples/duckdb_idle.py --phase            # install(), each query a phase
    ARENAPOOL=on python examples/duckdb_idle.py --keep-duckdb   # set_release(duckdb=False)
"""

import argparse
import contextlib
import json
import os
import sys
import time

import duckdb
import pandas  # noqa: F401  (.df() needs it: imported before the start is measured)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rows", type=int, default=34_000_000)
parser.add_argument("--phase", action="store_true", help="arenapool.install(), and each query in a phase")
parser.add_argument("--keep-duckdb", action="store_true", help="arenapool.set_release(duckdb=False)")
args = parser.parse_args()


def rss() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def follow(limit: float):
    """RSS 2 s and 10 s from now, and the first time (s) it was at most ``limit``."""
    t0, first, at2 = time.monotonic(), None, None
    while True:
        now, value = time.monotonic() - t0, rss()
        if first is None and value <= limit:
            first = round(now, 2)
        if at2 is None and now >= 2:
            at2 = value
        if now >= 10:
            return round(at2, 1), round(value, 1), first
        time.sleep(0.05)


block = contextlib.nullcontext
if args.phase or args.keep_duckdb or "arenapool" in sys.modules:
    import arenapool

    if args.keep_duckdb:
        arenapool.set_release(duckdb=False)
    if args.phase:
        arenapool.install()
        block = arenapool.phase

con = duckdb.connect()
con.execute("CREATE TABLE warm AS SELECT i FROM range(1000) r(i)")
con.execute("DROP TABLE warm")
time.sleep(2)
out = {"start": round(rss(), 1)}
with block():
    con.execute(
        "CREATE TABLE t AS SELECT i AS id, i % 1000000 AS k, random() AS v, 'x' || (i % 977) AS s "
        f"FROM range({args.rows}) r(i)"
    )
time.sleep(2)
table = out["table"] = round(rss(), 1)
QUERY = (
    "SELECT a.k, count(*) AS c, sum(a.v) AS s, max(b.mv) AS m FROM t a "
    "JOIN (SELECT k, max(v) AS mv FROM t GROUP BY k) b USING (k) GROUP BY a.k"
)
for key in ("query_s", "query_2s", "query_10s", "query_back_s"):
    out[key] = []
for _ in range(3):
    started = time.perf_counter()
    with block():
        df = con.execute(QUERY).df()
    out["query_s"].append(round(time.perf_counter() - started, 3))
    del df
    at2, at10, back = follow(table + 16)
    out["query_2s"].append(at2)
    out["query_10s"].append(at10)
    out["query_back_s"].append(back)
con.execute("DROP TABLE t")
out["drop_2s"], out["drop_10s"], out["drop_back_s"] = follow(out["start"] + 64)
con.close()
time.sleep(10)
out["closed_10s"] = round(rss(), 1)
print(json.dumps(out))
