//! pymalloc's free pools given back to the OS.
//!
//! CPython's allocator of small objects, pymalloc, carves arenas (1 MiB) into pools
//! (16 KiB), each for one size of block, and unmaps an arena only once every pool in it
//! is free: a few objects that live on keep their whole arena, and the free pools
//! around them stay resident. This module records the blocks CPython's arena allocator
//! hands out ([`arenas`]) and, when asked, gives back the pages of each free pool of
//! pymalloc's arenas but its first, which holds the pool's header: pymalloc keeps its
//! list of free pools there. The pool's size index is set to pymalloc's "none"
//! (`DUMMY_SIZE_IDX`), so that pymalloc sets the pool up anew when it takes it again
//! instead of following a list of free blocks through the pages given back.
//!
//! Nothing is written to a block before it is proven one of pymalloc's arenas:
//! - every pool header of it passes the checks of [`header`], which hold for every
//!   arena pymalloc made, and
//! - pymalloc's own count of the arenas it made ([`stats`]) accounts for every block
//!   of an arena's size the allocator handed out since the wrapper was installed, but
//!   the ones whose headers failed: the blocks left listed are then all pymalloc's. A
//!   block of another caller's whose headers pass (made to look like pymalloc's) breaks
//!   the count, and the give-back stops for the process.
//!
//! The sizes of arenas, pools and blocks are read from the running interpreter, so any
//! CPython whose pools are larger than a page and whose headers are laid out as above
//! is supported (3.10 to 3.15 today; 3.9's pools are a page). The give-back is off for
//! the process, with its reason in [`pymalloc_pools_off`], when the arena allocator in
//! force is no longer the wrapper, and once an interpreter other than the main one has
//! existed (it may have a pymalloc of its own, used under a lock of its own). It waits,
//! looking again at each look, while pymalloc's statistics cannot be read: while
//! `tracemalloc` traces (it wraps the object allocator, and CPython prints statistics
//! only while pymalloc is the object allocator itself), under another hook of the
//! object allocator, and where pymalloc is not the object allocator at all.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use pyo3::prelude::*;

mod arenas;
mod header;
mod stats;

use arenas::Table;
use header::{Geometry, Pool, Unsupported, MAX_PAGES, MAX_POOLS};

/// Why free pools are not given back, as a code: `ON` while they are.
static OFF: AtomicU8 = AtomicU8::new(NOT_INSTALLED);
const ON: u8 = 0;
const NOT_INSTALLED: u8 = 1;
const NOT_PYMALLOC: u8 = 2;
const POOL_OF_ONE_PAGE: u8 = 3;
const LAYOUT: u8 = 4;
const OTHER_INTERPRETER: u8 = 5;
const NOT_THE_WRAPPER: u8 = 6;
const UNPROVEN: u8 = 7;
const UNACCOUNTED: u8 = 8;
const NO_WRAPPER: u8 = 9;
const TRACING: u8 = 10;
const HIDDEN: u8 = 11;

/// Whether the give-back only waits under `code`, which each look checks again:
/// pymalloc's statistics could not be read at the last look, which a later one may.
fn waits(code: u8) -> bool {
    matches!(code, NOT_PYMALLOC | TRACING | HIDDEN)
}

/// What each code says, for `breakdown()` and `set_release`'s docs.
fn reason(code: u8) -> Option<&'static str> {
    Some(match code {
        ON => return None,
        NOT_INSTALLED => "arenapool.install() has not been called",
        NOT_PYMALLOC => {
            "pymalloc is not the object allocator (PYTHONMALLOC=malloc or mimalloc, a \
             build without pymalloc, or another allocator set over it)"
        }
        POOL_OF_ONE_PAGE => {
            "pymalloc's pools are a page each in this interpreter (CPython 3.9): a free \
             pool has no page to give back but its header's"
        }
        LAYOUT => "pymalloc's sizes in this interpreter are not ones its pools are read for",
        OTHER_INTERPRETER => {
            "an interpreter other than the main one has existed in this process: it may \
             have a pymalloc of its own, used under its own lock"
        }
        NOT_THE_WRAPPER => {
            "another arena allocator was set over arenapool's (PyObject_SetArenaAllocator): \
             arenapool no longer knows which arenas are mapped"
        }
        UNPROVEN => {
            "a block of an arena's size that the arena allocator handed out to another \
             caller could not be told apart from pymalloc's arenas"
        }
        UNACCOUNTED => {
            "pymalloc made arenas that arenapool did not see, or one of its arenas failed \
             the checks of its headers"
        }
        NO_WRAPPER => "the arena allocator could not be wrapped",
        TRACING => {
            "tracemalloc traces: pymalloc's statistics cannot be read while it wraps the \
             object allocator (free pools are given back again once it stops)"
        }
        HIDDEN => {
            "another allocator is set over pymalloc (PyMem_SetAllocator): its statistics \
             cannot be read meanwhile (free pools are given back again once it is gone)"
        }
        _ => "unknown",
    })
}

