"""What arenapool skipped, said once, while the program's own work goes on.

Every part of arenapool beyond the hooks is optional to the program that uses it:
Arrow's pool, pymalloc's free pools, glibc's heaps, a phase that cannot open, a
release that fails. When one of them cannot run, arenapool warns once with an
:class:`ArenaPoolWarning` naming what was skipped and why, and the program's call
goes on as it would without arenapool. Turn the warnings into errors while testing
with ``warnings.simplefilter("error", arenapool.ArenaPoolWarning)``, or silence them
with ``"ignore"``.
"""

__all__ = ["ArenaPoolWarning", "first_time", "warn_once"]


class ArenaPoolWarning(UserWarning):
    """An optional part of arenapool was skipped; the program's own work went on.

    The message names the part and what to do about it, if anything.
    """


def first_time(seen: dict[str, object], key: str) -> bool:
    """Whether ``key`` is new to ``seen``, which holds it from now on. One call of
    ``dict.setdefault``, atomic in the interpreter: no lock, since a lock held while the
    key is added (which allocates) could be wanted again, on the same thread, by a
    finalizer that a collection there runs."""
    mine = object()
    return seen.setdefault(key, mine) is mine


_said: dict[str, object] = {}


def warn_once(key: str, message: str, *, stacklevel: int = 3) -> None:
    """Warns with ``message`` the first time ``key`` is seen in this process.

    ``stacklevel`` counts from the caller of ``warn_once`` (the default names the
    caller's caller: the user's code that called into arenapool).
    """
    if not first_time(_said, key):
        return
    import warnings  # here, not at the top: not imported as the interpreter starts

    warnings.warn(message, ArenaPoolWarning, stacklevel=stacklevel)
