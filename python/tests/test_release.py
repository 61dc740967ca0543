"""A phase's end reaches the process's other allocators: glibc's heaps and Arrow's pools,
at the end and, for what is dropped later, by the watcher; each in a fresh process,
each checked against the same program with that part switched off."""

from __future__ import annotations

import pytest

import arenapool

from conftest import MiB, RSS_HELPER, run_fresh

# glibc's heaps keep 100 MB of free 1,000-byte blocks below one that stays: its own
# trimming, at the top of a heap only, cannot give them back.
GLIBC = RSS_HELPER + """
import ctypes, time, arenapool
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
{setting}
with arenapool.phase():  # the first phase's own memory before the start
    pass
start = rss()
def fill():
    blocks = [libc.malloc(1000) for _ in range(100_000)]
    for b in blocks[:-1]:
        libc.free(b)
"""


def test_phase_end_trims_glibc():
    code = GLIBC + """
with arenapool.phase() as p:
    fill()
print(json.dumps([start, rss(), [[r.holder, r.rss_returned] for r in p.released]]))
"""
    start, after, released = run_fresh(code.format(setting=""))
    assert after <= start + 16 * MiB, (start, after, released)
    assert released and released[0][0] == "glibc" and released[0][1] >= 64 * MiB, released


def test_watcher_trims_glibc_after_the_phase():
    code = GLIBC + """
fill()  # after the phase ended
time.sleep(2.5)
print(json.dumps([start, rss()]))
"""
    start, after = run_fresh(code.format(setting=""))
    assert after <= start + 16 * MiB, (start, after)


# A string frame and its groupby: pandas' strings are in Arrow's memory.
FRAME = RSS_HELPER + """
import time, arenapool
{setting}
import numpy as np, pandas as pd
from concurrent.futures import ThreadPoolExecutor
def frame(seed, rows):
    rng = np.random.default_rng(seed)
    keys = pd.Series(rng.integers(0, 100_000, rows)).astype(str)
    df = pd.DataFrame({{"k": "key" + keys, "v": rng.random(rows)}})
    return df, df.groupby("k")["v"].sum()
frame(0, 1000)  # the libraries' first-use memory before the start
with arenapool.phase():
    pass
start = rss()
"""


def test_phase_end_releases_arrows_pool():
    code = FRAME + """
with arenapool.phase() as p:
    df, total = frame(0, 4_000_000)
    del df, total
print(json.dumps([start, rss(), [[r.holder, r.rss_returned] for r in p.released]]))
"""
    start, after, released = run_fresh(code.format(setting=""))
    assert after <= start + 16 * MiB, (start, after, released)
    assert any(h.startswith("arrow:") and n >= 32 * MiB for h, n in released), released


def test_arrow_jemalloc_gives_back_what_is_dropped_after_the_phase():
    code = FRAME + """
with ThreadPoolExecutor(2) as pool:  # Arrow's buffers made on other threads
    with arenapool.phase():
        frames = list(pool.map(frame, range(2), [2_000_000] * 2))
del frames
time.sleep(2.5)
print(json.dumps([start, rss()]))
"""
    start, after = run_fresh(code.format(setting="arenapool.use_arrow_jemalloc()"))
    assert after <= start + 16 * MiB, (start, after)


def test_set_release_checks_its_arguments():
    with pytest.raises(ValueError, match="min_bytes"):
        arenapool.set_release(min_bytes=-1)
    with pytest.raises(ValueError, match="watch"):
        arenapool.set_release(watch=-2.0)
    arenapool.set_release(glibc=True, arrow=True, min_bytes=MiB, watch=1.0)
