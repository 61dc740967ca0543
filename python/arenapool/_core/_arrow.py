"""Arrow's default memory pool, set to give back what it frees: what
:func:`arenapool.install` does for pyarrow (pandas 3 keeps its strings there).

Arrow's default pool on Linux is mimalloc's, whose ``release_unused()`` reaches only
the memory of the thread that calls it, and which gives back nothing by itself; pyarrow
has no counter of what it holds free. Arrow's jemalloc pool, set to purge each freed
page at once (:func:`arenapool.use_arrow_jemalloc`), gives back what any thread frees.
pyarrow chooses its default pool when it loads, from ``ARROW_DEFAULT_MEMORY_POOL``:

- pyarrow not imported yet (``ARENAPOOL=on`` installs arenapool before the program
  runs): the variable is set, and every buffer goes to the jemalloc pool;
- pyarrow imported, its default still mimalloc's: the default becomes the jemalloc
  pool from now on; the buffers already in mimalloc's pool stay there, and what they
  held goes back when the main thread releases it
  (:mod:`arenapool._core._main_thread`: the watcher asks the main thread to, by
  ``Py_AddPendingCall``); buffers that other threads made there stay held until
  those threads release it themselves;
- a pool the program chose (``ARROW_DEFAULT_MEMORY_POOL`` set, or a default other than
  mimalloc's), or ``arenapool.set_release(arrow=False)`` called before: left as it is.
"""

import os
import sys

from ._warnings import warn_once

__all__ = ["JEMALLOC_CONF", "JEMALLOC_AT_ONCE", "NO_JEMALLOC", "give_back_by_default", "jemalloc_when_pyarrow_loads"]

# The key of the one warning that pyarrow has no jemalloc pool, whoever finds it out.
NO_JEMALLOC = "arrow:no-jemalloc"

_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"

# What use_arrow_jemalloc gives Arrow's jemalloc unless the user set it: freed pages
# back at once. Arrow's own setting keeps them a second, for its background thread to
# give back; its pool's release_unused() asks jemalloc for nothing here (pyarrow 26).
JEMALLOC_CONF = "JE_ARROW_MALLOC_CONF"
JEMALLOC_AT_ONCE = "dirty_decay_ms:0,muzzy_decay_ms:0"

# The process that set the pool (a child made by fork has the parent's pool).
_done_in = 0


def give_back_by_default() -> None:
    """Make Arrow's default pool one that gives back, once per process (see the
    module's docs). Warns once, and leaves Arrow as it is, if that cannot be done."""
    global _done_in
    if _done_in == os.getpid() or not _arrow_on():
        return
    _done_in = os.getpid()
    if _POOL_VARIABLE in os.environ:
        return  # the program's choice (or this process's own, before pyarrow loaded)
    pa = sys.modules.get("pyarrow")
    if pa is None:  # as the interpreter starts (ARENAPOOL=on): nothing more to import
        jemalloc_when_pyarrow_loads()
        return
    try:
        if pa is not None:
            if pa.default_memory_pool().backend_name != "mimalloc":
                return
            if "jemalloc" not in pa.supported_memory_backends():
                warn_once(
                    NO_JEMALLOC,
                    "Arrow's jemalloc pool is not in this pyarrow: its default pool stays mimalloc's, "
                    "whose memory goes back only from the thread that made it (arenapool asks "
                    "the main thread). Install pyarrow's wheel from PyPI for a pool that gives "
                    "back from any thread",
                    stacklevel=4,
                )
                return
        from ._release import use_arrow_jemalloc

        use_arrow_jemalloc()
    except Exception as error:
        warn_once(
            "arrow:default-pool",
            f"arenapool could not set Arrow's default pool to one that gives back "
            f"({type(error).__name__}: {error}); Arrow keeps its own",
            stacklevel=4,
        )


def jemalloc_when_pyarrow_loads(at_once: bool = True) -> None:
    """Arrow's jemalloc pool as its default when pyarrow loads, purging each freed page
    at once with ``at_once`` unless ``JE_ARROW_MALLOC_CONF`` is set (see
    :func:`arenapool.use_arrow_jemalloc`): pyarrow is not imported yet."""
    os.environ[_POOL_VARIABLE] = "jemalloc"
    if at_once:
        os.environ.setdefault(JEMALLOC_CONF, JEMALLOC_AT_ONCE)


def _arrow_on() -> bool:
    """``set_release(arrow=...)``'s setting, without importing the module that keeps
    it (it is not imported as the interpreter starts): until that module is imported,
    nothing has switched it off."""
    release = sys.modules.get(f"{__package__}._release")
    return release is None or bool(release.arrow_on())
