//! `ArenaAlloc`, the global allocator (its hot path first), and the check that it is
//! installed.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemalloc_sys as ffi;
use tikv_jemallocator::Jemalloc;

use crate::ctl::{self, CtlError};
use crate::{binding, phase, purge, recycler, standby, Error};

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
/// 16 KiB and more, one relaxed load, out of line), so the hot path costs the same. Which arena an allocation comes from is decided inside jemalloc by the calling
/// thread's binding, which scopes change through jemalloc's control interface; while a
/// [`phase`](crate::phase) is open, blocks of [`phase_threshold`](crate::phase_threshold)
/// bytes and more (allocated, zeroed or grown by `realloc`) asked for by threads that are
/// not bound go to the phase arenas instead, with the same alignment and contents.
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
        if layout.size() >= phase::FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
            return unsafe { alloc_large(layout, 0) };
        }
        // SAFETY: as above.
        unsafe { Jemalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= phase::FLOOR {
            // SAFETY: as for `alloc`.
            return unsafe { alloc_large(layout, ffi::MALLOCX_ZERO) };
        }
        // SAFETY: as for `alloc`.
        unsafe { Jemalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= phase::FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract, which we
            // forward.
            return unsafe { dealloc_large(ptr, layout) };
        }
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= phase::FLOOR {
            // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, which we
            // forward.
            return unsafe { realloc_large(ptr, layout, new_size) };
        }
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

/// The path of [`ArenaAlloc::alloc`] (`zero` 0) and [`ArenaAlloc::alloc_zeroed`]
/// (`zero` is `MALLOCX_ZERO`) for blocks of [`phase::FLOOR`] bytes and more: out of line
/// and cold, so that the path of small blocks is one comparison and a jump.
///
/// # Safety
///
/// As [`GlobalAlloc::alloc`]; `layout.size()` is at least [`phase::FLOOR`].
#[cold]
#[inline(never)]
unsafe fn alloc_large(layout: Layout, zero: c_int) -> *mut u8 {
    standby::before_large_alloc();
    let alloc = |arena| {
        let flags = phase::mallocx_flags(Some(arena), layout.align(), layout.size());
        // SAFETY: the size is non-zero (at least `FLOOR`), the flags name an existing
        // arena and a power-of-two alignment (`Layout`'s).
        unsafe { ffi::mallocx(layout.size(), flags | zero) }
    };
    let routed = phase::route(layout.size());
    let block = match routed {
        Some(arena) => alloc(arena).cast(),
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        None if zero != 0 => unsafe { Jemalloc.alloc_zeroed(layout) },
        // SAFETY: as above.
        None => unsafe { Jemalloc.alloc(layout) },
    };
    if block.is_null() {
        return elsewhere(routed, alloc);
    }
    block
}

/// The path of [`ArenaAlloc::dealloc`] for blocks of [`phase::FLOOR`] bytes and more:
/// out of line and cold, as [`alloc_large`]. The block's pages go back at once if it
/// lies in an idle arena of this crate's, also when jemalloc skips the purge of its free
/// because another thread is purging that arena (see [`purge::free`]).
///
/// # Safety
///
/// As [`GlobalAlloc::dealloc`]; `layout.size()` is at least [`phase::FLOOR`].
#[cold]
#[inline(never)]
unsafe fn dealloc_large(ptr: *mut u8, layout: Layout) {
    // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
    purge::free(ptr, Some(layout.size()), || unsafe {
        Jemalloc.dealloc(ptr, layout)
    });
}

/// The path of [`ArenaAlloc::realloc`] to sizes of [`phase::FLOOR`] bytes and more: out
/// of line and cold, as [`alloc_large`].
///
/// # Safety
///
/// As [`GlobalAlloc::realloc`]; `new_size` is at least [`phase::FLOOR`].
#[cold]
#[inline(never)]
unsafe fn realloc_large(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    standby::before_large_alloc();
    let realloc = |arena| {
        let flags = phase::mallocx_flags(Some(arena), layout.align(), new_size);
        // SAFETY: `ptr` is a live block of jemalloc's (this allocator's), the new size
        // non-zero, the flags valid; jemalloc keeps the block where it is if it can
        // resize it in place, and otherwise moves it into the arena. On failure the
        // block is left as it was, so it may be tried again.
        unsafe { ffi::rallocx(ptr.cast(), new_size, flags) }
    };
    let routed = phase::route(new_size);
    let block = match routed {
        Some(arena) => realloc(arena).cast(),
        // SAFETY: `ptr` was returned by this allocator, i.e. by jemalloc, with `layout`.
        None => unsafe { Jemalloc.realloc(ptr, layout, new_size) },
    };
    if block.is_null() {
        return elsewhere(routed, realloc);
    }
    block
}

/// After a large block was refused for want of memory in an arena of this crate's (the
/// phase arena it was `routed` to, or the arena the thread is bound to): the same call
/// (`attempt`) in each other arena of this crate's until one succeeds, else null (see
/// [`recycler::others`]). A block refused in one of jemalloc's own arenas is not tried
/// elsewhere.
#[cold]
#[inline(never)]
fn elsewhere(routed: Option<u32>, attempt: impl Fn(u32) -> *mut std::ffi::c_void) -> *mut u8 {
    let Some(tried) = routed.or_else(binding::bound_arena) else {
        return std::ptr::null_mut();
    };
    recycler::others(tried)
        .map(attempt)
        .find(|block| !block.is_null())
        .unwrap_or(std::ptr::null_mut())
        .cast()
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
