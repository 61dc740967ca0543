"""``python -m arenapool.bench`` measures the report's work through each kind of pool:
joblib's, ``ProcessPoolExecutor.map`` and ``multiprocessing.Pool.map``, with each
configuration, and its ``--guard`` prints a ratio for each. Small runs (40 tasks): what
is checked is that every row and every guard is measured, not the figures."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from typing import Dict, List

import pytest

pytest.importorskip("joblib")
pytest.importorskip("numpy")


def _bench(*arguments: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "arenapool.bench", "--runs", "1", "--tasks", "40", *arguments],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _rows(table: str) -> Dict[str, Dict[str, str]]:
    """The Markdown table's rows, by ``program/configuration``, each by column."""
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = dict(zip(head, (cell.strip() for cell in line.strip("|").split("|"))))
        rows[f"{cells['program']}/{cells['configuration']}"] = cells
    return rows


def test_the_process_pools_programs_measure_the_parent_and_each_worker_in_every_configuration():
    rows = _rows(_bench("--programs", "futures,pool", "--configs", "glibc,arenapool,ARENAPOOL=on"))
    expected = [f"{program}/{config}" for program in ("futures", "pool")
                for config in ("glibc", "arenapool", "ARENAPOOL=on")]
    assert sorted(rows) == sorted(expected), rows
    for name, cells in rows.items():
        # Figures, not the dash of a column with nothing measured (no workers found); a
        # worker's figures are above its start, and can be a little below it ("-0").
        for column in ("wall", "parent CPU", "workers after del", "workers 2 s later", "workers' CPU",
                       "wall vs glibc"):
            assert re.fullmatch(r"-?[0-9.]+", cells[column]), (name, column, cells)


def test_the_guard_has_a_ratio_for_the_process_pools_wall_time_and_the_starts():
    guards: Dict[str, List[float]] = {}
    starts = []
    for line in _bench("--guard", "--starts", "3").splitlines():
        word, name, *figures = line.split()
        if word == "start":
            # The milliseconds ARENAPOOL=on adds, then the two medians.
            starts.append([float(name), *map(float, figures)])
            continue
        assert word == "guard", line
        guards[name] = [float(figure) for figure in figures]
    assert len(starts) == 1, starts
    added, with_on, without = starts[0]
    assert with_on > 0 and without > 0 and added == pytest.approx(with_on - without, abs=0.11), starts
    walls = {"report_wall", "report_wall_install", "futures_wall", "pool_wall", "start", "start_numpy"}
    assert set(guards) >= walls, guards
    for name, (ratio, low, high) in guards.items():
        # A CPU ratio of 40 tasks can be 0, or nan where glibc's workers used no tick.
        assert math.isnan(ratio) or low <= ratio <= high, (name, guards[name])
    for name in walls:
        ratio, low, _ = guards[name]
        assert math.isfinite(ratio) and low > 0, (name, guards[name])
