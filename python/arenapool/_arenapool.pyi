"""The native part of arenapool (a Rust extension): process-wide phases, the hooks on
CPython's and numpy's allocators, and memory figures. The public API is the package
``arenapool``, which re-exports what users need from here."""

from typing import Dict, List, Literal, Optional, Tuple, final

__all__ = [
    "ArenaPoolError",
    "Memory",
    "Report",
    "OpenPhase",
    "memory",
    "rss",
    "trim",
    "metrics",
    "enter_phase",
    "phase_is_open",
    "phase_threshold",
    "threshold",
    "set_threshold",
    "raw_live_blocks",
    "owns",
    "taking",
    "install_raw",
    "uninstall_raw",
    "raw_state",
    "start_idle_return_in_child",
    "install_numpy",
    "install_numpy_default",
    "uninstall_numpy",
    "numpy_installed",
    "install_pymalloc_pools",
    "give_back_pymalloc_pools",
    "pymalloc_free_pools",
    "pymalloc_arenas_made",
    "pymalloc_pools_off",
]

class ArenaPoolError(RuntimeError):
    """arenapool could not do what was asked; the message says why and what to do.
    The base of every error of arenapool's own (arenapool.mpi's included)."""

@final
class Memory:
    """A snapshot of the process's memory, in bytes: what the kernel says (``rss``,
    ``peak_rss``) and what arenapool's allocator manages. Memory of CPython's and
    numpy's own allocators counts only in ``rss`` and ``peak_rss``."""

    @property
    def rss(self) -> int:
        """Resident set size of the process, in bytes (what ``ps`` and ``top`` show as RSS)."""
    @property
    def peak_rss(self) -> int:
        """Peak resident set size since the start (``VmHWM``)."""
    @property
    def allocated(self) -> int:
        """Bytes in live blocks of arenapool's allocator."""
    @property
    def active(self) -> int:
        """Bytes in pages that hold live blocks."""
    @property
    def resident(self) -> int:
        """Bytes the allocator has resident: active pages, free pages not yet given
        back, metadata."""
    @property
    def retained(self) -> int:
        """Bytes of address space kept mapped but given back to the OS."""
    @property
    def mapped(self) -> int:
        """Bytes mapped for data."""
    @property
    def metadata(self) -> int:
        """Bytes of the allocator's own metadata."""

@final
class Report:
    """What a phase did: RSS before and after, bytes given back to the OS, where the
    time went, and how many attempts to give back failed. ``rss_after`` is read when
    the phase ended, before its results were dropped."""

    @property
    def rss_before(self) -> int:
        """Process RSS, in bytes, when the phase began."""
    @property
    def rss_after(self) -> int:
        """Process RSS, in bytes, when it ended (what it returned still held)."""
    @property
    def returned(self) -> int:
        """Bytes of pages the phase's arenas gave back to the OS from its start to its end:
        while it ran (blocks freed inside the phase can go back before it ends) and at
        its end. A page given back, used again and given back again counts each time, so
        this can be more than the phase ever held."""
    @property
    def run_time(self) -> float:
        """Seconds the work inside the phase took."""
    @property
    def purge_time(self) -> float:
        """Seconds giving memory back took at the phase's end."""
    @property
    def arenas(self) -> List[int]:
        """The allocator's arenas the phase's large blocks went to (empty: no phase was
        open)."""
    @property
    def failed(self) -> int:
        """Attempts to give pages back that failed during the phase and at its end
        (0 in normal operation)."""

@final
class OpenPhase:
    """A process-wide phase held open until :meth:`end`; made by :func:`enter_phase`."""

    def end(self) -> Report:
        """Ends the phase and returns its report; ``ArenaPoolError`` if it has already
        ended."""
    @property
    def is_open(self) -> bool:
        """Whether the phase is still open."""

def memory() -> Memory:
    """A snapshot of the process's memory (see :class:`Memory`)."""

def rss() -> int:
    """The process's resident set size, in bytes, from ``/proc/self/statm`` (what ``ps``
    and ``top`` show as RSS)."""

def trim() -> int:
    """Gives every free page of the allocator's arenas back to the OS; returns the
    bytes given back."""

def metrics() -> List[Tuple[str, str, str, List[Tuple[Dict[str, str], float]]]]:
    """A snapshot of the allocator as its metrics: for each, its name (``arenapool_*``,
    with its unit), its help, its type (``gauge`` or ``counter``) and its series, each
    its labels (name to value) and value."""

def enter_phase() -> OpenPhase:
    """Opens a process-wide phase; ``ArenaPoolError`` if none can be opened."""

def phase_is_open() -> bool:
    """Whether a phase is open, on any thread."""

def phase_threshold() -> int:
    """The size, in bytes, from which blocks go to the phase's arenas while a phase is
    open."""

def threshold() -> int:
    """The size, in bytes, from which the hooks take blocks."""

def set_threshold(nbytes: Optional[int]) -> None:
    """Sets the size from which the hooks take blocks; ``None`` restores the default.
    ``ValueError`` below the phase threshold."""

def raw_live_blocks() -> int:
    """How many blocks the raw domain's hook made are still alive."""

def owns(address: int) -> bool:
    """Whether the memory at ``address`` belongs to arenapool's arenas."""

def taking() -> bool:
    """Whether the hooks are taking blocks (installed, and not uninstalled since)."""

def install_raw(idle_return_now: bool = True) -> bool:
    """Installs the hook on CPython's raw allocator (under tracemalloc if it traces) and
    starts taking blocks; whether it was newly put in the chain. Raises ArenaPoolError
    where tracemalloc traces under another hook. The idle return's thread starts now, or
    with ``idle_return_now=False`` once the hooks have taken 4 MiB of blocks."""

def uninstall_raw() -> Literal["top", "wrapped", "absent"]:
    """Stops taking blocks, takes the hook out of the chain where that is safe; where
    the hook is afterwards."""

def raw_state() -> Literal["top", "wrapped", "absent"]:
    """Where the raw domain's hook is: at the top of the chain, under a later hook, or
    absent."""

def start_idle_return_in_child() -> None:
    """In a child made by ``fork``, with the hooks taking blocks: starts the child's own
    idle return (the parent's thread is not in the child)."""

def install_numpy_default() -> bool:
    """Wraps numpy's default handler inside its own capsule; whether it was wrapped
    now."""

def install_numpy() -> bool:
    """Sets arenapool's handler for the current context; whether it was set."""

def uninstall_numpy() -> bool:
    """Puts back the handler arenapool's wrapped in the current context; whether it was
    put back."""

def numpy_installed() -> bool:
    """Whether arenapool's handler is in force in the current context."""

def install_pymalloc_pools() -> bool:
    """Wraps CPython's arena allocator to record pymalloc's arenas (once per process);
    whether free pools can be given back here (see :func:`pymalloc_pools_off`)."""

def give_back_pymalloc_pools() -> Tuple[int, int]:
    """Gives back the pages of pymalloc's free pools, headers aside; bytes of them
    resident before and after."""

def pymalloc_free_pools() -> Tuple[int, int]:
    """Bytes of the pages of pymalloc's free pools, headers aside: resident, and not
    resident (given back, or never touched)."""

def pymalloc_arenas_made() -> int:
    """How many blocks of an arena's size CPython's arena allocator has handed out
    since it was wrapped (pymalloc's arenas, and others')."""

def pymalloc_pools_off() -> Optional[str]:
    """Why pymalloc's free pools are not given back in this process; ``None`` while
    they are."""
