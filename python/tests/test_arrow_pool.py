"""Arrow's default pool gives back with ``arenapool.install()`` alone and with
``ARENAPOOL=on``, with no call to ``use_arrow_jemalloc()``: a pandas 3 string groupby on
4 M rows, deleted after a phase or with no phase at all, back within 16 MiB after
``del`` (how soon: the ``pandas`` row of ``python -m arenapool.bench --dask``); where
pyarrow was imported before arenapool, what the main thread made in mimalloc's pool
goes back through the watcher's release on the main thread. One fresh program per
measurement."""

from __future__ import annotations

import os
from typing import Dict, Optional

import pytest

from conftest import MiB, RSS_HELPER, require_arrow_strings, run_fresh

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

FRAME = """
def frame(rows):
    rng = np.random.default_rng(0)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    df = pd.DataFrame({"k": "key" + keys, "v": rng.random(rows)})
    return df, df.groupby("k")["v"].sum()
"""

INSTALLED_FIRST = RSS_HELPER + """
SETTING
import numpy as np, pandas as pd, pyarrow as pa
""" + FRAME + """
frame(1000)  # the libraries' first-use memory before the start
start = rss()
PHASE
    df, total = frame(4_000_000)
held = rss()
del df, total
after = once_at_most(rss, start + 16 * 2**20)
print(json.dumps([start, held, after, pa.default_memory_pool().backend_name]))
"""


def environment(arenapool_env: Optional[str]) -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("ARENAPOOL", "ARROW_DEFAULT_MEMORY_POOL")}
    if arenapool_env is not None:
        env["ARENAPOOL"] = arenapool_env
    return env


def back_after_del(setting: str, phase: bool, arenapool_env: Optional[str] = None) -> None:
    code = INSTALLED_FIRST.replace("SETTING", setting)
    code = code.replace("PHASE", "with arenapool.phase():" if phase else "if True:")
    start, held, after, pool = run_fresh(code, env=environment(arenapool_env))
    assert held >= start + 64 * MiB, (start, held, after, pool)  # the frame was there
    assert after <= start + 16 * MiB, ((after - start) / MiB, pool)


def test_install_and_a_phase():
    back_after_del("import arenapool; arenapool.install()", phase=True)


def test_install_and_no_phase():
    back_after_del("import arenapool; arenapool.install()", phase=False)


def test_arenapool_on_and_no_line():
    back_after_del("", phase=False, arenapool_env="on")


IMPORTED_FIRST = RSS_HELPER + """
import time
import numpy as np, pandas as pd, pyarrow as pa
""" + FRAME + """
frame(1000)
start = rss()
df, total = frame(4_000_000)   # in mimalloc's pool, Arrow's default until install()
held = rss()
import arenapool
SETTING
arenapool.install()
del df, total
# The watcher asks the main thread within a second; the main thread runs Python here.
after = once_at_most(rss, start + 16 * 2**20, seconds=5)
print(json.dumps([start, held, after, [r.holder for r in arenapool.recent_releases()]]))
"""


def test_pyarrow_imported_first_the_main_thread_gives_mimallocs_back():
    require_arrow_strings()
    start, held, after, releases = run_fresh(IMPORTED_FIRST.replace("SETTING", ""), env=environment(None))
    assert held >= start + 64 * MiB, (start, held, after)
    assert after <= start + 16 * MiB, ((after - start) / MiB, releases)
    assert "arrow:mimalloc" in releases, releases
