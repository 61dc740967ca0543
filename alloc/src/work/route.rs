//! Where a large block goes: the allocator's routing, its constants and the threshold
//! that is in force, read on the hot path's large branch. While a
//! [`phase`](crate::phase) is open, a block of at least the threshold asked for by a
//! thread that is not bound to an arena of this crate's goes to that thread's phase
//! arena (see [`crate::work::percpu`]); otherwise where jemalloc puts it. The phase's life (opening,
//! ending, giving back) is [`crate::phase`]'s: it opens the route with
//! [`open`] and closes it with [`close`].
//!
//! Where jemalloc puts a block, it would give back at once, inside the free, every free
//! extent of its oversize threshold (8 MiB) or more: a block of that size asked for
//! from one of its automatic arenas goes to its arena for oversize blocks, whose decay
//! is 0, and a free that leaves a free extent of that size in an automatic arena
//! (whose decay is 10 s by default) is purged there and then. A buffer reused in a loop would be faulted
//! in again at every use. So the first time a thread that is not bound asks for a
//! large block ([`before_jemallocs`]), its automatic arena is given an oversize
//! threshold no size reaches: its blocks of 8 MiB and more stay in it, and its freed
//! pages decay as its others do (10 s by default) whatever their size. The idle return, the next phase's end
//! and [`trim`](crate::trim) give back what it keeps, as before.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use tikv_jemalloc_sys as ffi;

use crate::mechanism::{ctl, table};
use crate::policy::idle;
use crate::work::binding;
use crate::work::percpu::PerCpu;

/// No threshold can be smaller: sizes below it are never routed, whatever the
/// settings, and are told apart by a comparison with this constant before any atomic
/// load. (jemalloc's smallest large size class with 4 KiB pages; the smallest
/// threshold allowed is larger still, see [`phase_threshold`](crate::phase_threshold).)
pub(crate) const FLOOR: usize = 16 << 10;

/// The threshold while a phase is open; `usize::MAX`, which no size reaches, while none
/// is.
static OPEN_THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The phase arenas, one per CPU, made by the first phase.
pub(crate) static PHASE_ARENAS: PerCpu = PerCpu::new();

/// Routes blocks of `threshold` bytes and more to the phase arenas, from now on.
pub(crate) fn open(threshold: usize) {
    OPEN_THRESHOLD.store(threshold, Ordering::Relaxed);
}

/// Routes no block any more.
pub(crate) fn close() {
    OPEN_THRESHOLD.store(usize::MAX, Ordering::Relaxed);
}

/// The alignment jemalloc gives every block without being asked (as tikv's `Jemalloc`
/// assumes on the 64-bit targets it supports).
const MIN_ALIGN: usize = 16;

/// jemalloc's `mallocx` flags for a block of `size` bytes aligned to `align` (a power of
/// two) in `arena` (`None`: the calling thread's own): no thread cache, so that no
/// thread keeps the block's pages once it is freed (for blocks above the threshold,
/// which no cache holds, this only says so), and the alignment as tikv's `Jemalloc`
/// asks for it.
#[inline]
pub(crate) fn mallocx_flags(arena: Option<u32>, align: usize, size: usize) -> c_int {
    let align = if align <= MIN_ALIGN && align <= size {
        0
    } else {
        ffi::MALLOCX_LG_ALIGN(align.trailing_zeros() as usize)
    };
    let arena = arena.map_or(0, |index| ffi::MALLOCX_ARENA(index as usize));
    arena | align | ffi::MALLOCX_TCACHE_NONE
}

/// The phase arena for a block of `size` bytes asked for by the calling thread, if it
/// goes to one: a phase is open, `size` reaches the threshold, and the thread is not
/// bound to an arena of its own. Each large block is also counted towards the work the
/// idle return waits out (atomics only: see [`crate::policy::idle::notice`]).
#[inline]
pub(crate) fn route(size: usize) -> Option<u32> {
    idle::notice(size);
    if size < OPEN_THRESHOLD.load(Ordering::Relaxed) {
        return None;
    }
    phase_arena()
}

/// After a large block was refused for want of memory in an arena of this crate's (the
/// arena it was `routed` to, or the one the calling thread is bound to): the same call
/// (`attempt`, with an arena index) in each other arena of this crate's until one
/// succeeds, else null (see [`table::ours_except`]: each arena keeps the address space
/// it has mapped for itself). A block refused in one of jemalloc's own arenas is not
/// tried elsewhere.
#[cold]
#[inline(never)]
pub(crate) fn elsewhere(routed: Option<u32>, attempt: impl Fn(u32) -> *mut c_void) -> *mut u8 {
    let Some(tried) = routed.or_else(binding::bound_arena) else {
        return ptr::null_mut();
    };
    in_each(table::ours_except(Some(tried)), attempt)
}

/// After no arena of this crate's could be made for a block (an arena per CPU is made
/// on first use: jemalloc's limit of arenas was reached, or no address space is left
/// for a new arena's metadata): the same call (`attempt`, with an arena index) in each
/// arena of this crate's that exists until one succeeds, else null. Memory that work
/// freed into those arenas is still theirs to give out again.
#[cold]
#[inline(never)]
pub(crate) fn in_any(attempt: impl Fn(u32) -> *mut c_void) -> *mut u8 {
    in_each(table::ours_except(None), attempt)
}

fn in_each(arenas: impl Iterator<Item = u32>, attempt: impl Fn(u32) -> *mut c_void) -> *mut u8 {
    arenas
        .map(attempt)
        .find(|block| !block.is_null())
        .unwrap_or(ptr::null_mut())
        .cast()
}

thread_local! {
    /// Whether the calling thread's automatic arena keeps freed extents of every size
    /// (see the module docs).
    static KEEPS_OVERSIZE: Cell<bool> = const { Cell::new(false) };
}

/// Before a large block that the calling thread asks jemalloc for where jemalloc puts
/// it: the first time, if the thread is not bound to an arena of this crate's, its
/// automatic arena is given an oversize threshold no size reaches (see the module
/// docs). A thread-local read after that.
#[inline]
pub(crate) fn before_jemallocs() {
    if !KEEPS_OVERSIZE.try_with(Cell::get).unwrap_or(true) {
        keep_oversize();
    }
}

#[cold]
#[inline(never)]
fn keep_oversize() {
    if binding::is_bound() {
        return;
    }
    // Marked first: a failed call is not made again at every block (jemalloc's
    // behaviour then stays, slower, still right).
    let _ = KEEPS_OVERSIZE.try_with(|keeps| keeps.set(true));
    if let Ok(index) = ctl::thread_arena() {
        if !table::is_ours(index) {
            let _ = ctl::arena_set_oversize_threshold(index, usize::MAX);
        }
    }
}

#[inline(never)]
fn phase_arena() -> Option<u32> {
    if binding::is_bound() {
        return None;
    }
    PHASE_ARENAS.pick()
}
