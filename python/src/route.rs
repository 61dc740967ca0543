//! Which blocks the hooks take (the size threshold, and whether they take any), and
//! the allocation, resizing and freeing of the blocks they take.
//!
//! Everything here but the Python functions runs inside CPython's and numpy's
//! allocators, on any thread, with or without the interpreter's lock: no Python API,
//! no lock, no panic.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arenapool_alloc::RawAlloc;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::wrapped::{Allocator, Free};

/// The alignment CPython and numpy expect of their allocators (glibc's `malloc`'s).
pub(crate) const ALIGN: usize = 16;

/// The threshold when none is set: blocks of 64 KiB and more. Smaller blocks stay with
/// the allocator they would have had, which keeps them cheaply; the figures of
/// `python -m arenapool.bench` are for this threshold.
const DEFAULT_THRESHOLD: usize = 64 << 10;

/// The threshold set (0: the default).
static THRESHOLD: AtomicUsize = AtomicUsize::new(0);

/// The threshold in force: the hooks take blocks of at least this size; `usize::MAX`
/// (no size) while they take none.
static TAKING_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Whether the hooks take blocks.
static TAKING: AtomicBool = AtomicBool::new(false);

fn threshold_set() -> usize {
    match THRESHOLD.load(Ordering::Relaxed) {
        0 => DEFAULT_THRESHOLD.max(arenapool_alloc::phase_threshold()),
        set => set,
    }
}

/// The hooks start taking blocks.
pub(crate) fn start() {
    TAKING.store(true, Ordering::SeqCst);
    TAKING_FROM.store(threshold_set(), Ordering::SeqCst);
}

/// The hooks stop taking blocks (they still free their own).
pub(crate) fn stop() {
    TAKING.store(false, Ordering::SeqCst);
    TAKING_FROM.store(usize::MAX, Ordering::SeqCst);
}

/// Whether the hooks take blocks.
pub(crate) fn taking() -> bool {
    TAKING.load(Ordering::SeqCst)
}

/// Whether a block of `size` bytes is to be taken: the hooks' fast test.
#[inline]
pub(crate) fn takes(size: usize) -> bool {
    size >= TAKING_FROM.load(Ordering::Relaxed)
}

/// [`takes`], read in the order of [`start`] and [`stop`] (for a hook that counts its
/// blocks, after counting one).
#[inline]
pub(crate) fn takes_in_order(size: usize) -> bool {
    size >= TAKING_FROM.load(Ordering::SeqCst)
}

/// A new block of `size` bytes (`zeroed`: cleared), or `None` for the previous
/// allocator to make: the size is below the threshold, or arenapool has no memory to
/// give (the previous allocator then tries).
#[inline]
pub(crate) fn alloc(size: usize, zeroed: bool) -> Option<*mut c_void> {
    if !takes(size) {
        return None;
    }
    let block = if zeroed {
        RawAlloc::alloc_zeroed(size, ALIGN)
    } else {
        RawAlloc::alloc(size, ALIGN)
    };
    (!block.is_null()).then_some(block.cast())
}

/// Frees `block` if it is one of arenapool's; false if it is not (the previous
/// allocator's to free).
///
/// # Safety
///
/// `block` is null or a live block of the allocator chain the hook is in, not used
/// again if this returns true.
#[inline]
pub(crate) unsafe fn free(block: *mut c_void) -> bool {
    if !RawAlloc::owns(block.cast()) {
        return false;
    }
    // SAFETY: a block of arenapool's arenas, live (the caller's contract): one that
    // RawAlloc made, since the hooks are the only code of the chain that asks it for
    // blocks. Freed once.
    unsafe { RawAlloc::free(block.cast()) };
    true
}

