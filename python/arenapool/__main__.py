"""``python -m arenapool``: what the package is, its version and build, and where to go
next."""

from __future__ import annotations

import sys


def main() -> None:
    import arenapool

    switch = "on" if arenapool.installed() else "not installed in this interpreter"
    print(
        f"arenapool {arenapool.__version__} (Python {sys.version.split()[0]}): gives memory back to "
        "the operating system when a parallel phase is done.\n"
        f"Hooks: {switch}.\n"
        "\n"
        "  import arenapool.joblib; arenapool.joblib.install()   every joblib.Parallel call a phase\n"
        "  with arenapool.phase() as p: ...                      a phase around any code\n"
        "  arenapool.release_others()                            give back what glibc and pymalloc hold now\n"
        "  %load_ext arenapool                                   in a notebook: all of it, and %arenapool\n"
        "\n"
        "  python -m arenapool.where PID    what a running process holds (and its workers)\n"
        "  python -m arenapool.where        this interpreter's memory, by holder\n"
        "  python -m arenapool.bench        the field report's program, with and without arenapool\n"
        "\n"
        "Documentation: https://github.com/arenapool/arenapool/blob/main/python/README.md"
    )


if __name__ == "__main__":
    main()
