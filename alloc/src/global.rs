//! `ArenaAlloc`, the global allocator (its hot path first), and the check that it is
//! installed.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemalloc_sys as ffi;
use tikv_jemallocator::Jemalloc;

use crate::ctl::{self, CtlError};
use crate::{phase, Error};

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
/// it unchanged, after one comparison of the size with a constant on the paths of
/// blocks of 16 KiB and more (and one relaxed load there), so the hot path costs the
/// same. Which arena an allocation comes from is decided inside jemalloc by the calling
/// thread's binding, which scopes change through jemalloc's control interface; while a
/// [`phase`](crate::phase) is open, blocks of [`phase_threshold`](crate::phase_threshold)
/// bytes and more (allocated, zeroed or grown by `realloc`) asked for by threads that are
/// not bound go to the phase arenas instead, with the same alignment and contents.
/// Nothing unwinds out of these methods: jemalloc reports failure with a null pointer.
#[derive(Debug, Default, Clone, Copy)]
pub struct ArenaAlloc;

/// The alignment jemalloc gives every block without being asked (as tikv's `Jemalloc`
/// assumes on the 64-bit targets it supports).
const MIN_ALIGN: usize = 16;

/// jemalloc's flags for a block of `size` bytes with `layout`'s alignment in phase
/// arena `arena`: no thread cache (phase blocks are larger than any cache holds; this
/// only says so), the alignment as tikv's `Jemalloc` gives it.
#[inline]
fn phase_flags(arena: u32, align: usize, size: usize) -> c_int {
    let align = if align <= MIN_ALIGN && align <= size {
        0
    } else {
        ffi::MALLOCX_LG_ALIGN(align.trailing_zeros() as usize)
    };
    ffi::MALLOCX_ARENA(arena as usize) | ffi::MALLOCX_TCACHE_NONE | align
}

// SAFETY: every method forwards to `Jemalloc`, a correct `GlobalAlloc`, with the same
// arguments and the same contract, or makes the same call `Jemalloc` makes with an
// arena named in its flags; every block is jemalloc's, so `Jemalloc` frees and resizes
// any of them.
unsafe impl GlobalAlloc for ArenaAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= phase::FLOOR {
            if let Some(arena) = phase::route(layout.size()) {
                let flags = phase_flags(arena, layout.align(), layout.size());
                // SAFETY: the size is non-zero (at least `FLOOR`), the flags name an
                // existing arena and a power-of-two alignment (`Layout`'s).
                return unsafe { ffi::mallocx(layout.size(), flags) }.cast();
            }
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        unsafe { Jemalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= phase::FLOOR {
            if let Some(arena) = phase::route(layout.size()) {
                let flags = phase_flags(arena, layout.align(), layout.size());
                // SAFETY: as in `alloc`.
                return unsafe { ffi::mallocx(layout.size(), flags | ffi::MALLOCX_ZERO) }.cast();
            }
        }
        // SAFETY: as for `alloc`.
        unsafe { Jemalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= phase::FLOOR {
            if let Some(arena) = phase::route(new_size) {
                let flags = phase_flags(arena, layout.align(), new_size);
                // SAFETY: `ptr` is a live block of jemalloc's (this allocator's), the
                // new size non-zero, the flags valid; jemalloc keeps the block where it
                // is if it can grow it in place, and otherwise moves it into the arena.
                return unsafe { ffi::rallocx(ptr.cast(), new_size, flags) }.cast();
            }
        }
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

const UNKNOWN: u8 = 0;
const INSTALLED: u8 = 1;
const NOT_INSTALLED: u8 = 2;

/// Whether the global allocator is jemalloc ([`ArenaAlloc`], or
/// `tikv_jemallocator::Jemalloc`, which is the same library). Checked once, then cached.
///
/// Arenas only hold memory that jemalloc hands out; under any other global allocator
/// binding a thread to one changes nothing.
pub fn is_installed() -> bool {
    match STATE.load(Ordering::Relaxed) {
        INSTALLED => true,
        NOT_INSTALLED => false,
        _ => {
            let installed = probe();
            let state = if installed { INSTALLED } else { NOT_INSTALLED };
            STATE.store(state, Ordering::Relaxed);
            installed
        }
    }
}

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Allocates one block through the global allocator and asks jemalloc whether it saw it.
/// `false` also when jemalloc's counters cannot be read (then [`ensure_bindable`]
/// reports the control that failed, not this).
fn probe() -> bool {
    const SIZE: usize = 4096;
    let Ok((before, _)) = ctl::thread_counters() else {
        return false;
    };
    let block = std::hint::black_box(vec![1u8; SIZE]);
    let after = ctl::thread_counters().map_or(before, |(allocated, _)| allocated);
    drop(block);
    after.wrapping_sub(before) >= SIZE as u64
}

/// `Ok` when threads can be bound to arenas: jemalloc's controls answer, [`ArenaAlloc`]
/// is installed, and jemalloc does not tie threads to per-CPU arenas. Otherwise the
/// error that says what to change.
pub(crate) fn ensure_bindable() -> Result<(), Error> {
    bindable(ctl::available(), is_installed, ctl::percpu_arena)
}

/// `Ok` when allocations can be routed to arenas of this crate's: jemalloc's controls
/// answer and [`ArenaAlloc`] is installed. (jemalloc's `percpu_arena` does not matter:
/// a routed allocation names its arena.)
pub(crate) fn ensure_routable() -> Result<(), Error> {
    bindable(ctl::available(), is_installed, || Ok(false))
}

/// The order of [`ensure_bindable`]'s checks: a control that fails is reported as
/// itself, before "not installed" (whose probe reads controls too and would only say
/// that it could not tell).
fn bindable(
    controls: Result<(), CtlError>,
    installed: impl FnOnce() -> bool,
    percpu_arena: impl FnOnce() -> Result<bool, CtlError>,
) -> Result<(), Error> {
    controls?;
    if !installed() {
        Err(Error::not_installed())
    } else if percpu_arena()? {
        Err(Error::percpu_arena())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_control_is_reported_as_itself() {
        let failed = CtlError {
            name: "thread.allocatedp",
            errno: libc::ENOENT,
        };
        // The probe cannot tell when controls fail, so it answers "not installed";
        // the error must still name the control.
        let e = bindable(Err(failed), || false, || Ok(false)).unwrap_err();
        assert!(!e.is_not_installed(), "{e}");
        assert!(e.to_string().contains("thread.allocatedp"), "{e}");
    }

    #[test]
    fn checks_installed_then_percpu() {
        let e = bindable(Ok(()), || false, || Ok(true)).unwrap_err();
        assert!(e.is_not_installed());
        let e = bindable(Ok(()), || true, || Ok(true)).unwrap_err();
        assert!(e.is_percpu_arena());
        assert!(bindable(Ok(()), || true, || Ok(false)).is_ok());
    }
}
