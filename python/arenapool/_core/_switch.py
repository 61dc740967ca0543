"""The environment variable ``ARENAPOOL``: arenapool for a whole program, and every
process it starts, without a change to its code.

- ``ARENAPOOL=on``: the startup hook the wheel installs (``arenapool.pth`` in
  site-packages) installs arenapool as the interpreter starts, and its integrations as
  their libraries are imported (see :mod:`arenapool._integrations._startup`).
- ``ARENAPOOL=off``: arenapool stays out, whatever the program calls:
  :func:`arenapool.install` does nothing (and says so once), so no hook is installed
  and no phase sends a block anywhere.
- Unset (or empty): the program decides. The startup hook reads the variable and does
  nothing else.

Child processes inherit the variable, so the workers of every pool get the same.
"""

from __future__ import annotations

import os
from typing import Optional

from ._warnings import warn_once

__all__ = ["VARIABLE", "setting"]

VARIABLE = "ARENAPOOL"

_VALUES = ("on", "off")


def setting() -> Optional[str]:
    """``"on"``, ``"off"``, or ``None`` when the variable is unset or empty; another
    value warns once and counts as unset."""
    value = os.environ.get(VARIABLE, "").strip().lower()
    if not value:
        return None
    if value in _VALUES:
        return value
    warn_once(
        f"switch:{value}",
        f"{VARIABLE}={os.environ[VARIABLE]!r} is neither 'on' nor 'off': arenapool takes it "
        f"as unset. Set {VARIABLE}=on to install arenapool in every process of the program, "
        f"{VARIABLE}=off to keep it out",
    )
    return None


def off() -> bool:
    """Whether ``ARENAPOOL=off`` rules arenapool out of this process."""
    return setting() == "off"
