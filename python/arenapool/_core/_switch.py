"""The environment variable ``ARENAPOOL``: arenapool for a whole program, and every
process it starts, without a change to its code.

- ``on``, ``1``, ``true`` or ``yes``: the startup hook the wheel installs
  (``arenapool.pth`` in site-packages) installs arenapool's hooks as the interpreter
  starts, and the rest and its integrations as their libraries are imported (see
  ``_arenapool_startup`` and :mod:`arenapool._integrations._startup`).
- ``off``, ``0``, ``false`` or ``no``: arenapool stays out, whatever the program calls:
  :func:`arenapool.install` does nothing (and says so once), so no hook is installed
  and no phase sends a block anywhere.
- Unset (or empty): the program decides. The startup hook reads the variable and does
  nothing else.

Any case, spaces around the value ignored (``ARENAPOOL=" Yes "`` is on). Any other
value counts as unset, and warns once for the whole program: the process that warns
marks the environment (:data:`WARNED`), and the processes it starts (workers, resource
trackers), which inherit both variables, stay quiet about the same value. The warning
names the variable, its value and the values understood, not a line of arenapool's.

Child processes inherit the variable, so the workers of every pool get the same.
"""

import os

from ._warnings import ArenaPoolWarning, first_time

__all__ = ["OFF", "ON", "VARIABLE", "WARNED", "first_in_program", "off", "setting", "value", "warn_about_variable"]

VARIABLE = "ARENAPOOL"

# The values understood, in lower case. arenapool.pth has the values that are off
# written out too (a .pth line cannot import this module for nothing): keep them equal.
ON = ("on", "1", "true", "yes")
OFF = ("off", "0", "false", "no")

# Set in the environment to the value of ARENAPOOL a warning was given for: a child
# process that inherits both says nothing more about that value.
WARNED = "_ARENAPOOL_WARNED"

# The values warned about in this process.
_said: dict[str, object] = {}


def setting() -> "str | None":
    """``"on"``, ``"off"``, or ``None`` when the variable is unset or empty; another
    value warns once per program (see the module's docs) and counts as unset."""
    written = value().lower()
    if not written:
        return None
    if written in ON:
        return "on"
    if written in OFF:
        return "off"
    warn_about_variable(
        f"{VARIABLE}={os.environ[VARIABLE]!r} is not a value arenapool understands, so it runs as if "
        f"{VARIABLE} were unset. {VARIABLE}=on (or {', '.join(ON[1:])}) installs arenapool in "
        f"every process of the program; {VARIABLE}=off (or {', '.join(OFF[1:])}) keeps it "
        f"out; any case"
    )
    return None


def off() -> bool:
    """Whether ``ARENAPOOL=off`` (or ``0``, ``false``, ``no``) rules arenapool out of
    this process."""
    return setting() == "off"


def value() -> str:
    """The variable's value as written, spaces around it left out."""
    return os.environ.get(VARIABLE, "").strip()


def first_in_program() -> bool:
    """Whether a warning about the variable's value is to be given here: it was given
    neither in this process nor in the process that started this one, nor in any
    before it (see the module's docs). From now on it counts as given."""
    written = os.environ.get(VARIABLE, "")
    if os.environ.get(WARNED) == written or not first_time(_said, f"{VARIABLE}={written}"):
        return False
    os.environ[WARNED] = written
    return True


def warn_about_variable(message: str) -> None:
    """Warns with ``message`` (an :class:`ArenaPoolWarning`) about the variable's
    value, once for the whole program (:func:`first_in_program`). The warning's place
    is the variable (``<environment: ARENAPOOL>``), not a line of arenapool's or of
    the interpreter's start."""
    if not first_in_program():
        return
    import warnings  # here, not at the top: not imported as the interpreter starts

    warnings.warn_explicit(message, ArenaPoolWarning, f"<environment: {VARIABLE}>", 0, module="arenapool")
