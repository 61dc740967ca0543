"""Tests of arenapool.mpi: every test runs an MPI program under mpirun, in a subprocess.

Field report S3's loop must run in flat memory, its broken versions must be caught by
the same measurement, and bad input must give a clear error on every rank instead of
a hang or a crash. The small programs of the error cases are written into the test's
temporary folder. Every run has a time limit, so a hang fails its test instead of the
whole run. The tests are skipped, with the reason, where mpi4py or mpirun is missing, unless
the environment sets ARENAPOOL_REQUIRE_MPI=1: then they fail, as does any other skip of
this module's tests.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, NamedTuple

import pytest

MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
LOOP = Path(__file__).with_name("mpi_loop.py")
# The report's loop: 20,000 iterations take 30 s on 2 idle cores, 100 s on 2 busy ones;
# ARENAPOOL_MPI_ITERATIONS sets fewer (at least 2,000) for slower machines.
ITERATIONS = max(2_000, int(os.environ.get("ARENAPOOL_MPI_ITERATIONS", "20000")))
LOOP_SECONDS = 300  # time limit of a loop run
CASE_SECONDS = 60  # time limit of an error case (each takes about a second)

# With ARENAPOOL_REQUIRE_MPI=1, a test of this module that would skip fails instead
# (conftest.py).
pytestmark = pytest.mark.mpi

needs_mpi = pytest.mark.skipif(
    not HAVE_MPI4PY or MPIRUN is None,
    reason="needs mpi4py (pip install mpi4py) and an MPI library's mpirun or mpiexec"
    if not HAVE_MPI4PY
    else "needs mpirun or mpiexec on PATH (install OpenMPI or MPICH)",
)
needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/status")
    or "RssShmem" not in Path("/proc/self/status").read_text(),
    reason="the memory figures come from /proc/self/status (Linux 4.5 or later)",
)


class Run(NamedTuple):
    """How an MPI program ended: its exit status and its output."""

    returncode: int
    stdout: str
    stderr: str

    def lines(self, start: str) -> List[str]:
        """The lines of stdout that start with ``start``."""
        return [line for line in self.stdout.splitlines() if line.startswith(start)]

    def describe(self) -> str:
        """Everything about the run, for an assertion's message."""
        return (
            f"exit status {self.returncode}\n--- stdout\n{self.stdout}\n"
            f"--- stderr\n{self.stderr}"
        )


@functools.lru_cache(maxsize=None)
def is_openmpi() -> bool:
    """Whether mpirun is OpenMPI's, which takes options that other MPI libraries do not."""
    version = subprocess.run(
        [str(MPIRUN), "--version"], capture_output=True, text=True, timeout=CASE_SECONDS
    )
    return "Open MPI" in version.stdout + version.stderr


