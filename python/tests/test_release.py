"""A phase's end reaches the process's other allocators: glibc's heaps and Arrow's pools,
at the end and, for what is dropped later, by the watcher; each in a fresh process,
each checked against the same program with that part switched off."""

from __future__ import annotations

import pytest

import arenapool

from conftest import (
    MiB,
    RSS_HELPER,
    require_arrow_strings,
    require_glibc_figures,
    require_pymalloc_figures,
    require_pymalloc_give_back,
    run_fresh,
)

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
    require_glibc_figures()
    code = GLIBC + """
with arenapool.phase() as p:
    fill()
print(json.dumps([start, rss(), [[r.holder, r.rss_returned] for r in p.released]]))
"""
    start, after, released = run_fresh(code.format(setting=""))
    assert after <= start + 16 * MiB, (start, after, released)
    assert released and released[0][0] == "glibc" and released[0][1] >= 64 * MiB, released


@pytest.mark.parametrize("counters", [("mallinfo2", "mallinfo"), ("mallinfo",)])
def test_phase_end_trims_glibc_by_either_counter(counters):
    # Before glibc 2.33 there is no mallinfo2: mallinfo is read instead (as here, where
    # mallinfo2 is left out), and the heaps are trimmed all the same.
    code = GLIBC + """
with arenapool.phase() as p:
    fill()
print(json.dumps([start, rss(), [r.holder for r in p.released], arenapool.breakdown().glibc.counter]))
"""
    setting = f"from arenapool._core import _holders\n_holders._MALLINFO_FUNCTIONS = {counters!r}"
    start, after, released, counter = run_fresh(code.format(setting=setting))
    assert "glibc" in released, released
    assert after <= start + 16 * MiB, (start, after, released)
    assert counter in counters, counter


def test_watcher_trims_glibc_after_the_phase():
    require_glibc_figures()
    code = GLIBC + """
fill()  # after the phase ended
print(json.dumps([start, once_at_most(rss, start + 16 * 2**20)]))
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
    require_arrow_strings()
    code = FRAME + """
with arenapool.phase() as p:
    df, total = frame(0, 4_000_000)
    del df, total
print(json.dumps([start, rss(), [[r.holder, r.rss_returned] for r in p.released]]))
"""
    # Arrow's mimalloc pool, as the program chose it: install() leaves it the default.
    start, after, released = run_fresh(code.format(setting=""), env={"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"})
    assert after <= start + 16 * MiB, (start, after, released)
    assert any(h.startswith("arrow:") and n >= 32 * MiB for h, n in released), released


def test_arrow_jemalloc_gives_back_what_is_dropped_after_the_phase():
    require_arrow_strings()
    code = FRAME + """
with ThreadPoolExecutor(2) as pool:  # Arrow's buffers made on other threads
    with arenapool.phase() as p:
        frames = list(pool.map(frame, range(2), [2_000_000] * 2))
del frames
print(json.dumps([start, once_at_most(rss, start + 16 * 2**20), [r.holder for r in p.released]]))
"""
    start, after, released = run_fresh(code.format(setting="arenapool.use_arrow_jemalloc()"))
    assert after <= start + 16 * MiB, (start, after)
    # The pool's release_unused() gives nothing back (pyarrow 26): not asked, not listed.
    assert "arrow:jemalloc" not in released, released


@pytest.mark.parametrize("at_once", [True, False])
def test_arrow_jemalloc_at_once_gives_back_as_buffers_are_dropped(at_once):
    require_arrow_strings()
    code = FRAME + """
import threading
workers = set()
def frame_on_a_worker(seed, rows):
    workers.add(threading.get_native_id())
    return frame(seed, rows)
with ThreadPoolExecutor(2) as pool:  # Arrow's buffers made on other threads
    with arenapool.phase():
        frames = list(pool.map(frame_on_a_worker, range(2), [2_000_000] * 2))
# Python's join returns before the thread has ended in the C library, where its caches
# go back to Arrow's jemalloc, whose arenas it then purges. A buffer freed during such a
# purge is left to the arena's next one: the threads must be gone first.
once_at_most(lambda: sum(os.path.exists(f"/proc/self/task/{{t}}") for t in workers), 0)
held = rss()
del frames
print(json.dumps([start, held, rss()]))
"""
    setting = f"os.environ.pop('JE_ARROW_MALLOC_CONF', None); arenapool.use_arrow_jemalloc(at_once={at_once})"
    start, held, after = run_fresh(code.format(setting=setting))
    assert held >= start + 64 * MiB, (start, held)
    if at_once:
        assert after <= start + 16 * MiB, (start, held, after)
    else:  # Arrow's own setting: its background thread gives them back within 2 s
        assert after >= start + 32 * MiB, (start, held, after)


def test_set_release_checks_its_arguments():
    with pytest.raises(ValueError, match="min_bytes"):
        arenapool.set_release(min_bytes=-1)
    with pytest.raises(ValueError, match="watch"):
        arenapool.set_release(watch=-2.0)
    arenapool.set_release(glibc=True, pymalloc=True, arrow=True, min_bytes=MiB, watch=1.0)


# pymalloc's arenas (1 MiB) each keep a few small objects that live on, and free pools
# around them: pymalloc unmaps an arena only once all of its pools are free.
PYMALLOC = RSS_HELPER + """
import sys, time, arenapool
{setting}
with arenapool.phase():  # the hooks, and the first phase's own memory, before the start
    pass
start = rss()
def arenas():
    return arenapool.breakdown().pymalloc.arenas
peak = 0
peak_rss = 0
def pinned_arenas(n):
    global peak, peak_rss
    objects = [(i, i + 1) for i in range(n)]  # tuples of 64 bytes, ints of 32
    peak = arenas()
    peak_rss = rss()
    return objects[::8192]  # about one of each per arena