/// `realloc` for a hook that wraps `wrapped`, takes new blocks with `take` and frees
/// its own with `give` (null `block`: a new block).
///
/// - A block of arenapool's stays arenapool's while its new size is taken, and moves
///   to the wrapped allocator, copied, below that.
/// - A block of the wrapped allocator's is resized by it; if it grew to a size that is
///   taken (a buffer filled chunk by chunk), it then moves to arenapool, copied from
///   the grown block: its old size is unknown here, its new one is not.
///
/// On failure returns null and leaves the block as it was.
///
/// # Safety
///
/// `block` is null or a live block of the chain the hook is in (CPython's and numpy's
/// contract for `realloc`), not used again unless null is returned.
pub(crate) unsafe fn realloc<F: Free>(
    wrapped: &Allocator<F>,
    block: *mut c_void,
    size: usize,
    take: impl FnOnce(usize) -> Option<*mut c_void>,
    give: impl FnOnce(*mut c_void),
) -> *mut c_void {
    if block.is_null() {
        // SAFETY: the wrapped allocator's own `malloc`.
        return take(size).unwrap_or_else(|| unsafe { wrapped.malloc(size) });
    }
    if !RawAlloc::owns(block.cast()) {
        // SAFETY: not ours, so the wrapped allocator's (the caller's contract).
        let grown = unsafe { wrapped.realloc(block, size) };
        if grown.is_null() || !takes(size) {
            return grown;
        }
        return match take(size) {
            Some(moved) => {
                // SAFETY: both blocks hold `size` bytes and are distinct; the grown one
                // is the wrapped allocator's, freed once.
                unsafe {
                    ptr::copy_nonoverlapping(grown.cast::<u8>(), moved.cast::<u8>(), size);
                    wrapped.free(grown, size);
                }
                moved
            }
            None => grown,
        };
    }
    if takes(size) {
        // SAFETY: a live block of RawAlloc's (owned, and live by the caller's
        // contract), made with this alignment.
        return unsafe { RawAlloc::realloc(block.cast(), size, ALIGN) }.cast();
    }
    // SAFETY: as above.
    let keep = unsafe { RawAlloc::usable_size(block.cast()) }.min(size);
    // SAFETY: the wrapped allocator's own `malloc`.
    let moved = unsafe { wrapped.malloc(size) };
    if !moved.is_null() {
        // SAFETY: `keep` bytes fit in both blocks, which are distinct; the old one is
        // ours, freed once.
        unsafe { ptr::copy_nonoverlapping(block.cast::<u8>(), moved.cast::<u8>(), keep) };
        give(block);
    }
    moved
}

/// The size, in bytes, from which the hooks take blocks.
#[pyfunction]
pub(crate) fn threshold() -> usize {
    threshold_set()
}

/// Sets the size from which the hooks take blocks; `None` restores the default
/// (64 KiB). Takes effect at once.
///
/// Raises `ValueError` below the phase threshold: blocks between the two would go to
/// arenas that a phase's end does not give back.
#[pyfunction]
#[pyo3(signature = (nbytes))]
pub(crate) fn set_threshold(nbytes: Option<usize>) -> PyResult<()> {
    let smallest = arenapool_alloc::phase_threshold();
    match nbytes {
        Some(n) if n < smallest => {
            return Err(PyValueError::new_err(format!(
                "threshold {n} is below the phase threshold ({smallest} bytes): blocks between \
                 the two would not be given back when a phase ends; use at least {smallest}"
            )))
        }
        Some(n) => THRESHOLD.store(n, Ordering::Relaxed),
        None => THRESHOLD.store(0, Ordering::Relaxed),
    }
    if taking() {
        TAKING_FROM.store(threshold_set(), Ordering::SeqCst);
    }
    Ok(())
}

/// Whether the memory at `address` (an integer, such as numpy's
/// `a.__array_interface__['data'][0]`) belongs to arenapool's arenas.
#[pyfunction]
pub(crate) fn owns(address: usize) -> bool {
    RawAlloc::owns(address as *const u8)
}

/// Whether the hooks are taking blocks (installed, and not uninstalled since).
#[pyfunction]
#[pyo3(name = "taking")]
pub(crate) fn is_taking() -> bool {
    taking()
}