/// Switches the give-back off for the process; the first reason stays.
fn switch_off(code: u8) {
    let _ = OFF.compare_exchange(ON, code, Ordering::AcqRel, Ordering::Acquire);
}

/// Why pymalloc's statistics cannot be read, when they cannot: a code the give-back
/// waits under.
fn unreadable() -> u8 {
    if crate::raw_hook::tracemalloc_traces() {
        TRACING
    } else if WRAPPED.load(Ordering::Acquire) {
        HIDDEN // they were read when the wrapper was installed
    } else {
        NOT_PYMALLOC
    }
}

/// Whether the wrapper of the arena allocator is installed.
static WRAPPED: AtomicBool = AtomicBool::new(false);

/// A look at a give-back that waits under `code` (see [`waits`]): the wrapper installed
/// if it is not yet, or pymalloc's statistics read again. Whether the give-back is on.
fn resume(py: Python<'_>, code: u8) -> bool {
    let now = if !WRAPPED.load(Ordering::Acquire) {
        install(py)
    } else if stats::read().is_some() {
        ON
    } else {
        unreadable()
    };
    // The caller holds the interpreter's lock: no other look changed the code meanwhile.
    let _ = OFF.compare_exchange(code, now, Ordering::AcqRel, Ordering::Acquire);
    now == ON
}

/// pymalloc's count of the arenas it made, when the wrapper was installed.
static MADE_BEFORE: AtomicUsize = AtomicUsize::new(0);

/// Installs the wrapper of CPython's arena allocator (once per process) where free
/// pools can be given back (see the module's docs). Arenas made before it was
/// installed are not given back from. Returns whether free pools can be given back in
/// this process.
#[pyfunction]
pub(crate) fn install_pymalloc_pools(py: Python<'_>) -> bool {
    // The caller holds the interpreter's lock, so one thread at a time gets here.
    static TRIED: AtomicBool = AtomicBool::new(false);
    if !TRIED.swap(true, Ordering::AcqRel) {
        OFF.store(install(py), Ordering::Release);
    } else {
        let code = OFF.load(Ordering::Acquire);
        if waits(code) {
            resume(py, code);
        }
    }
    OFF.load(Ordering::Acquire) == ON
}

/// Why the wrapper cannot be installed, or `ON`. Between reading pymalloc's count of
/// arenas and installing the wrapper nothing here makes a Python object, so pymalloc
/// makes no arena in between. `_py`: the interpreter's lock, under which pymalloc's
/// statistics are read and its arena allocator is set.
fn install(_py: Python<'_>) -> u8 {
    let Some(stats) = stats::read() else {
        return unreadable();
    };
    let geometry = match Geometry::new(&stats, header::page_size()) {
        Ok(geometry) => geometry,
        Err(Unsupported::PoolOfOnePage) => return POOL_OF_ONE_PAGE,
        Err(Unsupported::Layout) => return LAYOUT,
    };
    if arenas::other_interpreter() {
        return OTHER_INTERPRETER;
    }
    MADE_BEFORE.store(stats.arenas_made, Ordering::Relaxed);
    if !arenas::install_wrapper(geometry) {
        return NO_WRAPPER;
    }
    WRAPPED.store(true, Ordering::Release);
    ON
}

/// Why pymalloc's free pools are not given back in this process; `None` while they are.
#[pyfunction]
pub(crate) fn pymalloc_pools_off() -> Option<&'static str> {
    reason(OFF.load(Ordering::Acquire))
}

/// What one look at the recorded arenas found or did, in bytes of free pools' pages,
/// headers aside.
#[derive(Debug, Default, Clone, Copy)]
struct Pools {
    /// Resident when the look began.
    resident_before: usize,
    /// Resident when it ended (the same unless it gave back).
    resident_after: usize,
    /// Not resident when it ended: given back, by this look or an earlier one, or never
    /// touched.
    not_resident: usize,
}

