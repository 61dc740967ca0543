"""What the benches of the cluster libraries (``--dask``, ``--ray``) share: each run of
a row in a fresh process, each worker's breakdown as figures, and their lines under the
table's row."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from .._core._breakdown import Breakdown

_MiB = 2**20


@dataclass(frozen=True)
class Table:
    """What a suite's table is asked for: ``runs`` fresh processes per row of ``chosen``
    and configuration of ``configs``, each cell made by ``cell`` (median, min–max), under
    ``head``."""

    runs: int
    tasks: int
    rows: int
    chosen: List[str]
    configs: List[str]
    cell: Callable[..., str]
    head: Callable[[str, List[str]], None]


def fresh_runs(flag: str, row: str, config: str, tasks: int, rows: int, runs: int) -> List[Dict[str, Any]]:
    """The figures of ``runs`` fresh processes of ``python -m arenapool.bench FLAG row
    config tasks rows``, each printing them as JSON on its last line."""
    figures = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-m", "arenapool.bench", flag, row, config, str(tasks), str(rows)],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            sys.exit(child_failed(flag, row, config, out.returncode, out.stderr))
        figures.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return figures


def child_failed(flag: str, row: str, config: str, code: int, stderr: str) -> str:
    """What to say when a run's process failed: its error (the last lines it wrote),
    and for a package that is missing, the pip extra that installs it."""
    suite = flag.removeprefix("--").removesuffix("-child")
    tail = "\n".join(stderr.strip().splitlines()[-12:])
    text = f"python -m arenapool.bench --{suite}: the run of row {row!r}, {config}, exited with status {code}:\n{tail}"
    if "ModuleNotFoundError" in stderr or "ImportError" in stderr:
        text += f"\n--{suite} needs what pip install 'arenapool[{suite}]' installs"
    return text


def worker_figures(b: Breakdown) -> Dict[str, Optional[float]]:
    """A worker's breakdown in MiB, by holder."""
    return {
        "rss": b.rss / _MiB,
        "anonymous": b.anonymous / _MiB,
        "arenapool": (b.arenapool_live + b.arenapool_free + b.arenapool_metadata) / _MiB,
        "of_which_metadata": b.arenapool_metadata / _MiB,
        "glibc_in_use": b.glibc.in_use / _MiB if b.glibc else None,
        "glibc_free": b.glibc.free / _MiB if b.glibc else None,
        "pymalloc": (b.pymalloc.in_use + b.pymalloc.free) / _MiB if b.pymalloc else None,
        "arrow": sum(p.allocated for p in b.arrow if p.backend != "system") / _MiB,
        "files": b.files / _MiB,
        "rest": b.rest / _MiB,
    }


def print_worker_figures(figures: List[Dict[str, Any]]) -> None:
    """Each run's workers' breakdowns (``"breakdown"`` in its figures), a line each."""
    for f in figures:
        for worker in f.get("breakdown", []):
            print("    worker after: " + ", ".join(
                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in worker.items()))
