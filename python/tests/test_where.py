"""`arenapool.breakdown()`: each holder's figure against the holder's own counter, read
by the test itself, each in a fresh process."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys

import arenapool

from conftest import MiB, require_glibc_figures, require_installed, require_pymalloc_figures, run_fresh

# The test's own reading of glibc's counters: mallinfo2, or before glibc 2.33 mallinfo,
# whose int fields are read unsigned (modulo 4 GiB).
MALLINFO = """
import ctypes
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in FIELDS]
class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in FIELDS]
libc = ctypes.CDLL(None)
if hasattr(libc, "mallinfo2"):
    mallinfo = libc.mallinfo2
    mallinfo.restype = MallInfo2
else:
    mallinfo = libc.mallinfo
    mallinfo.restype = MallInfo
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""


def test_arenapool_figures_are_its_allocators():
    live, memory = run_fresh(
        """
        import json, arenapool
        with arenapool.phase():
            block = bytearray(64 << 20)
            b, m = arenapool.breakdown(), arenapool.memory()
        print(json.dumps([[b.arenapool_live, b.arenapool_free, b.arenapool_metadata],
                          [m.active, m.resident, m.metadata]]))
        """
    )
    assert live[0] >= 64 * MiB, live
    assert abs(live[0] - memory[0]) <= MiB, (live, memory)
    assert live[2] == memory[2] or abs(live[2] - memory[2]) <= MiB, (live, memory)
    assert abs(sum(live) - memory[1]) <= MiB, (live, memory)


def test_glibc_figures_are_mallinfo():
    require_glibc_figures()
    figures = run_fresh(
        MALLINFO
        + """
import json, arenapool
breakdown = arenapool.breakdown  # its modules imported before the heaps are measured
blocks = [libc.malloc(1000) for _ in range(100_000)]   # 100 MB in glibc's heaps
for b in blocks[:-1:2]:
    libc.free(b)                                        # half of it free, not at the top
g = breakdown().glibc
info = mallinfo()
print(json.dumps([g.in_use, g.free, info.uordblks + info.hblkhd, info.fordblks]))
"""
    )
    in_use, free, own_in_use, own_free = figures
    assert in_use >= 48 * MiB and free >= 48 * MiB, figures
    assert abs(in_use - own_in_use) <= MiB and abs(free - own_free) <= MiB, figures


def parse_debugmallocstats(text):
    allocated = int(re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text).group(1).replace(",", ""))
    arenas = int(re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text).group(1).replace(",", ""))
    arena_size = int(re.search(r"arenas \* (\d+) bytes/arena", text).group(1))
    return allocated, arenas, arena_size


