"""The rescue the README offers first: a process whose memory is stuck after ``del``
(free inside glibc's heaps, which it keeps) gets it back from one call, without
arenapool having been installed for the job: ``arenapool.release_others()`` in a
script, ``%load_ext arenapool`` in a notebook. Each in a fresh process, alone."""

from __future__ import annotations

from conftest import MiB, RSS_HELPER, require_glibc_figures, run_fresh

# 200 MB in blocks of 1,000 bytes from glibc's malloc, all freed but the last: the
# free memory sits below a live block, where glibc's own trimming (at the top of the
# heap) never reaches; the process is stuck with it.
STUCK = RSS_HELPER + """
import ctypes, time
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
start = rss()
blocks = [libc.malloc(1000) for _ in range(200_000)]
for block in blocks[:-1]:
    libc.free(block)
del blocks
stuck = rss()
"""


def test_release_others_gives_back_what_a_script_is_stuck_with():
    require_glibc_figures()
    start, stuck, after, glibc, seconds = run_fresh(
        STUCK
        + """
import arenapool
released = arenapool.release_others()
after = rss()
glibc = [r for r in released if r.holder == "glibc"]
print(json.dumps([start, stuck, after, glibc[0].rss_returned if glibc else 0,
                  glibc[0].seconds if glibc else 0]))
"""
    )
    assert stuck >= start + 150 * MiB, (start, stuck)
    assert after <= start + 30 * MiB, (start, stuck, after)
    assert glibc >= 150 * MiB and seconds < 5, (glibc, seconds)


def test_load_ext_gives_back_what_a_kernel_is_stuck_with():
    require_glibc_figures()
    start, stuck, after, printed = run_fresh(
        STUCK
        + """
import contextlib, io
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert shell.run_cell("%load_ext arenapool").success
print(json.dumps([start, stuck, rss(), printed.getvalue()]))
"""
    )
    assert stuck >= start + 150 * MiB, (start, stuck)
    # Importing IPython takes some of the free memory, and adds its own (50 MiB on 3.9).
    assert after <= stuck - 120 * MiB, (start, stuck, after)
    assert "Gave back" in printed and "RSS" in printed, printed
