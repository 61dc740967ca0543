"""Large blocks outside phases: a buffer freed and made again in a loop is faulted in
once, not at every use, and what the loop kept goes back when the process goes idle and
at the next phase's end. The same with ``_RJEM_MALLOC_CONF`` set as polars sets it for
its own jemalloc (arenapool's jemalloc reads the same variable): decays of 500 ms and
1 s with background threads, and the tuned setting of decay 0 with background threads;
arenapool's jemalloc then runs no background thread of its own.

Each program runs alone in a fresh interpreter: it counts the process's page faults and
measures its RSS."""

from __future__ import annotations

import sys
from typing import Dict

import pytest
from conftest import RSS_HELPER, MiB, run_fresh

SETTINGS: Dict[str, Dict[str, str]] = {
    "unset": {},
    "polars": {"_RJEM_MALLOC_CONF": "background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:1000"},
    "polars-tuned": {"_RJEM_MALLOC_CONF": "background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0"},
}

BLOCK = 16 * MiB
ROUNDS = 20
PAGES = BLOCK // 4096

PROGRAM = RSS_HELPER + f"""
import resource
import arenapool

arenapool.install()

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def jemalloc_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{{task}}/comm") as f:
            names.append(f.read().strip())
    return sum(name == "jemalloc_bg_thd" for name in names)

buffer = bytearray({BLOCK})
del buffer
before = faults()
for _ in range({ROUNDS}):
    buffer = bytearray({BLOCK})  # zeroed: every page written
    del buffer
loop_faults = faults() - before

# Outside phases: what is dropped goes back once the process is idle.
start = rss()
table = [bytearray(8 * 2**20) for _ in range(32)]
made = rss()
del table
gc.collect()
idle = once_at_most(rss, start + 16 * 2**20)

# In a phase: what the phase made goes back as it ends, and at once when dropped.
with arenapool.phase():
    results = [bytearray(8 * 2**20) for _ in range(32)]
del results
gc.collect()
after_phase = rss()

print(json.dumps({{
    "loop_faults": loop_faults, "jemalloc_threads": jemalloc_threads(),
    "start": start, "made": made, "idle": idle, "after_phase": after_phase,
}}))
"""


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_large_blocks_outside_phases_are_reused_and_given_back(setting: str) -> None:
    out = run_fresh(PROGRAM, env=SETTINGS[setting])
    # Faulted in again at every use, the loop makes ROUNDS × PAGES faults (81,920);
    # reused, none. The bound leaves room for the idle return giving it back twice.
    assert out["loop_faults"] < 3 * PAGES, out
    assert out["jemalloc_threads"] == 0, out
    assert out["made"] > out["start"] + 200 * MiB, out
    assert out["idle"] <= out["start"] + 16 * MiB, out
    assert out["after_phase"] <= out["start"] + 16 * MiB, out


# glibc's thresholds: blocks the hook takes would have taught glibc's `malloc` its
# `mmap` threshold and the free pages it keeps at its heap's top (see
# `c_heap_freed_elsewhere`); freed through the hook, they still do.
GLIBC_PROGRAM = """
import ctypes, json

class MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo.restype = MallInfo
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def mapped_alone(size):
    before = libc.mallinfo().hblks
    block = libc.malloc(size)
    mapped = libc.mallinfo().hblks > before
    libc.free(block)
    return mapped

# Frees a block glibc mapped, of 256 KiB: glibc adapts to that size.
first = mapped_alone(256 << 10)
from arenapool import _arenapool
block = bytes(1 << 20)
taken = _arenapool.owns(id(block))
del block
print(json.dumps({"first": first, "taken": taken, "after": mapped_alone(768 << 10)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's thresholds")
def test_glibc_adapts_to_blocks_the_hook_freed() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the C library is not glibc")
    out = run_fresh(GLIBC_PROGRAM, env={"ARENAPOOL": "on"})
    if not out["first"]:
        pytest.skip("glibc's threshold was above 256 KiB as the interpreter started")
    assert out["taken"], out
    # Had glibc not adapted to the 1 MiB block, it would map 768 KiB on its own.
    assert not out["after"], out
