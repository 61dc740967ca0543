//! Which blocks the hooks take (the size threshold, and whether they take any), and
//! the allocation, resizing and freeing of the blocks they take. Both hooks decide
//! here, and only here, whether a block is arenapool's: by its size in [`taken`] (a
//! new block's in [`take`], a resized one's in [`realloc`]), and an existing block by
//! `RawAlloc::owns`.
//!
//! Everything here but the Python functions runs inside CPython's and numpy's
//! allocators, on any thread, with or without the interpreter's lock: no Python API
//! (but the one request of `crate::idle_start`, made with the interpreter's lock), no
//! lock, no panic.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arenapool_alloc::RawAlloc;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::idle_start;
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

/// The threshold set, or the default: [`DEFAULT_THRESHOLD`], or the phases' threshold
/// where that is higher (jemalloc's threads' caches hold blocks up to it).
fn threshold_set() -> usize {
    match THRESHOLD.load(Ordering::Relaxed) {
        // jemalloc with no setting given keeps its defaults: threads' caches hold blocks
        // of up to 32 KiB, so the phases' threshold is below the default, and asking
        // jemalloc (its first control call, as the interpreter starts) is not needed.
        // tests/test_hooks.py checks that the two agree.
        0 if !arenapool_alloc::jemalloc_settings_given() => DEFAULT_THRESHOLD,
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

/// Whether a block of `size` bytes, new or resized, is to be arenapool's: the one place
/// where the hooks compare a size with the threshold. `order` is `Relaxed` for the fast test,
/// `SeqCst` to read the threshold in the order of [`start`] and [`stop`].
#[inline]
fn taken(size: usize, order: Ordering) -> bool {
    size >= TAKING_FROM.load(order)
}

/// A new block of `size` bytes (`zeroed`: cleared) from arenapool, or `None` for the
/// wrapped allocator to make: the size is below the threshold, or arenapool has no
/// memory to give (the wrapped allocator then tries). Every hook's new blocks are
/// decided here.
///
/// `live` is the count of the hook's blocks alive, for a hook that may leave its
/// allocator's chain once none is: the block is counted before the threshold is read
/// again in order, so that [`stop`] followed by a reading of the count sees every
/// block that can still be made. `None` for a hook that stays in place for good.
#[inline]
pub(crate) fn take(size: usize, zeroed: bool, live: Option<&AtomicUsize>) -> Option<*mut c_void> {
    if !taken(size, Ordering::Relaxed) {
        return None;
    }
    if let Some(live) = live {
        live.fetch_add(1, Ordering::SeqCst);
        if !taken(size, Ordering::SeqCst) {
            live.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
    }
    let block = if zeroed {
        RawAlloc::alloc_zeroed(size, ALIGN)
    } else {
        RawAlloc::alloc(size, ALIGN)
    };
    if block.is_null() {
        if let Some(live) = live {
            live.fetch_sub(1, Ordering::SeqCst);
        }
        return None;
    }
    idle_start::taken(size);
    Some(block.cast())
}

/// Frees `block` if it is one of arenapool's, and uncounts it from `live` (see
/// [`take`]); false if it is not (the wrapped allocator's to free).
///
/// # Safety
///
/// `block` is null or a live block of the allocator chain the hook is in, not used
/// again if this returns true; `live` is the count the hook passes to [`take`].
#[inline]
pub(crate) unsafe fn free(block: *mut c_void, live: Option<&AtomicUsize>) -> bool {
    if !RawAlloc::owns(block.cast()) {
        return false;
    }
    // SAFETY: a block of arenapool's arenas (owned), live (the caller's contract).
    unsafe { free_ours(block, live) };
    true
}

/// Frees `block`, one of arenapool's, and uncounts it from `live`.
///
/// # Safety
///
/// `block` is a live block of arenapool's arenas in the allocator chain the hook is
/// in, not used again; `live` is the count the hook passes to [`take`].
///
/// The block would have been the wrapped allocator's but for the hook: the C library's
/// `malloc` is told of its size, so that glibc adapts its thresholds as it would have
/// (see `arenapool_alloc::c_heap_freed_elsewhere`; without it, a program that frees
/// blocks of a few KiB in the order it made them gives a page back to the OS and takes
/// it again at nearly every `free`).
#[inline]
unsafe fn free_ours(block: *mut c_void, live: Option<&AtomicUsize>) {
    // SAFETY: a live block of arenapool's arenas (the caller's contract).
    arenapool_alloc::c_heap_freed_elsewhere(unsafe { RawAlloc::usable_size(block.cast()) });
    // SAFETY: a live block of arenapool's arenas (the caller's contract): one that
    // RawAlloc made, since the hooks are the only code of the chain that asks it for
    // blocks. Freed once.
    unsafe { RawAlloc::free(block.cast()) };
    if let Some(live) = live {
        live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `realloc` for a hook that wraps `wrapped` and counts its blocks in `live` (see
/// [`take`]); a null `block` is a new block.
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
/// contract for `realloc`), not used again unless null is returned; `live` is the
/// count the hook passes to [`take`].
pub(crate) unsafe fn realloc<F: Free>(
    wrapped: &Allocator<F>,
    block: *mut c_void,
    size: usize,
    live: Option<&AtomicUsize>,
) -> *mut c_void {
    if block.is_null() {
        // SAFETY: the wrapped allocator's own `malloc`.
        return take(size, false, live).unwrap_or_else(|| unsafe { wrapped.malloc(size) });
    }
    if !RawAlloc::owns(block.cast()) {
        // SAFETY: not ours, so the wrapped allocator's (the caller's contract).
        let grown = unsafe { wrapped.realloc(block, size) };
        if grown.is_null() {
            return grown;
        }
        return match take(size, false, live) {
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
    if taken(size, Ordering::Relaxed) {
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
        // ours (owned, live by the caller's contract), freed once.
        unsafe {
            ptr::copy_nonoverlapping(block.cast::<u8>(), moved.cast::<u8>(), keep);
            free_ours(block, live);
        }
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