def mpirun(ranks: int, *arguments: str, options: tuple = ()) -> List[str]:
    """The command that runs ``python ARGUMENTS`` on ``ranks`` ranks of this machine."""
    command = [str(MPIRUN), "-n", str(ranks)]
    if is_openmpi():
        # More ranks than cores are allowed; on a machine busy with other work, ranks
        # that wait in MPI yield the CPU instead of spinning on it (without this, the
        # loop of 20,000 iterations took 15 times longer on a loaded 2-core machine).
        command += ["--oversubscribe", "--bind-to", "none"]
        command += ["--mca", "mpi_yield_when_idle", "1"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-run-as-root")
    return command + list(options) + [sys.executable, *arguments]


def run(command: List[str], timeout: float) -> Run:
    """Run ``command`` in a session of its own; kill all of it if it hangs."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{' '.join(command)} hung: no end within {timeout} s\n"
            + Run(process.returncode, stdout, stderr).describe()
        )
    return Run(process.returncode, stdout, stderr)


# What every error-case program starts with: `say` prints one whole line at once, so
# that lines from different ranks do not mix; `still_works` shows that a good shared
# array can be made, written (by the first rank of each node) and read after the error,
# on every rank.
PREAMBLE = '''
import sys
import numpy as np
from mpi4py import MPI
from arenapool.mpi import MismatchError, OtherRankError, ViewsAliveError, shared_array

comm = MPI.COMM_WORLD
rank = comm.rank


def say(text):
    sys.stdout.write(f"rank {rank}: {text}\\n")
    sys.stdout.flush()


def report(error):
    say(f"{type(error).__name__}: {error}")


def still_works():
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    first_on_node = node.rank == 0
    node.Free()
    with shared_array(comm, 1000) as a:
        if first_on_node:
            a[:] = 1
        comm.Barrier()
        assert a.sum() == 1000
    say("still works")
'''


def run_case(tmp_path: Path, body: str, ranks: int = 2, options: tuple = ()) -> Run:
    """Write PREAMBLE + ``body`` to a program and run it on ``ranks`` ranks."""
    program = tmp_path / "case.py"
    program.write_text(PREAMBLE + textwrap.dedent(body))
    return run(mpirun(ranks, str(program), options=options), CASE_SECONDS)


def only_line(result: Run, rank: int) -> str:
    """The one error line printed by ``rank`` (any line other than 'still works')."""
    lines = [line for line in result.lines(f"rank {rank}: ") if not line.endswith("still works")]
    assert len(lines) == 1, result.describe()
    return lines[0]


def assert_still_works(result: Run, ranks: int = 2) -> None:
    assert result.returncode == 0, result.describe()
    for rank in range(ranks):
        assert f"rank {rank}: still works" in result.stdout.splitlines(), result.describe()


def shared_memory_free() -> int:
    if not os.path.isdir("/dev/shm"):
        return 0
    stats = os.statvfs("/dev/shm")
    return stats.f_bavail * stats.f_frsize


# --- report S3's loop ---------------------------------------------------------------


@needs_mpi
@needs_proc
def test_loop_of_20000_shared_arrays_runs_in_flat_memory() -> None:
    # 1 MiB over 19,000 iterations: a leak of 56 bytes per iteration would show.
    result = run(mpirun(2, str(LOOP), str(ITERATIONS), "--warmup", "1000"), LOOP_SECONDS)
    assert result.returncode == 0, result.describe()
    for rank in (0, 1):
        [line] = result.lines(f"rank {rank}: fixed, {ITERATIONS} iterations")
        assert "flat, within 1 MiB" in line, result.describe()


@needs_mpi
@needs_proc
def test_loop_never_freeing_its_windows_is_caught() -> None:
    # 300 windows of 800 KB, every rank reading each: 229 MiB of shared memory on every
    # rank, 153 MiB of it after the warm-up, against a limit of 1 MiB.
    if shared_memory_free() < 512 << 20:
        pytest.skip("needs 512 MiB free in /dev/shm for the leaked windows")
    result = run(mpirun(2, str(LOOP), "--leak", "window", "300", "--warmup", "100"), LOOP_SECONDS)
    assert result.returncode != 0, result.describe()
    for rank in (0, 1):
        [line] = result.lines(f"rank {rank}: window, 300 iterations")
        assert "GREW by more than 1 MiB" in line, result.describe()


@needs_mpi
@needs_proc
def test_loop_never_freeing_its_node_communicators_is_caught() -> None:
    # OpenMPI keeps about 7 KB per communicator never freed: 7 MiB over 1,000
    # iterations. Other MPI libraries keep other amounts.
    if not is_openmpi():
        pytest.skip("the size of a leaked communicator is known for OpenMPI only")
    result = run(mpirun(2, str(LOOP), "--leak", "comm", "2000", "--warmup", "1000"), LOOP_SECONDS)
    assert result.returncode != 0, result.describe()
    for rank in (0, 1):
        [line] = result.lines(f"rank {rank}: comm, 2000 iterations")
        assert "GREW by more than 1 MiB" in line, result.describe()


@needs_mpi
@needs_proc
def test_loop_on_one_rank_runs_in_flat_memory() -> None:
    result = run(mpirun(1, str(LOOP), "3000", "--warmup", "1000"), LOOP_SECONDS)
    assert result.returncode == 0, result.describe()
    [line] = result.lines("rank 0: fixed, 3000 iterations")
    assert "flat, within 1 MiB" in line, result.describe()


# --- bad input ------------------------------------------------------------------------


@needs_mpi
@pytest.mark.parametrize(
    "arguments, asked",
    [
        (
            "100 + rank",
            ["rank 0 asked for shape (100,) of float64", "rank 1 asked for shape (101,) of"],
        ),
        (
            "(4, 5), dtype=np.float64 if rank == 0 else np.int32",
            ["rank 0 asked for shape (4, 5) of float64", "rank 1 asked for shape (4, 5) of int32"],
        ),
    ],
    ids=["shapes", "dtypes"],
)
def test_ranks_asking_for_different_arrays_get_an_error_on_every_rank(
    tmp_path: Path, arguments: str, asked: List[str]
) -> None:
    result = run_case(
        tmp_path,
        f"""
        try:
            with shared_array(comm, {arguments}) as a:
                say("made an array")
        except MismatchError as error:
            report(error)
        still_works()
        """,
    )
    assert_still_works(result)
    for rank in (0, 1):
        line = only_line(result, rank)
        assert "MismatchError: every rank of a node must pass the same shape and dtype" in line
        for text in asked:
            assert text in line, line


@needs_mpi
def test_a_negative_dimension_on_one_rank_is_an_error_on_every_rank(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        try:
            with shared_array(comm, (10, -3) if rank == 1 else (10, 3)) as a:
                say("made an array")
        except (ValueError, OtherRankError) as error:
            report(error)
        still_works()
        """,
    )
    assert_still_works(result)
    assert "ValueError: shape (10, -3) has a negative dimension" in only_line(result, 1)
    line = only_line(result, 0)
    assert line.startswith("rank 0: OtherRankError: rank 1 could not make its shared array"), line
    assert "shape (10, -3) has a negative dimension" in line