def test_pymalloc_figures_are_cpythons():
    require_pymalloc_figures()
    code = """
import json, sys, arenapool
objects = [(i, str(i)) for i in range(300_000)]   # small objects: pymalloc's
p = arenapool.breakdown().pymalloc
print(json.dumps([p.in_use, p.free, p.arenas]))
sys.stdout.flush()
sys._debugmallocstats()                          # CPython's own figures, on stderr
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    in_use, free, arenas = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    own_in_use, own_arenas, arena_size = parse_debugmallocstats(out.stderr)
    assert in_use >= 20 * MiB, (in_use, own_in_use)
    # Printing the figures between the two readings takes some blocks.
    assert abs(in_use - own_in_use) <= MiB and abs(arenas - own_arenas) <= 1, (in_use, own_in_use, arenas, own_arenas)
    assert in_use + free == arenas * arena_size  # 1 MiB arenas from 3.10 on, 256 KiB before


def test_arrow_figures_are_its_pools_and_pyarrow_is_never_imported():
    require_installed("pyarrow")
    figures = run_fresh(
        """
        import json, sys, arenapool
        without = arenapool.breakdown()
        imported = "pyarrow" in sys.modules
        import pyarrow as pa
        array = pa.array(range(8_000_000))              # 64 MB in the default pool
        b = arenapool.breakdown()
        pools = {p.backend: [p.allocated, p.peak, p.is_default] for p in b.arrow}
        default = pa.default_memory_pool()
        print(json.dumps([without.arrow, imported, pools, default.backend_name,
                          default.bytes_allocated(), default.max_memory()]))
        """
    )
    without, imported, pools, backend, allocated, peak = figures
    assert without == [] and not imported, figures
    assert pools[backend] == [allocated, peak, True], figures
    assert allocated >= 60 * MiB, figures


def test_numpy_figure_is_tracemallocs():
    traced, own = run_fresh(
        """
        import json, tracemalloc, arenapool, numpy as np
        tracemalloc.start()
        arrays = [np.ones(1_000_000) for _ in range(8)]   # 64 MB of array data
        traced = arenapool.breakdown().numpy
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
        print(json.dumps([traced, sum(t.size for t in snapshot.traces)]))
        """
    )
    assert traced == own and traced >= 64_000_000, (traced, own)


def test_rest_is_the_anonymous_rss_no_holder_has():
    b = arenapool.breakdown()
    assert b.rss > 0 and b.anonymous > 0
    assert b.rest == b.anonymous - b.attributed
    assert b.files + b.shared + b.anonymous <= b.rss + 4 * MiB  # read at nearly the same time
    text = str(b)
    for holder in ("arenapool", "glibc", "pymalloc", "not counted"):
        assert holder in text
    assert pickle.loads(pickle.dumps(b)) == b


def test_where_prints_the_breakdown():
    out = subprocess.run([sys.executable, "-m", "arenapool.where"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("This process (pid ") and "pymalloc" in out.stdout, out.stdout
    assert "python -m arenapool.where PID" in out.stdout, out.stdout
    assert "Warning" not in out.stderr, out.stderr


def test_where_pid_reads_another_process_and_its_children():
    # A process with a child of its own, both holding memory the test knows of.
    code = (
        "import os, subprocess, sys, time\n"
        "block = bytearray(64 << 20)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(32 << 20); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(other.stdout.readline())
        out = subprocess.run(
            [sys.executable, "-m", "arenapool.where", str(other.pid)], capture_output=True, text=True, check=True
        ).stdout
    finally:
        other.kill()
        other.wait()
        subprocess.run(["kill", str(child)], check=False)
    assert out.startswith(f"Process {other.pid} (python"), out
    own = float(re.search(r"its own memory\s+([\d.]+) MiB", out).group(1))
    assert own >= 64, out
    assert "its share (PSS)" in out and f"pid {child}" in out, out
    assert "counted only inside the process" in out, out
    missing = subprocess.run([sys.executable, "-m", "arenapool.where", "999999999"], capture_output=True, text=True)
    assert missing.returncode != 0 and "no process 999999999" in missing.stderr, missing.stderr


def test_the_printed_breakdown_never_shows_a_negative_remainder():
    require_glibc_figures()
    # glibc's count of free bytes after malloc_trim gave them back: more than is resident.
    text, rest = run_fresh(
        MALLINFO
        + """
import json, arenapool
blocks = [libc.malloc(1000) for _ in range(200_000)]
for b in blocks[:-1]:
    libc.free(b)
libc.malloc_trim(0)
b = arenapool.breakdown()
print(json.dumps([str(b), b.rest]))
"""
    )
    assert rest < 0, (rest, text)  # the counters add up to more than the RSS
    assert not re.search(r"-\d", text), text
    assert "given back already" in text, text


def test_the_breakdown_shows_the_last_phase_and_the_workers():
    text, html = run_fresh(
        """
        import json, subprocess, sys, arenapool
        with arenapool.phase():
            block = bytearray(64 << 20)
            del block
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        b = arenapool.breakdown()
        child.kill()
        print(json.dumps([str(b), b._repr_html_()]))
        """
    )
    assert "Last phase: ended" in text and "MiB of pages back to the OS" in text, text
    assert "Workers (child processes): 1," in text, text
    assert "<table>" in html and "<svg" in html and "<polyline" in html, html