/// Looks at every free pool of pymalloc's arenas; gives back the resident pages of
/// each if `give_back`. The caller holds the interpreter's lock.
fn look(py: Python<'_>, mut give_back: bool) -> Pools {
    let mut pools = Pools::default();
    match OFF.load(Ordering::Acquire) {
        ON => {}
        code if waits(code) && resume(py, code) => {}
        _ => return pools,
    }
    let Some(geometry) = arenas::geometry() else {
        return pools;
    };
    if !arenas::wrapper_in_force() {
        switch_off(NOT_THE_WRAPPER);
        return pools;
    }
    if arenas::other_interpreter() {
        switch_off(OTHER_INTERPRETER);
        return pools;
    }
    // pymalloc's count, read before the table is locked: reading it allocates.
    let pymallocs = if give_back {
        match stats::read() {
            Some(stats) => stats
                .arenas_made
                .saturating_sub(MADE_BEFORE.load(Ordering::Relaxed)),
            None => {
                // A look it cannot make: skipped, and tried again at the next.
                let _ = OFF.compare_exchange(ON, unreadable(), Ordering::AcqRel, Ordering::Acquire);
                return pools;
            }
        }
    } else {
        0
    };
    let mut table = Table::lock();
    let mut states = [Pool::Uncarved; MAX_POOLS];
    // Every block of an arena's size handed out since the wrapper was installed is one
    // of pymalloc's arenas or one found not to be: if the counts say so, every listed
    // block is pymalloc's. Blocks not found yet may be found by their headers now.
    let accounted = |pymallocs: usize| {
        let (made, not_pymallocs) = arenas::counts();
        made.cmp(&(pymallocs + not_pymallocs))
    };
    if give_back && accounted(pymallocs).is_gt() {
        // SAFETY: every listed block is mapped (see `arenas`), and the interpreter's
        // lock is held, under which pymalloc changes its headers.
        table.retain(|arena| unsafe { header::check_arena(geometry, arena, &mut states) });
    }
    if give_back && accounted(pymallocs).is_ne() {
        switch_off(if accounted(pymallocs).is_gt() {
            UNPROVEN
        } else {
            UNACCOUNTED
        });
        give_back = false;
    }
    let page = geometry.page;
    let per_pool = geometry.pool / page;
    let mut resident = [0u8; MAX_PAGES];
    table.retain(|arena| {
        // SAFETY: as above.
        if !unsafe { header::check_arena(geometry, arena, &mut states) } {
            if give_back {
                // Proven pymalloc's by the count, yet its headers fail: touch nothing.
                switch_off(UNACCOUNTED);
                give_back = false;
            }
            return false;
        }
        let first = geometry.first_pool(arena);
        let count = geometry.pools(arena);
        // SAFETY: `first` is page-aligned and its `count * per_pool` pages (at most
        // `MAX_PAGES`, see `Geometry::new`) lie in the mapped arena; `resident` has a
        // byte for each.
        if unsafe {
            libc::mincore(
                first as *mut c_void,
                count * geometry.pool,
                resident.as_mut_ptr(),
            )
        } != 0
        {
            return true;
        }
        for (number, state) in states.iter().enumerate().take(count) {
            if *state != Pool::Free {
                continue;
            }
            let flags = &resident[number * per_pool..(number + 1) * per_pool];
            let kept = flags[1..].iter().filter(|&&flag| flag & 1 != 0).count() * page;
            let whole = (per_pool - 1) * page;
            pools.resident_before += kept;
            if kept == 0 || !give_back {
                pools.resident_after += kept;
                pools.not_resident += whole - kept;
                continue;
            }
            let at = first + number * geometry.pool;
            // SAFETY: a free pool of an arena proven pymalloc's (pymalloc's count
            // accounts for every other block, and its headers pass), under the
            // interpreter's lock: with no size index pymalloc sets it up anew before
            // handing out a block of it, and the pages after the header hold nothing
            // pymalloc reads again.
            let done = unsafe {
                header::forget_size(at);
                libc::madvise(
                    (at + page) as *mut c_void,
                    geometry.pool - page,
                    libc::MADV_DONTNEED,
                )
            };
            if done == 0 {
                pools.not_resident += whole;
            } else {
                pools.resident_after += kept;
                pools.not_resident += whole - kept;
            }
        }
        true
    });
    pools
}

/// Gives back the pages of pymalloc's free pools (see the module's docs). Returns the
/// bytes of free pools' pages (headers aside) resident before and after.
#[pyfunction]
pub(crate) fn give_back_pymalloc_pools(py: Python<'_>) -> (usize, usize) {
    // The interpreter's lock is held for the whole look.
    let pools = look(py, true);
    (pools.resident_before, pools.resident_after)
}

/// The free pools of pymalloc's arenas: bytes of their pages (headers aside) resident,
/// and not resident (given back, or never touched).
#[pyfunction]
pub(crate) fn pymalloc_free_pools(py: Python<'_>) -> (usize, usize) {
    let pools = look(py, false);
    (pools.resident_after, pools.not_resident)
}

/// How many blocks of an arena's size CPython's arena allocator has handed out since
/// the wrapper was installed (pymalloc's arenas, and others').
#[pyfunction]
pub(crate) fn pymalloc_arenas_made() -> usize {
    arenas::counts().0
}
