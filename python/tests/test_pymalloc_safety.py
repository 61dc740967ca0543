"""pymalloc's free pools are given back only from arenas proven pymalloc's: a block
another caller took from CPython's arena allocator comes through a phase's end
untouched, whatever its bytes look like, and the give-back switches itself off, with
its reason, where it cannot tell (another arena allocator set over arenapool's,
another interpreter, pymalloc not in use). Each program runs in a fresh interpreter."""

from __future__ import annotations

import sys

import pytest

from conftest import MiB, RSS_HELPER, run_fresh

pytestmark = pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="pymalloc is CPython's allocator"
)

# A program whose arenas each keep a few small objects: a phase's end has free pools to
# give back (see test_release.py), and says what it gave back and why not.
# CPython's arena allocator in force, through ctypes.
ARENA_ALLOCATOR = RSS_HELPER + """
import ctypes, struct, sys, arenapool
from arenapool import _arenapool

class ArenaAllocator(ctypes.Structure):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        # PYFUNCTYPE: called holding the interpreter's lock, as CPython calls it.
        ("alloc", ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)),
        ("free", ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)),
    ]

def arena_allocator():
    allocator = ArenaAllocator()
    ctypes.pythonapi.PyObject_GetArenaAllocator(ctypes.byref(allocator))
    return allocator
"""

PROGRAM = ARENA_ALLOCATOR + """
POOL, ARENA = 16384, 1 << 20
{before}
arenapool.install()
with arenapool.phase():
    pass
{setup}
with arenapool.phase() as p:
    objects = [(i, i + 1) for i in range(2_000_000)]
    kept = objects[::8192]  # about one of each per arena
    del objects
{after}
off = arenapool.breakdown().pymalloc.off
released = [[r.holder, r.rss_returned] for r in p.released]
print(json.dumps(dict(off=off, released=released, **result)))
"""


def run(setup: str = "", after: str = "result = {}", before: str = "", env=None):
    return run_fresh(PROGRAM.format(before=before, setup=setup, after=after), env=env)


def gave_back(figures) -> bool:
    return any(holder == "pymalloc" and n >= 48 * MiB for holder, n in figures["released"])


@pytest.fixture(scope="module")
def give_back_works():
    figures = run()
    if figures["off"] is not None:
        pytest.skip(f"pymalloc's free pools are not given back here: {figures['off']}")
    assert gave_back(figures), figures


# A block taken from the arena allocator as an extension could, the size of an arena,
# each pool-aligned spot of it written as `header(spot)` says, the rest 0xAB.
FOREIGN = """
allocator = arena_allocator()
block = allocator.alloc(allocator.ctx, ARENA)
ctypes.memset(block, 0xAB, ARENA)
first = -(-block // POOL) * POOL
for spot in range(first, block + ARENA - POOL + 1, POOL):
    header = {header}
    ctypes.memmove(spot, header, len(header))
before = ctypes.string_at(block, ARENA)
made = _arenapool.pymalloc_arenas_made()
"""
AFTER_FOREIGN = """
now = ctypes.string_at(block, ARENA)
result = dict(changed=sum(a != b for a, b in zip(before, now)), made=made)
"""

# What the earlier check took for a free pool: 0 blocks in use, a carved mark at 44.
LOOKS_FREE = "struct.pack('<I40xI', 0, 0xFFFF)"
# Every field as pymalloc writes it for a free pool of 64-byte blocks: no check on the
# headers alone can tell this block from an arena.
FORGED = "struct.pack('<IIQQQIIII', 0, 0, spot + 48, 0, 0, 7, 3, 48 + 2 * 64, POOL - 64)"


def test_a_block_that_looks_like_free_pools_is_left_alone(give_back_works):
    figures = run(FOREIGN.format(header=LOOKS_FREE), AFTER_FOREIGN)
    assert figures["made"] >= 1, figures  # the wrapper saw the block
    assert figures["changed"] == 0, figures
    # Its headers told it apart: pymalloc's own arenas were given back all the same.
    assert figures["off"] is None, figures
    assert gave_back(figures), figures


def test_a_block_forged_as_free_pools_is_left_alone_and_stops_the_give_back(give_back_works):
    figures = run(FOREIGN.format(header=FORGED), AFTER_FOREIGN)
    assert figures["changed"] == 0, figures
    assert "could not be told apart" in figures["off"], figures
    assert not gave_back(figures), figures


