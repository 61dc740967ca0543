"""Out of memory: numpy arrays of 64 MiB made until the address space is full.

Each program runs in a fresh interpreter under ``RLIMIT_AS`` (its size at the start
plus 3 GiB), with a time limit. The arrays must come from arenapool's arenas, the
refusal must be a ``MemoryError`` (not a crash), the memory must go back when the
arrays are dropped (outside phases, as the process goes idle: freed pages are kept for
reuse until then), and with the address space then full, the next phase must allocate
again, and so must the next array outside phases (from the arenas that hold the freed
memory, when those for blocks outside phases were never made).
"""

from __future__ import annotations

import pytest

from conftest import ONCE_AT_MOST, MiB, run_fresh


def available_memory() -> int:
    """``MemAvailable`` of ``/proc/meminfo``, in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# The arrays are written: up to 3 GiB resident, which the kernel must be able to give
# without killing the program.
needs_memory = pytest.mark.skipif(
    available_memory() < (4 << 30),
    reason="fills 3 GiB of address space with written arrays: needs 4 GiB of memory available",
)

# The program: fills the address space with 64 MiB arrays, inside a phase or outside
# any, then drops them and allocates 64 MiB again, in a phase and outside one.
FILL = """
import contextlib, gc, json, resource
import numpy as np
import arenapool
from arenapool import _arenapool

arenapool.install()

def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")

ARRAY = 8 << 20  # float64: 64 MiB

with arenapool.phase():  # the phases' arenas are made (they need address space)
    np.ones(ARRAY // 64)

limit = vm_size() + (3 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

def ours(array):
    return _arenapool.owns(array.__array_interface__["data"][0])

start = arenapool.rss()
arrays = []
raised = False
with arenapool.phase() if IN_PHASE else contextlib.nullcontext():
    try:
        while len(arrays) < 1000:
            arrays.append(np.ones(ARRAY))
    except MemoryError:
        raised = True
made = len(arrays)
owned = sum(ours(a) for a in arrays)
held = arenapool.rss()
del arrays
gc.collect()
# A phase's arenas give the arrays back as they are freed; outside phases, freed pages
# are kept for reuse until the process goes idle (the idle return).
after = arenapool.rss() if IN_PHASE else once_at_most(arenapool.rss, start + (16 << 20))
# What is left of the address space: 1 MiB, however much the filling left (it varies
# with the CPUs the thread ran on, each with arenas of its own). No new arena can be
# made: the next arrays must come from memory the arrays above freed.
limit = vm_size() + (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

with arenapool.phase():
    again = np.ones(ARRAY)
    again_ours = ours(again)
    again_right = bool(again[::4096].sum() == ARRAY // 4096)
del again
outside = np.ones(ARRAY)
outside_right = bool(outside[::4096].sum() == ARRAY // 4096)
del outside
print(json.dumps(dict(raised=raised, made=made, owned=owned, start=start, held=held,
                      after=after, again_ours=again_ours, again_right=again_right,
                      outside_right=outside_right)))
"""


@needs_memory
@pytest.mark.parametrize("where", ["phase", "outside"])
def test_filling_the_address_space_raises_memory_error_and_gives_it_all_back(where: str) -> None:
    figures = run_fresh(f"IN_PHASE = {where == 'phase'}\n" + ONCE_AT_MOST + FILL, timeout=120)
    assert figures["raised"], f"no MemoryError within 1000 arrays of 64 MiB: {figures}"
    assert figures["made"] >= 4, f"fewer than 4 arrays of 64 MiB in 3 GiB: {figures}"
    assert figures["owned"] >= 4, f"the arrays were not made in arenapool's arenas: {figures}"
    assert figures["held"] >= figures["start"] + figures["made"] * 60 * MiB, figures
    assert figures["after"] <= figures["start"] + 16 * MiB, (
        f"RSS after dropping the arrays is {(figures['after'] - figures['start']) / MiB:.1f} "
        f"MiB above the start: {figures}"
    )
    assert figures["again_ours"] and figures["again_right"], (
        f"the next phase could not make a 64 MiB array of arenapool's: {figures}"
    )
    assert figures["outside_right"], figures
