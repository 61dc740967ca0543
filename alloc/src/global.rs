//! `ArenaAlloc`, the global allocator, its hot path first.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_int;

use tikv_jemalloc_sys as ffi;
use tikv_jemallocator::Jemalloc;

use crate::policy::{decay, idle, phase_peak, purge};
use crate::work::binding;
use crate::work::raw::RawAlloc;
use crate::work::route::{self, FLOOR};

/// jemalloc as the global allocator, with arenas that scopes can bind and purge, and
/// phases that catch every thread's large allocations.
///
/// Install it once in the binary:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// # fn main() {}
/// ```
///
/// Outside any phase it *is* [`tikv_jemallocator::Jemalloc`]: every method forwards to
/// it unchanged, after one comparison of the size with a constant (and, for blocks of
/// 16 KiB and more, a relaxed load and a thread-local read, out of line), so the hot
/// path costs the same.
/// Which arena an allocation comes from is decided inside jemalloc by the calling
/// thread's binding, which scopes change through jemalloc's control interface; while a
/// [`phase`](crate::phase) is open, blocks of [`phase_threshold`](crate::phase_threshold)
/// bytes and more (allocated, zeroed or grown by `realloc`) asked for by threads that are
/// not bound go to the phase arenas instead, with the same alignment and contents.
/// Outside phases, the first large block a thread that is not bound asks for gives its
/// automatic arena an oversize threshold no size reaches (one control call per
/// thread): jemalloc would otherwise give every freed extent of 8 MiB and more back at
/// once, inside the free, and a large buffer reused in a loop would be faulted in again
/// at every use. That arena keeps freed pages over jemalloc's decay (10 s by default)
/// whatever their size; the idle return ([`set_idle_return`](crate::set_idle_return)), the next
/// phase's end and [`trim`](crate::trim) give them back.
/// Nothing unwinds out of these methods: jemalloc reports failure with a null pointer.
#[derive(Debug, Default, Clone, Copy)]
pub struct ArenaAlloc;

// SAFETY: every method forwards to `Jemalloc`, a correct `GlobalAlloc`, with the same
// arguments and the same contract, or makes the same call `Jemalloc` makes with an
// arena named in its flags; every block is jemalloc's, so `Jemalloc` frees and resizes
// any of them.
unsafe impl GlobalAlloc for ArenaAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
            return unsafe { alloc_large(layout, 0) };
        }
        // SAFETY: as above.
        unsafe { Jemalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= FLOOR {
            // SAFETY: as for `alloc`.
            return unsafe { alloc_large(layout, ffi::MALLOCX_ZERO) };
        }
        // SAFETY: as for `alloc`.
        unsafe { Jemalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract, which we
            // forward.
            return unsafe { dealloc_large(ptr, layout) };
        }
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, which we
            // forward.
            return unsafe { realloc_large(ptr, layout, new_size) };
        }
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

/// The path of [`ArenaAlloc::alloc`] (`zero` 0) and [`ArenaAlloc::alloc_zeroed`]
/// (`zero` is `MALLOCX_ZERO`) for blocks of [`FLOOR`] bytes and more: out of line
/// and cold, so that the path of small blocks is one comparison and a jump.
///
/// # Safety
///
/// As [`GlobalAlloc::alloc`]; `layout.size()` is at least [`FLOOR`].
#[cold]
#[inline(never)]
unsafe fn alloc_large(layout: Layout, zero: c_int) -> *mut u8 {
    before_large_alloc();
    let alloc = |arena| {
        let flags = route::mallocx_flags(Some(arena), layout.align(), layout.size());
        // SAFETY: the size is non-zero (at least `FLOOR`), the flags name an existing
        // arena and a power-of-two alignment (`Layout`'s).
        unsafe { ffi::mallocx(layout.size(), flags | zero) }
    };
    let routed = route::route(layout.size());
    if routed.is_none() {
        route::before_jemallocs();
    }
    let block = match routed {
        Some(arena) => alloc(arena).cast(),
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        None if zero != 0 => unsafe { Jemalloc.alloc_zeroed(layout) },
        // SAFETY: as above.
        None => unsafe { Jemalloc.alloc(layout) },
    };
    if block.is_null() {
        return route::elsewhere(routed, alloc);
    }
    block
}

/// The path of [`ArenaAlloc::dealloc`] for blocks of [`FLOOR`] bytes and more:
/// out of line and cold, as [`alloc_large`]. The block's pages go back at once if it
/// lies in an idle arena of this crate's, also when jemalloc skips the purge of its free
/// because another thread is purging that arena (see [`purge::free`]); a block freed
/// into a phase arena while a phase is open is counted against the phase's bound (see
/// [`crate::policy::phase_peak`]).
///
/// # Safety
///
/// As [`GlobalAlloc::dealloc`]; `layout.size()` is at least [`FLOOR`].
#[cold]
#[inline(never)]
unsafe fn dealloc_large(ptr: *mut u8, layout: Layout) {
    idle::notice_free();
    // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
    let arena = purge::free(ptr, Some(layout.size()), |_| unsafe {
        Jemalloc.dealloc(ptr, layout)
    });
    match arena {
        Some(arena) if phase_peak::keeps(arena) => phase_peak::freed(layout.size()),
        // One of jemalloc's arenas, which keep freed extents of every size (see
        // `route::before_jemallocs`), unless a scope's thread frees it.
        None if !binding::is_bound() => phase_peak::freed_outside(layout.size()),
        _ => {}
    }
}

/// The path of [`ArenaAlloc::realloc`] to sizes of [`FLOOR`] bytes and more: out
/// of line and cold, as [`alloc_large`].
///
/// # Safety
///
/// As [`GlobalAlloc::realloc`]; `new_size` is at least [`FLOOR`].
#[cold]
#[inline(never)]
unsafe fn realloc_large(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    before_large_alloc();
    let realloc = |arena| {
        let flags = route::mallocx_flags(Some(arena), layout.align(), new_size);
        // SAFETY: `ptr` is a live block of jemalloc's (this allocator's), the new size
        // non-zero, the flags valid; jemalloc keeps the block where it is if it can
        // resize it in place, and otherwise moves it into the arena. On failure the
        // block is left as it was, so it may be tried again.
        unsafe { ffi::rallocx(ptr.cast(), new_size, flags) }
    };
    let routed = route::route(new_size);
    if routed.is_none() {
        route::before_jemallocs();
    }
    let block = match routed {
        Some(arena) => realloc(arena).cast(),
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        None => unsafe { Jemalloc.realloc(ptr, layout, new_size) },
    };
    if block.is_null() {
        return route::elsewhere(routed, realloc);
    }
    // A block of jemalloc's arenas that moved was freed there: counted as a free is.
    if block != ptr && layout.size() >= FLOOR && !RawAlloc::owns(ptr) && !binding::is_bound() {
        phase_peak::freed_outside(layout.size());
    }
    block
}

/// Before a block of [`FLOOR`] bytes or more: a thread bound to an arena that stands by
/// switches it to keeping freed pages (see [`crate::policy::decay`]). A thread-local
/// read, and for a bound thread one load.
#[inline]
fn before_large_alloc() {
    if let Some(index) = binding::bound_arena() {
        decay::before_large_alloc(index);
    }
}
