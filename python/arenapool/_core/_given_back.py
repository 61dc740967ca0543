"""``Release``: what asking one holder of memory (glibc, pymalloc, an Arrow pool,
DuckDB's jemalloc) to give back its free memory did.

This module has no ``from __future__ import annotations``: a ``NamedTuple``'s fields
keep their types as types (``help(arenapool.Release)`` shows ``holder: str``, not a
``ForwardRef``).
"""

from typing import NamedTuple

__all__ = ["Release"]

_MiB = 2**20


class Release(NamedTuple):
    """What asking one holder to give back its free memory did: ``glibc gave back 12.3
    MiB in 4.1 ms``."""

    holder: str
    """``glibc``, ``pymalloc``, ``arrow:<backend>`` or ``duckdb``."""
    rss_returned: int
    """How much the process's RSS fell during the call, in bytes (other threads'
    allocations meanwhile count against it)."""
    seconds: float
    """How long the call took."""

    def __str__(self) -> str:
        return f"{self.holder} gave back {self.rss_returned / _MiB:.1f} MiB in {self.seconds * 1e3:.1f} ms"

    def __repr__(self) -> str:
        return (
            f"Release(holder={self.holder!r}, rss_returned={self.rss_returned / _MiB:.1f} MiB, "
            f"seconds={self.seconds * 1e3:.1f} ms)"
        )
