"""Fork safety: children made by fork while phases are open and other threads allocate.

Each program runs in a fresh interpreter with a time limit, in a session of its own:
a hung child (or parent) is killed with the whole session, and fails its test instead
of hanging the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, List

import pytest

from conftest import run_in_session

SCRIPT = Path(__file__).with_name("fork_safety.py")
FORKS = 100  # tests/fork_safety.py's default is 500
CHILD_DEADLINE = 20  # seconds a child may take before it counts as hung


def last_json(result: "subprocess.CompletedProcess[str]") -> Any:
    lines = result.stdout.strip().splitlines()
    if not lines:
        pytest.fail(f"no output (exit status {result.returncode}):\n{result.stderr}")
    return json.loads(lines[-1])


def test_children_forked_while_threads_churn_phases_exit_in_time() -> None:
    result = run_in_session(
        [sys.executable, str(SCRIPT), "--forks", str(FORKS), "--deadline", str(CHILD_DEADLINE)],
        timeout=FORKS * 0.05 + CHILD_DEADLINE + 120,
    )
    counts = last_json(result)
    assert counts["hung"] == 0, (
        f"{counts['hung']} of {FORKS} children forked while 3 threads opened and ended "
        f"phases hung (alive {CHILD_DEADLINE} s after they started, then killed): {counts}"
    )
    assert counts["exited 0"] == FORKS and result.returncode == 0, (counts, result.stderr)


@pytest.mark.parametrize("how", ["multiprocessing", "os.fork"])
def test_a_child_forked_inside_a_phase_sees_no_phase_open(how: str) -> None:
    code = textwrap.dedent(
        f"""
        import json, multiprocessing, os
        import numpy as np
        import arenapool

        def child(report):
            seen = arenapool.phase_is_open()
            with arenapool.phase() as p:  # a phase of the child's own
                inside = arenapool.phase_is_open()
                array = np.ones(1 << 20)
                del array
            os.write(report, json.dumps([seen, inside, arenapool.phase_is_open(),
                                         p.report is not None]).encode())
            os._exit(0)

        with arenapool.phase():
            read, write = os.pipe()
            if {how!r} == "os.fork":
                pid = os.fork()
                if pid == 0:
                    child(write)
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
            else:
                process = multiprocessing.get_context("fork").Process(target=child, args=(write,))
                process.start()
                process.join()
                code = process.exitcode
            os.close(write)
            seen_by_child = json.loads(os.read(read, 1000))
            still_open = arenapool.phase_is_open()
        print(json.dumps([code, seen_by_child, still_open, arenapool.phase_is_open()]))
        """
    )
    result = run_in_session([sys.executable, "-c", code], timeout=60)
    code, (seen, inside, after, reported), parent_inside, parent_after = last_json(result)
    assert code == 0, result.stderr
    assert not seen, "the child saw its parent's phase open"
    assert inside and reported and not after, "the child's own phase did not open and end"
    assert parent_inside and not parent_after, "the parent's phase changed"


def test_a_forked_child_that_never_installs_gives_back_what_it_freed_once_idle() -> None:
    # A worker of multiprocessing.Pool under fork: the hooks are its parent's, and it
    # never calls install(). What its tasks free outside phases goes back once it is
    # idle, as in its parent: its own thread of the idle return starts at the fork.
    code = textwrap.dedent(
        """
        import json, os, time, warnings
        import arenapool

        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: a fork of a process with threads

        def rss_mib():
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        arenapool.install(numpy=False)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            start = rss_mib()
            block = bytearray(b"x") * (64 << 20)  # through the hooks, outside phases
            held = rss_mib() - start
            del block
            deadline = time.monotonic() + 30
            while rss_mib() - start > 16 and time.monotonic() < deadline:
                time.sleep(0.05)
            os.write(write, json.dumps([held, rss_mib() - start]).encode())
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        os.close(write)
        print(json.dumps([os.waitstatus_to_exitcode(status), json.loads(os.read(read, 10000))]))
        """
    )
    result = run_in_session([sys.executable, "-c", code], timeout=90)
    status, (held, left) = last_json(result)
    assert status == 0, result.stderr
    assert held > 48, f"the child held {held:.0f} MiB with its 64 MiB block alive"
    assert left <= 16, f"the child still held {left:.0f} MiB 30 s after freeing its 64 MiB block"


def test_a_child_of_an_armed_start_starts_its_own_idle_return_at_4_mib() -> None:
    # ARENAPOOL=on arms the idle return; a child forked before 4 MiB of large blocks is
    # armed with its own count: its 8 MiB start its thread, the parent stays one thread.
    code = textwrap.dedent(
        """
        import json, os, time

        def threads():
            return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")
                          if int(t) != os.getpid())

        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            before = threads()
            block = bytearray(8 << 20)
            deadline = time.monotonic() + 30
            while "arenapool-idle" not in (after := threads()) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.write(write, json.dumps([before, after]).encode())
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        os.close(write)
        print(json.dumps([os.waitstatus_to_exitcode(status), threads(), json.loads(os.read(read, 10000))]))
        """
    )
    env = {key: value for key, value in os.environ.items() if key != "ARENAPOOL"}
    env["ARENAPOOL"] = "on"
    result = run_in_session([sys.executable, "-c", code], timeout=60, env=env)
    status, parent, (child_before, child_after) = last_json(result)
    assert status == 0, result.stderr
    assert parent == [] and child_before == [], (parent, child_before)
    assert "arenapool-idle" in child_after, f"the child started no idle return: its threads are {child_after}"


def test_a_child_forked_right_after_install_starts_its_idle_return() -> None:
    # Forked before the parent's first phase or scope: the child, as a fresh process,
    # starts the thread that gives back what it holds once idle, at its install().
    code = textwrap.dedent(
        """
        import json, os, time, warnings
        import arenapool

        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: a fork of a process with threads

        def threads():
            names = []
            for task in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{task}/comm") as comm:
                        names.append(comm.read().strip())
                except OSError:  # a thread that ended meanwhile
                    pass
            return sorted(names)

        def threads_once_idle_named(seconds=20):
            # A new thread names itself as it begins: wait for the name, not longer.
            deadline = time.monotonic() + seconds
            while "arenapool-idle" not in (names := threads()) and time.monotonic() < deadline:
                time.sleep(0.01)
            return names

        arenapool.install(numpy=False)  # numpy's import would open the allocator's first section
        parent = threads_once_idle_named()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            arenapool.install(numpy=False)
            os.write(write, json.dumps(threads_once_idle_named()).encode())
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        os.close(write)
        print(json.dumps([os.waitstatus_to_exitcode(status), parent, json.loads(os.read(read, 10000))]))
        """
    )
    result = run_in_session([sys.executable, "-c", code], timeout=60)
    status, parent, child = last_json(result)
    assert status == 0, result.stderr
    assert "arenapool-idle" in parent, parent
    assert "arenapool-idle" in child, f"the child started no idle return: its threads are {child}"
