"""``python -m arenapool.where``: where this interpreter's memory is, or, with
``--scheduler ADDRESS``, each worker's of a Dask cluster (see
:func:`arenapool.breakdown`)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ._core._breakdown import breakdown

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m arenapool.where [--scheduler ADDRESS]``."""
    parser = argparse.ArgumentParser(
        prog="python -m arenapool.where",
        description="Print where a process's memory is, by holder: this interpreter's, "
        "or each worker's of a Dask cluster.",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a Dask scheduler's address (tcp://host:8786): the breakdown of each of its workers",
    )
    args = parser.parse_args(argv)
    if args.scheduler is None:
        print(breakdown())
        return
    try:
        from distributed import Client
    except ImportError:
        sys.exit("--scheduler needs Dask's distributed: pip install distributed")
    with Client(args.scheduler, timeout=10) as client:
        for worker, figures in sorted(client.run(breakdown).items()):
            print(f"{worker}\n{figures}")


if __name__ == "__main__":
    main()