@needs_mpi
@pytest.mark.parametrize("dtype", ["object", "[('name', object), ('x', float)]"])
def test_dtypes_holding_python_objects_are_refused(tmp_path: Path, dtype: str) -> None:
    result = run_case(
        tmp_path,
        f"""
        try:
            with shared_array(comm, 10, dtype={dtype}) as a:
                say("made an array")
        except TypeError as error:
            report(error)
        still_works()
        """,
    )
    assert_still_works(result)
    for rank in (0, 1):
        line = only_line(result, rank)
        assert line.startswith(f"rank {rank}: TypeError: dtype "), line
        assert "holds Python objects" in line and "cannot be shared" in line, line


@needs_mpi
def test_an_array_larger_than_the_shared_memory_is_refused(tmp_path: Path) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("the free-space check reads /dev/shm")
    result = run_case(
        tmp_path,
        """
        try:
            with shared_array(comm, 10**15) as a:  # 8 PB
                say("made an array")
        except MemoryError as error:
            report(error)
        still_works()
        """,
    )
    assert_still_works(result)
    for rank in (0, 1):
        line = only_line(result, rank)
        assert line.startswith(f"rank {rank}: MemoryError: the shared array needs "), line
        assert "but the node's shared memory (/dev/shm) has only" in line, line
        assert "SIGBUS" in line, line


# --- views that outlive the block -----------------------------------------------------


@needs_mpi
def test_a_view_alive_after_the_block_is_an_error_and_the_memory_stays_valid(
    tmp_path: Path,
) -> None:
    result = run_case(
        tmp_path,
        """
        try:
            with shared_array(comm, 100) as a:
                if rank == 0:
                    a[:] = 2
                comm.Barrier()
                tail = a[10:]
        except ViewsAliveError as error:
            report(error)
        assert tail.sum() == 180  # the window was kept: the view still reads its memory
        del tail, a
        still_works()
        """,
    )
    assert_still_works(result)
    for rank in (0, 1):
        line = only_line(result, rank)
        assert line.startswith(f"rank {rank}: ViewsAliveError: the shared array must not be"), line
        assert f"1 on rank {rank} (this rank)" in line, line
        assert "the window was NOT freed" in line and "Drop views before the block ends" in line


@needs_mpi
def test_a_view_alive_on_one_rank_is_an_error_on_every_rank(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        try:
            with shared_array(comm, 100) as a:
                if rank == 1:
                    kept = [a.T, memoryview(a)]
        except ViewsAliveError as error:
            report(error)
        if rank == 1:
            del kept
        still_works()
        """,
    )
    assert_still_works(result)
    assert "(2 on rank 1 (this rank))" in only_line(result, 1)
    line = only_line(result, 0)
    assert line.startswith("rank 0: ViewsAliveError:") and "(2 on rank 1)" in line, line


@needs_mpi
def test_views_dropped_inside_the_block_and_no_as_name_are_fine(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        def total(a):
            halves = a.reshape(2, -1)  # a view, gone when the function returns
            return float(halves.sum())

        with shared_array(comm, 100) as a:
            if rank == 0:
                a[:] = 1
            comm.Barrier()
            view = a[1:]
            assert view.sum() == 99
            del view
            assert total(a) == 100
        with shared_array(comm, 100):
            pass
        with shared_array(comm, 100) as a:
            del a
        still_works()
        """,
    )
    assert_still_works(result)


