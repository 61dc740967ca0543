"""The hooks on CPython's raw allocator and numpy's handler: what they take, that every
block is freed by the allocator that made it, installing twice, removing, other hooks."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

import arenapool
from arenapool import _arenapool

from conftest import run_fresh


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture(autouse=True)
def installed():
    arenapool.install()
    yield
    arenapool.set_threshold(None)


def test_large_blocks_are_arenapools_small_ones_are_not():
    big = np.ones(50_000)
    small = np.ones(100)
    assert _arenapool.owns(address(big))
    assert not _arenapool.owns(address(small))
    assert big.sum() == 50_000


def test_blocks_made_by_cpython_go_through_the_hook():
    before = _arenapool.raw_live_blocks()
    blocks = [bytearray(200_000) for _ in range(10)]
    assert _arenapool.raw_live_blocks() >= before + 10
    del blocks
    assert _arenapool.raw_live_blocks() <= before


def test_a_buffer_grown_past_the_threshold_moves_and_keeps_its_bytes():
    buf = bytearray()
    for i in range(200):
        buf += bytes([i % 251]) * 1000
    assert len(buf) == 200_000
    assert all(buf[i * 1000] == i % 251 for i in range(200))
    shrunk = bytes(buf[:100])
    assert shrunk == bytes(buf[:100])


def test_calloc_is_zeroed_and_realloc_keeps_data():
    a = np.zeros(1 << 20)
    assert _arenapool.owns(address(a)) and not a.any()
    b = np.arange(100_000, dtype=np.int64)
    b.resize(300_000, refcheck=False)
    assert (b[:100_000] == np.arange(100_000)).all() and not b[100_000:].any()
    b.resize(10, refcheck=False)
    assert list(b) == list(range(10))


def test_installing_twice_changes_nothing():
    arenapool.install()
    arenapool.install()
    assert arenapool.installed()
    assert _arenapool.raw_state() == "top"
    a = np.ones(50_000)
    assert _arenapool.owns(address(a))


def test_threshold():
    assert arenapool.threshold() == 64 << 10
    arenapool.set_threshold(1 << 20)
    assert not _arenapool.owns(address(np.ones(50_000)))
    assert _arenapool.owns(address(np.ones(200_000)))
    arenapool.set_threshold(None)
    assert _arenapool.owns(address(np.ones(50_000)))
    with pytest.raises(ValueError, match="phase threshold"):
        arenapool.set_threshold(1024)
    with pytest.raises(TypeError):
        arenapool.set_threshold("64k")  # type: ignore[arg-type]


def test_the_default_threshold_is_above_the_phases_one_as_jemalloc_gives_it():
    # With no setting given to jemalloc, the hooks take the default threshold without
    # asking jemalloc for the phases' one (the interpreter's start under ARENAPOOL=on
    # makes no control call): it must be the larger of the two.
    assert "_RJEM_MALLOC_CONF" not in os.environ
    assert _arenapool.phase_threshold() <= 64 << 10 == arenapool.threshold()


@pytest.mark.parametrize("nbytes", [-1, 0, 1024, 32 << 10, 2**63, 2**70])
def test_a_threshold_out_of_range_is_one_value_error_giving_the_range(nbytes):
    smallest = _arenapool.phase_threshold()
    with pytest.raises(ValueError) as error:
        arenapool.set_threshold(nbytes)
    assert f"must be from {smallest} " in str(error.value)
    assert f"to {sys.maxsize} " in str(error.value)
    assert str(error.value).endswith(f"got {nbytes}. To stop the hooks taking blocks, call arenapool.uninstall()")
    assert arenapool.threshold() == 64 << 10  # unchanged
    with pytest.raises(ValueError, match="must be from"):
        arenapool.install(threshold=nbytes)


def test_the_ends_of_the_threshold_range_are_accepted():
    for nbytes in (_arenapool.phase_threshold(), sys.maxsize):
        arenapool.set_threshold(nbytes)
        assert arenapool.threshold() == nbytes


@pytest.mark.parametrize("value", ["yes", 1, 0, "False"])
def test_install_numpy_takes_a_bool_or_none_only(value):
    with pytest.raises(TypeError, match=r"numpy=\.\.\.\) takes True, False or None"):
        arenapool.install(numpy=value)


def test_every_thread_has_numpys_handler():
    # numpy 2's module, which numpy 1.26 has too (it forwards to numpy.core.multiarray).
    from numpy._core.multiarray import get_handler_name

    seen = {}

    def worker():
        seen["handler"] = get_handler_name()
        seen["ours"] = _arenapool.owns(address(np.ones(50_000)))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["ours"], seen
    assert seen["handler"] == "arenapool", seen


def test_arrays_made_before_install_are_freed_by_numpy():
    run_fresh(
        """
        import json, numpy as np
        before = [np.ones(50_000) for _ in range(50)] + [np.ones(10) for _ in range(50)]
        import arenapool
        from arenapool import _arenapool
        arenapool.install()
        after = [np.ones(50_000) for _ in range(50)]
        assert not any(_arenapool.owns(a.__array_interface__["data"][0]) for a in before)
        assert all(_arenapool.owns(a.__array_interface__["data"][0]) for a in after)
        del before
        arenapool.uninstall()
        late = np.ones(50_000)
        assert not _arenapool.owns(late.__array_interface__["data"][0])
        del after, late
        print(json.dumps(True))
        """
    )


def test_arrays_cross_threads_and_are_freed_right():
    made = []

    def worker(n):
        made.extend(np.full(50_000, n) for _ in range(20))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted({int(a[0]) for a in made}) == [0, 1, 2, 3]
    del made


def test_uninstall_and_install_again():
    run_fresh(
        """
        import json, numpy as np, arenapool
        from arenapool import _arenapool
        arenapool.install()
        kept = np.ones(50_000)
        raw = bytearray(200_000)
        gone = arenapool.uninstall()          # blocks of ours are alive: the hook stays
        assert gone is False and not arenapool.installed(), gone
        assert not _arenapool.owns(np.ones(50_000).__array_interface__["data"][0])
        del kept, raw                         # freed by the hook that made them
        assert arenapool.uninstall() is True  # now it can leave
        assert _arenapool.raw_state() == "absent"
        arenapool.install()
        assert arenapool.installed() and _arenapool.raw_state() == "top"
        assert _arenapool.owns(np.ones(50_000).__array_interface__["data"][0])
        print(json.dumps(True))
        """
    )


def test_a_hook_installed_after_arenapool_keeps_it_in_the_chain():
    run_fresh(
        """
        import json, tracemalloc, numpy as np, arenapool
        from arenapool import _arenapool
        arenapool.install()
        tracemalloc.start()                   # wraps arenapool's hook
        blocks = [bytearray(100_000) for _ in range(10)]
        assert _arenapool.raw_state() == "wrapped"
        assert arenapool.uninstall() is False # cannot leave from under tracemalloc
        del blocks
        tracemalloc.stop()                    # puts arenapool's hook back on top
        assert arenapool.uninstall() is True
        print(json.dumps(True))
        """
    )


def test_installed_over_tracemalloc():
    run_fresh(
        """
        import json, tracemalloc, numpy as np, arenapool
        from arenapool import _arenapool
        # A phase's end imports the breakdown's module the first time: imported after
        # install(), its objects' blocks (arenapool's) would keep the hook in the chain.
        import arenapool._core._breakdown
        tracemalloc.start()
        arenapool.install()                   # goes under tracemalloc
        assert _arenapool.raw_state() == "wrapped"
        with arenapool.phase():
            blocks = [np.ones(50_000) for _ in range(100)] + [bytearray(10_000)]
            raw = [bytes(1 << 20) for _ in range(4)]
        small, peak = tracemalloc.get_traced_memory()
        assert peak >= 4 << 20                # tracemalloc traces arenapool's blocks too
        del blocks, raw
        assert arenapool.uninstall() is False # cannot leave from under tracemalloc
        tracemalloc.stop()                    # puts arenapool's hook on top
        assert _arenapool.raw_state() == "top"
        assert arenapool.uninstall() is True
        print(json.dumps(peak))
        """
    )


def test_a_look_alike_of_tracemalloc_is_refused_and_left_as_it_was():
    # tracemalloc's own functions set over it again, each given as its context a copy
    # made at run time of the allocator tracemalloc wraps: laid out as tracemalloc's
    # (three allocators side by side, its functions), and working (its functions pass
    # each block to the allocator their context names). install() must refuse, and
    # write no byte: neither in the copy, where the raw domain's context points, nor in
    # tracemalloc's own, nor in the domains' tables.
    out = run_fresh(
        """
        import ctypes, json, tracemalloc, arenapool

        class Allocator(ctypes.Structure):
            FIELDS = ("ctx", "malloc", "calloc", "realloc", "free")
            _fields_ = [(name, ctypes.c_void_p) for name in FIELDS]

        get, put = ctypes.pythonapi.PyMem_GetAllocator, ctypes.pythonapi.PyMem_SetAllocator
        get.argtypes = put.argtypes = [ctypes.c_int, ctypes.POINTER(Allocator)]
        get.restype = put.restype = None
        DOMAINS = (1, 0, 2)                   # PYMEM_DOMAIN_MEM, _RAW, _OBJ

        def tables():
            found = [Allocator() for _ in DOMAINS]
            for domain, allocator in zip(DOMAINS, found):
                get(domain, allocator)
            return found

        tracemalloc.start()
        traced = tables()
        assert [a.ctx - traced[0].ctx for a in traced] == [0, 40, 80], "tracemalloc's layout"
        wrapped = (Allocator * 3).from_address(traced[0].ctx)
        copy = (Allocator * 3)()
        ctypes.memmove(copy, wrapped, ctypes.sizeof(copy))
        for i, (domain, allocator) in enumerate(zip(DOMAINS, traced)):
            look_alike = Allocator(ctypes.addressof(copy[i]), allocator.malloc,
                                   allocator.calloc, allocator.realloc, allocator.free)
            put(domain, look_alike)

        def memory():
            return [bytes(copy), bytes(wrapped)] + [bytes(a) for a in tables()]

        before = memory()
        try:
            arenapool.install()
            refused = None
        except arenapool.ArenaPoolError as error:
            refused = str(error)
        after = memory()
        for domain, allocator in zip(DOMAINS, traced):
            put(domain, allocator)
        tracemalloc.stop()
        print(json.dumps({"refused": refused, "unchanged": [b == a for b, a in zip(before, after)]}))
        """
    )
    assert out["refused"] and "not the ones tracemalloc sets" in out["refused"], out
    assert out["unchanged"] == [True] * 5, out


# tracemalloc started and stopped around install() in every order, with arenapool's
# blocks alive across each change; every block is freed by the allocator that made it
# (a block of arenapool's freed by the system's free() aborts the process).
TRACEMALLOC_ORDERS = {
    "start, install, stop": ["start", "install", "alloc", "stop", "free"],
    "start, install, stop, start, stop": ["start", "install", "alloc", "stop", "start", "alloc", "stop", "free"],
    "install, start, stop": ["install", "start", "alloc", "stop", "free"],
    "install, start, uninstall, stop, install": ["install", "start", "alloc", "uninstall", "stop", "install", "alloc", "free"],
    "start, install, exit": ["start", "install", "alloc"],  # -X tracemalloc: stopped at exit
}


@pytest.mark.parametrize("order", TRACEMALLOC_ORDERS)
def test_tracemalloc_started_and_stopped_in_any_order(order):
    steps = TRACEMALLOC_ORDERS[order]
    states = run_fresh(
        f"""
        import ctypes, json, tracemalloc, arenapool
        from arenapool import _arenapool
        blocks, states = [], []
        def arenapools(block):
            return _arenapool.owns(ctypes.addressof((ctypes.c_char * 1).from_buffer(block)))
        for step in {steps!r}:
            if step == "start":
                tracemalloc.start()
            elif step == "stop":
                tracemalloc.stop()
            elif step == "install":
                arenapool.install()
            elif step == "uninstall":
                arenapool.uninstall()
            elif step == "alloc":
                with arenapool.phase():
                    blocks += [bytearray(1 << 20) for _ in range(8)]
                assert all(arenapools(block) for block in blocks)
            elif step == "free":
                blocks.clear()
            states.append(_arenapool.raw_state())
        print(json.dumps(states))
        """
    )
    assert len(states) == len(steps)
    # Where it is said to be: under tracemalloc while it traces, on top once it stopped.
    for step, state in zip(steps, states):
        if step == "stop":
            assert state == "top", (steps, states)


@pytest.mark.parametrize("mode", ["debug", "malloc", "pymalloc_debug"])
def test_pythonmalloc(mode):
    run_fresh(
        """
        import json, numpy as np, arenapool
        with arenapool.phase():
            arrays = [np.ones(50_000) for _ in range(200)]
            buf = bytearray()
            for i in range(100):
                buf += b"x" * 10_000
            blobs = [bytes(300_000) for _ in range(50)]
        assert sum(a.sum() for a in arrays) == 200 * 50_000 and len(buf) == 1_000_000
        del arrays, buf, blobs
        print(json.dumps(True))
        """,
        env={"PYTHONMALLOC": mode},
    )


def test_numpy_less_install():
    with pytest.raises(ImportError, match="numpy"):
        run_fresh_raising_import()


def run_fresh_raising_import():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import arenapool\n"
        "arenapool.install()\n"  # numpy missing: the raw hook alone
        "assert arenapool.installed()\n"
        "arenapool.install(numpy=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if "ImportError" in out.stderr and "pip install" in out.stderr:
        raise ImportError("numpy: " + out.stderr.strip().splitlines()[-1])
    pytest.fail(f"expected a clear ImportError:\n{out.stderr}")


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
    reason="this kernel has no transparent huge pages",
)
def test_large_arrays_are_advised_huge_pages_as_numpys_own_handler_advises_them():
    # numpy's own handler advises huge pages for arrays of 4 MiB and more unless its
    # setting is off; arenapool's follows the setting as install() finds it. In a fresh
    # program: pages advised once keep the advice after their array is freed.
    out = run_fresh(
        """
        import json
        import numpy as np
        try:
            from numpy._core.multiarray import _set_madvise_hugepage
        except ImportError:
            from numpy.core.multiarray import _set_madvise_hugepage
        import arenapool
        from arenapool import _arenapool

        def vm_flags(address):
            # The kernel's flags of the mapping that holds `address`.
            with open("/proc/self/smaps") as smaps:
                inside = False
                for line in smaps:
                    head = line.split()[0]
                    if "-" in head and not head.endswith(":"):
                        low, high = (int(x, 16) for x in head.split("-"))
                        inside = low <= address < high
                    elif inside and line.startswith("VmFlags:"):
                        return line.split(":", 1)[1].split()
            raise AssertionError(hex(address))

        def seen(array):
            page = array.__array_interface__["data"][0] + 8192  # inside the block
            return [_arenapool.owns(page), "hg" in vm_flags(page)]

        _set_madvise_hugepage(False)
        arenapool.install()
        off = np.ones(2_000_000)  # 16 MB
        _set_madvise_hugepage(True)
        arenapool.install()
        on = np.ones(2_000_000)
        small = np.ones(400_000)  # 3.2 MB: below numpy's 4 MiB
        print(json.dumps([seen(off), seen(on), seen(small)]))
        """
    )
    assert out == [[True, False], [True, True], [True, False]], out