@pytest.mark.skipif(sys.version_info < (3, 11), reason="frames' data stack comes from the arena allocator since 3.11")
def test_a_frames_data_stack_of_an_arenas_size_is_left_alone(give_back_works):
    # A frame of 70,000 locals gets a 1 MiB chunk of data stack from the arena
    # allocator; a phase ends while it runs, and every local keeps its value.
    setup = """
made = _arenapool.pymalloc_arenas_made()
body = "".join(f"    v{i} = {i} * 3\\n" for i in range(70_000))
source = "def big():\\n" + body + '''
    with arenapool.phase() as p:
        objects = [(i, i + 1) for i in range(2_000_000)]
        kept = objects[::8192]
        del objects
    seen = _arenapool.pymalloc_arenas_made()
    values = locals()
    return p, seen, all(values[f"v{i}"] == i * 3 for i in range(70_000))
'''
exec(source)
inside, seen, intact = big()
"""
    after = "result = dict(made=made, seen=seen, intact=intact, inside=[[r.holder, r.rss_returned] for r in inside.released])"
    figures = run(setup, after)
    assert figures["seen"] > figures["made"], figures  # the chunk went through the wrapper
    assert figures["intact"], figures
    assert figures["off"] is None, figures
    assert gave_back(dict(released=figures["inside"])), figures


def test_another_arena_allocator_set_over_arenapools_stops_the_give_back(give_back_works):
    # CPython's own arena allocator, saved before arenapool wrapped it and set again
    # after, as another tool's would be.
    before = "cpythons = arena_allocator()"
    setup = "ctypes.pythonapi.PyObject_SetArenaAllocator(ctypes.byref(cpythons))"
    figures = run(setup, before=before)
    assert "another arena allocator" in figures["off"], figures
    assert not gave_back(figures), figures


# tracemalloc wraps the object allocator while it traces, and CPython prints pymalloc's
# statistics only while pymalloc is the object allocator itself: the give-back cannot
# look then, and must not stop for good. Each program's measured phase opens after
# tracemalloc stopped.
TRACEMALLOC_SESSIONS = {
    # A phase's end while tracemalloc traced, after install().
    "after install": dict(
        setup="import tracemalloc\ntracemalloc.start()\nwith arenapool.phase():\n    pass\n"
        "_arenapool.give_back_pymalloc_pools()\ntracemalloc.stop()"
    ),
    # install() while tracemalloc traced (-X tracemalloc, a test runner's).
    "around install": dict(before="import tracemalloc\ntracemalloc.start()", setup="tracemalloc.stop()"),
}


@pytest.mark.parametrize("session", TRACEMALLOC_SESSIONS)
def test_the_give_back_comes_back_once_tracemalloc_stops(give_back_works, session):
    figures = run(**TRACEMALLOC_SESSIONS[session])
    assert figures["off"] is None, figures
    assert gave_back(figures), figures


def test_while_tracemalloc_traces_the_give_back_says_so():
    code = ARENA_ALLOCATOR + """
import tracemalloc
arenapool.install()
tracemalloc.start()
with arenapool.phase():
    pass
_arenapool.give_back_pymalloc_pools()
print(json.dumps(_arenapool.pymalloc_pools_off()))
"""
    off = run_fresh(code)
    if off is not None and "a page each" in off:
        pytest.skip("pools are a page each only before 3.10")
    assert "tracemalloc traces" in off, off


def subinterpreters():
    for name in ("_interpreters", "_xxsubinterpreters"):
        try:
            return __import__(name).__name__
        except ImportError:
            pass
    return None


@pytest.mark.skipif(subinterpreters() is None, reason="this CPython has no module to make interpreters with")
def test_another_interpreter_stops_the_give_back_for_good(give_back_works):
    # One made, filled with objects (pymalloc makes arenas for it) and gone before the
    # phase: the main interpreter is the only one again, but the give-back stays off.
    setup = f"""
import {subinterpreters()} as interpreters
other = interpreters.create()
interpreters.run_string(other, "objects = [(i, i + 1) for i in range(300_000)]")
interpreters.destroy(other)
"""
    figures = run(setup)
    assert "interpreter other than the main one" in figures["off"], figures
    assert not gave_back(figures), figures


def test_no_pymalloc_no_wrapper():
    # Under PYTHONMALLOC=malloc the arena allocator still hands out blocks (frames' data
    # stack, extensions'): none is recorded, and nothing is given back.
    code = ARENA_ALLOCATOR + """
arenapool.install()
allocator = arena_allocator()
block = allocator.alloc(allocator.ctx, 1 << 20)
print(json.dumps([_arenapool.pymalloc_arenas_made(), _arenapool.pymalloc_pools_off()]))
"""
    made, off = run_fresh(code, env={"PYTHONMALLOC": "malloc"})
    assert made == 0
    assert "pymalloc is not the object allocator" in off


@pytest.mark.skipif(sys.version_info >= (3, 10), reason="pools are a page each only before 3.10")
def test_pools_of_a_page_are_not_given_back():
    figures = run()
    assert "a page each" in figures["off"], figures
    assert not gave_back(figures), figures