@needs_mpi
def test_the_as_name_is_read_only_after_the_block(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        with shared_array(comm, 100) as a:
            pass
        try:
            a[0] = 1.0
        except ValueError as error:
            report(error)
        del a
        still_works()
        """,
    )
    assert_still_works(result)
    for rank in (0, 1):
        assert "ValueError: assignment destination is read-only" in only_line(result, rank)


# --- a rank that fails inside the block ----------------------------------------------


@needs_mpi
def test_an_exception_in_the_block_on_one_rank_does_not_hang_the_other(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        try:
            with shared_array(comm, 100) as a:
                if rank == 1:
                    raise RuntimeError("rank 1 failed")
        except (RuntimeError, OtherRankError) as error:
            report(error)
        still_works()
        """,
    )
    assert_still_works(result)
    assert only_line(result, 1) == "rank 1: RuntimeError: rank 1 failed"
    line = only_line(result, 0)
    assert line.startswith(
        "rank 0: OtherRankError: rank 1 raised RuntimeError('rank 1 failed') inside its"
    ), line
    assert "The window of this rank's node was freed." in line, line


@needs_mpi
def test_an_exception_from_a_function_holding_a_view_keeps_the_window(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        def fail(a):
            head = a[:10]
            raise KeyError("missing")

        try:
            with shared_array(comm, 100) as a:
                if rank == 1:
                    fail(a)
        except (KeyError, OtherRankError) as error:
            report(error)
            for note in getattr(error, "__notes__", []):
                say(f"note: {note}")
        still_works()
        """,
    )
    assert_still_works(result)
    rank_1 = result.lines("rank 1: ")
    assert "rank 1: KeyError: 'missing'" in rank_1, result.describe()
    if sys.version_info >= (3, 11):
        assert any("its window was kept" in line for line in rank_1), result.describe()
    line = only_line(result, 0)
    assert line.startswith("rank 0: OtherRankError: rank 1 raised KeyError('missing')"), line
    assert "the window was NOT freed" in line, line


@needs_mpi
def test_an_uncaught_exception_on_one_rank_ends_the_job(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        with shared_array(comm, 100) as a:
            if rank == 1:
                raise RuntimeError("rank 1 failed")
        say("went on")
        """,
    )
    assert result.returncode != 0, result.describe()
    assert "went on" not in result.stdout, result.describe()
    # Both ranks' tracebacks reach one stderr, and the interpreter writes an error's
    # type, ": " and message separately: the other rank's lines can come in between.
    # So each piece written at once is looked for on its own.
    for piece in (
        "RuntimeError",
        "rank 1 failed",
        "OtherRankError",
        "rank 1 raised RuntimeError('rank 1 failed') inside its",
    ):
        assert piece in result.stderr, result.describe()


# --- communicators of one rank and of several nodes ------------------------------------


@needs_mpi
def test_a_communicator_of_one_rank_gives_each_rank_its_own_array(tmp_path: Path) -> None:
    result = run_case(
        tmp_path,
        """
        with shared_array(MPI.COMM_SELF, 10 + rank) as a:  # sizes may differ: two arrays
            a[:] = rank + 1
            comm.Barrier()
            say(f"sum {a.sum():.0f}")
        still_works()
        """,
    )
    assert_still_works(result)
    assert "rank 0: sum 10" in result.stdout and "rank 1: sum 22" in result.stdout


@needs_mpi
def test_a_communicator_spanning_two_nodes_gives_each_node_its_own_array(
    tmp_path: Path,
) -> None:
    # OpenMPI can lay a job out as two nodes on one machine: `ras_base_multiplier 2`
    # counts the machine twice, `--map-by node` puts one rank on each, and an agent
    # standing in for ssh starts the second node's daemon here.
    if not is_openmpi():
        pytest.skip("simulating two nodes on one machine needs OpenMPI")
    agent = tmp_path / "start-here"
    agent.write_text('#!/bin/sh\nshift\nexec sh -c "$*"\n')
    agent.chmod(0o755)
    options = (
        "--mca", "ras_base_multiplier", "2",
        "--mca", "plm_rsh_agent", str(agent),
        "--map-by", "node",
    )  # fmt: skip
    result = run_case(
        tmp_path,
        """
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        assert node.size == 1, "not two nodes"
        node.Free()
        with shared_array(comm, 10 + rank) as a:  # one array per node: sizes may differ
            a[:] = rank + 1
            comm.Barrier()
            say(f"sum {a.sum():.0f}")
        try:
            with shared_array(comm, -1 if rank == 1 else 5) as a:
                pass
        except (ValueError, OtherRankError) as error:
            report(error)
        try:
            with shared_array(comm, 5) as a:
                if rank == 1:
                    view = a[1:]
        except ViewsAliveError as error:
            report(error)
        try:
            with shared_array(comm, 5) as a:
                if rank == 1:
                    raise RuntimeError("rank 1 failed")
        except (RuntimeError, OtherRankError) as error:
            report(error)
        still_works()
        """,
        options=options,
    )
    assert_still_works(result)
    assert "rank 0: sum 10" in result.stdout and "rank 1: sum 22" in result.stdout
    rank_0 = result.lines("rank 0: ")
    assert any(
        line.startswith("rank 0: OtherRankError: rank 1 could not make its shared array")
        for line in rank_0
    ), result.describe()
    assert any(
        "ViewsAliveError" in line and "on rank 1, on another node" in line for line in rank_0
    ), result.describe()
    assert any(
        line.startswith("rank 0: OtherRankError: rank 1 raised RuntimeError") for line in rank_0
    ), result.describe()