"""


def test_phase_end_gives_back_pymallocs_free_pools():
    require_pymalloc_give_back()
    code = PYMALLOC + """
with arenapool.phase() as p:
    kept = pinned_arenas(2_000_000)
    held = rss()
print(json.dumps([start, held, rss(), [[r.holder, r.rss_returned] for r in p.released]]))
"""
    start, held, after, released = run_fresh(code.format(setting=""))
    assert held >= start + 96 * MiB, (start, held)
    assert after <= start + (held - start) / 2, (start, held, after, released)
    assert any(h == "pymalloc" and n >= 48 * MiB for h, n in released), released


def test_pymallocs_free_pools_stay_without_it():
    require_pymalloc_figures()
    # pymalloc's own figures, not RSS: the phase's end gives back the phase arenas'
    # free pages (the list's blocks among them), which RSS would count too.
    code = PYMALLOC + """
with arenapool.phase() as p:
    kept = pinned_arenas(2_000_000)
    held = arenapool.breakdown().pymalloc
after = arenapool.breakdown().pymalloc
print(json.dumps([held.free, after.free, after.given_back - held.given_back, [r.holder for r in p.released]]))
"""
    held, after, given_back, released = run_fresh(code.format(setting="arenapool.set_release(pymalloc=False)"))
    assert held >= 32 * MiB, held  # 65 MB on CPython 3.9, whose pools are a page each
    assert after >= held - MiB and given_back <= MiB, (held, after, given_back)
    assert "pymalloc" not in released, released


def test_watcher_gives_back_pymallocs_free_pools_dropped_after_the_phase():
    require_pymalloc_give_back()
    code = PYMALLOC + """
kept = pinned_arenas(2_000_000)  # after the phase ended
# The RSS while the objects lived: by the time they are dropped the watcher may
# already be giving their pools back.
held = peak_rss
print(json.dumps([start, held, once_at_most(rss, start + (held - start) // 2)]))
"""
    start, held, after = run_fresh(code.format(setting=""))
    assert held >= start + 96 * MiB, (start, held)
    assert after <= start + (held - start) / 2, (start, held, after)


def test_a_phase_ending_during_the_watchers_release_gives_back_what_it_freed():
    require_pymalloc_give_back()
    # The watcher's release is under way, held in its first holder, when the phase
    # opens, and still is when the phase ends: the phase's end waits for it and gives
    # back pymalloc's free pools itself, so its report has them. The held release goes
    # on once a call waits for it (or after 30 s, when nothing does).
    code = PYMALLOC + """
import threading
from arenapool._core import _release
inside = threading.Event()
def held(_any_thread):
    if threading.current_thread().name == "arenapool-release" and not inside.is_set():
        inside.set()
        deadline = time.monotonic() + 30
        while not getattr(_release, "_wanted", False) and time.monotonic() < deadline:
            time.sleep(0.01)
    return []
_release._RELEASES.insert(0, ("held", lambda: True, held))
inside.wait()
with arenapool.phase() as p:
    kept = pinned_arenas(2_000_000)
print(json.dumps([[r.holder, r.rss_returned] for r in p.released]))
"""
    released = run_fresh(code.format(setting=""))
    assert any(h == "pymalloc" and n >= 48 * MiB for h, n in released), released


@pytest.mark.parametrize("mode", ["pymalloc", "pymalloc_debug"])
def test_pools_given_back_are_used_again_whole(mode):
    require_pymalloc_give_back(mode)
    # A pool given back is set up anew when pymalloc takes it again: the same objects
    # made again fit in the arenas there are, and hold what was written.
    code = PYMALLOC + """
with arenapool.phase() as p:
    kept = pinned_arenas(2_000_000)
given = arenapool.breakdown().pymalloc.given_back
again = [(i, i + 1) for i in range(2_000_000)]
ok = all(a == i and b == i + 1 for i, (a, b) in enumerate(again))
print(json.dumps([peak, arenas(), given, ok]))
"""
    most, now, given, ok = run_fresh(code.format(setting=""), env={"PYTHONMALLOC": mode})
    assert given >= 48 * MiB, given
    assert ok
    assert now <= most + 4, (most, now)


def test_breakdown_counts_pools_given_back_apart():
    require_pymalloc_give_back()
    code = PYMALLOC + """
with arenapool.phase():
    kept = pinned_arenas(2_000_000)
    before = arenapool.breakdown().pymalloc
after = arenapool.breakdown().pymalloc
print(json.dumps([before.free, before.given_back, after.free, after.given_back]))
"""
    free_before, given_before, free_after, given_after = run_fresh(code.format(setting=""))
    assert given_after - given_before >= 48 * MiB, (given_before, given_after)
    assert free_after <= free_before - (given_after - given_before) + 4 * MiB


def test_a_collection_inside_a_release_that_ends_a_phase_returns():
    # A phase left open by an object that only the cyclic collector finds (an abandoned
    # map's); a collection runs inside release_others (forced there: it allocates, so
    # one may run), ends that phase, and the phase's end calls release_others again,
    # on the same thread. Later phases end as usual.
    ended = run_fresh(
        """
        import gc, json, arenapool
        from arenapool._core import _release

        class Abandoned:
            def __init__(self):
                self.phase = arenapool.phase().__enter__()
                self.cycle = self
            def __del__(self):
                self.phase.__exit__(None, None, None)

        def collect(any_thread):
            gc.collect()
            return []

        _release._RELEASES.insert(0, ("collection", lambda: True, collect))
        Abandoned()
        arenapool.release_others()
        assert not arenapool.phase_is_open()
        with arenapool.phase() as later:
            pass
        print(json.dumps(later.report is not None))
        """,
        timeout=60,
    )
    assert ended