# --- without mpi4py ---------------------------------------------------------------------


def test_importing_without_mpi4py_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['mpi4py'] = None; import arenapool.mpi"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=CASE_SECONDS
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: arenapool.mpi: it needs mpi4py"), result.stderr
    assert "pip install mpi4py" in last and "MPI library" in last, result.stderr


def test_importing_with_mpi4py_but_no_mpi_library_says_what_to_install(tmp_path: Path) -> None:
    # mpi4py 4 raises RuntimeError from `from mpi4py import MPI` when it finds no MPI
    # library: a stand-in package that does the same.
    package = tmp_path / "mpi4py"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "MPI.py").write_text(
        "raise RuntimeError('cannot load MPI library\\n/usr/lib/libmpi.so: cannot open "
        "shared object file: No such file or directory')\n"
    )
    code = textwrap.dedent(
        """
        try:
            import arenapool.mpi
        except ImportError as error:
            print(type(error.__cause__).__name__, str(error.__cause__).splitlines()[0])
            raise
        """
    )
    result = _run_with_path_first(code, tmp_path)
    assert result.returncode != 0
    assert result.stdout.strip() == "RuntimeError cannot load MPI library", result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: arenapool.mpi: mpi4py is installed but cannot load an MPI library "
        "(cannot load MPI library). It needs an MPI library"
    ), result.stderr
    assert "apt-get install openmpi-bin libopenmpi-dev" in last, result.stderr


def test_the_errors_are_arenapool_errors_and_keep_their_messages(tmp_path: Path) -> None:
    # A stand-in mpi4py whose communicator fails at its first collective call: enough
    # to import arenapool.mpi and enter a shared_array, without an MPI library.
    package = tmp_path / "mpi4py"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "MPI.py").write_text(
        textwrap.dedent(
            """
            COMM_NULL = None
            COMM_TYPE_SHARED = 0

            class Win:
                pass

            class Intracomm:
                def Split_type(self, split_type):
                    raise OSError("the stand-in communicator cannot split")
            """
        )
    )
    code = textwrap.dedent(
        """
        import json, pickle
        import arenapool
        from mpi4py import MPI
        from arenapool.mpi import (
            MismatchError, OtherRankError, SharedArrayError, ViewsAliveError, shared_array)

        family = {}
        for error in (SharedArrayError("s"), MismatchError("m"), OtherRankError("o", 1, "KeyError"),
                      ViewsAliveError("v")):
            again = pickle.loads(pickle.dumps(error))
            family[type(error).__name__] = [
                isinstance(error, arenapool.ArenaPoolError), isinstance(error, RuntimeError),
                isinstance(error, ValueError), type(again).__name__, str(again)]
        block = shared_array(MPI.Intracomm(), 10)
        try:
            block.__enter__()
        except OSError:
            pass
        try:
            block.__enter__()
        except arenapool.ArenaPoolError as error:
            family["entered twice"] = [type(error).__name__, str(error)]
        print(json.dumps(family))
        """
    )
    result = _run_with_path_first(code, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    family = json.loads(result.stdout.strip().splitlines()[-1])
    assert family == {
        "SharedArrayError": [True, True, False, "SharedArrayError", "s"],
        "MismatchError": [True, True, True, "MismatchError", "m"],
        "OtherRankError": [True, True, False, "OtherRankError", "o"],
        "ViewsAliveError": [True, True, False, "ViewsAliveError", "v"],
        "entered twice": [
            "SharedArrayError",
            "a shared_array(...) can be entered only once; call shared_array again",
        ],
    }, family


def _run_with_path_first(code: str, first: Path) -> "subprocess.CompletedProcess[str]":
    """Runs `code` in a fresh interpreter whose imports look in `first` before anything
    else (where a test puts its stand-in `mpi4py`)."""
    path = os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=CASE_SECONDS,
        env={**os.environ, "PYTHONPATH": path},
    )
